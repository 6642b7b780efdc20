// Quantizer kernels. Work goes in chunks of kChunk codes (a multiple of 8, so every chunk's packed
// bytes start byte-aligned): quantize a chunk into a small code buffer that stays in L1, then pack.
// Built with -ffp-contract=off (see CMakeLists.txt) so sender and receiver round identically.
#include "compression/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compression/bitpack.h"
#include "compression/half.h"

namespace slowpipe::compression {
namespace {

constexpr int64_t kChunk = 16384;

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t xoroshiro(uint64_t* s) {
  const uint64_t s0 = s[0];
  uint64_t s1 = s[1];
  const uint64_t r = s0 + s1;
  s1 ^= s0;
  s[0] = ((s0 << 24) | (s0 >> 40)) ^ s1 ^ (s1 << 16);
  s[1] = (s1 << 37) | (s1 >> 27);
  return r;
}

// Per-element scale (channel mode): m and inv vary along the run.
__attribute__((target_clones("avx2", "default"))) void quantRunVec(
    const float* x, const float* m, const float* inv, int64_t n, float top, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) {
    // Argument order matters: std::max(0, NaN) is 0, so a non-finite input maps to code 0
    // instead of an undefined float-to-int conversion (frames reject non-finite input earlier).
    const float t = std::min(top, std::max(0.0f, (x[i] + m[i]) * inv[i] + 0.5f));
    codes[i] = static_cast<uint8_t>(static_cast<int32_t>(t));
  }
}

// One scale for the whole run (group mode).
__attribute__((target_clones("avx2", "default"))) void quantRunScalar(
    const float* x, float m, float inv, int64_t n, float top, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) {
    const float t = std::min(top, std::max(0.0f, (x[i] + m) * inv + 0.5f));
    codes[i] = static_cast<uint8_t>(static_cast<int32_t>(t));
  }
}

__attribute__((target_clones("avx2", "default"))) void dequantRunVec(
    const uint8_t* codes, const float* m, const float* step, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(codes[i]) * step[i] - m[i];
}

__attribute__((target_clones("avx2", "default"))) void dequantRunScalar(
    const uint8_t* codes, float m, float step, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(codes[i]) * step - m;
}

__attribute__((target_clones("avx2", "default"))) void absMaxRows(
    const float* x, int64_t rows, int64_t cols, float* m) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) m[c] = std::max(m[c], std::fabs(row[c]));
  }
}

// Eight independent lanes so the compiler vectorizes the reduction without -ffast-math.
__attribute__((target_clones("avx2", "default"))) float absMax(const float* x, int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = std::max(lane[k], std::fabs(x[i + k]));
  for (; i < n; ++i) lane[0] = std::max(lane[0], std::fabs(x[i]));
  return *std::max_element(lane, lane + 8);
}

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
  return {n, opt.group, n == 0 ? 0 : (n - 1) / opt.group + 1, false};  // no overflow for huge groups
}

// Unpacks the codes chunk by chunk (each chunk stays in L1) and calls fn(codes, i, pos, run) for
// every run of values that shares one scale layout: within one channel row (channel mode, pos =
// channel of value i) or one group (group mode).
template <typename Fn>
void forEachDecodedRun(const Layout& l, const uint8_t* packed, int bits, Fn&& fn) {
  uint8_t codes[kChunk];
  for (int64_t i0 = 0; i0 < l.n; i0 += kChunk) {
    const int64_t len = std::min(kChunk, l.n - i0);
    unpackBits(packed + i0 * bits / 8, len, bits, codes);
    for (int64_t i = i0; i < i0 + len;) {
      const int64_t pos = i % l.cols, run = std::min(l.cols - pos, i0 + len - i);
      fn(codes + (i - i0), i, pos, run);
      i += run;
    }
  }
}

}  // namespace

int64_t quantScaleCount(const QuantOptions& opt, const Shape& shape) {
  return layoutOf(opt, shape).groups;
}

size_t quantPayloadBytes(const QuantOptions& opt, const Shape& shape) {
  const Layout l = layoutOf(opt, shape);
  const size_t scaleBytes = opt.levels == QuantOptions::Levels::kFixpoint ? 2 : 4;
  return scaleBytes * static_cast<size_t>(l.groups) + packedBytes(static_cast<size_t>(l.n), opt.bits);
}

QuantCodec::QuantCodec(QuantOptions opt) : opt_(opt) {
  SP_REQUIRE(opt_.bits >= 1 && opt_.bits <= 8,
          "quant: bits=" + std::to_string(opt_.bits) + " is out of range; expected 1..8");
  SP_REQUIRE(opt_.group >= 1 && opt_.group <= (int64_t{1} << 40),
             "quant: group=" + std::to_string(opt_.group) + " is out of range; expected 1..2^40");
  SP_REQUIRE(opt_.levels == QuantOptions::Levels::kSymmetric || opt_.round == QuantOptions::Round::kNearest,
             "quant: levels=fixpoint rounds to nearest (as the AC-SGD reference does); round=stochastic "
             "needs levels=symmetric");
  uint64_t s = opt_.seed;
  rng_[0] = splitmix(s);
  rng_[1] = splitmix(s);
}

