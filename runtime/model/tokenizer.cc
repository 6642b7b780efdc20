// Tokenizers (tokenizer.h).
#include "runtime/model/tokenizer.h"

#include <dlfcn.h>
#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "runtime/records/result.h"

namespace slowpipe::runtime {

using nlohmann::json;
namespace fs = std::filesystem;

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> out;
  out.reserve(text.size());
  for (unsigned char c : text) out.push_back(c);
  return out;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t i : ids) out += static_cast<char>(i & 0xff);
  return out;
}

namespace {

// UTF-8 decoding; an invalid byte stands for itself (U+FFFD would lose it: the bytes matter).
std::vector<std::pair<uint32_t, std::string>> codePoints(const std::string& s) {
  std::vector<std::pair<uint32_t, std::string>> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      const unsigned char d = s[i + k];
      if ((d >> 6) != 2) ok = false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (!ok) {
      n = 1;
      cp = 0xFFFD;
    }
    out.push_back({cp, s.substr(i, n)});
    i += n;
  }
  return out;
}

std::string utf8(uint32_t cp) {
  std::string o;
  if (cp < 0x80) {
    o += static_cast<char>(cp);
  } else if (cp < 0x800) {
    o += static_cast<char>(0xC0 | (cp >> 6));
    o += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    o += static_cast<char>(0xE0 | (cp >> 12));
    o += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    o += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    o += static_cast<char>(0xF0 | (cp >> 18));
    o += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    o += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    o += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return o;
}

locale_t unicodeLocale() {
  static locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return l;
}

bool isSpace(uint32_t c) {  // JavaScript's \s
  return c == 9 || c == 10 || c == 11 || c == 12 || c == 13 || c == 32 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000 || c == 0xfeff;
}
bool isNumber(uint32_t c) {  // \p{N}: digits, and Latin-1's other numbers
  if (c < 0x80) return c >= '0' && c <= '9';
  if (c == 0xb2 || c == 0xb3 || c == 0xb9 || c == 0xbc || c == 0xbd || c == 0xbe) return true;
  return unicodeLocale() && iswdigit_l(static_cast<wint_t>(c), unicodeLocale());
}
bool isLetter(uint32_t c) {  // \p{L}
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c == 0xaa || c == 0xb5 || c == 0xba) return true;
  if (c < 0xc0 || c == 0xd7 || c == 0xf7) return false;
  return !isNumber(c) && unicodeLocale() && iswalpha_l(static_cast<wint_t>(c), unicodeLocale());
}

}  // namespace

std::vector<std::string> Gpt2BpeTokenizer::pretokenize(const std::string& text) {
  const auto cps = codePoints(text);
  const size_t n = cps.size();
  std::vector<std::string> out;
  auto take = [&](size_t from, size_t to) {
    std::string p;
    for (size_t k = from; k < to; ++k) p += cps[k].second;
    out.push_back(p);
  };
  auto other = [](uint32_t c) { return !isSpace(c) && !isLetter(c) && !isNumber(c); };
  size_t i = 0;
  while (i < n) {
    const uint32_t c = cps[i].first;
    if (c == '\'') {  // 's|'t|'re|'ve|'m|'ll|'d
      bool matched = false;
      for (const char* s : {"s", "t", "re", "ve", "m", "ll", "d"}) {
        const size_t len = std::char_traits<char>::length(s);
        bool ok = i + 1 + len <= n;
        for (size_t k = 0; ok && k < len; ++k)
          ok = cps[i + 1 + k].first == static_cast<uint32_t>(s[k]);
        if (ok) {
          take(i, i + 1 + len);
          i += 1 + len;
          matched = true;
          break;
        }
      }
      if (matched) continue;
    }
    const size_t j = c == ' ' && i + 1 < n ? i + 1 : i;  // " ?" then a class run
    bool matched = false;
    for (auto cls : {isLetter, isNumber, static_cast<bool (*)(uint32_t)>(nullptr)}) {
      auto in = [&](uint32_t x) { return cls ? cls(x) : other(x); };
      if (j < n && in(cps[j].first)) {
        size_t k = j;
        while (k < n && in(cps[k].first)) ++k;
        take(i, k);
        i = k;
        matched = true;
        break;
      }
    }
    if (matched) continue;
    // \s+(?!\S) | \s+
    size_t k = i;
    while (k < n && isSpace(cps[k].first)) ++k;
    if (k == i) {  // cannot happen: every code point is one of the classes
      take(i, i + 1);
      ++i;
      continue;
    }
    if (k < n && k - i >= 2) k -= 1;  // leave the last space to prefix the next word
    take(i, k);
    i = k;
  }
  return out;
}

