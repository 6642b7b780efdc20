// Quantizer. Work goes in chunks of kChunk codes (a multiple of 8, so every chunk's packed bytes
// start byte-aligned): quantize a chunk into a small code buffer that stays in L1, then pack. The
// inner loops are compression/kernels.h (baseline and AVX2 builds, chosen at run time).
// Built with -ffp-contract=off (see CMakeLists.txt) so sender and receiver round identically.
#include "compression/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "compression/bitpack.h"
#include "compression/half.h"
#include "compression/kernels.h"
#include "compression/parallel.h"

namespace slowpipe::compression {
namespace {

// Step between levels and its inverse; zero scale maps everything to code 0 -> value 0.
inline float stepOf(float m, int levels) { return 2.0f * m / static_cast<float>(levels - 1); }
inline float invOf(float step) { return step > 0.0f ? 1.0f / step : 0.0f; }

struct Layout {
  int64_t n, cols, groups;  // cols: channel count (channel mode) or group size (group mode)
  bool channel;
};

Layout layoutOf(const QuantOptions& opt, const Shape& shape) {
  const int64_t n = numelOf(shape);
  if (opt.scale == QuantOptions::Scale::kChannel) {
    const int64_t c = shape.empty() ? 1 : shape.back();
    return {n, c, c, true};
  }
  return {n, opt.group, n == 0 ? 0 : (n - 1) / opt.group + 1,
          false};  // no overflow for huge groups
}

}  // namespace

// The key of the stochastic-rounding stream for values hi * 2^32 .. hi * 2^32 + 2^32 - 1.
uint32_t quantStreamKey(uint64_t seed, uint32_t hi) {
  return hash32(static_cast<uint32_t>(seed) ^
                hash32(static_cast<uint32_t>(seed >> 32) ^ hi ^ 0x9e3779b9u));
}

int64_t quantScaleCount(const QuantOptions& opt, const Shape& shape) {
  return layoutOf(opt, shape).groups;
}

size_t quantPayloadBytes(const QuantOptions& opt, const Shape& shape) {
  const Layout l = layoutOf(opt, shape);
  const size_t scaleBytes = opt.levels == QuantOptions::Levels::kFixpoint ? 2 : 4;
  return scaleBytes * static_cast<size_t>(l.groups) +
         packedBytes(static_cast<size_t>(l.n), opt.bits);
}

float fixpointDivisor(uint16_t scaleHalf) {
  // PyTorch evaluates `scale.half() + 1e-6` in fp16: the scalar becomes fp16 (a subnormal,
  // 1.0133e-6), the sum is rounded to fp16. The quotient x / divisor is then taken in fp32.
  static const float kEps = halfToFloat(floatToHalf(1e-6f));
  return halfToFloat(floatToHalf(halfToFloat(scaleHalf) + kEps));
}

// ---- QuantStream ----

QuantStream::QuantStream(QuantCodec& codec, const Shape& shape) : codec_(codec), opt_(codec.opt_) {
  const Layout l = layoutOf(opt_, shape);
  n_ = l.n;
  cols_ = l.cols;
  groups_ = l.groups;
  channel_ = l.channel;
  fixpoint_ = opt_.levels == QuantOptions::Levels::kFixpoint;
  const int levels = 1 << opt_.bits;
  top_ = static_cast<float>(levels) - 0.5f;  // t + 0.5 clamped below code levels-1 + 1
  const int f = opt_.bits - 1;
  mult_ = static_cast<float>(1 << f);
  lo_ = -mult_;
  hi_ = mult_ - 1.0f;
  finv_ = 1.0f / mult_;
  if (auto a = codec_.scales_.take()) {
    m_ = std::move(a->m);
    inv_ = std::move(a->inv);
    step_ = std::move(a->step);
    div_ = std::move(a->div);
    rdiv_ = std::move(a->rdiv);
    s_ = std::move(a->s);
    half_ = std::move(a->half);
    holder_.p = std::move(a);
  }
  m_.assign(groups_, 0.0f);
}

QuantStream::~QuantStream() {
  try {
    std::unique_ptr<QuantScaleArrays> a =
        holder_.p ? std::move(holder_.p) : std::make_unique<QuantScaleArrays>();
    a->m = std::move(m_);
    a->inv = std::move(inv_);
    a->step = std::move(step_);
    a->div = std::move(div_);
    a->rdiv = std::move(rdiv_);
    a->s = std::move(s_);
    a->half = std::move(half_);
    codec_.scales_.give(std::move(a));
  } catch (...) {  // no memory for the holder: the arrays are freed instead
  }
}

size_t QuantStream::scaleBytes() const {
  return (fixpoint_ ? 2 : 4) * static_cast<size_t>(groups_);
}

// fn(j, pos, run): values j .. j + run - 1 share one scale layout: one channel row (pos = channel
// of value j) or one group (group index j / cols_).
template <typename Fn>
void QuantStream::forEachRun(int64_t i, int64_t len, Fn&& fn) const {
  for (int64_t j = i; j < i + len;) {
    const int64_t pos = j % cols_, run = std::min(cols_ - pos, i + len - j);
    fn(j, pos, run);
    j += run;
  }
}

template <typename Run, typename Whole>
void QuantStream::forEachGroupSpan(int64_t i, int64_t len, Run&& run, Whole&& whole) const {
  int64_t j = i;
  const int64_t end = i + len;
  if (const int64_t pos = j % cols_; pos != 0) {
    const int64_t r = std::min(cols_ - pos, end - j);
    run(j, pos, r);
    j += r;
  }
  if (const int64_t full = (end - j) / cols_; full > 0) {
    whole(j, j / cols_, full);
    j += full * cols_;
  }
  if (j < end) run(j, int64_t{0}, end - j);
}

void QuantStream::accumulate(const float* v, int64_t i, int64_t len) {
  const Kernels& k = kernels();
  if (!channel_)
    return forEachGroupSpan(
        i, len,
        [&](int64_t j, int64_t, int64_t run) {
          float& m = m_[j / cols_];
          m = std::max(m, k.absMax(v + (j - i), run));
        },
        [&](int64_t j, int64_t g, int64_t count) {
          k.absMaxGroups(v + (j - i), count, cols_, m_.data() + g);
        });
  forEachRun(i, len, [&](int64_t j, int64_t pos, int64_t run) {
    if (channel_) {
      k.absMaxAccum(v + (j - i), run, m_.data() + pos);
    } else {
      float& m = m_[j / cols_];
      m = std::max(m, k.absMax(v + (j - i), run));
    }
  });
}

void QuantStream::accumulateParts(const std::function<void(int64_t, int64_t, QuantStream&)>& pass) {
  const int64_t pieces = std::min<int64_t>(codecThreads(), parallelParts(n_, QuantCodec::kChunk));
  if (pieces <= 1) return pass(0, n_, *this);
  const int64_t chunks = (n_ + QuantCodec::kChunk - 1) / QuantCodec::kChunk;
  std::vector<QuantStream> parts(static_cast<size_t>(pieces), *this);
  parallelFor(pieces, [&](int64_t t) {
    const int64_t lo = std::min(n_, chunks * t / pieces * QuantCodec::kChunk);
    const int64_t hi = std::min(n_, chunks * (t + 1) / pieces * QuantCodec::kChunk);
    if (lo < hi) pass(lo, hi, parts[static_cast<size_t>(t)]);
  });
  for (const QuantStream& part : parts)
    for (int64_t g = 0; g < groups_; ++g) m_[g] = std::max(m_[g], part.m_[g]);
}

void QuantStream::sizeScales() {
  if (fixpoint_) {
    half_.resize(groups_);
    div_.resize(groups_);
    rdiv_.resize(groups_);
    s_.resize(groups_);
  } else {
    inv_.resize(groups_);
    step_.resize(groups_);
  }
}

void QuantStream::finishScales() {
  sizeScales();
  finishScales(0, groups_);
}

void QuantStream::finishScales(int64_t g0, int64_t g1) {
  const int levels = 1 << opt_.bits;
  for (int64_t g = g0; g < g1; ++g) {
    if (fixpoint_) {
      half_[g] = floatToHalf(m_[g]);
      s_[g] = halfToFloat(half_[g]);
      SP_REQUIRE(std::isfinite(s_[g]), "quant levels=fixpoint: max |x| = " + std::to_string(m_[g]) +
                                           " in scale group " + std::to_string(g) +
                                           " overflows the fp16 scale (at most 65504)");
      div_[g] = fixpointDivisor(half_[g]);
      rdiv_[g] = 1.0f / div_[g];
    } else {
      step_[g] = stepOf(m_[g], levels);
      inv_[g] = invOf(step_[g]);
    }
  }
}

void QuantStream::writeScales(uint8_t* p) const { writeScales(p, 0, groups_); }

void QuantStream::writeScales(uint8_t* p, int64_t g0, int64_t g1) const {
  if (fixpoint_)
    copyBytes(p + 2 * g0, half_.data() + g0, 2 * static_cast<size_t>(g1 - g0));
  else
    copyBytes(p + 4 * g0, m_.data() + g0, 4 * static_cast<size_t>(g1 - g0));
}

void QuantStream::readScales(const uint8_t* p) {
  const int levels = 1 << opt_.bits;
  if (fixpoint_) {
    half_.resize(groups_);
    s_.resize(groups_);
    copyBytes(half_.data(), p, 2 * groups_);
    for (int64_t g = 0; g < groups_; ++g) {
      s_[g] = halfToFloat(half_[g]);
      SP_REQUIRE(std::isfinite(s_[g]) && !(half_[g] & 0x8000u),
                 "quant: scale " + std::to_string(g) + " is " + std::to_string(s_[g]) +
                     ", expected a finite value >= 0");
    }
  } else {
    step_.resize(groups_);
    copyBytes(m_.data(), p, 4 * groups_);
    for (int64_t g = 0; g < groups_; ++g) {
      SP_REQUIRE(std::isfinite(m_[g]) && m_[g] >= 0.0f, "quant: scale " + std::to_string(g) +
                                                            " is " + std::to_string(m_[g]) +
                                                            ", expected a finite value >= 0");
      step_[g] = stepOf(m_[g], levels);
    }
  }
}

void QuantStream::quantize(const float* v, int64_t i, int64_t len, uint8_t* codes) {
  const Kernels& k = kernels();
  const bool stochastic = opt_.round == QuantOptions::Round::kStochastic;
  if (!channel_ && !stochastic)
    return forEachGroupSpan(
        i, len,
        [&](int64_t j, int64_t, int64_t run) {
          const int64_t g = j / cols_;
          if (fixpoint_)
            k.fixScalar(v + (j - i), div_[g], run, mult_, lo_, hi_, codes + (j - i));
          else
            k.quantScalar(v + (j - i), m_[g], inv_[g], run, top_, codes + (j - i));
        },
        [&](int64_t j, int64_t g, int64_t count) {
          if (fixpoint_)
            k.fixGroups(v + (j - i), count, cols_, div_.data() + g, mult_, lo_, hi_,
                        codes + (j - i));
          else
            k.quantGroups(v + (j - i), count, cols_, m_.data() + g, inv_.data() + g, top_,
                          codes + (j - i));
        });
  forEachRun(i, len, [&](int64_t j, int64_t pos, int64_t run) {
    const float* x = v + (j - i);
    uint8_t* c = codes + (j - i);
    const int64_t g = channel_ ? pos : j / cols_;
    if (fixpoint_) {
      if (channel_)
        k.fixVec(x, div_.data() + pos, run, mult_, lo_, hi_, c);
      else
        k.fixScalar(x, div_[g], run, mult_, lo_, hi_, c);
    } else if (!stochastic) {
      if (channel_)
        k.quantVec(x, m_.data() + pos, inv_.data() + pos, run, top_, c);
      else
        k.quantScalar(x, m_[g], inv_[g], run, top_, c);
    } else {
      // Split where the stream position crosses a multiple of 2^32 (the key changes there).
      for (int64_t r0 = 0; r0 < run;) {
        const uint64_t at = codec_.drawn_ + static_cast<uint64_t>(j + r0);
        const int64_t piece = static_cast<int64_t>(std::min<uint64_t>(
            static_cast<uint64_t>(run - r0), (uint64_t{1} << 32) - (at & 0xffffffffu)));
        const uint32_t lo = static_cast<uint32_t>(at),
                       key = quantStreamKey(opt_.seed, static_cast<uint32_t>(at >> 32));
        if (channel_)
          k.stochVec(x + r0, m_.data() + pos + r0, inv_.data() + pos + r0, piece, top_, lo, key,
                     c + r0);
        else
          k.stochScalar(x + r0, m_[g], inv_[g], piece, top_, lo, key, c + r0);
        r0 += piece;
      }
    }
  });
}

void QuantStream::quantizePacked(const float* v, int64_t i, int64_t len, uint8_t* codes,
                                 uint8_t* packed) {
  const Kernels& k = kernels();
  const int bits = opt_.bits;
  const bool stochastic = opt_.round == QuantOptions::Round::kStochastic;
  const uint64_t at = codec_.drawn_ + static_cast<uint64_t>(i);
  // Every run starts on a byte (channels a multiple of 8, i too); stochastic rounding's range under
  // one key (quantize() splits where the stream position crosses a multiple of 2^32).
  const bool whole = channel_ && cols_ % 8 == 0 && i % 8 == 0 && len > 0 &&
                     (!stochastic || (at >> 32) == ((at + static_cast<uint64_t>(len) - 1) >> 32));
  const bool has = fixpoint_    ? k.fixVecPacked != nullptr
                   : stochastic ? k.stochVecPacked != nullptr
                                : k.quantVecPacked != nullptr;
  if (!whole || !has) {
    quantize(v, i, len, codes);
    packBits(codes, static_cast<size_t>(len), bits, packed);
    return;
  }
  const uint32_t key = stochastic ? quantStreamKey(opt_.seed, static_cast<uint32_t>(at >> 32)) : 0;
  forEachRun(i, len, [&](int64_t j, int64_t pos, int64_t run) {
    const float* x = v + (j - i);
    uint8_t* out = packed + (j - i) / 8 * bits;
    int64_t done;
    if (fixpoint_)
      done = k.fixVecPacked(x, div_.data() + pos, run, mult_, lo_, hi_, bits, out);
    else if (stochastic)
      done = k.stochVecPacked(x, m_.data() + pos, inv_.data() + pos, run, top_,
                              static_cast<uint32_t>(at + static_cast<uint64_t>(j - i)), key, bits,
                              out);
    else
      done = k.quantVecPacked(x, m_.data() + pos, inv_.data() + pos, run, top_, bits, out);
    if (done < run) {
      quantize(x + done, j + done, run - done, codes);
      packBits(codes, static_cast<size_t>(run - done), bits, out + done / 8 * bits);
    }
  });
}

void QuantStream::dequantize(const uint8_t* codes, int64_t i, int64_t len, float* out,
                             bool stream) const {
  const Kernels& k = kernels();
  const auto groups = stream ? k.dequantGroupsStream : k.dequantGroups;
  const auto fixGroups = stream ? k.fixDequantGroupsStream : k.fixDequantGroups;
  const auto vec = stream ? k.dequantVecStream : k.dequantVec;
  const auto fixVec = stream ? k.fixDequantVecStream : k.fixDequantVec;
  if (!channel_)  // a part of a group is one group of its length
    return forEachGroupSpan(
        i, len,
        [&](int64_t j, int64_t, int64_t run) {
          const int64_t g = j / cols_;
          if (fixpoint_)
            fixGroups(codes + (j - i), 1, run, s_.data() + g, lo_, finv_, out + (j - i));
          else
            groups(codes + (j - i), 1, run, m_.data() + g, step_.data() + g, out + (j - i));
        },
        [&](int64_t j, int64_t g, int64_t count) {
          if (fixpoint_)
            fixGroups(codes + (j - i), count, cols_, s_.data() + g, lo_, finv_, out + (j - i));
          else
            groups(codes + (j - i), count, cols_, m_.data() + g, step_.data() + g, out + (j - i));
        });
  forEachRun(i, len, [&](int64_t j, int64_t pos, int64_t run) {
    if (fixpoint_)
      fixVec(codes + (j - i), s_.data() + pos, run, lo_, finv_, out + (j - i));
    else
      vec(codes + (j - i), m_.data() + pos, step_.data() + pos, run, out + (j - i));
  });
}

bool QuantStream::packedApplies() const {
  const int b = opt_.bits;
  const Kernels& k = kernels();
  return channel_ && cols_ % 8 == 0 && (b <= 4 || b == 8) && k.deltaApplyPackedH != nullptr &&
         k.deltaApplyPackedF != nullptr;
}

// perValue: buffer elements per value (an fp16 buffer is addressed in bytes, two a value).
template <typename Y>
void QuantStream::applyPacked(void (*apply)(const uint8_t*, int, const float*, const float*, float,
                                            float, int64_t, Y*, float*, bool),
                              const uint8_t* packed, int64_t i, int64_t len, Y* buffer,
                              int64_t perValue, float* out, bool stream) const {
  forEachRun(i, len, [&](int64_t j, int64_t pos, int64_t run) {
    const uint8_t* codes = packed + j / 8 * opt_.bits;  // j: a multiple of 8 (cols_ and i are)
    Y* y = buffer + perValue * (j - i);
    if (fixpoint_)
      apply(codes, opt_.bits, s_.data() + pos, nullptr, lo_, finv_, run, y, out + (j - i), stream);
    else
      apply(codes, opt_.bits, step_.data() + pos, m_.data() + pos, 0.0f, 0.0f, run, y,
            out + (j - i), stream);
  });
}

void QuantStream::applyPackedHalf(const uint8_t* packed, int64_t i, int64_t len, uint8_t* mh,
                                  float* out, bool stream) const {
  applyPacked(kernels().deltaApplyPackedH, packed, i, len, mh, 2, out, stream);
}

void QuantStream::applyPackedFloat(const uint8_t* packed, int64_t i, int64_t len, float* m,
                                   float* out, bool stream) const {
  applyPacked(kernels().deltaApplyPackedF, packed, i, len, m, 1, out, stream);
}

namespace {
// Values per buffer element: an fp16 buffer is addressed in bytes, two per value.
constexpr int64_t kPerValue(const float*) { return 1; }
constexpr int64_t kPerValue(const uint16_t*) { return 1; }
constexpr int64_t kPerValue(const uint8_t*) { return 2; }
}  // namespace

template <typename Y>
void QuantStream::fusedAccumulate(void (*fn)(const float*, const Y*, int64_t, float*),
                                  const float* x, const Y* y, int64_t i, int64_t len) {
  forEachRun(i, len, [&](int64_t j, int64_t pos, int64_t run) {
    fn(x + (j - i), y + kPerValue(y) * (j - i), run, m_.data() + pos);
  });
}

template <typename Y>
void QuantStream::fusedUpdate(FixUpdate<Y> fix, QuantUpdate<Y> quant, const float* x, Y* y,
                              int64_t i, int64_t len, uint8_t* codes) {
  forEachRun(i, len, [&](int64_t j, int64_t pos, int64_t run) {
    const int64_t o = j - i;
    Y* yo = y + kPerValue(y) * o;
    if (fixpoint_)
      fix(x + o, yo, div_.data() + pos, rdiv_.data() + pos, s_.data() + pos, run, mult_, lo_, hi_,
          finv_, codes + o);
    else
      quant(x + o, yo, m_.data() + pos, inv_.data() + pos, step_.data() + pos, run, top_,
            codes + o);
  });
}

void QuantStream::deltaAccumulate(const float* x, const float* m, int64_t i, int64_t len) {
  fusedAccumulate(kernels().deltaAbsMax, x, m, i, len);
}

void QuantStream::deltaUpdate(const float* x, float* m, int64_t i, int64_t len, uint8_t* codes) {
  fusedUpdate(kernels().deltaFixUpdate, kernels().deltaQuantUpdate, x, m, i, len, codes);
}

bool QuantStream::halfFused() const { return fused() && kernels().deltaAbsMaxH != nullptr; }

bool QuantStream::packedUpdates() const {
  return fused() && cols_ % 8 == 0 && kernels().deltaQuantUpdatePacked != nullptr;
}

template <typename Y>
void QuantStream::fusedUpdatePacked(UpdatePacked<Y> packedStep, FixUpdate<Y> fix,
                                    QuantUpdate<Y> quant, const float* x, Y* y, int64_t i,
                                    int64_t len, uint8_t* codes, uint8_t* packed) {
  const int bits = opt_.bits;
  // Every run starts on a byte: at i or at a channel wrap, both multiples of 8.
  forEachRun(i, len, [&](int64_t j, int64_t pos, int64_t run) {
    const int64_t o = j - i;
    Y* yo = y + kPerValue(y) * o;
    uint8_t* out = packed + o / 8 * bits;
    const int64_t done =
        fixpoint_ ? packedStep.fix(x + o, yo, div_.data() + pos, rdiv_.data() + pos,
                                   s_.data() + pos, run, mult_, lo_, hi_, finv_, bits, out)
                  : packedStep.quant(x + o, yo, m_.data() + pos, inv_.data() + pos,
                                     step_.data() + pos, run, top_, bits, out);
    if (done == run) return;
    fusedUpdate(fix, quant, x + o + done, yo + kPerValue(y) * done, j + done, run - done, codes);
    packBits(codes, static_cast<size_t>(run - done), bits, out + done / 8 * bits);
  });
}

void QuantStream::deltaUpdatePacked(const float* x, float* m, int64_t i, int64_t len,
                                    uint8_t* codes, uint8_t* packed) {
  const Kernels& k = kernels();
  fusedUpdatePacked<float>({k.deltaFixUpdatePacked, k.deltaQuantUpdatePacked}, k.deltaFixUpdate,
                           k.deltaQuantUpdate, x, m, i, len, codes, packed);
}

void QuantStream::deltaUpdateHalfPacked(const float* x, uint8_t* mh, int64_t i, int64_t len,
                                        uint8_t* codes, uint8_t* packed) {
  const Kernels& k = kernels();
  fusedUpdatePacked<uint8_t>({k.deltaFixUpdateHPacked, k.deltaQuantUpdateHPacked},
                             k.deltaFixUpdateH, k.deltaQuantUpdateH, x, mh, i, len, codes, packed);
}

void QuantStream::residualUpdatePacked(const float* x, float* r, int64_t i, int64_t len,
                                       uint8_t* codes, uint8_t* packed) {
  const Kernels& k = kernels();
  fusedUpdatePacked<float>({k.efFixUpdatePacked, k.efQuantUpdatePacked}, k.efFixUpdate,
                           k.efQuantUpdate, x, r, i, len, codes, packed);
}

void QuantStream::residualUpdateBf16Packed(const float* x, uint16_t* r, int64_t i, int64_t len,
                                           uint8_t* codes, uint8_t* packed) {
  const Kernels& k = kernels();
  fusedUpdatePacked<uint16_t>({k.efFixUpdateBPacked, k.efQuantUpdateBPacked}, k.efFixUpdateB,
                              k.efQuantUpdateB, x, r, i, len, codes, packed);
}

void QuantStream::deltaAccumulateHalf(const float* x, const uint8_t* mh, int64_t i, int64_t len) {
  fusedAccumulate(kernels().deltaAbsMaxH, x, mh, i, len);
}

void QuantStream::deltaUpdateHalf(const float* x, uint8_t* mh, int64_t i, int64_t len,
                                  uint8_t* codes) {
  fusedUpdate(kernels().deltaFixUpdateH, kernels().deltaQuantUpdateH, x, mh, i, len, codes);
}

void QuantStream::sumAccumulate(const float* x, const float* r, int64_t i, int64_t len) {
  fusedAccumulate(kernels().sumAbsMax, x, r, i, len);
}

void QuantStream::residualUpdate(const float* x, float* r, int64_t i, int64_t len, uint8_t* codes) {
  fusedUpdate(kernels().efFixUpdate, kernels().efQuantUpdate, x, r, i, len, codes);
}

void QuantStream::sumAccumulateBf16(const float* x, const uint16_t* r, int64_t i, int64_t len) {
  fusedAccumulate(kernels().sumAbsMaxB, x, r, i, len);
}

void QuantStream::residualUpdateBf16(const float* x, uint16_t* r, int64_t i, int64_t len,
                                     uint8_t* codes) {
  fusedUpdate(kernels().efFixUpdateB, kernels().efQuantUpdateB, x, r, i, len, codes);
}

void QuantStream::setMaxima(const float* maxima) {
  copyBytes(m_.data(), maxima, 4 * static_cast<size_t>(groups_));
}

QuantStream::Params QuantStream::params() const {
  return {channel_,      fixpoint_,   opt_.round == QuantOptions::Round::kStochastic,
          cols_,         groups_,     top_,
          mult_,         lo_,         hi_,
          finv_,         m_.data(),   inv_.data(),
          step_.data(),  div_.data(), s_.data(),
          codec_.drawn_, opt_.seed};
}

void QuantStream::done() {
  if (opt_.round == QuantOptions::Round::kStochastic) codec_.drawn_ += static_cast<uint64_t>(n_);
}

// ---- QuantCodec ----

QuantCodec::QuantCodec(QuantOptions opt) : opt_(opt) {
  SP_REQUIRE(opt_.bits >= 1 && opt_.bits <= 8,
             "quant: bits=" + std::to_string(opt_.bits) + " is out of range; expected 1..8");
  SP_REQUIRE(opt_.group >= 1 && opt_.group <= (int64_t{1} << 40),
             "quant: group=" + std::to_string(opt_.group) + " is out of range; expected 1..2^40");
  SP_REQUIRE(
      opt_.levels == QuantOptions::Levels::kSymmetric ||
          opt_.round == QuantOptions::Round::kNearest,
      "quant: levels=fixpoint rounds to nearest (as the AC-SGD reference does); round=stochastic "
      "needs levels=symmetric");
}

std::string QuantCodec::spec() const {
  std::string s = "quant:bits=" + std::to_string(opt_.bits);
  s += opt_.scale == QuantOptions::Scale::kChannel
           ? ",scale=channel"
           : ",scale=group,group=" + std::to_string(opt_.group);
  s += opt_.round == QuantOptions::Round::kNearest ? ",round=nearest" : ",round=stochastic";
  if (opt_.round == QuantOptions::Round::kStochastic) s += ",seed=" + std::to_string(opt_.seed);
  if (opt_.levels == QuantOptions::Levels::kFixpoint) s += ",levels=fixpoint";
  return s;
}

// Group scales need nothing outside their group: one pass, a chunk of whole groups at a time
// (max, scales, codes while the chunk is in cache). 0: the chunk would not fit in cache (huge
// groups), so two passes. The bytes are the two-pass encode's (the digest test).
int64_t QuantCodec::onePassChunk() const {
  if (opt_.scale != QuantOptions::Scale::kGroup) return 0;
  const int64_t base = std::lcm(opt_.group, int64_t{8});
  if (base > (int64_t{1} << 20)) return 0;
  return base * std::max<int64_t>(1, kChunk / base);
}

void QuantCodec::encodeOnePass(const float* x, const Shape& shape, int64_t chunk, Bytes& out) {
  QuantStream s(*this, shape);
  s.sizeScales();
  const size_t at = out.size();
  uint8_t* p = ByteWriter(out).grow(quantPayloadBytes(opt_, shape));
  uint8_t* packed = p + s.scaleBytes();
  const int64_t group = opt_.group;
  try {
    parallelRanges(s.size(), chunk, [&](int64_t lo, int64_t hi, int64_t) {
      uint8_t codes[kChunk];
      for (int64_t c0 = lo; c0 < hi; c0 += chunk) {
        const int64_t len = std::min(chunk, hi - c0);
        const int64_t g0 = c0 / group, g1 = (c0 + len + group - 1) / group;
        s.accumulate(x + c0, c0, len);
        s.finishScales(g0, g1);  // throws for a fixpoint scale that overflows fp16
        s.writeScales(p, g0, g1);
        for (int64_t o = 0; o < len; o += kChunk) {
          const int64_t l = std::min(kChunk, len - o);
          s.quantize(x + c0 + o, c0 + o, l, codes);
          packBits(codes, l, opt_.bits, packed + (c0 + o) * opt_.bits / 8);
        }
      }
    });
  } catch (...) {
    out.resize(at);  // nothing of a refused message stays behind
    throw;
  }
  s.done();
}

void QuantCodec::encode(const float* x, const Shape& shape, const CodecContext&, Bytes& out) {
  if (const int64_t chunk = onePassChunk(); chunk > 0) return encodeOnePass(x, shape, chunk, out);
  QuantStream s(*this, shape);
  s.accumulateParts(
      [&](int64_t lo, int64_t hi, QuantStream& part) { part.accumulate(x + lo, lo, hi - lo); });
  s.finishScales();
  // The payload may start at any byte offset of `out` (acsgd and ef append after their own fields).
  uint8_t* p = ByteWriter(out).grow(quantPayloadBytes(opt_, shape));
  s.writeScales(p);
  uint8_t* packed = p + s.scaleBytes();
  parallelRanges(s.size(), kChunk, [&](int64_t lo, int64_t hi, int64_t) {
    uint8_t codes[kChunk];
    for (int64_t i0 = lo; i0 < hi; i0 += kChunk) {
      const int64_t len = std::min(kChunk, hi - i0);
      s.quantizePacked(x + i0, i0, len, codes, packed + i0 * opt_.bits / 8);
    }
  });
  s.done();
}

void QuantCodec::decode(const uint8_t* payload, size_t size, const Shape& shape,
                        const CodecContext&, float* out) {
  const size_t expect = quantPayloadBytes(opt_, shape);
  SP_REQUIRE(size == expect, "quant: payload is " + std::to_string(size) + " bytes, expected " +
                                 std::to_string(expect) + " for shape " + shapeString(shape) +
                                 " at " + std::to_string(opt_.bits) + " bits");
  QuantStream s(*this, shape);
  s.readScales(payload);
  const uint8_t* packed = payload + s.scaleBytes();
  // A large output goes out around the cache (it cannot stay there for its reader anyway): each
  // piece straight from its codes (non-temporal stores).
  const bool stream = s.size() >= kStreamValues;
  const Kernels& k = kernels();
  parallelRanges(s.size(), kChunk, [&](int64_t lo, int64_t hi, int64_t) {
    uint8_t codes[kChunk];
    for (int64_t i0 = lo; i0 < hi; i0 += kChunk) {
      const int64_t len = std::min(kChunk, hi - i0);
      unpackBits(packed + i0 * opt_.bits / 8, len, opt_.bits, codes);
      s.dequantize(codes, i0, len, out + i0, stream);
    }
    if (stream) k.streamFence();
  });
}

}  // namespace slowpipe::compression
