// Highway forms of absMaxAccum, quantVecPacked, deltaAbsMaxH and deltaQuantUpdateHPacked
// (kernels_hwy.h). This file is compiled once per
// Highway target (foreach_target.h re-includes it); each target's code is in its own namespace and
// HWY_DYNAMIC_DISPATCH picks one at run time. Built with -ffp-contract=off like every kernel here,
// so (x + m) * inv + 0.5 rounds as the hand-written kernels round it.
#include "compression/kernels_hwy.h"

#ifdef SLOWPIPE_HAVE_HWY
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "compression/kernels_hwy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace slowpipe::compression::hwy_kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Into L2, 16 KiB ahead, one prefetch per line (as kernels_avx2.cc's loops do).
inline void ahead(const float* p) { __builtin_prefetch(p + 4096, 0, 2); }

// A vector of a stream from memory as two half-width loads where the vector is wider than 256 bits
// (kernels_avx2.cc's loadStream16: on this project's Zen 5 VM a 512-bit load in a streaming loop
// ran slower), one full load otherwise.
template <class D>
HWY_INLINE hn::Vec<D> LoadStream(D d, const float* HWY_RESTRICT p) {
#if HWY_TARGET <= HWY_AVX3
  const hn::Half<D> dh;
  return hn::Combine(d, hn::LoadU(dh, p + hn::Lanes(dh)), hn::LoadU(dh, p));
#else
  return hn::LoadU(d, p);
#endif
}

void AbsMaxAccum(const float* HWY_RESTRICT v, int64_t n, float* HWY_RESTRICT m) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    for (int64_t k = 0; k < 2 * lanes; k += 16) ahead(v + i + k);
    hn::StoreU(hn::Max(hn::Abs(LoadStream(d, v + i)), hn::LoadU(d, m + i)), d, m + i);
    hn::StoreU(hn::Max(hn::Abs(LoadStream(d, v + i + lanes)), hn::LoadU(d, m + i + lanes)), d,
               m + i + lanes);
  }
  for (; i < n; ++i) {
    const float a = __builtin_fabsf(v[i]);
    m[i] = m[i] < a ? a : m[i];
  }
}

#if HWY_TARGET != HWY_SCALAR
// Adjacent pairs of values under 2^kBits in 8-bit lanes (two to a 16-bit lane) merged into one
// value lo | hi << kBits, narrowed to 8-bit lanes: half as many.
template <int kBits, class D8, class V8>
HWY_INLINE auto MergePairs(D8 d8, V8 bytes) {
  const hn::Repartition<int16_t, D8> d16;
  const hn::Rebind<uint8_t, decltype(d16)> dh;
  const auto w = hn::BitCast(d16, bytes);
  return hn::DemoteTo(
      dh, hn::And(hn::Or(w, hn::ShiftRight<8 - kBits>(w)), hn::Set(d16, (1 << 2 * kBits) - 1)));
}

// Codes 0..255 of one vector (N lanes) to bitpack.h's layout, N * B / 8 bytes: bytes, then pairs
// merged until a byte holds 8 / B codes (2 bits: twice, 4 bits: once); one bit a lane from the
// nonzero mask for B = 1.
template <int B, class D, class VI>
HWY_INLINE void PackCodes(D d, VI c, uint8_t* HWY_RESTRICT out) {
  if constexpr (B == 1) {
    const hn::RebindToSigned<D> di;
    hn::StoreMaskBits(di, hn::Ne(c, hn::Zero(di)), out);
  } else {
    const hn::Rebind<uint8_t, D> d8;
    const auto bytes = hn::DemoteTo(d8, c);
    if constexpr (B == 8) {
      hn::StoreU(bytes, d8, out);
    } else if constexpr (B == 4) {
      const auto packed = MergePairs<4>(d8, bytes);
      hn::StoreU(packed, hn::DFromV<decltype(packed)>(), out);
    } else {
      const auto nibbles = MergePairs<2>(d8, bytes);
      const auto packed = MergePairs<4>(hn::DFromV<decltype(nibbles)>(), nibbles);
      hn::StoreU(packed, hn::DFromV<decltype(packed)>(), out);
    }
  }
}

