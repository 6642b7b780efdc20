// Uniform b-bit quantizers (1 <= b <= 8) with one scale per group of values: a hidden channel
// (= last dim, max |x| over all other dims) or G consecutive values. Two level mappings:
//
// levels=symmetric (default): with m = max |x| the 2^b levels are -m + k*step, k = 0..2^b-1,
//   step = 2m/(2^b-1): symmetric around zero and without a zero level (2-bit = +-m, +-m/3).
//   Scales travel as fp32. Round to nearest gives |x - Q(x)| <= step/2; stochastic rounding picks
//   the upper level with probability equal to the fractional position, so E[Q(x)] = x. Its
//   uniforms are a counter-based hash of (seed, position in the codec's value stream): value j of
//   the codec's life draws u_j = hash32(lo32(j) ^ key(seed, hi32(j))) >> 8 / 2^24 (kernels.h), so
//   the draw vectorizes and is the same on every CPU path.
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

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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
  uint64_t seed = 0;  // stochastic rounding stream
  Levels levels = Levels::kSymmetric;
};

// The fixpoint mapping's divisor for an fp16 scale: fp16(s + fp16(1e-6)), as float.
float fixpointDivisor(uint16_t scaleHalf);

// Stochastic rounding's key for values whose stream position has these high 32 bits (quant.h
// above).
uint32_t quantStreamKey(uint64_t seed, uint32_t hi);

// Number of scales for a tensor of this shape.
int64_t quantScaleCount(const QuantOptions& opt, const Shape& shape);
size_t quantPayloadBytes(const QuantOptions& opt, const Shape& shape);

class QuantCodec;

// A stream's scale arrays, kept by its codec between messages: with group scales a 64 MiB message
// has 131072 of each, and arrays allocated afresh for every message cost page faults and zero fills
// (38% of a group-128 encode's time on 64 MiB, measured with perf). A stream takes the codec's
// spare arrays and gives its own back when it ends; copies of the cache start empty.
struct QuantScaleArrays {
  std::vector<float> m, inv, step, div, rdiv, s;
  std::vector<uint16_t> half;
};
class QuantScaleCache {
 public:
  QuantScaleCache() = default;
  QuantScaleCache(const QuantScaleCache&) {}
  QuantScaleCache& operator=(const QuantScaleCache&) { return *this; }
  ~QuantScaleCache() { delete spare_.load(); }
  std::unique_ptr<QuantScaleArrays> take() {
    return std::unique_ptr<QuantScaleArrays>(spare_.exchange(nullptr));
  }
  void give(std::unique_ptr<QuantScaleArrays> a) { delete spare_.exchange(a.release()); }

 private:
  std::atomic<QuantScaleArrays*> spare_{nullptr};  // a codec may encode and decode on two threads
};

