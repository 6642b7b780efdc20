// Element-wise codecs: none (fp32 as is), fp16, bf16; and topk (largest-magnitude fraction).
#pragma once

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
// (u32, strictly increasing), k values (fp16). Everything else decodes to zero.
class TopkCodec : public Codec {
 public:
  explicit TopkCodec(double ratio);
  CodecId id() const override { return CodecId::kTopk; }
  std::string spec() const override;
  void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) override;
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* out) override;
  int64_t keepCount(int64_t n) const;

 private:
  double ratio_;
};

}  // namespace slowpipe::compression