template <int B>
int64_t QuantPackedB(const float* HWY_RESTRICT x, const float* HWY_RESTRICT m,
                     const float* HWY_RESTRICT inv, int64_t n, float top,
                     uint8_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  if (lanes < 8) return 0;  // a vector's codes would not fill whole bytes at 1 bit
  const auto half = hn::Set(d, 0.5f), zero = hn::Zero(d), tv = hn::Set(d, top);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    for (int64_t k = 0; k < lanes; k += 16) ahead(x + i + k);
    const auto y = hn::Add(
        hn::Mul(hn::Add(LoadStream(d, x + i), hn::LoadU(d, m + i)), hn::LoadU(d, inv + i)), half);
    // Max(y, 0) first: a NaN y gives 0 as the hand-written kernels' max(y, 0) does (x86 maxps
    // returns its second operand for a NaN; Highway's Max on x86 is maxps(a, b)).
    const auto t = hn::Min(hn::Max(y, zero), tv);
    PackCodes<B>(d, hn::ConvertTo(di, t), out + i / 8 * B);
  }
  return i;
}
#endif

// AC-SGD's two passes over an fp16 buffer (kernels.h's deltaAbsMaxH and deltaQuantUpdateHPacked)
// where the target converts fp16 in hardware (F16C, AVX-512): Highway 1.0's SSE4 / SSSE3 / scalar
// DemoteTo to fp16 truncates where F16C rounds to nearest even, so those targets do nothing (0).
#if HWY_TARGET <= HWY_AVX2
template <class D>
HWY_INLINE hn::Vec<D> LoadHalf(D d, const uint8_t* HWY_RESTRICT mh, int64_t i) {
  const hn::Rebind<hwy::float16_t, D> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(mh + 2 * i)));
}
template <class D>
HWY_INLINE void StoreHalf(D d, hn::Vec<D> v, uint8_t* HWY_RESTRICT mh, int64_t i) {
  const hn::Rebind<hwy::float16_t, D> dh;
  hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(mh + 2 * i));
}
// x 16 KiB ahead and the buffer's same values: a line of x per 16 values, of the buffer per 32.
inline void aheadBoth(const float* x, const uint8_t* mh, int64_t i) {
  if ((i & 15) == 0) ahead(x + i);
  if ((i & 31) == 0) __builtin_prefetch(mh + 2 * (i + 4096), 0, 2);
}

template <int B>
int64_t DeltaUpdateHPackedB(const float* HWY_RESTRICT x, uint8_t* HWY_RESTRICT mh,
                            const float* HWY_RESTRICT mx, const float* HWY_RESTRICT inv,
                            const float* HWY_RESTRICT step, int64_t n, float top,
                            uint8_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto half = hn::Set(d, 0.5f), zero = hn::Zero(d), tv = hn::Set(d, top);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    aheadBoth(x, mh, i);
    const auto m = LoadHalf(d, mh, i), v = hn::Sub(LoadStream(d, x + i), m);
    const auto vmx = hn::LoadU(d, mx + i);
    const auto u = hn::Add(hn::Mul(hn::Add(v, vmx), hn::LoadU(d, inv + i)), half);
    const auto c = hn::ConvertTo(di, hn::Min(hn::Max(u, zero), tv));  // Max first: NaN -> 0
    const auto dq = hn::Sub(hn::Mul(hn::ConvertTo(d, c), hn::LoadU(d, step + i)), vmx);
    StoreHalf(d, hn::Add(m, dq), mh, i);
    PackCodes<B>(d, c, out + i / 8 * B);
  }
  return i;
}
#endif

int64_t DeltaAbsMaxH(const float* HWY_RESTRICT x, const uint8_t* HWY_RESTRICT mh, int64_t n,
                     float* HWY_RESTRICT acc) {
#if HWY_TARGET <= HWY_AVX2
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    aheadBoth(x, mh, i);
    const auto a = hn::Abs(hn::Sub(LoadStream(d, x + i), LoadHalf(d, mh, i)));
    hn::StoreU(hn::Max(a, hn::LoadU(d, acc + i)), d, acc + i);
  }
  return i;
#else
  (void)x, (void)mh, (void)n, (void)acc;
  return 0;
#endif
}

int64_t DeltaQuantUpdateHPacked(const float* HWY_RESTRICT x, uint8_t* HWY_RESTRICT mh,
                                const float* HWY_RESTRICT mx, const float* HWY_RESTRICT inv,
                                const float* HWY_RESTRICT step, int64_t n, float top, int bits,
                                uint8_t* HWY_RESTRICT out) {
#if HWY_TARGET <= HWY_AVX2
  switch (bits) {
    case 1:
      return DeltaUpdateHPackedB<1>(x, mh, mx, inv, step, n, top, out);
    case 2:
      return DeltaUpdateHPackedB<2>(x, mh, mx, inv, step, n, top, out);
    case 4:
      return DeltaUpdateHPackedB<4>(x, mh, mx, inv, step, n, top, out);
    case 8:
      return DeltaUpdateHPackedB<8>(x, mh, mx, inv, step, n, top, out);
    default:
      return 0;
  }
#else
  (void)x, (void)mh, (void)mx, (void)inv, (void)step, (void)n, (void)top, (void)bits, (void)out;
  return 0;
#endif
}

