// The AVX2 + F16C build of compression/kernels.inc (this file alone is compiled with -mavx2
// -mf16c; nothing here runs unless the CPU has both: see kernels.cc).
#include <immintrin.h>

#include <atomic>
#include <cstring>
#include <type_traits>

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
    _mm256_storeu_ps(
        out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i))));
  baselineKernels()->fromHalf(in + 2 * i, n - i, out + i);  // the tail
}

// The fused steps of kernels.inc on a buffer as stored, 8 values per step in registers: AC-SGD's
// delta step (d = x - m, m += deQ(Q(d)); deltaAbsMax / deltaQuantUpdate / deltaFixUpdate) on fp32
// or fp16 buffers, and ef's step (v = x + r, r = v - deQ(Q(v)); sumAbsMax / efQuantUpdate /
// efFixUpdate) on an fp32 or bf16 residual. Every operation is the one kernels.inc performs, in the
// same order (min/max operand order keeps their NaN behaviour; no FMA), and F16C and the bf16
// narrowing round like floatToHalf and floatToBf16: the bits are those of the baseline build
// (CpuPathTest, FusedAcsgdTest, FusedEfTest).
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

static inline __m256 loadBf16x8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
static inline void storeBf16x8(uint16_t* p, __m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i h = _mm256_blendv_epi8(rounded, quiet, nan);  // 8 x int32 in [0, 0xffff]
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
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
  *p = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u
                                 ? (u >> 16) | 0x40u
                                 : (u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

// The bf16 codec's conversions, 8 values a step (the tail as the baseline build does it).
static void toBf16(const float* in, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    storeBf16x8(reinterpret_cast<uint16_t*>(out + 2 * i), _mm256_loadu_ps(in + i));
  baselineKernels()->toBf16(in + i, n - i, out + 2 * i);
}

static void fromBf16(const uint8_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, loadBf16x8(reinterpret_cast<const uint16_t*>(in + 2 * i)));
  baselineKernels()->fromBf16(in + 2 * i, n - i, out + i);
}

// A buffer's elements by index: fp32, fp16 (two little-endian bytes each) or bf16.
struct BufF32 {
  using T = float;
  static __m256 load8(const float* p, int64_t i) { return _mm256_loadu_ps(p + i); }
  static void store8(float* p, int64_t i, __m256 v) { _mm256_storeu_ps(p + i, v); }
  static float at(const float* p, int64_t i) { return p[i]; }
  static void put(float* p, int64_t i, float v) { p[i] = v; }
  static const void* addr(const float* p, int64_t i) { return p + i; }
};
struct BufF16 {
  using T = uint8_t;
  static __m256 load8(const uint8_t* p, int64_t i) { return loadHalf8(p + 2 * i); }
  static void store8(uint8_t* p, int64_t i, __m256 v) { storeHalf8(p + 2 * i, v); }
  static float at(const uint8_t* p, int64_t i) { return halfAt(p + 2 * i); }
  static void put(uint8_t* p, int64_t i, float v) { putHalf(p + 2 * i, v); }
  static const void* addr(const uint8_t* p, int64_t i) { return p + 2 * i; }
};
struct BufBf16 {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p, int64_t i) { return loadBf16x8(p + i); }
  static void store8(uint16_t* p, int64_t i, __m256 v) { storeBf16x8(p + i, v); }
  static float at(const uint16_t* p, int64_t i) { return bf16At(p + i); }
  static void put(uint16_t* p, int64_t i, float v) { putBf16(p + i, v); }
  static const void* addr(const uint16_t* p, int64_t i) { return p + i; }
};

// The two steps: AC-SGD's delta (the value is x - m, the buffer becomes m + dq) and ef's sum (the
// value is x + r, the buffer becomes v - dq).
enum class Step { kDelta, kSum };
template <Step S>
static inline __m256 value8(__m256 x, __m256 b) {
  return S == Step::kDelta ? _mm256_sub_ps(x, b) : _mm256_add_ps(x, b);
}
template <Step S>
static inline __m256 next8(__m256 b, __m256 v, __m256 dq) {
  return S == Step::kDelta ? _mm256_add_ps(b, dq) : _mm256_sub_ps(v, dq);
}
template <Step S>
static inline float value1(float x, float b) {
  return S == Step::kDelta ? x - b : x + b;
}
template <Step S>
static inline float next1(float b, float v, float dq) {
  return S == Step::kDelta ? b + dq : v - dq;
}

// Software prefetch, 16 KiB of x ahead (and the same values of the buffer), into L2 (prefetcht1):
// a loop that computes as it reads keeps too few lines in flight for the hardware prefetcher alone,
// and prefetches into L1 are capped by its few miss buffers. Measured on a Zen 5 VM (memcpy 14-18
// GB/s): the channel quantizer's pass over 64 MiB at 1.1-1.3x memcpy with 1 KiB into L1, at
// 1.4-2.0x with 8-16 KiB into L2. Prefetches past an array's end are harmless (they never fault).
constexpr int64_t kPrefetch = 4096;
static inline void ahead(const void* p) { __builtin_prefetch(p, 0, 2); }
template <class B>
static inline void prefetch(const float* x, const typename B::T* b, int64_t i) {
  ahead(x + i + kPrefetch);
  ahead(B::addr(b, i + kPrefetch));
}

// acc = max(acc, |value|)
template <class B, Step S>
static void absMaxT(const float* x, const typename B::T* b, int64_t n, float* acc) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    prefetch<B>(x, b, i);
    const __m256 a = _mm256_andnot_ps(sign, value8<S>(_mm256_loadu_ps(x + i), B::load8(b, i)));
    _mm256_storeu_ps(acc + i, _mm256_max_ps(a, _mm256_loadu_ps(acc + i)));  // = maxOf(acc, a)
  }
  for (; i < n; ++i) {
    const float a = __builtin_fabsf(value1<S>(x[i], B::at(b, i)));
    acc[i] = acc[i] < a ? a : acc[i];
  }
}

bool cpuHas512F();
extern std::atomic<bool> allow512;

// 16 floats of a stream from memory as two 256-bit loads: on the Zen 5 VM these kernels were
// measured on, a loop streaming its input ran 15-40% faster so than with one 512-bit load (the
// channel quantizer's packed pass over 64 MiB: 17.3-18.6 -> 20-29 GB/s, a scratch program). Arrays
// that stay in L1 (channel scales) keep the 512-bit load.
__attribute__((target("avx512f"))) static inline __m512 loadStream16(const float* p) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(p))),
                         _mm256_castps_pd(_mm256_loadu_ps(p + 8)), 1));
}

// An fp16 or bf16 buffer's 16 elements as fp32 and back on AVX-512 F, rounded as load8 / store8
// round (F16C's nearest even; bf16's narrowing with its NaN rule).
template <class B>
__attribute__((target("avx512f"))) static inline __m512 load16(const typename B::T* p, int64_t i) {
  if constexpr (std::is_same_v<B, BufF32>) {
    return loadStream16(p + i);
  } else if constexpr (std::is_same_v<B, BufF16>) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i)));
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i))), 16));
  }
}
template <class B>
__attribute__((target("avx512f"))) static inline void store16(typename B::T* p, int64_t i,
                                                              __m512 v) {
  if constexpr (std::is_same_v<B, BufF32>) {
    _mm512_storeu_ps(p + i, v);
  } else if constexpr (std::is_same_v<B, BufF16>) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 2 * i),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  } else {
    // u + 0x7fff + lsb, or for a NaN u with its quiet bit set (the same high half as
    // storeBf16x8's (u >> 16) | 0x40); then the high halves.
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i sum = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    const __m512i h = _mm512_mask_or_epi32(sum, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), u,
                                           _mm512_set1_epi32(0x00400000));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + i),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16)));
  }
}

// quantUpdateT's step on 16 values where the CPU has AVX-512 F, on an fp16 or bf16 buffer (the
// same operations lane by lane: the same codes and buffer): the buffer's values i..i+15 updated,
// their codes returned as int32 lanes.
template <class B, Step S>
struct QuantUpdate16 {
  const float* x;
  typename B::T* b;
  const float *mx, *inv, *step;
  float top;
  __attribute__((target("avx512f"))) __m512i operator()(int64_t i) const {
    const __m512 m = load16<B>(b, i), xv = loadStream16(x + i);
    const __m512 v = S == Step::kDelta ? _mm512_sub_ps(xv, m) : _mm512_add_ps(xv, m);
    const __m512 vmx = _mm512_loadu_ps(mx + i);
    const __m512 u = _mm512_add_ps(_mm512_mul_ps(_mm512_add_ps(v, vmx), _mm512_loadu_ps(inv + i)),
                                   _mm512_set1_ps(0.5f));
    // max(u, 0): NaN -> 0
    const __m512 t = _mm512_min_ps(_mm512_max_ps(u, _mm512_setzero_ps()), _mm512_set1_ps(top));
    const __m512i c = _mm512_cvttps_epi32(t);
    const __m512 dq =
        _mm512_sub_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(c), _mm512_loadu_ps(step + i)), vmx);
    store16<B>(b, i, S == Step::kDelta ? _mm512_add_ps(m, dq) : _mm512_sub_ps(v, dq));
    return c;
  }
};

// A step's codes as bytes, 16 values a step from value 0 (x and the buffer prefetched); returns
// where it stopped. step16 by value, as packedLoop512 takes its code (below).
template <class B, class Step16>
__attribute__((target("avx512f"))) static int64_t codeBytes512(const float* x,
                                                               const typename B::T* b, int64_t n,
                                                               const Step16 step16,
                                                               uint8_t* codes) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch<B>(x, b, i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(step16(i)));
  }
  return i;
}

