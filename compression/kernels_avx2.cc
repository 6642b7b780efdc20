// The AVX2 + F16C build of compression/kernels.inc (this file alone is compiled with -mavx2
// -mf16c; nothing here runs unless the CPU has both: see kernels.cc).
#include <immintrin.h>

#include <cstring>

#include "compression/half.h"

#include "compression/kernels.h"

namespace slowpipe::compression {
namespace kernels_avx2 {
// F16C rounds to nearest even like floatToHalf (only NaN payload bits may differ; frames reject
// non-finite values before any codec sees them).
static void toHalf(const float* in, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  baselineKernels()->toHalf(in + i, n - i, out + 2 * i);  // the tail
}

static void fromHalf(const uint8_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i))));
  baselineKernels()->fromHalf(in + 2 * i, n - i, out + i);  // the tail
}

// AC-SGD's delta step on an fp16 buffer, 8 values per step in registers. Every operation is the
// one kernels.inc's deltaAbsMax / deltaQuantUpdate / deltaFixUpdate performs, in the same order
// (min/max operand order keeps their NaN behaviour; no FMA), and F16C rounds like floatToHalf:
// the bits are those of the buffered path (CpuPathTest, FusedAcsgdTest).
static inline __m256 loadHalf8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
static inline void storeHalf8(uint8_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
static inline void storeCodes8(uint8_t* p, __m256i c) {  // 8 int32 in [0, 255] -> 8 bytes
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(w, w));
}
static inline float halfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return halfToFloat(h);
}
static inline void putHalf(uint8_t* p, float v) {
  const uint16_t h = floatToHalf(v);
  std::memcpy(p, &h, 2);
}

// Software prefetch distance of the fused two-pass kernels below, in values: 1 KiB of x ahead (and
// the same values of the buffer or residual). The hardware prefetcher alone leaves these loops
// below memcpy's bandwidth; 1-4 KiB measured alike (bench codecs, 64 MiB: acsgd encode 0.55-0.65x
// memcpy against 0.50-0.57x without). Prefetches past an array's end are harmless (they never fault).
constexpr int64_t kPrefetch = 256;
static void deltaAbsMaxH(const float* x, const uint8_t* mh, int64_t n, float* acc) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __builtin_prefetch(x + i + kPrefetch);
    __builtin_prefetch(mh + 2 * (i + kPrefetch));
    const __m256 a = _mm256_andnot_ps(sign, _mm256_sub_ps(_mm256_loadu_ps(x + i), loadHalf8(mh + 2 * i)));
    _mm256_storeu_ps(acc + i, _mm256_max_ps(a, _mm256_loadu_ps(acc + i)));  // = maxOf(acc, a)
  }
  for (; i < n; ++i) {
    const float a = __builtin_fabsf(x[i] - halfAt(mh + 2 * i));
    acc[i] = acc[i] < a ? a : acc[i];
  }
}

static void deltaQuantUpdateH(const float* x, uint8_t* mh, const float* mx, const float* inv, const float* step,
                              int64_t n, float top, uint8_t* codes) {
  const __m256 vtop = _mm256_set1_ps(top), zero = _mm256_setzero_ps(), half = _mm256_set1_ps(0.5f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __builtin_prefetch(x + i + kPrefetch);
    __builtin_prefetch(mh + 2 * (i + kPrefetch), 1);
    const __m256 m = loadHalf8(mh + 2 * i), vmx = _mm256_loadu_ps(mx + i);
    const __m256 v = _mm256_add_ps(
        _mm256_mul_ps(_mm256_add_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), m), vmx), _mm256_loadu_ps(inv + i)), half);
    const __m256 t = _mm256_min_ps(_mm256_max_ps(v, zero), vtop);  // = minOf(top, maxOf(0, v))
    const __m256i c = _mm256_cvttps_epi32(t);
    storeCodes8(codes + i, c);
    const __m256 dq = _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(c), _mm256_loadu_ps(step + i)), vmx);
    storeHalf8(mh + 2 * i, _mm256_add_ps(m, dq));
  }
  for (; i < n; ++i) {
    const float m = halfAt(mh + 2 * i), v = ((x[i] - m) + mx[i]) * inv[i] + 0.5f;
    const float w = 0.0f < v ? v : 0.0f, t = w < top ? w : top;
    const uint8_t c = static_cast<uint8_t>(static_cast<int32_t>(t));
    codes[i] = c;
    putHalf(mh + 2 * i, m + (static_cast<float>(c) * step[i] - mx[i]));
  }
}

