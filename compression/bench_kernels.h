// `slowpipe bench kernels`: the channel quantizer's two hot kernels and AC-SGD's two on an fp16
// buffer (its first pass's max |x - m| and its packed update step), hand-written (kernels.h, the
// active CPU path) against the same kernels written with Google Highway (kernels_hwy.h) on every
// Highway target this CPU runs, on one buffer of fp32 rows (activation-shaped, `cols` channels),
// with memcpy of that buffer measured in the same round. Issue 47 asks for Highway where it is as
// fast and a hand-written path only where that measures faster: this is the measurement.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace slowpipe::compression {

struct KernelBenchOptions {
  int64_t sizeKiB = 65536;
  int64_t cols = 1024;  // channels: each kernel call covers one row
  int rounds = 5;
  std::function<void(int round)> onRound;  // progress, before each round
};

// {"benchmark": "kernels", "size_bytes", "cols", "rounds", "cpu_path", "highway" (built with it),
// "highway_targets" (best first), "memcpy_GBps" (median over rounds, "memcpy_GBps_range"),
// "results": [{"kernel" ("absMaxAccum", "deltaAbsMaxH", "quantVecPacked" or
// "deltaQuantUpdateHPacked"; the AC-SGD ones where the build has the hand-written ones: not the
// baseline build), "bits" (the packing kernels: 1, 2, 4, 8),
// "impl" ("hand" or "highway"), "target" (hand: "avx2 (512-bit where the CPU has AVX-512 F)" or
// "baseline"; highway: its target), "GBps", "GBps_range", "vs_memcpy", "vs_hand" (medians of each
// round's ratios, ranges beside), "same_output" (the same bytes as the hand-written kernel: the
// maxima, or the codes and the updated fp16 buffer, from the same starting buffer)}]}.
// GB/s count fp32 input bytes (10^9 B/s). Throws std::invalid_argument for a size under 4 KiB,
// cols not a positive multiple of 16 dividing the buffer, or rounds < 1.
nlohmann::json benchKernels(const KernelBenchOptions& o);

}  // namespace slowpipe::compression
