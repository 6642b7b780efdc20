// fp16 conversion. The scalar functions are the reference (bit manipulation: round to nearest even,
// subnormals, inf/NaN); the bulk ones run F16C where the CPU has it, which gives the same bits.
#include "compression/half.h"

#include "compression/element.h"
#include "compression/kernels.h"

namespace slowpipe::compression {

// The element functions are the CUDA kernels' too (compression/element.h): one definition.
uint16_t floatToHalf(float f) { return element::halfFromFloat(f); }

float halfToFloat(uint16_t h) { return element::floatFromHalf(h); }

// F16C where the CPU has it (compression/kernels.h): the same bits as floatToHalf.
void floatToHalfBytes(const float* in, size_t n, uint8_t* out) { kernels().toHalf(in, n, out); }

void halfBytesToFloat(const uint8_t* in, size_t n, float* out) { kernels().fromHalf(in, n, out); }

}  // namespace slowpipe::compression
