// The baseline (x86-64 SSE2 or any other target) build of compression/kernels.inc.
#include <cstring>

#include "compression/half.h"
#include "compression/kernels.h"

namespace slowpipe::compression {
namespace kernels_baseline {
#include "compression/kernels.inc"

static void toHalf(const float* in, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = floatToHalf(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

static void fromHalf(const uint8_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = halfToFloat(h);
  }
}

const Kernels kTable = {"baseline",  absMaxAccum, absMax,    quantVec,         quantScalar,      stochVec,
                        stochScalar, dequantVec,  dequantScalar, fixVec,       fixScalar,        fixDequantVec,
                        fixDequantScalar, sub,    add,       deltaAbsMax,      deltaQuantUpdate, deltaFixUpdate,
                        sumAbsMax,        efQuantUpdate,    efFixUpdate,      toHalf,           fromHalf};
}  // namespace kernels_baseline

const Kernels* baselineKernels() { return &kernels_baseline::kTable; }

}  // namespace slowpipe::compression