std::string QuantCodec::spec() const {
  std::string s = "quant:bits=" + std::to_string(opt_.bits);
  s += opt_.scale == QuantOptions::Scale::kChannel ? ",scale=channel"
                                                    : ",scale=group,group=" + std::to_string(opt_.group);
  s += opt_.round == QuantOptions::Round::kNearest ? ",round=nearest" : ",round=stochastic";
  if (opt_.round == QuantOptions::Round::kStochastic) s += ",seed=" + std::to_string(opt_.seed);
  if (opt_.levels == QuantOptions::Levels::kFixpoint) s += ",levels=fixpoint";
  return s;
}

void QuantCodec::encode(const float* x, const Shape& shape, const CodecContext&, Bytes& out) {
  if (opt_.levels == QuantOptions::Levels::kFixpoint) return encodeFixpoint(x, shape, out);
  const Layout l = layoutOf(opt_, shape);
  const int levels = 1 << opt_.bits;
  const float top = static_cast<float>(levels) - 0.5f;  // t + 0.5 clamped below code levels-1 + 1
  // Scales are computed in an aligned local buffer and copied into the payload: the payload may
  // start at any byte offset of `out` (acsgd and ef append after their own fields).
  std::vector<float> mv(l.groups, 0.0f), inv(l.channel ? l.cols : 0);
  float* m = mv.data();
  if (l.channel) {
    if (l.cols > 0) absMaxRows(x, l.n / l.cols, l.cols, m);
    for (int64_t c = 0; c < l.cols; ++c) inv[c] = invOf(stepOf(m[c], levels));
  } else {
    for (int64_t g = 0; g < l.groups; ++g)
      m[g] = absMax(x + g * l.cols, std::min(l.cols, l.n - g * l.cols));
  }
  ByteWriter w(out);
  w.append(m, 4 * l.groups);
  uint8_t* packed = w.grow(packedBytes(l.n, opt_.bits));
  const bool stochastic = opt_.round == QuantOptions::Round::kStochastic;
  uint8_t codes[kChunk];
  for (int64_t i0 = 0; i0 < l.n; i0 += kChunk) {
    const int64_t len = std::min(kChunk, l.n - i0);
    for (int64_t i = i0; i < i0 + len;) {
      const int64_t pos = i % l.cols, run = std::min(l.cols - pos, i0 + len - i);
      if (stochastic) {
        for (int64_t k = 0; k < run; ++k) {
          const int64_t gi = l.channel ? pos + k : i / l.cols;
          const float mm = m[gi], iv = l.channel ? inv[gi] : invOf(stepOf(mm, levels));
          const float u = static_cast<float>(xoroshiro(rng_) >> 40) * 0x1.0p-24f;
          const float t = std::min(top - 0.5f, std::max(0.0f, (x[i + k] + mm) * iv + u));
          codes[i - i0 + k] = static_cast<uint8_t>(static_cast<int32_t>(t));
        }
      } else if (l.channel) {
        quantRunVec(x + i, m + pos, inv.data() + pos, run, top, codes + (i - i0));
      } else {
        const float mm = m[i / l.cols];
        quantRunScalar(x + i, mm, invOf(stepOf(mm, levels)), run, top, codes + (i - i0));
      }
      i += run;
    }
    packBits(codes, len, opt_.bits, packed + i0 * opt_.bits / 8);
  }
}

void QuantCodec::decode(const uint8_t* payload, size_t size, const Shape& shape,
                        const CodecContext&, float* out) {
  const Layout l = layoutOf(opt_, shape);
  const size_t expect = quantPayloadBytes(opt_, shape);
  SP_REQUIRE(size == expect, "quant: payload is " + std::to_string(size) + " bytes, expected " +
                              std::to_string(expect) + " for shape " + shapeString(shape) +
                              " at " + std::to_string(opt_.bits) + " bits");
  if (opt_.levels == QuantOptions::Levels::kFixpoint) return decodeFixpoint(payload, shape, out);
  const int levels = 1 << opt_.bits;
  std::vector<float> m(l.groups), step(l.groups);
  copyBytes(m.data(), payload, 4 * l.groups);
  for (int64_t g = 0; g < l.groups; ++g) {
    SP_REQUIRE(std::isfinite(m[g]) && m[g] >= 0.0f,
            "quant: scale " + std::to_string(g) + " is " + std::to_string(m[g]) +
                ", expected a finite value >= 0");
    step[g] = stepOf(m[g], levels);
  }
  forEachDecodedRun(l, payload + 4 * l.groups, opt_.bits, [&](const uint8_t* codes, int64_t i, int64_t pos, int64_t run) {
    if (l.channel) {
      dequantRunVec(codes, m.data() + pos, step.data() + pos, run, out + i);
    } else {
      const int64_t g = i / l.cols;
      dequantRunScalar(codes, m[g], step[g], run, out + i);
    }
  });
}

// ---- levels=fixpoint: the AC-SGD reference's mapping (see quant.h) ----