Gpt2BpeTokenizer::Gpt2BpeTokenizer(std::unordered_map<std::string, int32_t> vocab,
                                   const std::vector<std::pair<std::string, std::string>>& merges,
                                   std::string source)
    : vocab_(std::move(vocab)), source_(std::move(source)) {
  // bytes_to_unicode: printable bytes stand for themselves, the rest for 256 + n in byte order.
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    byteChar_[b] =
        utf8(printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + extra++));
    charByte_[byteChar_[b]] = static_cast<uint8_t>(b);
  }
  int32_t maxId = -1;
  for (const auto& [t, id] : vocab_) {
    if (id < 0)
      throw std::invalid_argument(source_ + ": token '" + t + "' has id " + std::to_string(id));
    maxId = std::max(maxId, id);
  }
  idToToken_.assign(static_cast<size_t>(maxId + 1), "");
  for (const auto& [t, id] : vocab_) idToToken_[id] = t;
  for (size_t r = 0; r < merges.size(); ++r) ranks_.emplace(merges[r], static_cast<int>(r));
}

void Gpt2BpeTokenizer::bpe(const std::string& piece, std::vector<int32_t>& out) const {
  if (const auto it = cache_.find(piece); it != cache_.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<std::string> word;
  for (unsigned char b : piece) word.push_back(byteChar_[b]);
  while (word.size() > 1) {
    int best = std::numeric_limits<int>::max();
    std::pair<std::string, std::string> pair;
    for (size_t k = 0; k + 1 < word.size(); ++k) {
      const auto it = ranks_.find({word[k], word[k + 1]});
      if (it != ranks_.end() && it->second < best) {
        best = it->second;
        pair = it->first;
      }
    }
    if (best == std::numeric_limits<int>::max()) break;
    std::vector<std::string> next;
    for (size_t k = 0; k < word.size();) {
      if (k + 1 < word.size() && word[k] == pair.first && word[k + 1] == pair.second) {
        next.push_back(word[k] + word[k + 1]);
        k += 2;
      } else {
        next.push_back(word[k++]);
      }
    }
    word = std::move(next);
  }
  std::vector<int32_t> ids;
  for (const auto& w : word) {
    const auto it = vocab_.find(w);
    if (it == vocab_.end())
      throw std::invalid_argument(source_ + ": the BPE of '" + piece + "' leaves '" + w +
                                  "', which is not in the vocabulary");
    ids.push_back(it->second);
  }
  if (cache_.size() < 100000) cache_[piece] = ids;
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> out;
  for (const auto& piece : pretokenize(text)) bpe(piece, out);
  return out;
}

std::string Gpt2BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(idToToken_.size()))
      throw std::invalid_argument(source_ + ": no token id " + std::to_string(id));
    for (const auto& [cp, ch] : codePoints(idToToken_[id])) {
      const auto it = charByte_.find(ch);
      out += it == charByte_.end() ? ch : std::string(1, static_cast<char>(it->second));
    }
  }
  return out;
}

namespace {

std::vector<std::pair<std::string, std::string>> readMerges(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("tokenizer: cannot read '" + path + "'");
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  size_t no = 0;
  while (std::getline(in, line)) {
    ++no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size())
      throw std::invalid_argument("tokenizer: '" + path + "' line " + std::to_string(no) +
                                  ": expected two symbols \"a b\"");
    out.push_back({line.substr(0, sp), line.substr(sp + 1)});
  }
  return out;
}

std::unordered_map<std::string, int32_t> vocabOf(const json& j, const std::string& where) {
  if (!j.is_object())
    throw std::invalid_argument("tokenizer: " + where + ": expected an object of token -> id");
  std::unordered_map<std::string, int32_t> v;
  for (const auto& [t, id] : j.items()) {
    if (!id.is_number_integer())
      throw std::invalid_argument("tokenizer: " + where + "['" + t + "']: " + id.dump() +
                                  " is not an id");
    v[t] = id.get<int32_t>();
  }
  return v;
}

}  // namespace

// The shim's C table (runtime/model/spm_shim.cc), loaded once.
struct SentencePieceTokenizer::Shim {
  void* (*load)(const char*, char*, size_t) = nullptr;
  void (*close)(void*) = nullptr;
  int (*size)(void*) = nullptr;
  int (*encode)(void*, const char*, size_t, int**, size_t*, char*, size_t) = nullptr;
  int (*decode)(void*, const int*, size_t, char**, size_t*, char*, size_t) = nullptr;
  void (*free)(void*) = nullptr;

  static const Shim& get() {
    static const Shim shim = open();
    return shim;
  }

