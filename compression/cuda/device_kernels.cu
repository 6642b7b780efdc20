// CUDA kernels of the codecs (see device_kernels.h). One thread per value (or per output byte, per
// channel); the arithmetic is compression/element.h's, compiled with --fmad=false so that every
// rounding step is the CPU's.
#include "compression/cuda/device_kernels.h"

#include <cuda_runtime.h>

#include <stdexcept>

#include "compression/element.h"

namespace slowpipe::compression::cuda {

namespace el = slowpipe::compression::element;

namespace {

constexpr int kThreads = 256;

int blocksFor(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }
cudaStream_t asStream(Stream s) { return static_cast<cudaStream_t>(s); }

void check(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("cuda ") + what + ": " + cudaGetErrorString(e));
}

__global__ void quantVecK(const float* x, const float* m, const float* inv, int64_t n, float top, uint8_t* codes) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) codes[i] = el::symCode(x[i], m[i], inv[i], top);
}
__global__ void stochVecK(const float* x, const float* m, const float* inv, int64_t n, float top, uint32_t lo, uint32_t key,
                          uint8_t* codes) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) codes[i] = el::symCodeStochastic(x[i], m[i], inv[i], top, el::uniform24(lo, key, i));
}
__global__ void dequantVecK(const uint8_t* codes, const float* m, const float* step, int64_t n, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = el::symValue(codes[i], m[i], step[i]);
}
__global__ void fixVecK(const float* x, const float* d, int64_t n, float mult, float lo, float hi, uint8_t* codes) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) codes[i] = el::fixCode(x[i], d[i], mult, lo, hi);
}
__global__ void fixDequantVecK(const uint8_t* codes, const float* sc, int64_t n, float lo, float inv, float* out) {
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
  if (i >= n) return;
  const int64_t bit = i * bits;
  uint32_t v = packed[bit / 8];
  if ((bit % 8) + bits > 8) v |= static_cast<uint32_t>(packed[bit / 8 + 1]) << 8;
  codes[i] = static_cast<uint8_t>((v >> (bit % 8)) & ((1u << bits) - 1u));
}

#define SP_INDEX const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; \
  if (i >= n) return
__global__ void deltaAbsMaxK(const float* x, const float* m, int64_t n, float* acc) {
  SP_INDEX;
  acc[i] = el::maxOf(acc[i], el::absOf(x[i] - m[i]));
}
__global__ void deltaQuantUpdateK(const float* x, float* m, const float* mx, const float* inv, const float* step, int64_t n,
                                  float top, uint8_t* codes) {
  SP_INDEX;
  float mi = m[i];
  codes[i] = el::deltaSymStep(x[i], mi, mx[i], inv[i], step[i], top);
  m[i] = mi;
}
__global__ void deltaFixUpdateK(const float* x, float* m, const float* d, const float* sc, int64_t n, float mult, float lo,
                                float hi, float inv, uint8_t* codes) {
  SP_INDEX;
  float mi = m[i];
  codes[i] = el::deltaFixStep(x[i], mi, d[i], sc[i], mult, lo, hi, inv);
  m[i] = mi;
}
__global__ void deltaFixUpdateHK(const float* x, uint16_t* mh, const float* d, const float* sc, int64_t n, float mult,
                                 float lo, float hi, float inv, uint8_t* codes) {
  SP_INDEX;
  float mi = el::floatFromHalf(mh[i]);
  codes[i] = el::deltaFixStep(x[i], mi, d[i], sc[i], mult, lo, hi, inv);
  mh[i] = el::halfFromFloat(mi);
}
__global__ void sumAbsMaxK(const float* x, const float* r, int64_t n, float* acc) {
  SP_INDEX;
  acc[i] = el::maxOf(acc[i], el::absOf(x[i] + r[i]));
}
__global__ void efQuantUpdateK(const float* x, float* r, const float* mx, const float* inv, const float* step, int64_t n,
                               float top, uint8_t* codes) {
  SP_INDEX;
  float ri = r[i];
  codes[i] = el::efSymStep(x[i], ri, mx[i], inv[i], step[i], top);
  r[i] = ri;
}
__global__ void efFixUpdateK(const float* x, float* r, const float* d, const float* sc, int64_t n, float mult, float lo,
                             float hi, float inv, uint8_t* codes) {
  SP_INDEX;
  float ri = r[i];
  codes[i] = el::efFixStep(x[i], ri, d[i], sc[i], mult, lo, hi, inv);
  r[i] = ri;
}
#undef SP_INDEX

}  // namespace