template <class B, Step S>
static int64_t quantUpdate512(const float* x, typename B::T* b, const float* mx, const float* inv,
                              const float* step, int64_t n, float top, uint8_t* codes) {
  return codeBytes512<B>(x, b, n, QuantUpdate16<B, S>{x, b, mx, inv, step, top}, codes);
}

// Symmetric levels: codes = Q(value), buffer = next(deQ(codes)).
template <class B, Step S>
static void quantUpdateT(const float* x, typename B::T* b, const float* mx, const float* inv,
                         const float* step, int64_t n, float top, uint8_t* codes) {
  const __m256 vtop = _mm256_set1_ps(top), zero = _mm256_setzero_ps(), half = _mm256_set1_ps(0.5f);
  // fp32 buffers stay at 8 a step: 16 measured slower there (ef(quant:bits=4) encode 0.30x
  // against 0.40x memcpy); fp16 and bf16 ones, whose conversions are most of the work, gain.
  int64_t i = 0;
  if constexpr (!std::is_same_v<B, BufF32>)
    if (cpuHas512F() && allow512.load(std::memory_order_relaxed))
      i = quantUpdate512<B, S>(x, b, mx, inv, step, n, top, codes);
  for (; i + 8 <= n; i += 8) {
    prefetch<B>(x, b, i);
    const __m256 m = B::load8(b, i), v = value8<S>(_mm256_loadu_ps(x + i), m),
                 vmx = _mm256_loadu_ps(mx + i);
    const __m256 u =
        _mm256_add_ps(_mm256_mul_ps(_mm256_add_ps(v, vmx), _mm256_loadu_ps(inv + i)), half);
    const __m256 t = _mm256_min_ps(_mm256_max_ps(u, zero), vtop);  // = minOf(top, maxOf(0, u))
    const __m256i c = _mm256_cvttps_epi32(t);
    storeCodes8(codes + i, c);
    const __m256 dq =
        _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(c), _mm256_loadu_ps(step + i)), vmx);
    B::store8(b, i, next8<S>(m, v, dq));
  }
  for (; i < n; ++i) {
    const float m = B::at(b, i), v = value1<S>(x[i], m), u = (v + mx[i]) * inv[i] + 0.5f;
    const float w = 0.0f < u ? u : 0.0f, t = w < top ? w : top;
    const uint8_t c = static_cast<uint8_t>(static_cast<int32_t>(t));
    codes[i] = c;
    B::put(b, i, next1<S>(m, v, static_cast<float>(c) * step[i] - mx[i]));
  }
}

// rint(v / d * mult) for 8 values without the division where that is provably the same. With
// rd = fl(1 / d) and mult a power of two, t = fl(v * rd) * mult is within |t| * 2^-22 of the
// quotient's fl(v / d) * mult (three roundings of 2^-24 each), so both round to the same integer
// unless a half-integer lies within that distance of t. t is first clamped to [lo - 1, hi + 1]
// (|lo|, hi <= 128: beyond it both clamp alike; a NaN becomes lo - 1, then lo, as the division's
// NaN does), so |t| <= 129 and a constant 2^-12 >= 4 * 129 * 2^-22 bounds the distance: vectors
// with a lane that near a tie (about 4e-3 of them) take the division.
static inline __m256 fixRound8(__m256 v, const float* d, const float* rd, __m256 vmult,
                               __m256 below, __m256 above) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 t = _mm256_min_ps(
      _mm256_max_ps(_mm256_mul_ps(_mm256_mul_ps(v, _mm256_loadu_ps(rd)), vmult), below), above);
  const __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 off = _mm256_andnot_ps(sign, _mm256_sub_ps(t, r));  // in [0, 0.5]
  const __m256 near = _mm256_cmp_ps(off, _mm256_set1_ps(0.5f - 0x1.0p-12f), _CMP_GE_OQ);
  if (__builtin_expect(_mm256_movemask_ps(near) == 0, 1)) return r;
  return _mm256_round_ps(_mm256_mul_ps(_mm256_div_ps(v, _mm256_loadu_ps(d)), vmult),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// fixRound8 and fixUpdateT's loop 16 values a step where the CPU has AVX-512 F, on an fp16 or bf16
// buffer (the same operations lane by lane, the same rule for near-ties); returns where it
// stopped.
__attribute__((target("avx512f"))) static inline __m512 fixRound16(__m512 v, const float* d,
                                                                   const float* rd, __m512 vmult,
                                                                   __m512 below, __m512 above) {
  const __m512 t = _mm512_min_ps(
      _mm512_max_ps(_mm512_mul_ps(_mm512_mul_ps(v, _mm512_loadu_ps(rd)), vmult), below), above);
  const __m512 r = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 off = _mm512_castsi512_ps(_mm512_and_si512(
      _mm512_castps_si512(_mm512_sub_ps(t, r)), _mm512_set1_epi32(0x7fffffff)));  // [0, 0.5]
  const __mmask16 near = _mm512_cmp_ps_mask(off, _mm512_set1_ps(0.5f - 0x1.0p-12f), _CMP_GE_OQ);
  if (__builtin_expect(near == 0, 1)) return r;
  return _mm512_roundscale_ps(_mm512_mul_ps(_mm512_div_ps(v, _mm512_loadu_ps(d)), vmult),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

template <class B, Step S>
struct FixUpdate16 {
  const float* x;
  typename B::T* b;
  const float *d, *rd, *s;
  float mult, lo, hi, inv;
  __attribute__((target("avx512f"))) __m512i operator()(int64_t i) const {
    const __m512 vlo = _mm512_set1_ps(lo);
    const __m512 m = load16<B>(b, i), xv = loadStream16(x + i);
    const __m512 v = S == Step::kDelta ? _mm512_sub_ps(xv, m) : _mm512_add_ps(xv, m);
    const __m512 r = fixRound16(v, d + i, rd + i, _mm512_set1_ps(mult), _mm512_set1_ps(lo - 1.0f),
                                _mm512_set1_ps(hi + 1.0f));
    const __m512 q = _mm512_min_ps(_mm512_max_ps(r, vlo), _mm512_set1_ps(hi));
    const __m512i c = _mm512_cvttps_epi32(_mm512_sub_ps(q, vlo));
    const __m512 dq =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(_mm512_cvtepi32_ps(c), vlo), _mm512_set1_ps(inv)),
                      _mm512_loadu_ps(s + i));
    store16<B>(b, i, S == Step::kDelta ? _mm512_add_ps(m, dq) : _mm512_sub_ps(v, dq));
    return c;
  }
};

template <class B, Step S>
static int64_t fixUpdate512(const float* x, typename B::T* b, const float* d, const float* rd,
                            const float* s, int64_t n, float mult, float lo, float hi, float inv,
                            uint8_t* codes) {
  return codeBytes512<B>(x, b, n, FixUpdate16<B, S>{x, b, d, rd, s, mult, lo, hi, inv}, codes);
}

// Fixpoint levels: codes = clip(rint(value / d * mult), lo, hi) - lo, buffer = next(deQ(codes)).
template <class B, Step S>
static void fixUpdateT(const float* x, typename B::T* b, const float* d, const float* rd,
                       const float* s, int64_t n, float mult, float lo, float hi, float inv,
                       uint8_t* codes) {
  const __m256 vmult = _mm256_set1_ps(mult), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi),
               vinv = _mm256_set1_ps(inv), below = _mm256_set1_ps(lo - 1.0f),
               above = _mm256_set1_ps(hi + 1.0f);
  int64_t i = 0;
  if constexpr (!std::is_same_v<B, BufF32>)  // as quantUpdateT
    if (cpuHas512F() && allow512.load(std::memory_order_relaxed))
      i = fixUpdate512<B, S>(x, b, d, rd, s, n, mult, lo, hi, inv, codes);
  for (; i + 8 <= n; i += 8) {
    prefetch<B>(x, b, i);
    const __m256 m = B::load8(b, i), v = value8<S>(_mm256_loadu_ps(x + i), m);
    const __m256 q =
        _mm256_min_ps(_mm256_max_ps(fixRound8(v, d + i, rd + i, vmult, below, above), vlo), vhi);
    const __m256i c = _mm256_cvttps_epi32(_mm256_sub_ps(q, vlo));
    storeCodes8(codes + i, c);
    const __m256 dq = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(_mm256_cvtepi32_ps(c), vlo), vinv),
                                    _mm256_loadu_ps(s + i));
    B::store8(b, i, next8<S>(m, v, dq));
  }
  for (; i < n; ++i) {
    const float m = B::at(b, i), v = value1<S>(x[i], m), q0 = __builtin_rintf(v / d[i] * mult);
    const float w = lo < q0 ? q0 : lo, q = w < hi ? w : hi;
    const uint8_t c = static_cast<uint8_t>(static_cast<int32_t>(q - lo));
    codes[i] = c;
    B::put(b, i, next1<S>(m, v, ((static_cast<float>(c) + lo) * inv) * s[i]));
  }
}

// The table's entries (kernels.h names them).
#define SLOWPIPE_FUSED_STEPS(Buf, S, absMax, quantUpdate, fixUpdate)                          \
  static void absMax(const float* x, const Buf::T* b, int64_t n, float* acc) {                \
    absMaxT<Buf, S>(x, b, n, acc);                                                            \
  }                                                                                           \
  static void quantUpdate(const float* x, Buf::T* b, const float* mx, const float* inv,       \
                          const float* step, int64_t n, float top, uint8_t* codes) {          \
    quantUpdateT<Buf, S>(x, b, mx, inv, step, n, top, codes);                                 \
  }                                                                                           \
  static void fixUpdate(const float* x, Buf::T* b, const float* d, const float* rd,           \
                        const float* s, int64_t n, float mult, float lo, float hi, float inv, \
                        uint8_t* codes) {                                                     \
    fixUpdateT<Buf, S>(x, b, d, rd, s, n, mult, lo, hi, inv, codes);                          \
  }
