// The baseline (x86-64 SSE2 or any other target) build of compression/kernels.inc.
#include <cstring>

#include "compression/half.h"
#include "compression/kernels.h"

namespace slowpipe::compression {
namespace kernels_baseline {
static void toHalf(const float* in, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = floatToHalf(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

static void toBf16(const float* in, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = floatToBf16(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

static void fromBf16(const uint8_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = bf16ToFloat(h);
  }
}

static void fromHalf(const uint8_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = halfToFloat(h);
  }
}

// No in-register fp16 step here: callers convert through a buffer (kernels.h).
constexpr void (*deltaAbsMaxH)(const float*, const uint8_t*, int64_t, float*) = nullptr;
constexpr void (*deltaQuantUpdateH)(const float*, uint8_t*, const float*, const float*,
                                    const float*, int64_t, float, uint8_t*) = nullptr;
constexpr void (*deltaFixUpdateH)(const float*, uint8_t*, const float*, const float*, const float*,
                                  int64_t, float, float, float, float, uint8_t*) = nullptr;
constexpr void (*deltaApplyH)(const float*, uint8_t*, int64_t, float*, bool) = nullptr;
constexpr void (*deltaApplyPackedH)(const uint8_t*, int, const float*, const float*, float, float,
                                    int64_t, uint8_t*, float*, bool) = nullptr;
constexpr void (*deltaApplyPackedF)(const uint8_t*, int, const float*, const float*, float, float,
                                    int64_t, float*, float*, bool) = nullptr;
constexpr int64_t (*quantVecPacked)(const float*, const float*, const float*, int64_t, float, int,
                                    uint8_t*) = nullptr;
constexpr int64_t (*fixVecPacked)(const float*, const float*, int64_t, float, float, float, int,
                                  uint8_t*) = nullptr;
constexpr int64_t (*stochVecPacked)(const float*, const float*, const float*, int64_t, float,
                                    uint32_t, uint32_t, int, uint8_t*) = nullptr;
// No packed update steps either (kernels.h): the byte codes, then packBits.
#define SLOWPIPE_NO_PACKED_STEPS(Y, quantPacked, fixPacked)                                    \
  constexpr int64_t (*quantPacked)(const float*, Y*, const float*, const float*, const float*, \
                                   int64_t, float, int, uint8_t*) = nullptr;                   \
  constexpr int64_t (*fixPacked)(const float*, Y*, const float*, const float*, const float*,   \
                                 int64_t, float, float, float, float, int, uint8_t*) = nullptr;
SLOWPIPE_NO_PACKED_STEPS(float, deltaQuantUpdatePacked, deltaFixUpdatePacked)
SLOWPIPE_NO_PACKED_STEPS(uint8_t, deltaQuantUpdateHPacked, deltaFixUpdateHPacked)
SLOWPIPE_NO_PACKED_STEPS(float, efQuantUpdatePacked, efFixUpdatePacked)
SLOWPIPE_NO_PACKED_STEPS(uint16_t, efQuantUpdateBPacked, efFixUpdateBPacked)
#undef SLOWPIPE_NO_PACKED_STEPS

static void streamOut(const float* src, int64_t n, float* dst) {
  std::memcpy(dst, src, 4 * static_cast<size_t>(n));
}
static void streamFence() {}
static void streamBytes(const void* src, size_t n, void* dst) {
  if (n) std::memcpy(dst, src, n);
}

#define KERNELS_NAME "baseline"
#include "compression/kernels.inc"  // the shared kernels and this build's table, kTable
#undef KERNELS_NAME
}  // namespace kernels_baseline

const Kernels* baselineKernels() { return &kernels_baseline::kTable; }

}  // namespace slowpipe::compression