void deltaAbsMax(const float* x, const float* m, int64_t n, float* acc, Stream s) {
  if (n > 0) deltaAbsMaxK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(x, m, n, acc);
  check("deltaAbsMax");
}
void deltaQuantUpdate(const float* x, float* m, const float* mx, const float* inv, const float* step, int64_t n, float top,
                      uint8_t* codes, Stream s) {
  if (n > 0) deltaQuantUpdateK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(x, m, mx, inv, step, n, top, codes);
  check("deltaQuantUpdate");
}
void deltaFixUpdate(const float* x, float* m, const float* d, const float* sc, int64_t n, float mult, float lo, float hi,
                    float inv, uint8_t* codes, Stream s) {
  if (n > 0) deltaFixUpdateK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(x, m, d, sc, n, mult, lo, hi, inv, codes);
  check("deltaFixUpdate");
}
void deltaFixUpdateH(const float* x, uint16_t* mh, const float* d, const float* sc, int64_t n, float mult, float lo, float hi,
                     float inv, uint8_t* codes, Stream s) {
  if (n > 0) deltaFixUpdateHK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(x, mh, d, sc, n, mult, lo, hi, inv, codes);
  check("deltaFixUpdateH");
}
void sumAbsMax(const float* x, const float* r, int64_t n, float* acc, Stream s) {
  if (n > 0) sumAbsMaxK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(x, r, n, acc);
  check("sumAbsMax");
}
void efQuantUpdate(const float* x, float* r, const float* mx, const float* inv, const float* step, int64_t n, float top,
                   uint8_t* codes, Stream s) {
  if (n > 0) efQuantUpdateK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(x, r, mx, inv, step, n, top, codes);
  check("efQuantUpdate");
}
void efFixUpdate(const float* x, float* r, const float* d, const float* sc, int64_t n, float mult, float lo, float hi,
                 float inv, uint8_t* codes, Stream s) {
  if (n > 0) efFixUpdateK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(x, r, d, sc, n, mult, lo, hi, inv, codes);
  check("efFixUpdate");
}

bool deviceAvailable(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (why) *why = e != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(e) : "no CUDA device on this machine";
    return false;
  }
  return true;
}

void quantVec(const float* x, const float* m, const float* inv, int64_t n, float top, uint8_t* codes, Stream s) {
  if (n > 0) quantVecK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(x, m, inv, n, top, codes);
  check("quantVec");
}
void stochVec(const float* x, const float* m, const float* inv, int64_t n, float top, uint32_t lo, uint32_t key, uint8_t* codes,
              Stream s) {
  if (n > 0) stochVecK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(x, m, inv, n, top, lo, key, codes);
  check("stochVec");
}
void dequantVec(const uint8_t* codes, const float* m, const float* step, int64_t n, float* out, Stream s) {
  if (n > 0) dequantVecK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(codes, m, step, n, out);
  check("dequantVec");
}
void fixVec(const float* x, const float* d, int64_t n, float mult, float lo, float hi, uint8_t* codes, Stream s) {
  if (n > 0) fixVecK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(x, d, n, mult, lo, hi, codes);
  check("fixVec");
}
void fixDequantVec(const uint8_t* codes, const float* sc, int64_t n, float lo, float inv, float* out, Stream s) {
  if (n > 0) fixDequantVecK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(codes, sc, n, lo, inv, out);
  check("fixDequantVec");
}
void toHalf(const float* x, int64_t n, uint16_t* out, Stream s) {
  if (n > 0) toHalfK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(x, n, out);
  check("toHalf");
}
void fromHalf(const uint16_t* in, int64_t n, float* out, Stream s) {
  if (n > 0) fromHalfK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(in, n, out);
  check("fromHalf");
}
void toBf16(const float* x, int64_t n, uint16_t* out, Stream s) {
  if (n > 0) toBf16K<<<blocksFor(n), kThreads, 0, asStream(s)>>>(x, n, out);
  check("toBf16");
}
void fromBf16(const uint16_t* in, int64_t n, float* out, Stream s) {
  if (n > 0) fromBf16K<<<blocksFor(n), kThreads, 0, asStream(s)>>>(in, n, out);
  check("fromBf16");
}
void channelAbsMax(const float* x, int64_t rows, int64_t channels, float* out, Stream s) {
  if (channels > 0) channelAbsMaxK<<<blocksFor(channels), kThreads, 0, asStream(s)>>>(x, rows, channels, out);
  check("channelAbsMax");
}
void groupAbsMax(const float* x, int64_t n, int64_t group, float* out, Stream s) {
  if (group <= 0) throw std::invalid_argument("cuda groupAbsMax: group must be positive");
  const int64_t groups = (n + group - 1) / group;
  if (groups > 0) groupAbsMaxK<<<blocksFor(groups), kThreads, 0, asStream(s)>>>(x, n, group, out);
  check("groupAbsMax");
}
void packBits(const uint8_t* codes, int64_t n, int bits, uint8_t* packed, Stream s) {
  if (bits < 1 || bits > 8) throw std::invalid_argument("cuda packBits: bits must be 1..8");
  const int64_t bytes = (n * bits + 7) / 8;
  if (bytes > 0) packK<<<blocksFor(bytes), kThreads, 0, asStream(s)>>>(codes, n, bits, bytes, packed);
  check("packBits");
}
void unpackBits(const uint8_t* packed, int64_t n, int bits, uint8_t* codes, Stream s) {
  if (bits < 1 || bits > 8) throw std::invalid_argument("cuda unpackBits: bits must be 1..8");
  if (n > 0) unpackK<<<blocksFor(n), kThreads, 0, asStream(s)>>>(packed, n, bits, codes);
  check("unpackBits");
}

}  // namespace slowpipe::compression::cuda
