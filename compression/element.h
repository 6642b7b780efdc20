// The per-value arithmetic of the codecs, as __host__ __device__ functions: the CUDA kernels
// (compression/cuda/) compute every value with these, and tests/compression/element_test.cc checks
// them bit for bit against the CPU kernels (compression/kernels.inc) and the scalar fp16 reference,
// so a payload encoded on a GPU is the one the CPU would have written. Both sides compile without
// fused multiply-add (-ffp-contract=off here, --fmad=false for nvcc): a*b+c rounds twice on both.
// Header-only, no std:: calls (device code).
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define SLOWPIPE_HD __host__ __device__ __forceinline__
#else
#define SLOWPIPE_HD inline
#endif

namespace slowpipe::compression::element {

SLOWPIPE_HD uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
#endif
}
SLOWPIPE_HD float bitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}
// max / min with std::max / std::min's NaN behaviour (a NaN in b gives a), no fmaxf semantics.
SLOWPIPE_HD float maxOf(float a, float b) { return a < b ? b : a; }
SLOWPIPE_HD float minOf(float a, float b) { return b < a ? b : a; }
SLOWPIPE_HD float absOf(float a) { return bitsFloat(floatBits(a) & 0x7fffffffu); }
// Round half to even (rintf in the default rounding mode), exact for |x| < 2^23.
SLOWPIPE_HD float roundHalfEven(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return __builtin_rintf(x);
#endif
}