int64_t QuantVecPacked(const float* HWY_RESTRICT x, const float* HWY_RESTRICT m,
                       const float* HWY_RESTRICT inv, int64_t n, float top, int bits,
                       uint8_t* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  (void)x, (void)m, (void)inv, (void)n, (void)top, (void)bits, (void)out;
  return 0;
#else
  switch (bits) {
    case 1:
      return QuantPackedB<1>(x, m, inv, n, top, out);
    case 2:
      return QuantPackedB<2>(x, m, inv, n, top, out);
    case 4:
      return QuantPackedB<4>(x, m, inv, n, top, out);
    case 8:
      return QuantPackedB<8>(x, m, inv, n, top, out);
    default:
      return 0;
  }
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace slowpipe::compression::hwy_kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <hwy/targets.h>

namespace slowpipe::compression::hwy_kernels {

HWY_EXPORT(AbsMaxAccum);
HWY_EXPORT(QuantVecPacked);
HWY_EXPORT(DeltaAbsMaxH);
HWY_EXPORT(DeltaQuantUpdateHPacked);

bool built() { return true; }

namespace {
// The compiled targets this CPU runs, taken once before any useTarget() narrows them.
int64_t runnable() {
  static const int64_t all = hwy::SupportedTargets() & HWY_TARGETS;
  return all;
}
}  // namespace

std::vector<std::string> targets() {
  std::vector<std::string> names;
  for (int64_t bits = runnable(); bits != 0; bits &= bits - 1)
    names.emplace_back(hwy::TargetName(bits & -bits));  // lowest bit first: the best target
  return names;
}

bool useTarget(const std::string& name) {
  const int64_t all = runnable();
  if (name.empty()) {
    hwy::SetSupportedTargetsForTest(0);  // Highway's own choice again
    return true;
  }
  for (int64_t bits = all; bits != 0; bits &= bits - 1)
    if (name == hwy::TargetName(bits & -bits)) {
      hwy::SetSupportedTargetsForTest(bits & -bits);
      return true;
    }
  return false;
}

std::string currentTarget() {
  runnable();
  const int64_t s = hwy::SupportedTargets() & HWY_TARGETS;
  return s ? hwy::TargetName(s & -s) : "";
}

void absMaxAccum(const float* v, int64_t n, float* m) {
  HWY_DYNAMIC_DISPATCH(AbsMaxAccum)(v, n, m);
}

int64_t quantVecPacked(const float* x, const float* m, const float* inv, int64_t n, float top,
                       int bits, uint8_t* out) {
  return HWY_DYNAMIC_DISPATCH(QuantVecPacked)(x, m, inv, n, top, bits, out);
}

int64_t deltaAbsMaxH(const float* x, const uint8_t* mh, int64_t n, float* acc) {
  return HWY_DYNAMIC_DISPATCH(DeltaAbsMaxH)(x, mh, n, acc);
}

int64_t deltaQuantUpdateHPacked(const float* x, uint8_t* mh, const float* mx, const float* inv,
                                const float* step, int64_t n, float top, int bits, uint8_t* out) {
  return HWY_DYNAMIC_DISPATCH(DeltaQuantUpdateHPacked)(x, mh, mx, inv, step, n, top, bits, out);
}

}  // namespace slowpipe::compression::hwy_kernels
#endif  // HWY_ONCE

#else  // no libhwy in this build

namespace slowpipe::compression::hwy_kernels {
bool built() { return false; }
std::vector<std::string> targets() { return {}; }
bool useTarget(const std::string& name) { return name.empty(); }
std::string currentTarget() { return ""; }
void absMaxAccum(const float*, int64_t, float*) {}
int64_t quantVecPacked(const float*, const float*, const float*, int64_t, float, int, uint8_t*) {
  return 0;
}
int64_t deltaAbsMaxH(const float*, const uint8_t*, int64_t, float*) { return 0; }
int64_t deltaQuantUpdateHPacked(const float*, uint8_t*, const float*, const float*, const float*,
                                int64_t, float, int, uint8_t*) {
  return 0;
}
}  // namespace slowpipe::compression::hwy_kernels

#endif  // SLOWPIPE_HAVE_HWY
