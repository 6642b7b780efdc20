// fp32 <-> fp16 / bf16 conversion, round to nearest even, NaN and infinities preserved.
// Scalar code so results are identical on every machine (both ends of a link must agree bit for
// bit).
#pragma once

#include <cstdint>
#include <cstring>

#include "compression/element.h"

namespace slowpipe::compression {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t floatToBf16(float f) { return element::bf16FromFloat(f); }  // NaN stays a quiet NaN
inline float bf16ToFloat(uint16_t h) { return element::floatFromBf16(h); }

uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
// Bulk conversions to / from little-endian fp16 bytes (no alignment needed: payloads are bytes).
void floatToHalfBytes(const float* in, size_t n, uint8_t* out);
void halfBytesToFloat(const uint8_t* in, size_t n, float* out);

}  // namespace slowpipe::compression
