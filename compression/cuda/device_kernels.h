// The codec kernels on a CUDA device (built with -DSLOWPIPE_CUDA=ON): the CPU kernel table's
// element-wise operations (compression/kernels.h) over device pointers, each value computed by
// compression/element.h exactly as the CPU computes it, plus the reductions and bit packing a codec
// needs around them. Every function launches on `stream` and returns without waiting; errors
// (a launch that fails, no device) throw std::runtime_error naming the function and CUDA's message.
//
// Status: compiled in CI here (no GPU on these machines); checked bit for bit against the CPU
// kernels on a device by tests/compression/cuda_kernels_test.cc (skipped, saying so, without one).
#pragma once

#include <cstdint>
#include <string>

namespace slowpipe::compression::cuda {

// True when a CUDA device is usable; otherwise why not.
bool deviceAvailable(std::string* why = nullptr);

using Stream = void*;  // cudaStream_t, kept opaque so callers need no CUDA headers

void quantVec(const float* x, const float* m, const float* inv, int64_t n, float top,
              uint8_t* codes, Stream s = nullptr);
void stochVec(const float* x, const float* m, const float* inv, int64_t n, float top, uint32_t lo,
              uint32_t key, uint8_t* codes, Stream s = nullptr);
void dequantVec(const uint8_t* codes, const float* m, const float* step, int64_t n, float* out,
                Stream s = nullptr);
void fixVec(const float* x, const float* d, int64_t n, float mult, float lo, float hi,
            uint8_t* codes, Stream s = nullptr);
void fixDequantVec(const uint8_t* codes, const float* sc, int64_t n, float lo, float inv,
                   float* out, Stream s = nullptr);
// AC-SGD's delta step and ef's step, fused as on the CPU (kernels.h): acc = max(acc, |x - m|);
// codes = Q(x - m), m += deQ(codes) (m in fp32, or fp16 words with the ...H variant); and
// acc = max(acc, |x + r|); codes = Q(x + r), r = x + r - deQ(codes).
void deltaAbsMax(const float* x, const float* m, int64_t n, float* acc, Stream s = nullptr);
void deltaQuantUpdate(const float* x, float* m, const float* mx, const float* inv,
                      const float* step, int64_t n, float top, uint8_t* codes, Stream s = nullptr);
void deltaFixUpdate(const float* x, float* m, const float* d, const float* sc, int64_t n,
                    float mult, float lo, float hi, float inv, uint8_t* codes, Stream s = nullptr);
void deltaFixUpdateH(const float* x, uint16_t* mh, const float* d, const float* sc, int64_t n,
                     float mult, float lo, float hi, float inv, uint8_t* codes, Stream s = nullptr);
void sumAbsMax(const float* x, const float* r, int64_t n, float* acc, Stream s = nullptr);
void efQuantUpdate(const float* x, float* r, const float* mx, const float* inv, const float* step,
                   int64_t n, float top, uint8_t* codes, Stream s = nullptr);
void efFixUpdate(const float* x, float* r, const float* d, const float* sc, int64_t n, float mult,
                 float lo, float hi, float inv, uint8_t* codes, Stream s = nullptr);
// fp16 / bf16 as little-endian 16-bit words.
void toHalf(const float* x, int64_t n, uint16_t* out, Stream s = nullptr);
void fromHalf(const uint16_t* in, int64_t n, float* out, Stream s = nullptr);
void toBf16(const float* x, int64_t n, uint16_t* out, Stream s = nullptr);
void fromBf16(const uint16_t* in, int64_t n, float* out, Stream s = nullptr);
// out[c] = max over rows of |x[r * channels + c]| (the channel scales' source).
void channelAbsMax(const float* x, int64_t rows, int64_t channels, float* out, Stream s = nullptr);
// out[g] = max |x| over values [g * group, (g + 1) * group) (the last group may be short).
void groupAbsMax(const float* x, int64_t n, int64_t group, float* out, Stream s = nullptr);
// Dense b-bit packing (compression/bitpack.h): packed[0, ceil(n*bits/8)).
void packBits(const uint8_t* codes, int64_t n, int bits, uint8_t* packed, Stream s = nullptr);
void unpackBits(const uint8_t* packed, int64_t n, int bits, uint8_t* codes, Stream s = nullptr);

}  // namespace slowpipe::compression::cuda
