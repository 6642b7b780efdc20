// The channel quantizer's two hot kernels and AC-SGD's two passes over an fp16 buffer written with
// Google Highway (libhwy, runtime dispatch
// over the targets it compiles: SSE4, AVX2, AVX-512 ...), beside the hand-written ones of
// kernels.h, so that `slowpipe bench kernels` measures both on the same buffers (issue 47: keep a
// hand-written path only where it measures faster). The same values as kernels.h's absMaxAccum and
// quantVecPacked, deltaAbsMaxH and deltaQuantUpdateHPacked (tests/compression/kernels_hwy_test.cc
// checks every target this CPU runs).
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

// Kernels::deltaAbsMaxH and Kernels::deltaQuantUpdateHPacked (AC-SGD's max |x - m| and its
// update step on an fp16 buffer, codes packed): values [0, returned) done, a whole number of
// vectors; 0 on targets without hardware fp16 conversion (SSE4 and below: Highway 1.0's software
// conversion to fp16 truncates where F16C rounds to nearest even) and, for the update, at bits
// other than 1, 2, 4, 8.
int64_t deltaAbsMaxH(const float* x, const uint8_t* mh, int64_t n, float* acc);
int64_t deltaQuantUpdateHPacked(const float* x, uint8_t* mh, const float* mx, const float* inv,
                                const float* step, int64_t n, float top, int bits, uint8_t* out);

}  // namespace slowpipe::compression::hwy_kernels