// rint(v / d * mult) for 8 values without the division where that is provably the same. With
// rd = fl(1 / d) and mult a power of two, t = fl(v * rd) * mult is within |t| * 2^-22 of the
// quotient's fl(v / d) * mult (three roundings of 2^-24 each), so both round to the same integer
// unless a half-integer lies within that distance of t. t is first clamped to [lo - 1, hi + 1]
// (|lo|, hi <= 128: beyond it both clamp alike; a NaN becomes lo - 1, then lo, as the division's
// NaN does), so |t| <= 129 and a constant 2^-12 >= 4 * 129 * 2^-22 bounds the distance: vectors
// with a lane that near a tie (about 4e-3 of them) take the division.
static inline __m256 fixRound8(__m256 v, const float* d, const float* rd, __m256 vmult, __m256 below, __m256 above) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_mul_ps(v, _mm256_loadu_ps(rd)), vmult), below), above);
  const __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 off = _mm256_andnot_ps(sign, _mm256_sub_ps(t, r));  // in [0, 0.5]
  const __m256 near = _mm256_cmp_ps(off, _mm256_set1_ps(0.5f - 0x1.0p-12f), _CMP_GE_OQ);
  if (__builtin_expect(_mm256_movemask_ps(near) == 0, 1)) return r;
  return _mm256_round_ps(_mm256_mul_ps(_mm256_div_ps(v, _mm256_loadu_ps(d)), vmult),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static void deltaFixUpdateH(const float* x, uint8_t* mh, const float* d, const float* rd, const float* s, int64_t n,
                            float mult, float lo, float hi, float inv, uint8_t* codes) {
  const __m256 vmult = _mm256_set1_ps(mult), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi),
               vinv = _mm256_set1_ps(inv), below = _mm256_set1_ps(lo - 1.0f), above = _mm256_set1_ps(hi + 1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __builtin_prefetch(x + i + kPrefetch);
    __builtin_prefetch(mh + 2 * (i + kPrefetch), 1);
    const __m256 m = loadHalf8(mh + 2 * i);
    const __m256 r = fixRound8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m), d + i, rd + i, vmult, below, above);
    const __m256 q = _mm256_min_ps(_mm256_max_ps(r, vlo), vhi);  // = minOf(hi, maxOf(lo, r))
    const __m256i c = _mm256_cvttps_epi32(_mm256_sub_ps(q, vlo));
    storeCodes8(codes + i, c);
    const __m256 dq = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(_mm256_cvtepi32_ps(c), vlo), vinv), _mm256_loadu_ps(s + i));
    storeHalf8(mh + 2 * i, _mm256_add_ps(m, dq));
  }
  for (; i < n; ++i) {
    const float m = halfAt(mh + 2 * i), r = __builtin_rintf((x[i] - m) / d[i] * mult);
    const float w = lo < r ? r : lo, q = w < hi ? w : hi;
    const uint8_t c = static_cast<uint8_t>(static_cast<int32_t>(q - lo));
    codes[i] = c;
    putHalf(mh + 2 * i, m + ((static_cast<float>(c) + lo) * inv) * s[i]);
  }
}

static void deltaApplyH(const float* dq, uint8_t* mh, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_add_ps(loadHalf8(mh + 2 * i), _mm256_loadu_ps(dq + i)), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(mh + 2 * i), h);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) {
    putHalf(mh + 2 * i, halfAt(mh + 2 * i) + dq[i]);
    out[i] = halfAt(mh + 2 * i);
  }
}

// ef's step on a bf16 residual, 8 values per step: the operations of kernels.inc's sumAbsMaxB /
// efQuantUpdateB / efFixUpdateB in the same order, and the same bf16 rounding (to nearest even, NaN
// kept quiet), so the bits are those of the baseline build (CpuPathTest).
static inline __m256 loadBf16x8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
static inline void storeBf16x8(uint16_t* p, __m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i h = _mm256_blendv_epi8(rounded, quiet, nan);  // 8 x int32 in [0, 0xffff]
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}
static inline float bf16At(const uint16_t* p) {
  const uint32_t u = static_cast<uint32_t>(*p) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static inline void putBf16(uint16_t* p, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  *p = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : (u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

// ef's residual as stored: fp32 in place, or bf16 (store=bf16). The kernels below are written once
// for both; per element they perform the operations of kernels.inc's sumAbsMax / efQuantUpdate /
// efFixUpdate (and their bf16 forms) in the same order, so the bits are the baseline build's.
struct ResidualF32 {
  using T = float;
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
  static float at(const float* p) { return *p; }
  static void put(float* p, float v) { *p = v; }
};
struct ResidualBf16 {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) { return loadBf16x8(p); }
  static void store8(uint16_t* p, __m256 v) { storeBf16x8(p, v); }
  static float at(const uint16_t* p) { return bf16At(p); }
  static void put(uint16_t* p, float v) { putBf16(p, v); }
};

template <class R>
static void sumAbsMaxT(const float* x, const typename R::T* r, int64_t n, float* acc) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __builtin_prefetch(x + i + kPrefetch);
    __builtin_prefetch(r + i + kPrefetch);
    const __m256 a = _mm256_andnot_ps(sign, _mm256_add_ps(_mm256_loadu_ps(x + i), R::load8(r + i)));
    _mm256_storeu_ps(acc + i, _mm256_max_ps(a, _mm256_loadu_ps(acc + i)));  // = maxOf(acc, a)
  }
  for (; i < n; ++i) {
    const float a = __builtin_fabsf(x[i] + R::at(r + i));
    acc[i] = acc[i] < a ? a : acc[i];
  }
}