// The quantizer in streaming form, for codecs that fuse it into passes of their own (acsgd, ef):
// values are addressed by their flat index i in [0, N) of the tensor `shape`.
//   encode: accumulate() every value (any order of ranges), finishScales(), writeScales(), then
//           quantize() ranges in increasing order (stochastic rounding draws in index order);
//           done() commits the codec's stochastic stream position.
//   decode: readScales(), then dequantize() any ranges.
// Ranges passed to quantize() for packing must start at multiples of 8 (so that codes pack
// byte-aligned: QuantCodec::kChunk is one).
class QuantStream {
 public:
  QuantStream(QuantCodec& codec, const Shape& shape);
  QuantStream(const QuantStream&) = default;
  ~QuantStream();  // gives its scale arrays to the codec's QuantScaleCache
  int64_t size() const { return n_; }
  size_t scaleBytes() const;
  void accumulate(const float* v, int64_t i, int64_t len);
  // Pass 1 on the codec threads (compression/parallel.h): pass(lo, hi, stream) for pieces of
  // [0, size()) at multiples of QuantCodec::kChunk, each accumulating into a stream of its own
  // whose maxima are folded into this one. A max is exact, so the scales are those of one serial
  // pass.
  void accumulateParts(const std::function<void(int64_t lo, int64_t hi, QuantStream& part)>& pass);
  void finishScales();  // throws for a fixpoint scale that overflows fp16
  void writeScales(uint8_t* p) const;
  // The same for scales [g0, g1) only (a caller that works group-aligned ranges in turn, e.g.
  // hadamard's fused step): sizeScales() once, then each range's accumulate(), finishScales(g0,
  // g1), writeScales(p, g0, g1) (p: the whole payload's scale section).
  void sizeScales();
  void finishScales(int64_t g0, int64_t g1);
  void writeScales(uint8_t* p, int64_t g0, int64_t g1) const;
  int64_t groupSize() const { return cols_; }  // values per scale in group mode
  bool channelScales() const { return channel_; }
  void readScales(const uint8_t* p);  // validates every scale
  void quantize(const float* v, int64_t i, int64_t len, uint8_t* codes);
  // quantize() and then packBits() into `packed` (value i's byte; i a multiple of 8), the same
  // bytes: channel scales pack in registers where the kernels can (Kernels::quantVecPacked and
  // its kin), the rest goes through `codes` (room for len).
  void quantizePacked(const float* v, int64_t i, int64_t len, uint8_t* codes, uint8_t* packed);
  // stream: out written around the cache (the kernels' *Stream; the caller fences with
  // streamFence), the same values.
  void dequantize(const uint8_t* codes, int64_t i, int64_t len, float* out,
                  bool stream = false) const;
  void done();
  // AC-SGD's delta step on values [i, i + len) of x - m, fused where this mode has a kernel
  // (channel scales, nearest rounding); false (nothing done) otherwise. deltaAccumulate =
  // accumulate(x - m); deltaUpdate = quantize(x - m) into codes, then m += dequantize(codes).
  bool fused() const { return channel_ && opt_.round == QuantOptions::Round::kNearest; }
  void deltaAccumulate(const float* x, const float* m, int64_t i, int64_t len);
  void deltaUpdate(const float* x, float* m, int64_t i, int64_t len, uint8_t* codes);
  // The same on an fp16 buffer (little-endian bytes, updated in place) where the active kernels
  // convert in registers (halfFused(); kernels.h).
  bool halfFused() const;
  void deltaAccumulateHalf(const float* x, const uint8_t* mh, int64_t i, int64_t len);
  void deltaUpdateHalf(const float* x, uint8_t* mh, int64_t i, int64_t len, uint8_t* codes);
  // The receiver's step straight from the packed codes (packed: value 0's; the kernels'
  // deltaApplyPackedH / F) for values [i, i + len): the buffer = buffer + dequantize(code) (fp16:
  // rounded; mh two bytes a value), out = the value it now holds; stream as dequantize's.
  // packedApplies(): this stream has those kernels (channel scales over a multiple of 8 values,
  // 1-4 or 8 bits, the AVX2 build); i must then be a multiple of 8.
  bool packedApplies() const;
  void applyPackedHalf(const uint8_t* packed, int64_t i, int64_t len, uint8_t* mh, float* out,
                       bool stream) const;
  void applyPackedFloat(const uint8_t* packed, int64_t i, int64_t len, float* m, float* out,
                        bool stream) const;
  // ef's step likewise: sumAccumulate = accumulate(x + r); residualUpdate = quantize(x + r) into
  // codes, then r = (x + r) - dequantize(codes).
  void sumAccumulate(const float* x, const float* r, int64_t i, int64_t len);
  void residualUpdate(const float* x, float* r, int64_t i, int64_t len, uint8_t* codes);
  // The same on a bf16 residual (r read as bf16, written as bf16 of the new residual).
  void sumAccumulateBf16(const float* x, const uint16_t* r, int64_t i, int64_t len);
  void residualUpdateBf16(const float* x, uint16_t* r, int64_t i, int64_t len, uint8_t* codes);
  // The four update steps above (deltaUpdate, deltaUpdateHalf, residualUpdate, residualUpdateBf16)
  // and then packBits into `packed` (value i's byte): the same bytes, the codes packed in registers
  // (Kernels::deltaQuantUpdatePacked and its kin) where packedUpdates(): fused(), channels a
  // multiple of 8, the kernels built. i must be a multiple of 8; codes: room for len.
  bool packedUpdates() const;
  void deltaUpdatePacked(const float* x, float* m, int64_t i, int64_t len, uint8_t* codes,
                         uint8_t* packed);
  void deltaUpdateHalfPacked(const float* x, uint8_t* mh, int64_t i, int64_t len, uint8_t* codes,
                             uint8_t* packed);
  void residualUpdatePacked(const float* x, float* r, int64_t i, int64_t len, uint8_t* codes,
                            uint8_t* packed);
  void residualUpdateBf16Packed(const float* x, uint16_t* r, int64_t i, int64_t len, uint8_t* codes,
                                uint8_t* packed);
  // For kernels elsewhere (compression/cuda/device_codec.cu): the per-scale max |x| computed there,
  // in place of accumulate(); and, after finishScales() or readScales(), the scale arrays and
  // constants the CPU kernels are given (scale g of value i: i % cols if channel, else i / cols).
  void setMaxima(const float* maxima);
  struct Params {
    bool channel, fixpoint, stochastic;
    int64_t cols, groups;
    float top, mult, lo, hi, finv;
    const float *m, *inv, *step;  // symmetric
    const float *div, *s;         // fixpoint
    uint64_t drawn, seed;         // stochastic: the stream position of value 0, the seed
  };
  Params params() const;

