// The numeric inner loops of the codecs, built twice: for the x86-64 baseline (SSE2) and for AVX2
// + F16C (compression/kernels_avx2.cc), chosen once at run time by what the CPU offers. Both builds
// compile the same source (compression/kernels.inc) without fused multiply-add, so every path
// produces the same bits; tests/compression/kernels_test.cc checks that on every codec. One binary
// thus runs anywhere and uses AVX2 where it is present (no -march=native).
//
// SLOWPIPE_CPU=baseline|avx2 in the environment forces a path (unavailable: an error at start).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compression/element.h"

namespace slowpipe::compression {

struct Kernels {
  const char* name;
  // m[k] = max(m[k], |v[k]|)
  void (*absMaxAccum)(const float* v, int64_t n, float* m);
  float (*absMax)(const float* v, int64_t n);
  // Symmetric levels, round to nearest: code = clamp(floor((x + m) * inv + 0.5), 0, top - 0.5).
  // Vec: m and inv per element (channel scales along the run); Scalar: one for the run.
  void (*quantVec)(const float* x, const float* m, const float* inv, int64_t n, float top,
                   uint8_t* codes);
  void (*quantScalar)(const float* x, float m, float inv, int64_t n, float top, uint8_t* codes);
  // Stochastic rounding: u_k = (hash32((lo + k) ^ key) >> 8) * 2^-24 in place of 0.5; lo + k must
  // not wrap (the caller splits runs at 2^32 boundaries of the stream index).
  void (*stochVec)(const float* x, const float* m, const float* inv, int64_t n, float top,
                   uint32_t lo, uint32_t key, uint8_t* codes);
  void (*stochScalar)(const float* x, float m, float inv, int64_t n, float top, uint32_t lo,
                      uint32_t key, uint8_t* codes);
  void (*dequantVec)(const uint8_t* codes, const float* m, const float* step, int64_t n,
                     float* out);
  void (*dequantScalar)(const uint8_t* codes, float m, float step, int64_t n, float* out);
  // levels=fixpoint (quant.h): q = clip(rint(x / d * mult), lo, hi) - lo; value = ((q + lo) * inv)
  // * s.
  void (*fixVec)(const float* x, const float* d, int64_t n, float mult, float lo, float hi,
                 uint8_t* codes);
  void (*fixScalar)(const float* x, float d, int64_t n, float mult, float lo, float hi,
                    uint8_t* codes);
  void (*fixDequantVec)(const uint8_t* codes, const float* s, int64_t n, float lo, float inv,
                        float* out);
  void (*fixDequantScalar)(const uint8_t* codes, float s, int64_t n, float lo, float inv,
                           float* out);
  // dequantVec and fixDequantVec writing out around the cache where the build can (AVX2:
  // non-temporal stores, as streamOut; the caller fences); the same values.
  void (*dequantVecStream)(const uint8_t* codes, const float* m, const float* step, int64_t n,
                           float* out);
  void (*fixDequantVecStream)(const uint8_t* codes, const float* s, int64_t n, float lo, float inv,
                              float* out);
  // dequantGroups and fixDequantGroups likewise (a run with one scale: one group of its length).
  void (*dequantGroupsStream)(const uint8_t* codes, int64_t groups, int64_t g, const float* m,
                              const float* step, float* out);
  void (*fixDequantGroupsStream)(const uint8_t* codes, int64_t groups, int64_t g, const float* s,
                                 float lo, float inv, float* out);
  void (*sub)(const float* a, const float* b, int64_t n, float* out);  // out = a - b
  void (*add)(const float* a, const float* b, int64_t n, float* out);  // out = a + b
  // AC-SGD's delta step, fused (channel scales, nearest rounding): acc = max(acc, |x - m|); and
  // codes = Q(x - m), m = m + deQ(codes) for symmetric (mx, inv, step) or fixpoint (d, s) levels.
  // Fixpoint steps also get rd = fl(1 / d): a kernel may multiply by it where the product provably
  // rounds as the quotient does and divide elsewhere, so the codes stay those of x / d
  // (kernels_avx2.cc).
  void (*deltaAbsMax)(const float* x, const float* m, int64_t n, float* acc);
  void (*deltaQuantUpdate)(const float* x, float* m, const float* mx, const float* inv,
                           const float* step, int64_t n, float top, uint8_t* codes);
  void (*deltaFixUpdate)(const float* x, float* m, const float* d, const float* rd, const float* s,
                         int64_t n, float mult, float lo, float hi, float inv, uint8_t* codes);
  // ef(quant)'s step, fused likewise: acc = max(acc, |x + r|); v = x + r, codes = Q(v), r = v -
  // deQ(codes).
  void (*sumAbsMax)(const float* x, const float* r, int64_t n, float* acc);
  void (*efQuantUpdate)(const float* x, float* r, const float* mx, const float* inv,
                        const float* step, int64_t n, float top, uint8_t* codes);
  void (*efFixUpdate)(const float* x, float* r, const float* d, const float* rd, const float* s,
                      int64_t n, float mult, float lo, float hi, float inv, uint8_t* codes);
  // The same on a bf16 residual (ef's store=bf16): r read as bf16, written as bf16(v - deQ(codes)).
  void (*sumAbsMaxB)(const float* x, const uint16_t* r, int64_t n, float* acc);
  void (*efQuantUpdateB)(const float* x, uint16_t* r, const float* mx, const float* inv,
                         const float* step, int64_t n, float top, uint8_t* codes);
  void (*efFixUpdateB)(const float* x, uint16_t* r, const float* d, const float* rd, const float* s,
                       int64_t n, float mult, float lo, float hi, float inv, uint8_t* codes);
  // The delta step on an fp16 buffer (little-endian bytes mh, updated in place): AC-SGD with the
  // reference's fp16 buffers, converting in registers. AVX2 build only (null in the baseline build,
  // whose callers convert through a buffer instead: the same bits).
  void (*deltaAbsMaxH)(const float* x, const uint8_t* mh, int64_t n, float* acc);
  void (*deltaQuantUpdateH)(const float* x, uint8_t* mh, const float* mx, const float* inv,
                            const float* step, int64_t n, float top, uint8_t* codes);
  void (*deltaFixUpdateH)(const float* x, uint8_t* mh, const float* d, const float* rd,
                          const float* s, int64_t n, float mult, float lo, float hi, float inv,
                          uint8_t* codes);
  // The receiver's side: mh = fp16(m + dq), out = the value mh now holds; stream: out written
  // around the cache (non-temporal stores, as streamOut; the caller fences).
  void (*deltaApplyH)(const float* dq, uint8_t* mh, int64_t n, float* out, bool stream);
  // The same straight from packed codes (bitpack.h's layout, value 0 at bit 0 of packed; bits 1-4
  // or 8) with channel scales along the run: dq = code * a[k] - b[k] (dequantVec: a = step, b = m)
  // or, fixpoint, ((code + lo) * inv) * a[k] (fixDequantVec: a = s, b null). Reads only the
  // packedBytes(n, bits) bytes of the run. Null where the build has no in-register fp16 step.
  void (*deltaApplyPackedH)(const uint8_t* packed, int bits, const float* a, const float* b,
                            float lo, float inv, int64_t n, uint8_t* mh, float* out, bool stream);
  // The same on an fp32 buffer: m = m + dq, out = m.
  void (*deltaApplyPackedF)(const uint8_t* packed, int bits, const float* a, const float* b,
                            float lo, float inv, int64_t n, float* m, float* out, bool stream);
  // quantVec / fixVec / stochVec with the codes straight into bitpack.h's layout (out: value 0's
  // byte; bits 1, 2, 4 or 8): the bytes of those kernels and then packBits. Each returns how many
  // values it did, a multiple of 16 from value 0, and the caller does the rest the old way: 0 where
  // the CPU lacks AVX-512 F, setAvx512(false) holds it or bits is another width. Null in the
  // baseline build.
  int64_t (*quantVecPacked)(const float* x, const float* m, const float* inv, int64_t n, float top,
                            int bits, uint8_t* out);
  int64_t (*fixVecPacked)(const float* x, const float* d, int64_t n, float mult, float lo, float hi,
                          int bits, uint8_t* out);
  int64_t (*stochVecPacked)(const float* x, const float* m, const float* inv, int64_t n, float top,
                            uint32_t lo, uint32_t key, int bits, uint8_t* out);
  // The fused update steps (deltaQuantUpdate ... efFixUpdateB) with the codes straight into
  // bitpack.h's layout likewise: the same buffer and bytes, how many values done returned as those
  // kernels return it (AC-SGD's and ef's encode then need no code buffer and no packing pass).
  // Null in the baseline build.
  int64_t (*deltaQuantUpdatePacked)(const float* x, float* m, const float* mx, const float* inv,
                                    const float* step, int64_t n, float top, int bits,
                                    uint8_t* out);
  int64_t (*deltaFixUpdatePacked)(const float* x, float* m, const float* d, const float* rd,
                                  const float* s, int64_t n, float mult, float lo, float hi,
                                  float inv, int bits, uint8_t* out);
  int64_t (*deltaQuantUpdateHPacked)(const float* x, uint8_t* mh, const float* mx, const float* inv,
                                     const float* step, int64_t n, float top, int bits,
                                     uint8_t* out);
  int64_t (*deltaFixUpdateHPacked)(const float* x, uint8_t* mh, const float* d, const float* rd,
                                   const float* s, int64_t n, float mult, float lo, float hi,
                                   float inv, int bits, uint8_t* out);
  int64_t (*efQuantUpdatePacked)(const float* x, float* r, const float* mx, const float* inv,
                                 const float* step, int64_t n, float top, int bits, uint8_t* out);
  int64_t (*efFixUpdatePacked)(const float* x, float* r, const float* d, const float* rd,
                               const float* s, int64_t n, float mult, float lo, float hi, float inv,
                               int bits, uint8_t* out);
  int64_t (*efQuantUpdateBPacked)(const float* x, uint16_t* r, const float* mx, const float* inv,
                                  const float* step, int64_t n, float top, int bits, uint8_t* out);
  int64_t (*efFixUpdateBPacked)(const float* x, uint16_t* r, const float* d, const float* rd,
                                const float* s, int64_t n, float mult, float lo, float hi,
                                float inv, int bits, uint8_t* out);
  // fp16 (IEEE binary16, round to nearest even) to / from little-endian bytes.
  void (*toHalf)(const float* in, size_t n, uint8_t* out);
  void (*fromHalf)(const uint8_t* in, size_t n, float* out);
  // bf16 likewise (floatToBf16 / bf16ToFloat: round to nearest even, a NaN stays a quiet NaN).
  void (*toBf16)(const float* in, size_t n, uint8_t* out);
  void (*fromBf16)(const uint8_t* in, size_t n, float* out);
  // hadamard's transform of one block of b values (b a power of two, >= 8), in place:
  // v = post * H (pre * v), the butterflies of the textbook loops (compression/hadamard.cc).
  void (*fwhtScaled)(float* v, int64_t b, const float* pre, const float* post);
  // A decoded chunk (in cache) to its place in a large output, around the cache (AVX2 build:
  // non-temporal stores, which skip reading the destination lines first; baseline: memcpy), and the
  // fence that makes such stores visible; a caller fences once after its last streamOut.
  void (*streamOut)(const float* src, int64_t n, float* dst);
  void (*streamFence)();
  // The same for n bytes at any alignment (`none`'s large payloads: a copy into memory that is
  // not in cache, which memcpy of 1 MiB parts does with ordinary stores); fence likewise.
  void (*streamBytes)(const void* src, size_t n, void* dst);
  // randk's kept set of indices lo .. lo + n - 1 (keep[k] = 1 where mix64(base ^ (lo + k)) <
  // threshold); returns how many are kept.
  int64_t (*randkKeep)(uint64_t base, uint64_t threshold, int64_t lo, int64_t n, uint8_t* keep);
  // randk's values: gather writes x[i] * scale for every kept i, in order, to kept (which has room
  // for n + 8 values) and returns how many; scatter writes out[i] = the next of `values` where
  // keep[i], else 0, reading at most `available` values, and returns how many it read.
  int64_t (*randkGather)(const float* x, const uint8_t* keep, int64_t n, float scale, float* kept);
  // topk's candidates: the positions k in [0, n) (n <= 2^31) whose |x| bits (the float's bits
  // without the sign) are >= lo (lo < 2^31), ascending, to idx (room for n); returns how many.
  int64_t (*keysAtLeast)(const float* x, int64_t n, uint32_t lo, uint32_t* idx);
  int64_t (*randkScatter)(const uint8_t* values, int64_t available, const uint8_t* keep, int64_t n,
                          float* out);
  // lowrank's products over rows of d values and r basis rows p (r x d): coef[i * r + j] = the dot
  // of row i and p_j, summed in 8 lanes (lane k % 8 takes term k; lanes added pairwise:
  // ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))); and out_i = ((0 + c_i0 p_0) + c_i1 p_1) +
  // ...
  void (*lowrankProject)(const float* x, int64_t rows, int64_t d, const float* p, int64_t r,
                         float* coef);
  void (*lowrankExpand)(const float* coef, int64_t rows, int64_t r, const float* p, int64_t d,
                        float* out);
  // Group scales: `groups` whole groups of g values, scale q for group q; each as absMax (m[q] =
  // max(m[q], absMax(group))), quantScalar, dequantScalar, fixScalar, fixDequantScalar on its
  // group.
  void (*absMaxGroups)(const float* x, int64_t groups, int64_t g, float* m);
  void (*quantGroups)(const float* x, int64_t groups, int64_t g, const float* m, const float* inv,
                      float top, uint8_t* codes);
  void (*dequantGroups)(const uint8_t* codes, int64_t groups, int64_t g, const float* m,
                        const float* step, float* out);
  void (*fixGroups)(const float* x, int64_t groups, int64_t g, const float* d, float mult, float lo,
                    float hi, uint8_t* codes);
  void (*fixDequantGroups)(const uint8_t* codes, int64_t groups, int64_t g, const float* s,
                           float lo, float inv, float* out);
  // The fused steps above prefetch their streams as they go (AVX2 build): callers need not.
  bool fusedStepsPrefetch;
};

enum class CpuPath : uint8_t { kBaseline, kAvx2 };

const Kernels& kernels();             // the active path's kernels
bool cpuPathAvailable(CpuPath path);  // built in and supported by this CPU
void setCpuPath(CpuPath path);        // tests and benchmarks; throws CodecError if unavailable
const char* cpuPathName();            // "baseline" or "avx2"

// randk's mask by the AVX2 build's 256-bit kernel (bits 256) or its AVX-512 DQ one (bits 512,
// which the AVX2 table uses where the CPU has it): false, and nothing written, where this build or
// CPU has no such kernel. Tests: the two widths give the same bits.
bool randkKeepOfWidth(int bits, uint64_t base, uint64_t threshold, int64_t lo, int64_t n,
                      uint8_t* keep, int64_t* count);

// The AVX2 table's kernels with an AVX-512 form (randk's mask and lowrank's projection: AVX-512 F
// + DQ; stochastic rounding: AVX-512 F) use it where the CPU has it. setAvx512(false) holds them to
// 256-bit vectors (tests compare the widths; the bits are the same); returns the previous setting.
bool setAvx512(bool allowed);

// One entry per path (defined in kernels_{baseline,avx2}.cc); null where not built.
const Kernels* baselineKernels();
const Kernels* avx2Kernels();

// The stochastic-rounding hash (lowbias32 by Chris Wellons): public so callers derive run keys with
// it.
inline uint32_t hash32(uint32_t x) { return element::lowbias32(x); }

}  // namespace slowpipe::compression