SLOWPIPE_FUSED_STEPS(BufF32, Step::kDelta, deltaAbsMax, deltaQuantUpdate, deltaFixUpdate)
SLOWPIPE_FUSED_STEPS(BufF16, Step::kDelta, deltaAbsMaxH, deltaQuantUpdateH, deltaFixUpdateH)
SLOWPIPE_FUSED_STEPS(BufF32, Step::kSum, sumAbsMax, efQuantUpdate, efFixUpdate)
SLOWPIPE_FUSED_STEPS(BufBf16, Step::kSum, sumAbsMaxB, efQuantUpdateB, efFixUpdateB)
#undef SLOWPIPE_FUSED_STEPS
#define KERNELS_HAVE_FUSED_STEPS

static void deltaApplyH(const float* dq, uint8_t* mh, int64_t n, float* out, bool stream) {
  int64_t i = 0;
  auto one = [&](int64_t j) {
    putHalf(mh + 2 * j, halfAt(mh + 2 * j) + dq[j]);
    out[j] = halfAt(mh + 2 * j);
  };
  if (stream)  // non-temporal stores need 32-byte aligned addresses: the head one at a time
    for (; i < n && (reinterpret_cast<uintptr_t>(out + i) & 31) != 0; ++i) one(i);
  for (; i + 8 <= n; i += 8) {
    if ((i & 31) == 0) ahead(mh + 2 * (i + kPrefetch));  // a line per 32 values
    const __m128i h = _mm256_cvtps_ph(_mm256_add_ps(loadHalf8(mh + 2 * i), _mm256_loadu_ps(dq + i)),
                                      _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(mh + 2 * i), h);
    if (stream)
      _mm256_stream_ps(out + i, _mm256_cvtph_ps(h));
    else
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) one(i);
}

// deltaApplyH from the packed codes, on an fp16 or fp32 buffer: 8 codes a step unpacked in
// registers (b <= 4: the group's 8b bits in one 32-bit word, shifted apart lane by lane; b = 8: the
// bytes widened), dequantized with dequantVec's / fixDequantVec's operations, then deltaApplyH's;
// the last n % 8 values one at a time.
static inline uint32_t codeAt(const uint8_t* packed, int bits, int64_t k) {
  const int64_t bit = k * bits;
  const int64_t at = bit >> 3, shift = bit & 7;
  uint32_t w = packed[at];
  if (shift + bits > 8) w |= static_cast<uint32_t>(packed[at + 1]) << 8;
  return (w >> shift) & ((1u << bits) - 1);
}

// The 8 codes of a group (its `bits` bytes); whole: reading 4 bytes stays inside the caller's.
static inline __m256i codes8Packed(const uint8_t* group, int bits, bool whole, __m256i shifts,
                                   __m256i mask) {
  if (bits == 8)
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(group)));
  uint32_t w = 0;
  if (whole)
    std::memcpy(&w, group, 4);
  else
    for (int k = 0; k < bits; ++k) w |= static_cast<uint32_t>(group[k]) << (8 * k);
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int32_t>(w)), shifts),
                          mask);
}

// Its main loop on AVX-512 F where the CPU has it: 16 values a step (two groups of codes, one per
// half), the fp16 conversions (most of this loop's work) on twice the lanes; the same operations
// lane by lane, so the same bits. Stores as the 256-bit loop makes them (nt: 32, 16 or 0). Steps
// while both groups are whole (< fit); returns where it stopped.
template <class B>
__attribute__((target("avx512f"))) static int64_t deltaApplyPacked512(
    const uint8_t* packed, int bits, const float* a, const float* b, float lo, float inv, int64_t n,
    int64_t fit, typename B::T* mb, float* out, int nt) {
  const bool fix = b == nullptr;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i shifts = _mm512_mullo_epi32(lane, _mm512_set1_epi32(bits));
  const __m512i mask = _mm512_set1_epi32((1 << bits) - 1);
  const __m512 lv = _mm512_set1_ps(lo), iv = _mm512_set1_ps(inv);
  int64_t i = 0;
  for (; i + 16 <= n && i / 8 + 1 < fit; i += 16) {
    if ((i & (sizeof(typename B::T) == 4 ? 15 : 31)) == 0) ahead(B::addr(mb, i + kPrefetch));
    const uint8_t* g = packed + i / 8 * bits;
    __m512i ci;
    if (bits == 8) {
      ci = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g)));
    } else {
      uint32_t w0, w1;
      std::memcpy(&w0, g, 4);
      std::memcpy(&w1, g + bits, 4);
      const __m512i w =
          _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(static_cast<int32_t>(w0))),
                             _mm256_set1_epi32(static_cast<int32_t>(w1)), 1);
      ci = _mm512_and_si512(_mm512_srlv_epi32(w, shifts), mask);
    }
    const __m512 c = _mm512_cvtepi32_ps(ci);
    const __m512 dq =
        fix ? _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(c, lv), iv), _mm512_loadu_ps(a + i))
            : _mm512_sub_ps(_mm512_mul_ps(c, _mm512_loadu_ps(a + i)), _mm512_loadu_ps(b + i));
    __m512 v;
    if constexpr (sizeof(typename B::T) == 4) {  // fp32 buffer
      float* m = reinterpret_cast<float*>(mb) + i;
      v = _mm512_add_ps(_mm512_loadu_ps(m), dq);
      _mm512_storeu_ps(m, v);
    } else {  // fp16 buffer: two bytes a value
      uint8_t* m = reinterpret_cast<uint8_t*>(mb) + 2 * i;
      const __m256i h = _mm512_cvtps_ph(
          _mm512_add_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(m))),
                        dq),
          _MM_FROUND_TO_NEAREST_INT);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(m), h);
      v = _mm512_cvtph_ps(h);
    }
    for (int half = 0; half < 2; ++half) {
      const __m256 u = half ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))
                            : _mm512_castps512_ps256(v);
      float* o = out + i + 8 * half;
      if (nt == 32) {
        _mm256_stream_ps(o, u);
      } else if (nt == 16) {
        _mm_stream_ps(o, _mm256_castps256_ps128(u));
        _mm_stream_ps(o + 4, _mm256_extractf128_ps(u, 1));
      } else {
        _mm256_storeu_ps(o, u);
      }
    }
  }
  return i;
}

template <class B>
static void deltaApplyPackedT(const uint8_t* packed, int bits, const float* a, const float* b,
                              float lo, float inv, int64_t n, typename B::T* mb, float* out,
                              bool stream) {
  const bool fix = b == nullptr;
  auto dq1 = [&](int64_t j) {
    const float c = static_cast<float>(codeAt(packed, bits, j));
    return fix ? ((c + lo) * inv) * a[j] : c * a[j] - b[j];
  };
  auto one = [&](int64_t j) {
    B::put(mb, j, B::at(mb, j) + dq1(j));
    out[j] = B::at(mb, j);
  };
  const __m256i shifts =
      _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(bits));
  const __m256i mask = _mm256_set1_epi32((1 << bits) - 1);
  const __m256 lv = _mm256_set1_ps(lo), iv = _mm256_set1_ps(inv);
  // A group of 8 codes is `bits` whole bytes; groups from `fit` on are read a byte at a time (a
  // 4-byte read would pass the run's packed bytes).
  const int64_t bytes = (n * bits + 7) / 8;
  const int64_t fit = bits == 8 ? n / 8 : bytes < 4 ? 0 : (bytes - 4) / bits + 1;
  // Groups start at multiples of 8 values (32 bytes of out), so out's alignment is every group's:
  // non-temporal stores of 32 or 16 bytes where it allows, plain stores otherwise.
  const uintptr_t align = reinterpret_cast<uintptr_t>(out) & 31;
  const int nt = !stream ? 0 : align == 0 ? 32 : align % 16 == 0 ? 16 : 0;
  auto step = [&](int64_t i, bool whole) {
    const __m256 c =
        _mm256_cvtepi32_ps(codes8Packed(packed + i / 8 * bits, bits, whole, shifts, mask));
    const __m256 dq =
        fix ? _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(c, lv), iv), _mm256_loadu_ps(a + i))
            : _mm256_sub_ps(_mm256_mul_ps(c, _mm256_loadu_ps(a + i)), _mm256_loadu_ps(b + i));
    B::store8(mb, i, _mm256_add_ps(B::load8(mb, i), dq));
    const __m256 v = B::load8(mb, i);  // what the buffer now holds (fp16: rounded)
    if (nt == 32) {
      _mm256_stream_ps(out + i, v);
    } else if (nt == 16) {
      _mm_stream_ps(out + i, _mm256_castps256_ps128(v));
      _mm_stream_ps(out + i + 4, _mm256_extractf128_ps(v, 1));
    } else {
      _mm256_storeu_ps(out + i, v);
    }
  };
  int64_t i = 0;
  if (cpuHas512F() && allow512.load(std::memory_order_relaxed))
    i = deltaApplyPacked512<B>(packed, bits, a, b, lo, inv, n, fit, mb, out, nt);
  for (; i + 8 <= n && i / 8 < fit; i += 8) {
    if ((i & (sizeof(typename B::T) == 4 ? 15 : 31)) == 0) ahead(B::addr(mb, i + kPrefetch));
    step(i, true);
  }
  for (; i + 8 <= n; i += 8) step(i, false);
  for (; i < n; ++i) one(i);
}
static void deltaApplyPackedH(const uint8_t* packed, int bits, const float* a, const float* b,
                              float lo, float inv, int64_t n, uint8_t* mh, float* out,
                              bool stream) {
  deltaApplyPackedT<BufF16>(packed, bits, a, b, lo, inv, n, mh, out, stream);
}
static void deltaApplyPackedF(const uint8_t* packed, int bits, const float* a, const float* b,
                              float lo, float inv, int64_t n, float* m, float* out, bool stream) {
  deltaApplyPackedT<BufF32>(packed, bits, a, b, lo, inv, n, m, out, stream);
}

