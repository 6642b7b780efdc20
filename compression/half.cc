// fp16 conversion. The scalar functions are the reference (bit manipulation: round to nearest even,
// subnormals, inf/NaN); the bulk ones run F16C where the CPU has it, which gives the same bits.
#include "compression/half.h"

#include "compression/kernels.h"

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

// F16C where the CPU has it (compression/kernels.h): the same bits as floatToHalf.
void floatToHalfBytes(const float* in, size_t n, uint8_t* out) { kernels().toHalf(in, n, out); }

void halfBytesToFloat(const uint8_t* in, size_t n, float* out) { kernels().fromHalf(in, n, out); }

}  // namespace slowpipe::compression