 private:
  template <typename Fn>
  void forEachRun(int64_t i, int64_t len, Fn&& fn) const;
  template <typename Y>
  void applyPacked(void (*apply)(const uint8_t*, int, const float*, const float*, float, float,
                                 int64_t, Y*, float*, bool),
                   const uint8_t* packed, int64_t i, int64_t len, Y* buffer, int64_t perValue,
                   float* out, bool stream) const;
  // Group mode: run(j, pos, n) for a partial group at either end, whole(j, g, count) for the whole
  // groups between (values j.., groups g..).
  template <typename Run, typename Whole>
  void forEachGroupSpan(int64_t i, int64_t len, Run&& run, Whole&& whole) const;
  // The fused steps share one shape: an accumulation kernel (x, y -> max per channel) and an update
  // kernel per level mapping (x, y in/out -> codes). Y is the buffer's element: float, a bf16
  // value (uint16_t), or the two bytes of an fp16 value (uint8_t, two per value).
  template <typename Y>
  void fusedAccumulate(void (*fn)(const float*, const Y*, int64_t, float*), const float* x,
                       const Y* y, int64_t i, int64_t len);
  template <typename Y>
  using FixUpdate = void (*)(const float*, Y*, const float*, const float*, const float*, int64_t,
                             float, float, float, float, uint8_t*);
  template <typename Y>
  using QuantUpdate = void (*)(const float*, Y*, const float*, const float*, const float*, int64_t,
                               float, uint8_t*);
  template <typename Y>
  struct UpdatePacked {  // the same two with packed codes (kernels.h)
    int64_t (*fix)(const float*, Y*, const float*, const float*, const float*, int64_t, float,
                   float, float, float, int, uint8_t*);
    int64_t (*quant)(const float*, Y*, const float*, const float*, const float*, int64_t, float,
                     int, uint8_t*);
  };
  template <typename Y>
  void fusedUpdate(FixUpdate<Y> fix, QuantUpdate<Y> quant, const float* x, Y* y, int64_t i,
                   int64_t len, uint8_t* codes);
  template <typename Y>
  void fusedUpdatePacked(UpdatePacked<Y> packedStep, FixUpdate<Y> fix, QuantUpdate<Y> quant,
                         const float* x, Y* y, int64_t i, int64_t len, uint8_t* codes,
                         uint8_t* packed);

  // The holder the arrays came in from the codec's cache, kept to hand them back in (no allocation
  // per message); a copy of the stream starts without one.
  struct Holder {
    std::unique_ptr<QuantScaleArrays> p;
    Holder() = default;
    Holder(const Holder&) {}
    Holder& operator=(const Holder&) { return *this; }
  };

  QuantCodec& codec_;
  const QuantOptions& opt_;
  Holder holder_;
  int64_t n_, cols_, groups_;  // cols_: channel count (channel mode) or group size (group mode)
  bool channel_, fixpoint_;
  float top_ = 0, mult_ = 0, lo_ = 0, hi_ = 0, finv_ = 0;
  std::vector<float> m_;               // max |x| per scale (symmetric: what the payload carries)
  std::vector<float> inv_, step_;      // symmetric: 1 / step and step per scale
  std::vector<uint16_t> half_;         // fixpoint: the scales as fp16 (the payload) ...
  std::vector<float> div_, rdiv_, s_;  // ... their divisor (fixpointDivisor), its reciprocal, value
};

class QuantCodec : public Codec {
 public:
  explicit QuantCodec(QuantOptions opt);
  CodecId id() const override { return CodecId::kQuant; }
  std::string spec() const override;
  void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) override;
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* out) override;
  const QuantOptions& options() const { return opt_; }
  // Encodes in one pass over its input (group scales, a chunk of whole groups at a time); else two
  // (the scales, then the codes).
  bool encodesInOnePass() const { return onePassChunk() > 0; }
  static constexpr int64_t kChunk = 16384;  // values per quantize/pack step (a multiple of 8)
  // Outputs of at least this many values (8 MiB) are written around the cache (Kernels::streamOut).
  static constexpr int64_t kStreamValues = int64_t{1} << 21;
  // Values decoded into an L1 buffer before they are streamed out (a multiple of 8).
  static constexpr int64_t kStreamPiece = 4096;

 private:
  friend class QuantStream;
  // tests/compression/quant_test.cc sets the stream position near a multiple of 2^32: a message
  // crossing it otherwise needs 4G values drawn first.
  friend struct QuantCodecTestAccess;
  int64_t onePassChunk() const;
  void encodeOnePass(const float* x, const Shape& shape, int64_t chunk, Bytes& out);
  QuantOptions opt_;
  uint64_t drawn_ = 0;  // stochastic rounding: values drawn so far (the stream position)
  QuantScaleCache scales_;
};

}  // namespace slowpipe::compression
