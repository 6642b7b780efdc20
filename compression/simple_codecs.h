// Element-wise codecs: none (fp32 as is), fp16, bf16; and topk (largest-magnitude fraction).
#pragma once

#include <memory>

#include "compression/codec.h"

namespace slowpipe::compression {

// fp32 verbatim (bits = 32), or each value rounded to fp16 / bf16 (bits = 16).
class CastCodec : public Codec {
 public:
  explicit CastCodec(CodecId id);
  CodecId id() const override { return id_; }
  std::string spec() const override { return codecName(id_); }
  void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) override;
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* out) override;

 private:
  CodecId id_;
};

// Keeps k = max(1, ceil(ratio*N)) values of largest |x| (N > 0). Payload: k (u32), k indices
// (u32, strictly increasing), k values: fp16, or with bits=B (1..8; SparseLoCo uses 2) the quant
// payload of the k values as one group (quant:bits=B,scale=group,group=k: one scale, symmetric
// levels). Everything else decodes to zero.
class TopkCodec : public Codec {
 public:
  explicit TopkCodec(double ratio, int bits = 16);
  ~TopkCodec() override;
  // A copy has the options, not the scratch (it makes its own on first use).
  TopkCodec(const TopkCodec& other);
  TopkCodec& operator=(const TopkCodec&) = delete;
  CodecId id() const override { return CodecId::kTopk; }
  std::string spec() const override;
  void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) override;
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* out) override;
  int64_t keepCount(int64_t n) const;
  // k, k u32 indices and k values (fp16, or the quantizer's payload: at most 4 bytes a value).
  uint64_t maxPayloadBytes(const Shape& shape) const override {
    return 4096 + 8 * static_cast<uint64_t>(keepCount(numelOf(shape)));
  }
  int bits() const { return bits_; }

  struct Scratch;  // simple_codecs.cc

 private:
  Scratch& scratch();
  double ratio_;
  int bits_;                          // 16: fp16 values
  std::unique_ptr<Scratch> scratch_;  // kept from message to message (one caller at a time)
};

// The quantizer of topk's values with bits=B < 16: one group of the k values, symmetric levels.
class QuantCodec;
QuantCodec topkValueQuant(int bits, int64_t k);

}  // namespace slowpipe::compression
