// fp32 <-> fp16 / bf16 conversion, round to nearest even, NaN and infinities preserved.
// Scalar code so results are identical on every machine (both ends of a link must agree bit for bit).
#pragma once

#include <cstdint>
#include <cstring>

namespace slowpipe::compression {

inline uint32_t floatBits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bitsFloat(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline uint16_t floatToBf16(float f) {
  const uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
inline float bf16ToFloat(uint16_t h) { return bitsFloat(static_cast<uint32_t>(h) << 16); }

uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
// Bulk conversions to / from little-endian fp16 bytes (no alignment needed: payloads are bytes).
void floatToHalfBytes(const float* in, size_t n, uint8_t* out);
void halfBytesToFloat(const uint8_t* in, size_t n, float* out);

}  // namespace slowpipe::compression