// Group scales in registers: max |x| of each group (four accumulators, then across lanes: a max is
// exact, so any order gives kernels.inc's result), and the symmetric quantizer on a run with one
// scale, 32 values a step: t = min(top, max(0, (x + m) * inv + 0.5)) as kernels.inc writes it
// (max(0, y) with y's NaN giving 0 as maxOf does), truncated to int32, packed to bytes in order.
#define KERNELS_HAVE_GROUPS
static inline float horizontalMax(__m256 v) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

// max |v| of n values: four accumulators of 8 lanes (a NaN |v| leaves a lane as it is, as maxOf
// does), 16 KiB of v prefetched into L2 a line at a time as the loop goes.
static float absMaxRun(const float* v, int64_t n) {
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    ahead(v + i + kPrefetch);
    ahead(v + i + kPrefetch + 16);
    a0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + i), absMask), a0);
    a1 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + i + 8), absMask), a1);
    a2 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + i + 16), absMask), a2);
    a3 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + i + 24), absMask), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + i), absMask), a0);
  float r = horizontalMax(_mm256_max_ps(_mm256_max_ps(a0, a1), _mm256_max_ps(a2, a3)));
  for (; i < n; ++i) {
    const float a = __builtin_fabsf(v[i]);
    r = r < a ? a : r;
  }
  return r;
}

// The bench's read-only pass and group scales' partial groups (kernels.inc's absMax): it was the
// portable loop, one accumulator and no prefetch, 25-27 GB/s in cache and from memory alike.
#define KERNELS_HAVE_ABSMAX
static float absMax(const float* x, int64_t n) { return absMaxRun(x, n); }

static void absMaxGroups(const float* x, int64_t groups, int64_t g, float* m) {
  for (int64_t q = 0; q < groups; ++q) {
    const float r = absMaxRun(x + q * g, g);
    m[q] = m[q] < r ? r : m[q];
  }
}

// m[k] = max(m[k], |v[k]|) (kernels.inc's absMaxAccum), prefetching v.
static void absMaxAccumRun(const float* v, int64_t n, float* m) {
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    ahead(v + i + kPrefetch);
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(v + i), absMask);
    const __m256 b = _mm256_and_ps(_mm256_loadu_ps(v + i + 8), absMask);
    _mm256_storeu_ps(m + i, _mm256_max_ps(a, _mm256_loadu_ps(m + i)));
    _mm256_storeu_ps(m + i + 8, _mm256_max_ps(b, _mm256_loadu_ps(m + i + 8)));
  }
  for (; i < n; ++i) {
    const float a = __builtin_fabsf(v[i]);
    m[i] = m[i] < a ? a : m[i];
  }
}

static inline __m256i quant8(const float* x, __m256 m, __m256 inv, __m256 half, __m256 top) {
  const __m256 y = _mm256_add_ps(_mm256_mul_ps(_mm256_add_ps(_mm256_loadu_ps(x), m), inv), half);
  // max(y, 0) returns 0 for a NaN y (the second operand), as maxOf(0, y) does; then min(top, .).
  const __m256 t = _mm256_min_ps(_mm256_max_ps(y, _mm256_setzero_ps()), top);
  return _mm256_cvttps_epi32(t);
}

// Four runs of 8 int32 codes in [0, 255] to 32 bytes in order.
static inline void storeCodes32(__m256i a, __m256i b, __m256i c, __m256i d, uint8_t* out) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(bytes, order));
}

static inline uint8_t quantOne(float x, float m, float inv, float top) {
  const float y = (x + m) * inv + 0.5f;
  const float lo = 0.0f < y ? y : 0.0f;
  const float t = top < lo ? top : lo;
  return static_cast<uint8_t>(static_cast<int32_t>(t));
}

static void quantRun(const float* x, float m, float inv, int64_t n, float top, uint8_t* codes) {
  const __m256 mv = _mm256_set1_ps(m), iv = _mm256_set1_ps(inv), hv = _mm256_set1_ps(0.5f),
               tv = _mm256_set1_ps(top);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    storeCodes32(quant8(x + i, mv, iv, hv, tv), quant8(x + i + 8, mv, iv, hv, tv),
                 quant8(x + i + 16, mv, iv, hv, tv), quant8(x + i + 24, mv, iv, hv, tv), codes + i);
  for (; i < n; ++i) codes[i] = quantOne(x[i], m, inv, top);
}

// The same with a scale per value (channel scales along the run).
static void quantRunVec(const float* x, const float* m, const float* inv, int64_t n, float top,
                        uint8_t* codes) {
  const __m256 hv = _mm256_set1_ps(0.5f), tv = _mm256_set1_ps(top);
  auto q8 = [&](int64_t j) {
    return quant8(x + j, _mm256_loadu_ps(m + j), _mm256_loadu_ps(inv + j), hv, tv);
  };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    ahead(x + i + kPrefetch);  // as the fused steps do (above)
    ahead(x + i + kPrefetch + 16);
    storeCodes32(q8(i), q8(i + 8), q8(i + 16), q8(i + 24), codes + i);
  }
  for (; i < n; ++i) codes[i] = quantOne(x[i], m[i], inv[i], top);
}

// levels=fixpoint and stochastic rounding likewise (kernels.inc's fixVec / fixScalar / stochVec /
// stochScalar, the same operations lane by lane): the quotient x / d (not a product), rounded half
// to even as rintf does, clipped as maxOf / minOf clip; the stochastic uniforms from lowbias32 of
// the stream index in 32-bit lanes.
static inline __m256i fix8(__m256 x, __m256 d, __m256 mult, __m256 lo, __m256 hi) {
  const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_div_ps(x, d), mult),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_min_ps(_mm256_max_ps(r, lo), hi), lo));
}

static inline uint8_t fixOne(float x, float d, float mult, float lo, float hi) {
  const float r = __builtin_rintf(x / d * mult);
  const float a = lo < r ? r : lo;
  const float q = a < hi ? a : hi;
  return static_cast<uint8_t>(static_cast<int32_t>(q - lo));
}

// Codes of n values, 32 a step from eight(j) (8 int32 codes from value j), one at a time from
// one(j) for the tail; x prefetched.
template <class Eight, class One>
static inline void codeLoop(const float* x, int64_t n, uint8_t* codes, Eight eight, One one) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    ahead(x + i + kPrefetch);
    ahead(x + i + kPrefetch + 16);
    storeCodes32(eight(i), eight(i + 8), eight(i + 16), eight(i + 24), codes + i);
  }
  for (; i < n; ++i) codes[i] = one(i);
}

static void fixRunVec(const float* x, const float* d, int64_t n, float mult, float lo, float hi,
                      uint8_t* codes) {
  const __m256 mv = _mm256_set1_ps(mult), lv = _mm256_set1_ps(lo), hv = _mm256_set1_ps(hi);
  codeLoop(
      x, n, codes,
      [&](int64_t j) { return fix8(_mm256_loadu_ps(x + j), _mm256_loadu_ps(d + j), mv, lv, hv); },
      [&](int64_t j) { return fixOne(x[j], d[j], mult, lo, hi); });
}

static void fixRun(const float* x, float d, int64_t n, float mult, float lo, float hi,
                   uint8_t* codes) {
  const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(mult), lv = _mm256_set1_ps(lo),
               hv = _mm256_set1_ps(hi);
  codeLoop(
      x, n, codes, [&](int64_t j) { return fix8(_mm256_loadu_ps(x + j), dv, mv, lv, hv); },
      [&](int64_t j) { return fixOne(x[j], d, mult, lo, hi); });
}

static inline __m256 uniform8(uint32_t lo, uint32_t key, int64_t k) {
  __m256i v =
      _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(lo + static_cast<uint32_t>(k))),
                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  v = _mm256_xor_si256(v, _mm256_set1_epi32(static_cast<int32_t>(key)));
  v = _mm256_xor_si256(v, _mm256_srli_epi32(v, 16));
  v = _mm256_mullo_epi32(v, _mm256_set1_epi32(0x7feb352d));
  v = _mm256_xor_si256(v, _mm256_srli_epi32(v, 15));
  v = _mm256_mullo_epi32(v, _mm256_set1_epi32(static_cast<int32_t>(0x846ca68bu)));
  v = _mm256_xor_si256(v, _mm256_srli_epi32(v, 16));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 8)), _mm256_set1_ps(0x1.0p-24f));
}

static inline __m256i stoch8(__m256 x, __m256 m, __m256 inv, __m256 u, __m256 top) {
  const __m256 y = _mm256_add_ps(_mm256_mul_ps(_mm256_add_ps(x, m), inv), u);
  return _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(y, _mm256_setzero_ps()), top));
}

static inline uint8_t stochOne(float x, float m, float inv, float u, float top) {
  const float y = (x + m) * inv + u;
  const float a = 0.0f < y ? y : 0.0f;
  const float t = a < top ? a : top;
  return static_cast<uint8_t>(static_cast<int32_t>(t));
}

