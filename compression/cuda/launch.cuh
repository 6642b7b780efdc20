// Launch helpers shared by the CUDA files of compression/cuda/ (internal; .cu files only).
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "compression/cuda/device_kernels.h"

namespace slowpipe::compression::cuda {

constexpr int kThreads = 256;

inline cudaStream_t asStream(Stream s) { return static_cast<cudaStream_t>(s); }
inline int blocksFor(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

// Throws std::runtime_error naming `what` and CUDA's message.
inline void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("cuda ") + what + ": " + cudaGetErrorString(e));
}

// One thread per item of `count` (nothing to do for 0), then the launch's error, named.
template <typename... P, typename... A>
void launch(const char* what, int64_t count, Stream s, void (*kernel)(P...), A... args) {
  if (count > 0) kernel<<<blocksFor(count), kThreads, 0, asStream(s)>>>(args...);
  ok(cudaGetLastError(), what);
}

}  // namespace slowpipe::compression::cuda
