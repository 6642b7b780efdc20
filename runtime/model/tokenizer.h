// Tokenizers a fine-tuned checkpoint comes with: GPT-2's byte-level BPE (tokenizer.json, or
// vocab.json + merges.txt; also the encoder.json + vocab.bpe of OpenAI's release), SentencePiece
// models (tokenizer.model: Llama 2, Mistral, TinyLlama; through libsentencepiece) and the built-in
// byte-level vocabulary (a byte is its token). Torch-free.
//
// GPT-2 BPE as the reference encoder does it: the text is split by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (letters and numbers classified by the C library's Unicode tables in C.UTF-8, whitespace as
// JavaScript's \s), each piece's UTF-8 bytes mapped to printable characters (bytes_to_unicode),
// then merged pairwise by merge rank until no ranked pair is left.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace slowpipe::runtime {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int vocabSize() const = 0;
  virtual std::string describe() const = 0;
};

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocabSize() const override { return 256; }
  std::string describe() const override { return "byte-level (256)"; }
};

class Gpt2BpeTokenizer : public Tokenizer {
 public:
  // vocab: token string -> id; merges: "a b" pairs in rank order. `source` names the files
  // (errors).
  Gpt2BpeTokenizer(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   std::string source);
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocabSize() const override { return static_cast<int>(idToToken_.size()); }
  std::string describe() const override { return "GPT-2 byte-level BPE from " + source_; }
  // The pieces GPT-2's pattern splits `text` into (exposed for tests).
  static std::vector<std::string> pretokenize(const std::string& text);

 private:
  void bpe(const std::string& piece, std::vector<int32_t>& out) const;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> idToToken_;
  std::map<std::pair<std::string, std::string>, int> ranks_;
  std::string byteChar_[256];  // byte -> its printable character (UTF-8)
  std::unordered_map<std::string, uint8_t> charByte_;
  std::string source_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// A SentencePiece model file (tokenizer.model, or what spm_train wrote): ids exactly as
// libsentencepiece's Encode gives them (no BOS/EOS added), through the shim
// runtime/model/spm_shim.cc (libslowpipe_spm.so: $SLOWPIPE_SPM_SHIM, the build's, or
// PREFIX/lib/slowpipe next to bin/).
class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& modelFile);
  ~SentencePieceTokenizer() override;
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocabSize() const override;
  std::string describe() const override { return "SentencePiece from " + source_; }

 private:
  struct Shim;
  const Shim& shim_;
  void* handle_ = nullptr;
  std::string source_;
};

// The tokenizer of a folder: tokenizer.json (a BPE model), vocab.json + merges.txt, encoder.json +
// vocab.bpe, or tokenizer.model (SentencePiece); DIR may also name a .model file itself. Throws
// naming the folder and what it looked for.
std::unique_ptr<Tokenizer> loadTokenizer(const std::string& dir);

}  // namespace slowpipe::runtime