// lowbias32 written out here: a header's inline copy built with AVX2 could stand in for the
// baseline's (kernels.inc's note).
static inline float uniformOne(uint32_t lo, uint32_t key, int64_t k) {
  uint32_t v = (lo + static_cast<uint32_t>(k)) ^ key;
  v ^= v >> 16;
  v *= 0x7feb352du;
  v ^= v >> 15;
  v *= 0x846ca68bu;
  v ^= v >> 16;
  return static_cast<float>(static_cast<int32_t>(v >> 8)) * 0x1.0p-24f;
}

static void stochRunVec256(const float* x, const float* m, const float* inv, int64_t n, float top,
                           uint32_t lo, uint32_t key, uint8_t* codes) {
  const __m256 tv = _mm256_set1_ps(top - 0.5f);
  codeLoop(
      x, n, codes,
      [&](int64_t j) {
        return stoch8(_mm256_loadu_ps(x + j), _mm256_loadu_ps(m + j), _mm256_loadu_ps(inv + j),
                      uniform8(lo, key, j), tv);
      },
      [&](int64_t j) { return stochOne(x[j], m[j], inv[j], uniformOne(lo, key, j), top - 0.5f); });
}

static void stochRun256(const float* x, float m, float inv, int64_t n, float top, uint32_t lo,
                        uint32_t key, uint8_t* codes) {
  const __m256 mv = _mm256_set1_ps(m), iv = _mm256_set1_ps(inv), tv = _mm256_set1_ps(top - 0.5f);
  codeLoop(
      x, n, codes,
      [&](int64_t j) { return stoch8(_mm256_loadu_ps(x + j), mv, iv, uniform8(lo, key, j), tv); },
      [&](int64_t j) { return stochOne(x[j], m, inv, uniformOne(lo, key, j), top - 0.5f); });
}

// The same 16 lanes a step on CPUs with AVX-512 F (its 32-bit multiply on twice the lanes: the
// hash is most of this loop's work), chosen at run time like randk's mask below; the same
// operations lane by lane, so the same codes (CpuPathTest.StochasticCodesAreTheSameAtEveryWidth).
__attribute__((target("avx512f"))) static inline __m512 uniform16(uint32_t lo, uint32_t key,
                                                                  int64_t k) {
  __m512i v =
      _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(lo + static_cast<uint32_t>(k))),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  v = _mm512_xor_si512(v, _mm512_set1_epi32(static_cast<int32_t>(key)));
  v = _mm512_xor_si512(v, _mm512_srli_epi32(v, 16));
  v = _mm512_mullo_epi32(v, _mm512_set1_epi32(0x7feb352d));
  v = _mm512_xor_si512(v, _mm512_srli_epi32(v, 15));
  v = _mm512_mullo_epi32(v, _mm512_set1_epi32(static_cast<int32_t>(0x846ca68bu)));
  v = _mm512_xor_si512(v, _mm512_srli_epi32(v, 16));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 8)), _mm512_set1_ps(0x1.0p-24f));
}

// m and inv per value (perValue) or one for the run (m[0], inv[0]).
template <bool perValue>
__attribute__((target("avx512f"))) static void stochRun512(const float* x, const float* m,
                                                           const float* inv, int64_t n, float top,
                                                           uint32_t lo, uint32_t key,
                                                           uint8_t* codes) {
  const __m512 tv = _mm512_set1_ps(top - 0.5f), zero = _mm512_setzero_ps();
  // One scale for the run: m[0] and inv[0]; per value they are read lane by lane below (and an
  // empty run's arrays may be null).
  const __m512 ms = _mm512_set1_ps(perValue ? 0.0f : m[0]);
  const __m512 is = _mm512_set1_ps(perValue ? 0.0f : inv[0]);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    ahead(x + i + kPrefetch);
    ahead(x + i + kPrefetch + 16);
    for (int64_t j = i; j < i + 32; j += 16) {
      const __m512 mv = perValue ? _mm512_loadu_ps(m + j) : ms;
      const __m512 iv = perValue ? _mm512_loadu_ps(inv + j) : is;
      const __m512 y = _mm512_add_ps(_mm512_mul_ps(_mm512_add_ps(loadStream16(x + j), mv), iv),
                                     uniform16(lo, key, j));
      // max(y, 0) gives 0 for a NaN y, as stoch8 does; the codes are in [0, 255].
      const __m512 t = _mm512_min_ps(_mm512_max_ps(y, zero), tv);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + j),
                       _mm512_cvtusepi32_epi8(_mm512_cvttps_epi32(t)));
    }
  }
  for (; i < n; ++i)
    codes[i] = stochOne(x[i], perValue ? m[i] : m[0], perValue ? inv[i] : inv[0],
                        uniformOne(lo, key, i), top - 0.5f);
}

bool cpuHas512F() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

std::atomic<bool> allow512{true};

static void stochRunVec(const float* x, const float* m, const float* inv, int64_t n, float top,
                        uint32_t lo, uint32_t key, uint8_t* codes) {
  if (cpuHas512F() && allow512.load(std::memory_order_relaxed))
    return stochRun512<true>(x, m, inv, n, top, lo, key, codes);
  stochRunVec256(x, m, inv, n, top, lo, key, codes);
}

static void stochRun(const float* x, float m, float inv, int64_t n, float top, uint32_t lo,
                     uint32_t key, uint8_t* codes) {
  if (cpuHas512F() && allow512.load(std::memory_order_relaxed))
    return stochRun512<false>(x, &m, &inv, n, top, lo, key, codes);
  stochRun256(x, m, inv, n, top, lo, key, codes);
}

// The channel quantizer's codes packed in registers (Kernels::quantVecPacked, fixVecPacked,
// stochVecPacked): 16 values a step with AVX-512 F, each lane's code by the operations quant8 /
// fix8 / stochRun512 use (the same codes), then bitpack.h's layout of the 16 codes, 2 * B bytes:
// 8 bits, the low byte of each lane; 4, each 64-bit lane's pair c0 | c1 << 4; 2, the bytes'
// quads b0 + 4 b1 + 16 b2 + 64 b3; 1, the lanes' nonzero mask. No code buffer and no packing pass.
template <int B>
__attribute__((target("avx512f"))) static inline void packCodes16(__m512i c, uint8_t* out) {
  if constexpr (B == 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(c));
  } else if constexpr (B == 4) {
    const __m512i pairs = _mm512_or_si512(c, _mm512_srli_epi64(c, 28));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm512_cvtepi64_epi8(pairs));
  } else if constexpr (B == 2) {
    const __m128i pairs = _mm_maddubs_epi16(_mm512_cvtepi32_epi8(c), _mm_set1_epi16(0x0401));
    const __m128i quads = _mm_madd_epi16(pairs, _mm_set1_epi32(0x00100001));
    const __m128i bytes = _mm_packus_epi16(_mm_packus_epi32(quads, quads), quads);
    const int32_t word = _mm_cvtsi128_si32(bytes);
    std::memcpy(out, &word, 4);
  } else {
    static_assert(B == 1);
    const uint16_t mask = static_cast<uint16_t>(_mm512_test_epi32_mask(c, c));
    std::memcpy(out, &mask, 2);
  }
}

// `code` is a copy of the caller's: its pointers and constants then stay in registers (with a
// reference, every byte stored to `out` might alias them, and the loop reloaded them each step).
template <int B, class Code16>
__attribute__((target("avx512f"))) static int64_t packedLoop512(const float* x, int64_t n,
                                                                uint8_t* out, const Code16 code) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    ahead(x + i + kPrefetch);  // one line of x a step
    packCodes16<B>(code(i), out + i / 8 * B);
  }
  return i;
}

template <class Code16>
static int64_t packedRun(const float* x, int64_t n, int bits, uint8_t* out, const Code16& code) {
  if (!cpuHas512F() || !allow512.load(std::memory_order_relaxed)) return 0;
  switch (bits) {
    case 1:
      return packedLoop512<1>(x, n, out, code);
    case 2:
      return packedLoop512<2>(x, n, out, code);
    case 4:
      return packedLoop512<4>(x, n, out, code);
    case 8:
      return packedLoop512<8>(x, n, out, code);
    default:
      return 0;
  }
}

struct Quant16 {
  const float *x, *m, *inv;
  float top;
  __attribute__((target("avx512f"))) __m512i operator()(int64_t j) const {
    const __m512 y =
        _mm512_add_ps(_mm512_mul_ps(_mm512_add_ps(loadStream16(x + j), _mm512_loadu_ps(m + j)),
                                    _mm512_loadu_ps(inv + j)),
                      _mm512_set1_ps(0.5f));
    const __m512 t = _mm512_min_ps(_mm512_max_ps(y, _mm512_setzero_ps()), _mm512_set1_ps(top));
    return _mm512_cvttps_epi32(t);
  }
};

