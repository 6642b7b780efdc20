// CUDA kernels of the codecs (see device_kernels.h). One thread per value (or per output byte, per
// channel); the arithmetic is compression/element.h's, compiled with --fmad=false so that every
// rounding step is the CPU's.
#include "compression/cuda/device_kernels.h"

#include <stdexcept>

#include "compression/cuda/launch.cuh"
#include "compression/element.h"

namespace slowpipe::compression::cuda {

namespace el = slowpipe::compression::element;

namespace {

__global__ void quantVecK(const float* x, const float* m, const float* inv, int64_t n, float top,
                          uint8_t* codes) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) codes[i] = el::symCode(x[i], m[i], inv[i], top);
}
__global__ void stochVecK(const float* x, const float* m, const float* inv, int64_t n, float top,
                          uint32_t lo, uint32_t key, uint8_t* codes) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) codes[i] = el::symCodeStochastic(x[i], m[i], inv[i], top, el::uniform24(lo, key, i));
}
__global__ void dequantVecK(const uint8_t* codes, const float* m, const float* step, int64_t n,
                            float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = el::symValue(codes[i], m[i], step[i]);
}
__global__ void fixVecK(const float* x, const float* d, int64_t n, float mult, float lo, float hi,
                        uint8_t* codes) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) codes[i] = el::fixCode(x[i], d[i], mult, lo, hi);
}
__global__ void fixDequantVecK(const uint8_t* codes, const float* sc, int64_t n, float lo,
                               float inv, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = el::fixValue(codes[i], sc[i], lo, inv);
}
__global__ void toHalfK(const float* x, int64_t n, uint16_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = el::halfFromFloat(x[i]);
}
__global__ void fromHalfK(const uint16_t* in, int64_t n, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = el::floatFromHalf(in[i]);
}
__global__ void toBf16K(const float* x, int64_t n, uint16_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = el::bf16FromFloat(x[i]);
}
__global__ void fromBf16K(const uint16_t* in, int64_t n, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = el::floatFromBf16(in[i]);
}
// Max is exact, so the order of the reduction does not matter: one thread per channel walks the
// rows (coalesced across neighbouring channels).
__global__ void channelAbsMaxK(const float* x, int64_t rows, int64_t channels, float* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  float m = 0.0f;
  for (int64_t r = 0; r < rows; ++r) m = el::maxOf(m, el::absOf(x[r * channels + c]));
  out[c] = m;
}
__global__ void groupAbsMaxK(const float* x, int64_t n, int64_t group, float* out) {
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t begin = g * group;
  if (begin >= n) return;
  const int64_t end = begin + group < n ? begin + group : n;
  float m = 0.0f;
  for (int64_t i = begin; i < end; ++i) m = el::maxOf(m, el::absOf(x[i]));
  out[g] = m;
}
__global__ void packK(const uint8_t* codes, int64_t n, int bits, int64_t bytes, uint8_t* packed) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j < bytes) packed[j] = el::packedByte(codes, n, bits, j);
}
__global__ void unpackK(const uint8_t* packed, int64_t n, int bits, uint8_t* codes) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) codes[i] = el::codeAt(packed, i, bits);
}

#define SP_INDEX                                                                 \
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; \
  if (i >= n) return
__global__ void deltaAbsMaxK(const float* x, const float* m, int64_t n, float* acc) {
  SP_INDEX;
  acc[i] = el::maxOf(acc[i], el::absOf(x[i] - m[i]));
}
__global__ void deltaQuantUpdateK(const float* x, float* m, const float* mx, const float* inv,
                                  const float* step, int64_t n, float top, uint8_t* codes) {
  SP_INDEX;
  float mi = m[i];
  codes[i] = el::deltaSymStep(x[i], mi, mx[i], inv[i], step[i], top);
  m[i] = mi;
}
__global__ void deltaFixUpdateK(const float* x, float* m, const float* d, const float* sc,
                                int64_t n, float mult, float lo, float hi, float inv,
                                uint8_t* codes) {
  SP_INDEX;
  float mi = m[i];
  codes[i] = el::deltaFixStep(x[i], mi, d[i], sc[i], mult, lo, hi, inv);
  m[i] = mi;
}
__global__ void deltaFixUpdateHK(const float* x, uint16_t* mh, const float* d, const float* sc,
                                 int64_t n, float mult, float lo, float hi, float inv,
                                 uint8_t* codes) {
  SP_INDEX;
  float mi = el::floatFromHalf(mh[i]);
  codes[i] = el::deltaFixStep(x[i], mi, d[i], sc[i], mult, lo, hi, inv);
  mh[i] = el::halfFromFloat(mi);
}
__global__ void sumAbsMaxK(const float* x, const float* r, int64_t n, float* acc) {
  SP_INDEX;
  acc[i] = el::maxOf(acc[i], el::absOf(x[i] + r[i]));
}
__global__ void efQuantUpdateK(const float* x, float* r, const float* mx, const float* inv,
                               const float* step, int64_t n, float top, uint8_t* codes) {
  SP_INDEX;
  float ri = r[i];
  codes[i] = el::efSymStep(x[i], ri, mx[i], inv[i], step[i], top);
  r[i] = ri;
}
__global__ void efFixUpdateK(const float* x, float* r, const float* d, const float* sc, int64_t n,
                             float mult, float lo, float hi, float inv, uint8_t* codes) {
  SP_INDEX;
  float ri = r[i];
  codes[i] = el::efFixStep(x[i], ri, d[i], sc[i], mult, lo, hi, inv);
  r[i] = ri;
}
#undef SP_INDEX

}  // namespace