 private:
  static std::vector<std::string> candidates() {
    std::vector<std::string> out;
    if (const char* env = std::getenv("SLOWPIPE_SPM_SHIM")) out.push_back(env);
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec)
      out.push_back(
          (exe.parent_path().parent_path() / "lib" / "slowpipe" / "libslowpipe_spm.so").string());
#ifdef SLOWPIPE_SPM_SHIM_BUILD
    out.push_back(SLOWPIPE_SPM_SHIM_BUILD);
#endif
    return out;
  }

  static Shim open() {
    // Its own symbol scope first (RTLD_DEEPBIND); the sanitizers refuse DEEPBIND, and their build
    // has no libtorch to clash with.
#if defined(__SANITIZE_ADDRESS__)
    const int flags = RTLD_NOW | RTLD_LOCAL;
#else
    const int flags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#endif
    std::string tried;
    for (const auto& path : candidates()) {
      if (!fs::exists(path)) {
        tried += (tried.empty() ? "" : ", ") + path + " (absent)";
        continue;
      }
      void* h = dlopen(path.c_str(), flags);
      if (!h) {
        tried += (tried.empty() ? "" : ", ") + path + " (" + dlerror() + ")";
        continue;
      }
      Shim s;
      bool ok = true;
      auto sym = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
        ok = ok && fn;
      };
      sym(s.load, "slowpipe_spm_load");
      sym(s.close, "slowpipe_spm_close");
      sym(s.size, "slowpipe_spm_size");
      sym(s.encode, "slowpipe_spm_encode");
      sym(s.decode, "slowpipe_spm_decode");
      sym(s.free, "slowpipe_spm_free");
      if (ok) return s;
      tried += (tried.empty() ? "" : ", ") + path + " (not the shim: a function is missing)";
    }
    throw std::runtime_error(
        "tokenizer: SentencePiece needs slowpipe's shim libslowpipe_spm.so (set "
        "SLOWPIPE_SPM_SHIM); tried " +
        tried);
  }
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& modelFile)
    : shim_(Shim::get()), source_(modelFile) {
  char err[512] = "";
  handle_ = shim_.load(modelFile.c_str(), err, sizeof err);
  if (!handle_)
    throw std::invalid_argument("tokenizer: '" + modelFile +
                                "' is not a SentencePiece model: " + err);
}

SentencePieceTokenizer::~SentencePieceTokenizer() { shim_.close(handle_); }

std::vector<int32_t> SentencePieceTokenizer::encode(const std::string& text) const {
  char err[512] = "";
  int* ids = nullptr;
  size_t n = 0;
  if (shim_.encode(handle_, text.data(), text.size(), &ids, &n, err, sizeof err) != 0)
    throw std::runtime_error("tokenizer: SentencePiece '" + source_ + "' could not encode: " + err);
  std::vector<int32_t> out(ids, ids + n);
  shim_.free(ids);
  return out;
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  const int n = vocabSize();
  for (int32_t i : ids)
    if (i < 0 || i >= n)
      throw std::invalid_argument("tokenizer: id " + std::to_string(i) +
                                  " is outside SentencePiece's 0.." + std::to_string(n - 1));
  const std::vector<int> in(ids.begin(), ids.end());
  char err[512] = "";
  char* text = nullptr;
  size_t len = 0;
  if (shim_.decode(handle_, in.data(), in.size(), &text, &len, err, sizeof err) != 0)
    throw std::runtime_error("tokenizer: SentencePiece '" + source_ + "' could not decode: " + err);
  std::string out(text, len);
  shim_.free(text);
  return out;
}

int SentencePieceTokenizer::vocabSize() const { return shim_.size(handle_); }

std::unique_ptr<Tokenizer> loadTokenizer(const std::string& dir) {
  const fs::path d(dir);
  if (fs::is_regular_file(d) && d.extension() == ".model")
    return std::make_unique<SentencePieceTokenizer>(dir);
  if (fs::exists(d / "tokenizer.json")) {
    const std::string f = (d / "tokenizer.json").string();
    const json j = readJsonFile(f, "tokenizer");
    if (!j.is_object() || !j.contains("model") || !j["model"].is_object() ||
        j["model"].value("type", "") != "BPE")
      throw std::invalid_argument(
          "tokenizer: '" + f +
          "': model.type is not BPE (only byte-level BPE tokenizer.json files are read)");
    std::vector<std::pair<std::string, std::string>> merges;
    for (const json& m : j["model"].value("merges", json::array())) {
      if (m.is_string()) {
        const std::string s = m;
        const size_t sp = s.find(' ');
        if (sp == std::string::npos)
          throw std::invalid_argument("tokenizer: '" + f + "': merge '" + s + "' is not \"a b\"");
        merges.push_back({s.substr(0, sp), s.substr(sp + 1)});
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.push_back({m[0], m[1]});
      } else {
        throw std::invalid_argument("tokenizer: '" + f + "': merge " + m.dump() +
                                    " is not \"a b\" or [a, b]");
      }
    }
    return std::make_unique<Gpt2BpeTokenizer>(
        vocabOf(j["model"].value("vocab", json()), f + " model.vocab"), merges, f);
  }
  for (const auto& [v, m] :
       {std::pair{"vocab.json", "merges.txt"}, std::pair{"encoder.json", "vocab.bpe"}})
    if (fs::exists(d / v) && fs::exists(d / m))
      return std::make_unique<Gpt2BpeTokenizer>(
          vocabOf(readJsonFile((d / v).string(), "tokenizer vocabulary"), (d / v).string()),
          readMerges((d / m).string()), (d / v).string() + " + " + m);
  if (fs::exists(d / "tokenizer.model"))
    return std::make_unique<SentencePieceTokenizer>((d / "tokenizer.model").string());
  throw std::invalid_argument("tokenizer: '" + dir +
                              "' has neither tokenizer.json, vocab.json + merges.txt, encoder.json "
                              "+ vocab.bpe nor tokenizer.model");
}

}  // namespace slowpipe::runtime