struct Fix16 {
  const float *x, *d;
  float mult, lo, hi;
  __attribute__((target("avx512f"))) __m512i operator()(int64_t j) const {
    const __m512 r = _mm512_roundscale_ps(
        _mm512_mul_ps(_mm512_div_ps(loadStream16(x + j), _mm512_loadu_ps(d + j)),
                      _mm512_set1_ps(mult)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 lv = _mm512_set1_ps(lo);
    return _mm512_cvttps_epi32(
        _mm512_sub_ps(_mm512_min_ps(_mm512_max_ps(r, lv), _mm512_set1_ps(hi)), lv));
  }
};

struct Stoch16 {
  const float *x, *m, *inv;
  float top;
  uint32_t lo, key;
  __attribute__((target("avx512f"))) __m512i operator()(int64_t j) const {
    const __m512 y =
        _mm512_add_ps(_mm512_mul_ps(_mm512_add_ps(loadStream16(x + j), _mm512_loadu_ps(m + j)),
                                    _mm512_loadu_ps(inv + j)),
                      uniform16(lo, key, j));
    const __m512 t =
        _mm512_min_ps(_mm512_max_ps(y, _mm512_setzero_ps()), _mm512_set1_ps(top - 0.5f));
    return _mm512_cvttps_epi32(t);
  }
};

// An update step's codes packed (packedRun prefetches x; this, the buffer too).
template <class B, class Step16>
struct BufferPrefetched {
  const typename B::T* b;
  Step16 step16;
  __attribute__((target("avx512f"))) __m512i operator()(int64_t i) const {
    ahead(B::addr(b, i + kPrefetch));
    return step16(i);
  }
};

template <class B, Step S>
static int64_t quantUpdatePacked(const float* x, typename B::T* b, const float* mx,
                                 const float* inv, const float* step, int64_t n, float top,
                                 int bits, uint8_t* out) {
  using Step16 = QuantUpdate16<B, S>;
  return packedRun(x, n, bits, out,
                   BufferPrefetched<B, Step16>{b, Step16{x, b, mx, inv, step, top}});
}

template <class B, Step S>
static int64_t fixUpdatePacked(const float* x, typename B::T* b, const float* d, const float* rd,
                               const float* s, int64_t n, float mult, float lo, float hi, float inv,
                               int bits, uint8_t* out) {
  using Step16 = FixUpdate16<B, S>;
  return packedRun(x, n, bits, out,
                   BufferPrefetched<B, Step16>{b, Step16{x, b, d, rd, s, mult, lo, hi, inv}});
}

// The table's entries (kernels.h names them).
#define SLOWPIPE_PACKED_STEPS(Buf, S, quantPacked, fixPacked)                                    \
  static int64_t quantPacked(const float* x, Buf::T* b, const float* mx, const float* inv,       \
                             const float* step, int64_t n, float top, int bits, uint8_t* out) {  \
    return quantUpdatePacked<Buf, S>(x, b, mx, inv, step, n, top, bits, out);                    \
  }                                                                                              \
  static int64_t fixPacked(const float* x, Buf::T* b, const float* d, const float* rd,           \
                           const float* s, int64_t n, float mult, float lo, float hi, float inv, \
                           int bits, uint8_t* out) {                                             \
    return fixUpdatePacked<Buf, S>(x, b, d, rd, s, n, mult, lo, hi, inv, bits, out);             \
  }
SLOWPIPE_PACKED_STEPS(BufF32, Step::kDelta, deltaQuantUpdatePacked, deltaFixUpdatePacked)
SLOWPIPE_PACKED_STEPS(BufF16, Step::kDelta, deltaQuantUpdateHPacked, deltaFixUpdateHPacked)
SLOWPIPE_PACKED_STEPS(BufF32, Step::kSum, efQuantUpdatePacked, efFixUpdatePacked)
SLOWPIPE_PACKED_STEPS(BufBf16, Step::kSum, efQuantUpdateBPacked, efFixUpdateBPacked)
#undef SLOWPIPE_PACKED_STEPS

static int64_t quantVecPacked(const float* x, const float* m, const float* inv, int64_t n,
                              float top, int bits, uint8_t* out) {
  return packedRun(x, n, bits, out, Quant16{x, m, inv, top});
}

static int64_t fixVecPacked(const float* x, const float* d, int64_t n, float mult, float lo,
                            float hi, int bits, uint8_t* out) {
  return packedRun(x, n, bits, out, Fix16{x, d, mult, lo, hi});
}

static int64_t stochVecPacked(const float* x, const float* m, const float* inv, int64_t n,
                              float top, uint32_t lo, uint32_t key, int bits, uint8_t* out) {
  return packedRun(x, n, bits, out, Stoch16{x, m, inv, top, lo, key});
}

// randk's values 8 at a time: the lanes' keep flags as a bit mask, a permutation per mask (gather:
// the kept lanes first, in order; scatter: lane j takes value popcount(mask below j)), zero where a
// lane is not kept. The same values as kernels.inc's loops.
#define KERNELS_HAVE_RANDK
struct RandkTables {
  alignas(32) int32_t pack[256][8];
  alignas(32) int32_t expand[256][8];
  uint64_t spread[256];  // bit j of m -> byte j (0 or 1)
  RandkTables() {
    for (int m = 0; m < 256; ++m) {
      spread[m] = 0;
      for (int j = 0; j < 8; ++j) spread[m] |= static_cast<uint64_t>((m >> j) & 1) << (8 * j);
      int c = 0;
      for (int j = 0; j < 8; ++j) {
        pack[m][j] = 0;
        expand[m][j] = 0;
      }
      for (int j = 0; j < 8; ++j)
        if (m & (1 << j)) {
          pack[m][c] = j;
          expand[m][j] = c++;
        }
    }
  }
};
static const RandkTables& randkTables() {
  static const RandkTables t;
  return t;
}

static inline int keepMask8(const uint8_t* keep) {
  const __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(keep)));
  return _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k, _mm256_setzero_si256())));
}

// x * c mod 2^64 in four 64-bit lanes (AVX2 has no 64-bit multiply): lo*lo + ((lo*hi + hi*lo) <<
// 32).
static inline __m256i mul64(__m256i x, __m256i c, __m256i cHi) {
  const __m256i cross =
      _mm256_add_epi64(_mm256_mul_epu32(x, cHi), _mm256_mul_epu32(_mm256_srli_epi64(x, 32), c));
  return _mm256_add_epi64(_mm256_mul_epu32(x, c), _mm256_slli_epi64(cross, 32));
}

// kernels.inc's randkKeep (mix64 of base ^ index below threshold), four indices a vector, eight a
// step.
static int64_t randkKeep256(uint64_t base, uint64_t threshold, int64_t lo, int64_t n,
                            uint8_t* keep) {
  const __m256i golden = _mm256_set1_epi64x(static_cast<int64_t>(0x9E3779B97F4A7C15ull));
  const __m256i c1 = _mm256_set1_epi64x(static_cast<int64_t>(0xBF58476D1CE4E5B9ull));
  const __m256i c2 = _mm256_set1_epi64x(static_cast<int64_t>(0x94D049BB133111EBull));
  const __m256i c1Hi = _mm256_srli_epi64(c1, 32), c2Hi = _mm256_srli_epi64(c2, 32);
  const __m256i sign = _mm256_set1_epi64x(static_cast<int64_t>(0x8000000000000000ull));
  const __m256i thr = _mm256_xor_si256(_mm256_set1_epi64x(static_cast<int64_t>(threshold)), sign);
  const __m256i b = _mm256_set1_epi64x(static_cast<int64_t>(base));
  auto below = [&](__m256i idx) {  // lanes with mix64(base ^ idx) < threshold (unsigned)
    __m256i z = _mm256_add_epi64(_mm256_xor_si256(b, idx), golden);
    z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), c1, c1Hi);
    z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), c2, c2Hi);
    z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
    return _mm256_movemask_pd(
        _mm256_castsi256_pd(_mm256_cmpgt_epi64(thr, _mm256_xor_si256(z, sign))));
  };
  const RandkTables& t = randkTables();
  int64_t count = 0, k = 0;
  __m256i idx = _mm256_add_epi64(_mm256_set1_epi64x(lo), _mm256_setr_epi64x(0, 1, 2, 3));
  const __m256i four = _mm256_set1_epi64x(4);
  for (; k + 8 <= n; k += 8) {
    const int m = below(idx) | (below(_mm256_add_epi64(idx, four)) << 4);
    idx = _mm256_add_epi64(idx, _mm256_set1_epi64x(8));
    std::memcpy(keep + k, &t.spread[m], 8);  // the 8 mask bits as 8 bytes of 0 / 1
    count += __builtin_popcount(static_cast<unsigned>(m));
  }
  for (; k < n; ++k) {
    uint64_t z = (base ^ static_cast<uint64_t>(lo + k)) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    keep[k] = z < threshold;
    count += z < threshold;
  }
  return count;
}

// The same mask, eight indices a vector, on CPUs with AVX-512 DQ: its 64-bit multiply and unsigned
// compare replace the three 32-bit multiplies and the sign flips above (the hash is the same, so
// the bits are: CpuPathTest.RandkMaskIsTheSameAtEveryVectorWidth compares them).
__attribute__((target("avx512f,avx512dq"))) static int64_t randkKeep512(uint64_t base,
                                                                        uint64_t threshold,
                                                                        int64_t lo, int64_t n,
                                                                        uint8_t* keep) {
  const __m512i golden = _mm512_set1_epi64(static_cast<int64_t>(0x9E3779B97F4A7C15ull));
  const __m512i c1 = _mm512_set1_epi64(static_cast<int64_t>(0xBF58476D1CE4E5B9ull));
  const __m512i c2 = _mm512_set1_epi64(static_cast<int64_t>(0x94D049BB133111EBull));
  const __m512i thr = _mm512_set1_epi64(static_cast<int64_t>(threshold));
  const __m512i b = _mm512_set1_epi64(static_cast<int64_t>(base));
  const __mmask8 all = 0xff;  // maskz shifts: GCC 12's plain ones read an "undefined" vector
  const RandkTables& t = randkTables();
  int64_t count = 0, k = 0;
  __m512i idx = _mm512_add_epi64(_mm512_set1_epi64(lo), _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
  const __m512i eight = _mm512_set1_epi64(8);
  for (; k + 8 <= n; k += 8) {
    __m512i z = _mm512_add_epi64(_mm512_xor_si512(b, idx), golden);
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_maskz_srli_epi64(all, z, 30)), c1);
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_maskz_srli_epi64(all, z, 27)), c2);
    z = _mm512_xor_si512(z, _mm512_maskz_srli_epi64(all, z, 31));
    const unsigned m = _mm512_cmplt_epu64_mask(z, thr);
    idx = _mm512_add_epi64(idx, eight);
    std::memcpy(keep + k, &t.spread[m], 8);
    count += __builtin_popcount(m);
  }
  return count + randkKeep256(base, threshold, lo + k, n - k, keep + k);
}

