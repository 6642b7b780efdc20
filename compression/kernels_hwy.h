// The channel quantizer's two hot kernels written with Google Highway (libhwy, runtime dispatch
// over the targets it compiles: SSE4, AVX2, AVX-512 ...), beside the hand-written ones of
// kernels.h, so that `slowpipe bench kernels` measures both on the same buffers (issue 47: keep a
// hand-written path only where it measures faster). The same values as kernels.h's absMaxAccum and
// quantVecPacked (tests/compression/kernels_hwy_test.cc checks every target this CPU runs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace slowpipe::compression::hwy_kernels {

bool built();  // false where the build found no libhwy: the functions below then do nothing
// The Highway targets compiled here that this CPU runs, best first ("AVX3_DL", "AVX2", ...).
std::vector<std::string> targets();
// Dispatch to that target only ("" = Highway's own choice, the best); false for a name not in
// targets(). Process-wide: benchmarks and tests.
bool useTarget(const std::string& name);
std::string currentTarget();  // the target a call dispatches to now

// m[k] = max(m[k], |v[k]|)
void absMaxAccum(const float* v, int64_t n, float* m);
// Kernels::quantVecPacked: codes of symmetric levels, nearest rounding, packed (bits 1, 2, 4, 8);
// returns how many values it did, a multiple of 8 from value 0 (0: this target's vectors are under
// 8 floats, or another width).
int64_t quantVecPacked(const float* x, const float* m, const float* inv, int64_t n, float top,
                       int bits, uint8_t* out);

}  // namespace slowpipe::compression::hwy_kernels
