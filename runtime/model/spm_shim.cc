// The SentencePiece shim: a small library of its own, linked to libsentencepiece and loaded by
// runtime/model/tokenizer.cc with dlopen (RTLD_LOCAL | RTLD_DEEPBIND). Debian's libsentencepiece
// carries its own copy of protobuf-lite, whose symbols, in one symbol scope with libtorch's
// libprotobuf, crash the process at start-up (libprotobuf's initialisers bind to sentencepiece's
// copies); loaded apart, each binds to its own. A C table, so nothing C++ crosses the boundary.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void setError(char* err, size_t errLen, const std::string& what) {
  if (err && errLen) {
    std::strncpy(err, what.c_str(), errLen - 1);
    err[errLen - 1] = '\0';
  }
}

}  // namespace

extern "C" {

// Loads a model file; null (and the reason in err) when it is not one.
void* slowpipe_spm_load(const char* path, char* err, size_t errLen) {
  auto* sp = new sentencepiece::SentencePieceProcessor;
  if (const auto st = sp->Load(path); !st.ok()) {
    setError(err, errLen, st.ToString());
    delete sp;
    return nullptr;
  }
  return sp;
}

void slowpipe_spm_close(void* h) { delete static_cast<sentencepiece::SentencePieceProcessor*>(h); }

int slowpipe_spm_size(void* h) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(h)->GetPieceSize();
}

// Ids of `text` into *ids (malloc'ed, *n of them; free with slowpipe_spm_free). 0 on success.
int slowpipe_spm_encode(void* h, const char* text, size_t len, int** ids, size_t* n, char* err,
                        size_t errLen) {
  std::vector<int> out;
  if (const auto st = static_cast<sentencepiece::SentencePieceProcessor*>(h)->Encode(
          std::string(text, len), &out);
      !st.ok()) {
    setError(err, errLen, st.ToString());
    return 1;
  }
  *n = out.size();
  *ids = static_cast<int*>(std::malloc(std::max<size_t>(1, out.size()) * sizeof(int)));
  if (!*ids) return setError(err, errLen, "out of memory"), 1;
  std::memcpy(*ids, out.data(), out.size() * sizeof(int));
  return 0;
}

// The text of n ids into *text (malloc'ed, *len bytes; free with slowpipe_spm_free). 0 on success.
int slowpipe_spm_decode(void* h, const int* ids, size_t n, char** text, size_t* len, char* err,
                        size_t errLen) {
  std::string out;
  if (const auto st = static_cast<sentencepiece::SentencePieceProcessor*>(h)->Decode(
          std::vector<int>(ids, ids + n), &out);
      !st.ok()) {
    setError(err, errLen, st.ToString());
    return 1;
  }
  *len = out.size();
  *text = static_cast<char*>(std::malloc(std::max<size_t>(1, out.size())));
  if (!*text) return setError(err, errLen, "out of memory"), 1;
  std::memcpy(*text, out.data(), out.size());
  return 0;
}

void slowpipe_spm_free(void* p) { std::free(p); }

}  // extern "C"