bool cpuHas512DQ() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

int64_t randkKeepOfWidth(int bits, uint64_t base, uint64_t threshold, int64_t lo, int64_t n,
                         uint8_t* keep) {
  return bits == 512 ? randkKeep512(base, threshold, lo, n, keep)
                     : randkKeep256(base, threshold, lo, n, keep);
}

static int64_t randkKeep(uint64_t base, uint64_t threshold, int64_t lo, int64_t n, uint8_t* keep) {
  static const bool has = cpuHas512DQ();
  const int bits = has && allow512.load(std::memory_order_relaxed) ? 512 : 256;
  return randkKeepOfWidth(bits, base, threshold, lo, n, keep);
}

// kernels.inc's keysAtLeast, 16 values a step: the keys as signed int32 (both sides below 2^31),
// a mask of the lanes at or above lo, its set bits in order; blocks without one cost a compare.
static int64_t keysAtLeast(const float* x, int64_t n, uint32_t lo, uint32_t* idx) {
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff);
  const __m256i below = _mm256_set1_epi32(static_cast<int32_t>(lo) - 1);  // key > lo - 1
  int64_t c = 0, k = 0;
  for (; k + 16 <= n; k += 16) {
    ahead(x + k + kPrefetch);
    const __m256i a =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k)), absMask);
    const __m256i b =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k + 8)), absMask);
    unsigned m =
        static_cast<unsigned>(
            _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, below)))) |
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(b, below))))
            << 8;
    while (m) {
      idx[c++] = static_cast<uint32_t>(k + __builtin_ctz(m));
      m &= m - 1;
    }
  }
  for (; k < n; ++k) {
    uint32_t bits;
    std::memcpy(&bits, x + k, 4);
    if ((bits & 0x7fffffffu) >= lo) idx[c++] = static_cast<uint32_t>(k);
  }
  return c;
}

static int64_t randkGather(const float* x, const uint8_t* keep, int64_t n, float scale,
                           float* kept) {
  const RandkTables& t = randkTables();
  const __m256 sv = _mm256_set1_ps(scale);
  int64_t c = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const int m = keepMask8(keep + i);
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sv);
    const __m256i idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.pack[m]));
    _mm256_storeu_ps(kept + c, _mm256_permutevar8x32_ps(v, idx));
    c += __builtin_popcount(static_cast<unsigned>(m));
  }
  for (; i < n; ++i) {
    kept[c] = x[i] * scale;
    c += keep[i];
  }
  return c;
}

static int64_t randkScatter(const uint8_t* values, int64_t available, const uint8_t* keep,
                            int64_t n, float* out) {
  const RandkTables& t = randkTables();
  int64_t c = 0, i = 0;
  // Eight values are loaded at a time while eight remain to be read; the rest one by one.
  for (; i + 8 <= n && c + 8 <= available; i += 8) {
    const int m = keepMask8(keep + i);
    const __m256 v = _mm256_loadu_ps(reinterpret_cast<const float*>(values + 4 * c));
    const __m256i idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.expand[m]));
    const __m256i lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i on = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(m), lanes), lanes);
    _mm256_storeu_ps(out + i,
                     _mm256_and_ps(_mm256_permutevar8x32_ps(v, idx), _mm256_castsi256_ps(on)));
    c += __builtin_popcount(static_cast<unsigned>(m));
  }
  for (; i < n; ++i) {
    float v = 0.0f;
    if (keep[i] && c < available) std::memcpy(&v, values + 4 * c, 4);
    if (keep[i]) ++c;
    out[i] = v;
  }
  return c;
}

// hadamard's first three passes (h = 1, 2, 4) on 8 values in one register, each value times pre
// first: per pass, the value beside it (a lane swap), its sum where the lane is a pair's low end
// and the difference (low - high) where it is the high end; a + c = c + a exactly, so the bits are
// kernels.inc's scalar butterflies'.
#define KERNELS_HAVE_FWHT8
static void fwhtFirstPasses(float* v, int64_t b, const float* pre) {
  for (int64_t i = 0; i < b; i += 8) {
    const __m256 a = _mm256_mul_ps(_mm256_loadu_ps(v + i), _mm256_loadu_ps(pre + i));
    const __m256 a1 = _mm256_permute_ps(a, 0xB1);  // (1, 0, 3, 2) per half
    const __m256 x = _mm256_blend_ps(_mm256_add_ps(a, a1), _mm256_sub_ps(a1, a), 0xAA);
    const __m256 x2 = _mm256_permute_ps(x, 0x4E);  // (2, 3, 0, 1) per half
    const __m256 y = _mm256_blend_ps(_mm256_add_ps(x, x2), _mm256_sub_ps(x2, x), 0xCC);
    const __m256 y4 = _mm256_permute2f128_ps(y, y, 1);  // the halves swapped
    _mm256_storeu_ps(v + i, _mm256_blend_ps(_mm256_add_ps(y, y4), _mm256_sub_ps(y4, y), 0xF0));
  }
}

// Non-temporal 32-byte stores from the first 32-byte boundary of dst on; head and tail copied.
static void streamBytes(const void* src, size_t n, void* dst) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  size_t head = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
  if (head > n) head = n;
  if (head) std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 128 <= n; i += 128) {
    // The source 2 KiB ahead: a cold source (none's payload) streams at about 1.3x without it
    // (measured here: 16.7 against 12.8 GB/s).
    __builtin_prefetch(s + i + 2048);
    __builtin_prefetch(s + i + 2048 + 64);
    for (int k = 0; k < 128; k += 32)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + k),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + k)));
  }
  for (; i + 32 <= n; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
  if (i < n) std::memcpy(d + i, s + i, n - i);
}

static void streamOut(const float* src, int64_t n, float* dst) {
  streamBytes(src, 4 * static_cast<size_t>(n), dst);
}

// kernels.inc's dequantVec / fixDequantVec (the same operations lane by lane: a product and a
// difference, no FMA), stored non-temporally from the first 32-byte aligned value on.
template <class Eight, class One>
static inline void dequantStream(int64_t n, float* out, Eight eight, One one) {
  int64_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(out + i) & 31) != 0; ++i) out[i] = one(i);
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(out + i, eight(i));
  for (; i < n; ++i) out[i] = one(i);
}

static inline __m256 codes8(const uint8_t* c) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))));
}

#define KERNELS_HAVE_DEQUANT_STREAM
static void dequantVecStream(const uint8_t* codes, const float* m, const float* step, int64_t n,
                             float* out) {
  dequantStream(
      n, out,
      [&](int64_t j) {
        return _mm256_sub_ps(_mm256_mul_ps(codes8(codes + j), _mm256_loadu_ps(step + j)),
                             _mm256_loadu_ps(m + j));
      },
      [&](int64_t j) { return static_cast<float>(codes[j]) * step[j] - m[j]; });
}

static void fixDequantVecStream(const uint8_t* codes, const float* s, int64_t n, float lo,
                                float inv, float* out) {
  const __m256 lv = _mm256_set1_ps(lo), iv = _mm256_set1_ps(inv);
  dequantStream(
      n, out,
      [&](int64_t j) {
        return _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(codes8(codes + j), lv), iv),
                             _mm256_loadu_ps(s + j));
      },
      [&](int64_t j) { return ((static_cast<float>(codes[j]) + lo) * inv) * s[j]; });
}

// One scale a group: dequantScalar / fixDequantScalar's operations, each group streamed as above
// (a group whose start is not 32-byte aligned begins one value at a time).
static void dequantGroupsStream(const uint8_t* codes, int64_t groups, int64_t g, const float* m,
                                const float* step, float* out) {
  for (int64_t q = 0; q < groups; ++q) {
    const uint8_t* c = codes + q * g;
    const float mq = m[q], sq = step[q];
    const __m256 mv = _mm256_set1_ps(mq), sv = _mm256_set1_ps(sq);
    dequantStream(
        g, out + q * g,
        [&](int64_t j) { return _mm256_sub_ps(_mm256_mul_ps(codes8(c + j), sv), mv); },
        [&](int64_t j) { return static_cast<float>(c[j]) * sq - mq; });
  }
}

static void fixDequantGroupsStream(const uint8_t* codes, int64_t groups, int64_t g, const float* s,
                                   float lo, float inv, float* out) {
  const __m256 lv = _mm256_set1_ps(lo), iv = _mm256_set1_ps(inv);
  for (int64_t q = 0; q < groups; ++q) {
    const uint8_t* c = codes + q * g;
    const float sq = s[q];
    const __m256 sv = _mm256_set1_ps(sq);
    dequantStream(
        g, out + q * g,
        [&](int64_t j) {
          return _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(codes8(c + j), lv), iv), sv);
        },
        [&](int64_t j) { return ((static_cast<float>(c[j]) + lo) * inv) * sq; });
  }
}

static void streamFence() { _mm_sfence(); }