template <class R>
static void efQuantUpdateT(const float* x, typename R::T* r, const float* mx, const float* inv, const float* step,
                           int64_t n, float top, uint8_t* codes) {
  const __m256 vtop = _mm256_set1_ps(top), zero = _mm256_setzero_ps(), half = _mm256_set1_ps(0.5f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __builtin_prefetch(x + i + kPrefetch);
    __builtin_prefetch(r + i + kPrefetch, 1);
    const __m256 v = _mm256_add_ps(_mm256_loadu_ps(x + i), R::load8(r + i)), vmx = _mm256_loadu_ps(mx + i);
    const __m256 u = _mm256_add_ps(_mm256_mul_ps(_mm256_add_ps(v, vmx), _mm256_loadu_ps(inv + i)), half);
    const __m256 t = _mm256_min_ps(_mm256_max_ps(u, zero), vtop);  // = minOf(top, maxOf(0, u))
    const __m256i c = _mm256_cvttps_epi32(t);
    storeCodes8(codes + i, c);
    const __m256 dq = _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(c), _mm256_loadu_ps(step + i)), vmx);
    R::store8(r + i, _mm256_sub_ps(v, dq));
  }
  for (; i < n; ++i) {
    const float v = x[i] + R::at(r + i), u = (v + mx[i]) * inv[i] + 0.5f;
    const float w = 0.0f < u ? u : 0.0f, t = w < top ? w : top;
    const uint8_t c = static_cast<uint8_t>(static_cast<int32_t>(t));
    codes[i] = c;
    R::put(r + i, v - (static_cast<float>(c) * step[i] - mx[i]));
  }
}

template <class R>
static void efFixUpdateT(const float* x, typename R::T* r, const float* d, const float* rd, const float* s, int64_t n,
                         float mult, float lo, float hi, float inv, uint8_t* codes) {
  const __m256 vmult = _mm256_set1_ps(mult), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi),
               vinv = _mm256_set1_ps(inv), below = _mm256_set1_ps(lo - 1.0f), above = _mm256_set1_ps(hi + 1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __builtin_prefetch(x + i + kPrefetch);
    __builtin_prefetch(r + i + kPrefetch, 1);
    const __m256 v = _mm256_add_ps(_mm256_loadu_ps(x + i), R::load8(r + i));
    const __m256 q = _mm256_min_ps(_mm256_max_ps(fixRound8(v, d + i, rd + i, vmult, below, above), vlo), vhi);
    const __m256i c = _mm256_cvttps_epi32(_mm256_sub_ps(q, vlo));
    storeCodes8(codes + i, c);
    const __m256 dq = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(_mm256_cvtepi32_ps(c), vlo), vinv), _mm256_loadu_ps(s + i));
    R::store8(r + i, _mm256_sub_ps(v, dq));
  }
  for (; i < n; ++i) {
    const float v = x[i] + R::at(r + i), q0 = __builtin_rintf(v / d[i] * mult);
    const float w = lo < q0 ? q0 : lo, q = w < hi ? w : hi;
    const uint8_t c = static_cast<uint8_t>(static_cast<int32_t>(q - lo));
    codes[i] = c;
    R::put(r + i, v - ((static_cast<float>(c) + lo) * inv) * s[i]);
  }
}

static void sumAbsMax(const float* x, const float* r, int64_t n, float* acc) { sumAbsMaxT<ResidualF32>(x, r, n, acc); }
static void efQuantUpdate(const float* x, float* r, const float* mx, const float* inv, const float* step, int64_t n,
                          float top, uint8_t* codes) {
  efQuantUpdateT<ResidualF32>(x, r, mx, inv, step, n, top, codes);
}
static void efFixUpdate(const float* x, float* r, const float* d, const float* rd, const float* s, int64_t n, float mult,
                        float lo, float hi, float inv, uint8_t* codes) {
  efFixUpdateT<ResidualF32>(x, r, d, rd, s, n, mult, lo, hi, inv, codes);
}
static void sumAbsMaxB(const float* x, const uint16_t* r, int64_t n, float* acc) { sumAbsMaxT<ResidualBf16>(x, r, n, acc); }
static void efQuantUpdateB(const float* x, uint16_t* r, const float* mx, const float* inv, const float* step, int64_t n,
                           float top, uint8_t* codes) {
  efQuantUpdateT<ResidualBf16>(x, r, mx, inv, step, n, top, codes);
}
static void efFixUpdateB(const float* x, uint16_t* r, const float* d, const float* rd, const float* s, int64_t n,
                         float mult, float lo, float hi, float inv, uint8_t* codes) {
  efFixUpdateT<ResidualBf16>(x, r, d, rd, s, n, mult, lo, hi, inv, codes);
}
#define KERNELS_HAVE_FP32_RESIDUAL

#define KERNELS_NAME "avx2"
#include "compression/kernels.inc"  // the shared kernels and this build's table, kTable
#undef KERNELS_NAME
}  // namespace kernels_avx2

const Kernels* avx2Kernels() { return &kernels_avx2::kTable; }

}  // namespace slowpipe::compression
