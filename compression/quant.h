// Uniform symmetric b-bit quantizer (1 <= b <= 8), the AC-SGD reference's Q.
//
// For each scale group (a hidden channel = last dim, max |x| over all other dims; or G consecutive
// values) with m = max |x| the 2^b levels are -m + k*step, k = 0..2^b-1, step = 2m/(2^b-1): the
// levels are symmetric around zero and b = 1 means {-m, +m}. Round to nearest gives
// |x - Q(x)| <= step/2; stochastic rounding picks the upper level with probability equal to the
// fractional position, so E[Q(x)] = x.
//
// Payload: m per group (fp32, count = groups) followed by the codes, densely bit-packed
// (compression/bitpack.h). Its size is exactly 4*groups + ceil(N*b/8).
#pragma once

#include <cstdint>
#include <string>

#include "compression/codec.h"

namespace slowpipe::compression {

struct QuantOptions {
  enum class Scale : uint8_t { kChannel, kGroup };
  enum class Round : uint8_t { kNearest, kStochastic };
  int bits = 4;
  Scale scale = Scale::kChannel;
  int64_t group = 128;  // values per scale when scale == kGroup
  Round round = Round::kNearest;
  uint64_t seed = 0;    // stochastic rounding stream
};

// Number of scales for a tensor of this shape.
int64_t quantScaleCount(const QuantOptions& opt, const Shape& shape);
size_t quantPayloadBytes(const QuantOptions& opt, const Shape& shape);

class QuantCodec : public Codec {
 public:
  explicit QuantCodec(QuantOptions opt);
  CodecId id() const override { return CodecId::kQuant; }
  std::string spec() const override;
  void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) override;
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* out) override;
  const QuantOptions& options() const { return opt_; }

 private:
  QuantOptions opt_;
  uint64_t rng_[2];  // xoroshiro128+ state for stochastic rounding
};

}  // namespace slowpipe::compression