// fp16 (IEEE binary16), round to nearest even; subnormals; NaN -> quiet NaN, overflow -> inf.
SLOWPIPE_HD uint16_t halfFromFloat(float f) {
  const uint32_t u = floatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t absU = u & 0x7fffffffu;
  if (absU >= 0x7f800000u) return sign | (absU > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (absU >= 0x477ff000u) return sign | 0x7c00u;
  if (absU < 0x38800000u) {
    if (absU < 0x33000000u) return sign;
    const uint32_t mant = (absU & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(absU >> 23);
    const uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    const uint32_t up = (rem > mid || (rem == mid && (half & 1u))) ? 1u : 0u;
    return sign | static_cast<uint16_t>(half + up);
  }
  const uint32_t rebased = absU - 0x38000000u;
  const uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>((rebased + rounding) >> 13);
}
SLOWPIPE_HD float floatFromHalf(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return bitsFloat(sign);
  int e = 113;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return bitsFloat(sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13));
}
// bf16: the top half of the fp32 bits, round to nearest even; NaN stays a (quiet) NaN.
SLOWPIPE_HD uint16_t bf16FromFloat(float f) {
  const uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
SLOWPIPE_HD float floatFromBf16(uint16_t h) { return bitsFloat(static_cast<uint32_t>(h) << 16); }

// splitmix64's finaliser (bytes.h's mix64): randk's kept set, hadamard's signs.
SLOWPIPE_HD uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Stochastic rounding's uniform in [0, 1): 24 bits of lowbias32((lo + k) ^ key).
SLOWPIPE_HD uint32_t lowbias32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
SLOWPIPE_HD float uniform24(uint32_t lo, uint32_t key, int64_t k) {
  return static_cast<float>(
             static_cast<int32_t>(lowbias32((lo + static_cast<uint32_t>(k)) ^ key) >> 8)) *
         0x1.0p-24f;
}

// Symmetric levels (quant.h): code = clamp(floor((x + m) * inv + 0.5), 0, top); value = code * step
// - m. A NaN input gives code 0 (maxOf(0, NaN) is 0).
SLOWPIPE_HD uint8_t symCode(float x, float m, float inv, float top) {
  return static_cast<uint8_t>(static_cast<int32_t>(minOf(top, maxOf(0.0f, (x + m) * inv + 0.5f))));
}
// Stochastic rounding: u (uniform24) in place of 0.5, clamped to top - 0.5.
SLOWPIPE_HD uint8_t symCodeStochastic(float x, float m, float inv, float top, float u) {
  return static_cast<uint8_t>(
      static_cast<int32_t>(minOf(top - 0.5f, maxOf(0.0f, (x + m) * inv + u))));
}
SLOWPIPE_HD float symValue(uint8_t code, float m, float step) {
  return static_cast<float>(code) * step - m;
}

// The AC-SGD reference's fixed point (levels=fixpoint): q = clip(rint(x / d * mult), lo, hi) - lo,
// a division (not a multiply by 1/d) for bit-exactness with the reference; value = ((q + lo) * inv)
// * s.
SLOWPIPE_HD uint8_t fixCode(float x, float d, float mult, float lo, float hi) {
  return static_cast<uint8_t>(
      static_cast<int32_t>(minOf(hi, maxOf(lo, roundHalfEven(x / d * mult))) - lo));
}
SLOWPIPE_HD float fixValue(uint8_t code, float s, float lo, float inv) {
  return ((static_cast<float>(code) + lo) * inv) * s;
}

// AC-SGD's delta step (acsgd.h) on one value: the code of x - m, and m moved by its value, in the
// order the CPU kernels compute them (deltaQuantUpdate / deltaFixUpdate); with an fp16 buffer the
// moved m is rounded to fp16 (deltaFixUpdateH: m is read from and written back as fp16).
SLOWPIPE_HD uint8_t deltaSymStep(float x, float& m, float mx, float inv, float step, float top) {
  const uint8_t c = symCode(x - m, mx, inv, top);
  m = m + symValue(c, mx, step);
  return c;
}
SLOWPIPE_HD uint8_t deltaFixStep(float x, float& m, float d, float s, float mult, float lo,
                                 float hi, float inv) {
  const uint8_t c = fixCode(x - m, d, mult, lo, hi);
  m = m + fixValue(c, s, lo, inv);
  return c;
}
// ef(quant)'s step: v = x + r, the code of v, r = v - its value.
SLOWPIPE_HD uint8_t efSymStep(float x, float& r, float mx, float inv, float step, float top) {
  const float v = x + r;
  const uint8_t c = symCode(v, mx, inv, top);
  r = v - symValue(c, mx, step);
  return c;
}
SLOWPIPE_HD uint8_t efFixStep(float x, float& r, float d, float s, float mult, float lo, float hi,
                              float inv) {
  const float v = x + r;
  const uint8_t c = fixCode(v, d, mult, lo, hi);
  r = v - fixValue(c, s, lo, inv);
  return c;
}

// Dense bit packing (bitpack.h): byte j of the stream of n b-bit codes, code(i) giving value i's
// code (value i occupies bits [i*b, i*b + b), LSB first); what one GPU thread writes.
template <typename CodeOf>
SLOWPIPE_HD uint8_t packedByteOf(int64_t n, int bits, int64_t j, const CodeOf& code) {
  const int64_t firstBit = 8 * j, lastBit = firstBit + 8;  // [firstBit, lastBit)
  int64_t i = firstBit / bits;
  uint32_t out = 0;
  const uint32_t mask = (1u << bits) - 1u;
  for (; i < n && i * bits < lastBit; ++i) {
    const int64_t at = i * bits - firstBit;  // may be negative: the code began in the byte before
    const uint32_t c = static_cast<uint32_t>(code(i)) & mask;
    out |= at >= 0 ? (c << at) : (c >> -at);
  }
  return static_cast<uint8_t>(out & 0xffu);
}
SLOWPIPE_HD uint8_t packedByte(const uint8_t* codes, int64_t n, int bits, int64_t j) {
  return packedByteOf(n, bits, j, [codes](int64_t i) { return codes[i]; });
}
// The inverse: code i of a packed stream.
SLOWPIPE_HD uint8_t codeAt(const uint8_t* packed, int64_t i, int bits) {
  const int64_t bit = i * bits, byte = bit / 8;
  const int off = static_cast<int>(bit % 8);
  uint32_t v = packed[byte];
  if (off + bits > 8) v |= static_cast<uint32_t>(packed[byte + 1]) << 8;
  return static_cast<uint8_t>((v >> off) & ((1u << bits) - 1u));
}

}  // namespace slowpipe::compression::element
