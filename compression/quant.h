// Uniform b-bit quantizers (1 <= b <= 8) with one scale per group of values: a hidden channel
// (= last dim, max |x| over all other dims) or G consecutive values. Two level mappings:
//
// levels=symmetric (default): with m = max |x| the 2^b levels are -m + k*step, k = 0..2^b-1,
//   step = 2m/(2^b-1): symmetric around zero and without a zero level (2-bit = +-m, +-m/3).
//   Scales travel as fp32. Round to nearest gives |x - Q(x)| <= step/2; stochastic rounding picks
//   the upper level with probability equal to the fractional position, so E[Q(x)] = x.
// levels=fixpoint: the AC-SGD reference's quantizer (DS3Lab AC-SGD, compress/fixpoint.py,
//   _compress_nbits / _decompress_nbits), bit for bit: f = b-1; s = max |x| rounded to fp16;
//   q = round-half-to-even(x / (s + 1e-6) * 2^f) with s + 1e-6 evaluated in fp16 as PyTorch does;
//   q clipped to [-2^f, 2^f - 1]; decode q / 2^f * s. Zero-preserving and asymmetric: 2-bit
//   levels are {-s, -s/2, 0, +s/2}. Scales travel as fp16 (as in the reference). Nearest rounding
//   only (the reference's default); a scale that overflows fp16 (max |x| > 65504) is an error.
//   tests/compression/quant_torch_test.cc checks it against a libtorch-ops transcription.
//
// Payload: the scales (fp32 or fp16, count = groups) followed by the codes, densely bit-packed
// (compression/bitpack.h). Its size is exactly {4|2}*groups + ceil(N*b/8).
#pragma once

#include <cstdint>
#include <string>

#include "compression/codec.h"

namespace slowpipe::compression {

struct QuantOptions {
  enum class Scale : uint8_t { kChannel, kGroup };
  enum class Round : uint8_t { kNearest, kStochastic };
  enum class Levels : uint8_t { kSymmetric, kFixpoint };
  int bits = 4;
  Scale scale = Scale::kChannel;
  int64_t group = 128;  // values per scale when scale == kGroup
  Round round = Round::kNearest;
  uint64_t seed = 0;    // stochastic rounding stream
  Levels levels = Levels::kSymmetric;
};

// The fixpoint mapping's divisor for an fp16 scale: fp16(s + fp16(1e-6)), as float.
float fixpointDivisor(uint16_t scaleHalf);

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
  void encodeFixpoint(const float* x, const Shape& shape, Bytes& out);
  void decodeFixpoint(const uint8_t* payload, const Shape& shape, float* out);

  QuantOptions opt_;
  uint64_t rng_[2];  // xoroshiro128+ state for stochastic rounding
};

}  // namespace slowpipe::compression