void deltaAbsMax(const float* x, const float* m, int64_t n, float* acc, Stream s) {
  launch("deltaAbsMax", n, s, deltaAbsMaxK, x, m, n, acc);
}
void deltaQuantUpdate(const float* x, float* m, const float* mx, const float* inv,
                      const float* step, int64_t n, float top, uint8_t* codes, Stream s) {
  launch("deltaQuantUpdate", n, s, deltaQuantUpdateK, x, m, mx, inv, step, n, top, codes);
}
void deltaFixUpdate(const float* x, float* m, const float* d, const float* sc, int64_t n,
                    float mult, float lo, float hi, float inv, uint8_t* codes, Stream s) {
  launch("deltaFixUpdate", n, s, deltaFixUpdateK, x, m, d, sc, n, mult, lo, hi, inv, codes);
}
void deltaFixUpdateH(const float* x, uint16_t* mh, const float* d, const float* sc, int64_t n,
                     float mult, float lo, float hi, float inv, uint8_t* codes, Stream s) {
  launch("deltaFixUpdateH", n, s, deltaFixUpdateHK, x, mh, d, sc, n, mult, lo, hi, inv, codes);
}
void sumAbsMax(const float* x, const float* r, int64_t n, float* acc, Stream s) {
  launch("sumAbsMax", n, s, sumAbsMaxK, x, r, n, acc);
}
void efQuantUpdate(const float* x, float* r, const float* mx, const float* inv, const float* step,
                   int64_t n, float top, uint8_t* codes, Stream s) {
  launch("efQuantUpdate", n, s, efQuantUpdateK, x, r, mx, inv, step, n, top, codes);
}
void efFixUpdate(const float* x, float* r, const float* d, const float* sc, int64_t n, float mult,
                 float lo, float hi, float inv, uint8_t* codes, Stream s) {
  launch("efFixUpdate", n, s, efFixUpdateK, x, r, d, sc, n, mult, lo, hi, inv, codes);
}

bool deviceAvailable(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (why)
      *why = e != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(e)
                              : "no CUDA device on this machine";
    return false;
  }
  return true;
}

void quantVec(const float* x, const float* m, const float* inv, int64_t n, float top,
              uint8_t* codes, Stream s) {
  launch("quantVec", n, s, quantVecK, x, m, inv, n, top, codes);
}
void stochVec(const float* x, const float* m, const float* inv, int64_t n, float top, uint32_t lo,
              uint32_t key, uint8_t* codes, Stream s) {
  launch("stochVec", n, s, stochVecK, x, m, inv, n, top, lo, key, codes);
}
void dequantVec(const uint8_t* codes, const float* m, const float* step, int64_t n, float* out,
                Stream s) {
  launch("dequantVec", n, s, dequantVecK, codes, m, step, n, out);
}
void fixVec(const float* x, const float* d, int64_t n, float mult, float lo, float hi,
            uint8_t* codes, Stream s) {
  launch("fixVec", n, s, fixVecK, x, d, n, mult, lo, hi, codes);
}
void fixDequantVec(const uint8_t* codes, const float* sc, int64_t n, float lo, float inv,
                   float* out, Stream s) {
  launch("fixDequantVec", n, s, fixDequantVecK, codes, sc, n, lo, inv, out);
}
void toHalf(const float* x, int64_t n, uint16_t* out, Stream s) {
  launch("toHalf", n, s, toHalfK, x, n, out);
}
void fromHalf(const uint16_t* in, int64_t n, float* out, Stream s) {
  launch("fromHalf", n, s, fromHalfK, in, n, out);
}
void toBf16(const float* x, int64_t n, uint16_t* out, Stream s) {
  launch("toBf16", n, s, toBf16K, x, n, out);
}
void fromBf16(const uint16_t* in, int64_t n, float* out, Stream s) {
  launch("fromBf16", n, s, fromBf16K, in, n, out);
}
void channelAbsMax(const float* x, int64_t rows, int64_t channels, float* out, Stream s) {
  launch("channelAbsMax", channels, s, channelAbsMaxK, x, rows, channels, out);
}
void groupAbsMax(const float* x, int64_t n, int64_t group, float* out, Stream s) {
  if (group <= 0) throw std::invalid_argument("cuda groupAbsMax: group must be positive");
  const int64_t groups = (n + group - 1) / group;
  launch("groupAbsMax", groups, s, groupAbsMaxK, x, n, group, out);
}
void packBits(const uint8_t* codes, int64_t n, int bits, uint8_t* packed, Stream s) {
  if (bits < 1 || bits > 8) throw std::invalid_argument("cuda packBits: bits must be 1..8");
  const int64_t bytes = (n * bits + 7) / 8;
  launch("packBits", bytes, s, packK, codes, n, bits, bytes, packed);
}
void unpackBits(const uint8_t* packed, int64_t n, int bits, uint8_t* codes, Stream s) {
  if (bits < 1 || bits > 8) throw std::invalid_argument("cuda unpackBits: bits must be 1..8");
  launch("unpackBits", n, s, unpackK, packed, n, bits, codes);
}

}  // namespace slowpipe::compression::cuda
