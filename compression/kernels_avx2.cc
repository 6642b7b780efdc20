// The AVX2 + F16C build of compression/kernels.inc (this file alone is compiled with -mavx2
// -mf16c; nothing here runs unless the CPU has both: see kernels.cc).
#include <immintrin.h>

#include "compression/kernels.h"

namespace slowpipe::compression {
namespace kernels_avx2 {
// F16C rounds to nearest even like floatToHalf (only NaN payload bits may differ; frames reject
// non-finite values before any codec sees them).
static void toHalf(const float* in, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  baselineKernels()->toHalf(in + i, n - i, out + 2 * i);  // the tail
}

static void fromHalf(const uint8_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i))));
  baselineKernels()->fromHalf(in + 2 * i, n - i, out + i);  // the tail
}

#define KERNELS_NAME "avx2"
#include "compression/kernels.inc"  // the shared kernels and this build's table, kTable
#undef KERNELS_NAME
}  // namespace kernels_avx2

const Kernels* avx2Kernels() { return &kernels_avx2::kTable; }

}  // namespace slowpipe::compression