// lowrank's products (kernels.h) in registers, blocked so that each load serves several products:
// project takes IM rows of x against JN basis rows (IM x JN dots, eight lanes each, summed as the
// shared definition sums them: the tail into lane k % 8, the same pairwise reduction); expand
// writes IM rows' outputs KB vectors at a time, the r terms added in order onto 0. Blocking changes
// which products share a load, never the order of any sum: the bits are the unblocked loops'.
template <int IM, int JN>
static void projectBlock(const float* a, int64_t d, const float* p, int64_t r, float* out) {
  __m256 acc[IM][JN];
  for (int i = 0; i < IM; ++i)
    for (int j = 0; j < JN; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= d; k += 8) {
    __m256 pv[JN];
    for (int j = 0; j < JN; ++j) pv[j] = _mm256_loadu_ps(p + j * d + k);
    for (int i = 0; i < IM; ++i) {
      const __m256 xv = _mm256_loadu_ps(a + i * d + k);
      for (int j = 0; j < JN; ++j) acc[i][j] = _mm256_add_ps(acc[i][j], _mm256_mul_ps(xv, pv[j]));
    }
  }
  for (int i = 0; i < IM; ++i)
    for (int j = 0; j < JN; ++j) {
      float lane[8];
      _mm256_storeu_ps(lane, acc[i][j]);
      for (int64_t t = k; t < d; ++t) lane[t % 8] += a[i * d + t] * p[j * d + t];
      out[i * r + j] =
          ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
}

template <int IM>
static void projectRowsOf(const float* x, int64_t d, const float* p, int64_t r, float* coef) {
  int64_t j = 0;
  for (; j + 4 <= r; j += 4) projectBlock<IM, 4>(x, d, p + j * d, r, coef + j);
  for (; j < r; ++j) projectBlock<IM, 1>(x, d, p + j * d, r, coef + j);
}

static void lowrankProject256(const float* x, int64_t rows, int64_t d, const float* p, int64_t r,
                              float* coef) {
  int64_t i = 0;
  for (; i + 2 <= rows; i += 2) projectRowsOf<2>(x + i * d, d, p, r, coef + i * r);
  for (; i < rows; ++i) projectRowsOf<1>(x + i * d, d, p, r, coef + i * r);
}

// The same dots with AVX-512 (F + DQ) where the CPU has it: a 512-bit accumulator holds the eight
// lanes of basis row j in its low half and those of row j + 1 in its high half, x's eight values
// broadcast to both halves, so every lane sums the same terms in the same order and the pairwise
// reduction is the 256-bit kernel's: the same bits (CpuPathTest, both widths), half the vector
// operations.
template <int IM, int JP>
__attribute__((target("avx512f,avx512dq"))) static void projectBlock512(const float* a, int64_t d,
                                                                        const float* p, int64_t r,
                                                                        float* out) {
  __m512 acc[IM][JP];
  for (int i = 0; i < IM; ++i)
    for (int j = 0; j < JP; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= d; k += 8) {
    __m512 pv[JP];
    for (int j = 0; j < JP; ++j)
      pv[j] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(p + 2 * j * d + k)),
                                 _mm256_loadu_ps(p + (2 * j + 1) * d + k), 1);
    for (int i = 0; i < IM; ++i) {
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(a + i * d + k));
      for (int j = 0; j < JP; ++j) acc[i][j] = _mm512_add_ps(acc[i][j], _mm512_mul_ps(xv, pv[j]));
    }
  }
  for (int i = 0; i < IM; ++i)
    for (int j = 0; j < JP; ++j) {
      float lane[16];
      _mm512_storeu_ps(lane, acc[i][j]);
      for (int h = 0; h < 2; ++h) {
        float* l = lane + 8 * h;
        const float* pj = p + (2 * j + h) * d;
        for (int64_t t = k; t < d; ++t) l[t % 8] += a[i * d + t] * pj[t];
        out[i * r + 2 * j + h] = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
      }
    }
}

__attribute__((target("avx512f,avx512dq"))) static void lowrankProject512(const float* x,
                                                                          int64_t rows, int64_t d,
                                                                          const float* p, int64_t r,
                                                                          float* coef) {
  int64_t i = 0;
  // Four rows by eight basis rows a block (16 accumulators): each basis load serves four rows.
  for (; i + 4 <= rows; i += 4) {
    int64_t j = 0;
    for (; j + 8 <= r; j += 8) projectBlock512<4, 4>(x + i * d, d, p + j * d, r, coef + i * r + j);
    for (; j + 4 <= r; j += 4) projectBlock512<4, 2>(x + i * d, d, p + j * d, r, coef + i * r + j);
    for (; j < r; ++j)
      for (int64_t h = 0; h < 4; h += 2)
        projectBlock<2, 1>(x + (i + h) * d, d, p + j * d, r, coef + (i + h) * r + j);
  }
  for (; i + 2 <= rows; i += 2) {
    int64_t j = 0;
    for (; j + 4 <= r; j += 4) projectBlock512<2, 2>(x + i * d, d, p + j * d, r, coef + i * r + j);
    for (; j < r; ++j) projectBlock<2, 1>(x + i * d, d, p + j * d, r, coef + i * r + j);
  }
  for (; i < rows; ++i) projectRowsOf<1>(x + i * d, d, p, r, coef + i * r);
}

static void lowrankProject(const float* x, int64_t rows, int64_t d, const float* p, int64_t r,
                           float* coef) {
  if (cpuHas512DQ() && allow512.load(std::memory_order_relaxed))
    return lowrankProject512(x, rows, d, p, r, coef);
  lowrankProject256(x, rows, d, p, r, coef);
}

template <int IM, int KB>
static void expandBlock(const float* c, int64_t r, const float* p, int64_t d, int64_t k, float* o) {
  __m256 acc[IM][KB];
  for (int i = 0; i < IM; ++i)
    for (int q = 0; q < KB; ++q) acc[i][q] = _mm256_setzero_ps();
  for (int64_t j = 0; j < r; ++j) {
    __m256 pv[KB];
    for (int q = 0; q < KB; ++q) pv[q] = _mm256_loadu_ps(p + j * d + k + 8 * q);
    for (int i = 0; i < IM; ++i) {
      const __m256 cv = _mm256_set1_ps(c[i * r + j]);
      for (int q = 0; q < KB; ++q) acc[i][q] = _mm256_add_ps(acc[i][q], _mm256_mul_ps(cv, pv[q]));
    }
  }
  for (int i = 0; i < IM; ++i)
    for (int q = 0; q < KB; ++q) _mm256_storeu_ps(o + i * d + k + 8 * q, acc[i][q]);
}

// IM rows' columns [k, d).
template <int IM>
static void expandRows(const float* c, int64_t r, const float* p, int64_t d, float* o,
                       int64_t k = 0) {
  for (; k + 32 <= d; k += 32) expandBlock<IM, 4>(c, r, p, d, k, o);
  for (; k + 8 <= d; k += 8) expandBlock<IM, 1>(c, r, p, d, k, o);
  for (int i = 0; i < IM; ++i)
    for (int64_t t = k; t < d; ++t) {
      float v = 0.0f;
      for (int64_t j = 0; j < r; ++j) v += c[i * r + j] * p[j * d + t];
      o[i * d + t] = v;
    }
}

// The same sums with AVX-512 F where the CPU has it: 16 columns an accumulator, every output still
// 0 + c0 p0 + c1 p1 + ... in order of j (the same bits, CpuPathTest at both widths); four rows
// share each basis load. (Non-temporal stores of the output measured slower here: 0.52x against
// 0.60x memcpy for a 64 MiB decode.)
template <int IM, int KB>
__attribute__((target("avx512f"))) static void expandBlock512(const float* c, int64_t r,
                                                              const float* p, int64_t d, int64_t k,
                                                              float* o) {
  __m512 acc[IM][KB];
  for (int i = 0; i < IM; ++i)
    for (int q = 0; q < KB; ++q) acc[i][q] = _mm512_setzero_ps();
  for (int64_t j = 0; j < r; ++j) {
    __m512 pv[KB];
    for (int q = 0; q < KB; ++q) pv[q] = _mm512_loadu_ps(p + j * d + k + 16 * q);
    for (int i = 0; i < IM; ++i) {
      const __m512 cv = _mm512_set1_ps(c[i * r + j]);
      for (int q = 0; q < KB; ++q) acc[i][q] = _mm512_add_ps(acc[i][q], _mm512_mul_ps(cv, pv[q]));
    }
  }
  for (int i = 0; i < IM; ++i)
    for (int q = 0; q < KB; ++q) _mm512_storeu_ps(o + i * d + k + 16 * q, acc[i][q]);
}

// Four rows at a time; returns the first row it left (fewer than four remain).
__attribute__((target("avx512f"))) static int64_t lowrankExpand512(const float* coef, int64_t rows,
                                                                   int64_t r, const float* p,
                                                                   int64_t d, float* out) {
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4) {
    const float* c = coef + i * r;
    float* o = out + i * d;
    int64_t k = 0;
    for (; k + 64 <= d; k += 64) expandBlock512<4, 4>(c, r, p, d, k, o);
    for (; k + 16 <= d; k += 16) expandBlock512<4, 1>(c, r, p, d, k, o);
    expandRows<4>(c, r, p, d, o, k);  // the last columns, 8 and then 1 at a time
  }
  return i;
}

static void lowrankExpand(const float* coef, int64_t rows, int64_t r, const float* p, int64_t d,
                          float* out) {
  int64_t i = cpuHas512F() && allow512.load(std::memory_order_relaxed)
                  ? lowrankExpand512(coef, rows, r, p, d, out)
                  : 0;
  for (; i + 2 <= rows; i += 2) expandRows<2>(coef + i * r, r, p, d, out + i * d);
  for (; i < rows; ++i) expandRows<1>(coef + i * r, r, p, d, out + i * d);
}
#define KERNELS_HAVE_LOWRANK

#define KERNELS_NAME "avx2"
#include "compression/kernels.inc"  // the shared kernels and this build's table, kTable
#undef KERNELS_NAME
}  // namespace kernels_avx2

const Kernels* avx2Kernels() { return &kernels_avx2::kTable; }

}  // namespace slowpipe::compression
