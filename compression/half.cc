// fp16 conversion. Scalar bit manipulation (round to nearest even, subnormals, inf/NaN) rather
// than F16C so that every machine produces the same bits.
#include "compression/half.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace slowpipe::compression {

uint16_t floatToHalf(float f) {
  const uint32_t u = floatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t absU = u & 0x7fffffffu;
  if (absU >= 0x7f800000u) return sign | (absU > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN / inf
  if (absU >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to inf
  if (absU < 0x38800000u) {                        // below 2^-14: subnormal half or zero
    if (absU < 0x33000000u) return sign;           // below 2^-25: rounds to zero
    const uint32_t mant = (absU & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(absU >> 23);  // 14..24
    const uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    const uint32_t up = (rem > mid || (rem == mid && (half & 1u))) ? 1u : 0u;
    return sign | static_cast<uint16_t>(half + up);
  }
  const uint32_t rebased = absU - 0x38000000u;  // exponent bias 127 -> 15
  const uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>((rebased + rounding) >> 13);
}

float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return bitsFloat(sign);
  int e = 113;  // normalise the subnormal
  while ((mant & 0x400u) == 0) { mant <<= 1; --e; }
  return bitsFloat(sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13));
}

#if defined(__x86_64__)
// F16C converts with the same IEEE round-to-nearest-even as the scalar code above (only NaN
// payload bits may differ), eight values per instruction; unaligned loads and stores.
__attribute__((target("f16c,avx"))) static void toHalfF16c(const float* in, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) {
    const uint16_t h = floatToHalf(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}
__attribute__((target("f16c,avx"))) static void fromHalfF16c(const uint8_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i))));
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = halfToFloat(h);
  }
}
static const bool kHasF16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
#endif

void floatToHalfBytes(const float* in, size_t n, uint8_t* out) {
#if defined(__x86_64__)
  if (kHasF16c) return toHalfF16c(in, n, out);
#endif
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = floatToHalf(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

void halfBytesToFloat(const uint8_t* in, size_t n, float* out) {
#if defined(__x86_64__)
  if (kHasF16c) return fromHalfF16c(in, n, out);
#endif
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = halfToFloat(h);
  }
}

}  // namespace slowpipe::compression