float fixpointDivisor(uint16_t scaleHalf) {
  // PyTorch evaluates `scale.half() + 1e-6` in fp16: the scalar becomes fp16 (a subnormal,
  // 1.0133e-6), the sum is rounded to fp16. The quotient x / divisor is then taken in fp32.
  static const float kEps = halfToFloat(floatToHalf(1e-6f));
  return halfToFloat(floatToHalf(halfToFloat(scaleHalf) + kEps));
}

namespace {

// q = clip(rint(x / d * 2^f), -2^f, 2^f - 1) + 2^f. Division (not a multiply by 1/d) and rint
// (round half to even) are what make it bit-exact with the reference.
__attribute__((target_clones("avx2", "default"))) void fixpointRunVec(
    const float* x, const float* d, int64_t n, float mult, float lo, float hi, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) {
    const float q = std::min(hi, std::max(lo, __builtin_rintf(x[i] / d[i] * mult)));  // NaN -> lo
    codes[i] = static_cast<uint8_t>(static_cast<int32_t>(q - lo));
  }
}

__attribute__((target_clones("avx2", "default"))) void fixpointRunScalar(
    const float* x, float d, int64_t n, float mult, float lo, float hi, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) {
    const float q = std::min(hi, std::max(lo, __builtin_rintf(x[i] / d * mult)));
    codes[i] = static_cast<uint8_t>(static_cast<int32_t>(q - lo));
  }
}

// value = (code - 2^f) / 2^f * s; dividing by a power of two is exact, so one rounding, as in torch.
__attribute__((target_clones("avx2", "default"))) void fixpointDequantVec(
    const uint8_t* codes, const float* s, int64_t n, float lo, float inv, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ((static_cast<float>(codes[i]) + lo) * inv) * s[i];
}

__attribute__((target_clones("avx2", "default"))) void fixpointDequantScalar(
    const uint8_t* codes, float s, int64_t n, float lo, float inv, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ((static_cast<float>(codes[i]) + lo) * inv) * s;
}

}  // namespace

void QuantCodec::encodeFixpoint(const float* x, const Shape& shape, Bytes& out) {
  const Layout l = layoutOf(opt_, shape);
  const int f = opt_.bits - 1;
  const float mult = static_cast<float>(1 << f), lo = -mult, hi = mult - 1.0f;
  std::vector<float> m(l.groups, 0.0f), d(l.groups);
  std::vector<uint16_t> sh(l.groups);
  if (l.channel) {
    if (l.cols > 0) absMaxRows(x, l.n / l.cols, l.cols, m.data());
  } else {
    for (int64_t g = 0; g < l.groups; ++g) m[g] = absMax(x + g * l.cols, std::min(l.cols, l.n - g * l.cols));
  }
  for (int64_t g = 0; g < l.groups; ++g) {
    sh[g] = floatToHalf(m[g]);
    SP_REQUIRE(std::isfinite(halfToFloat(sh[g])),
               "quant levels=fixpoint: max |x| = " + std::to_string(m[g]) + " in scale group " + std::to_string(g) +
                   " overflows the fp16 scale (at most 65504)");
    d[g] = fixpointDivisor(sh[g]);
  }
  ByteWriter w(out);
  w.append(sh.data(), 2 * l.groups);
  uint8_t* packed = w.grow(packedBytes(l.n, opt_.bits));
  uint8_t codes[kChunk];
  for (int64_t i0 = 0; i0 < l.n; i0 += kChunk) {
    const int64_t len = std::min(kChunk, l.n - i0);
    for (int64_t i = i0; i < i0 + len;) {
      const int64_t pos = i % l.cols, run = std::min(l.cols - pos, i0 + len - i);
      if (l.channel) fixpointRunVec(x + i, d.data() + pos, run, mult, lo, hi, codes + (i - i0));
      else fixpointRunScalar(x + i, d[i / l.cols], run, mult, lo, hi, codes + (i - i0));
      i += run;
    }
    packBits(codes, len, opt_.bits, packed + i0 * opt_.bits / 8);
  }
}

void QuantCodec::decodeFixpoint(const uint8_t* payload, const Shape& shape, float* out) {
  const Layout l = layoutOf(opt_, shape);
  const int f = opt_.bits - 1;
  const float lo = -static_cast<float>(1 << f), inv = 1.0f / static_cast<float>(1 << f);
  std::vector<float> s(l.groups);
  for (int64_t g = 0; g < l.groups; ++g) {
    uint16_t h;
    std::memcpy(&h, payload + 2 * g, 2);
    s[g] = halfToFloat(h);
    SP_REQUIRE(std::isfinite(s[g]) && !(h & 0x8000u),
               "quant: scale " + std::to_string(g) + " is " + std::to_string(s[g]) + ", expected a finite value >= 0");
  }
  forEachDecodedRun(l, payload + 2 * l.groups, opt_.bits, [&](const uint8_t* codes, int64_t i, int64_t pos, int64_t run) {
    if (l.channel) {
      fixpointDequantVec(codes, s.data() + pos, run, lo, inv, out + i);
    } else {
      fixpointDequantScalar(codes, s[i / l.cols], run, lo, inv, out + i);
    }
  });
}

}  // namespace slowpipe::compression
