// The Highway kernels (compression/kernels_hwy.h) give the hand-written kernels' values on every
// Highway target this CPU runs: absMaxAccum's maxima and quantVecPacked's bytes equal the baseline
// build's quantVec codes put through packBits (NaN, infinities, zero scales, lengths that are not a
// whole vector; nothing written past the values a call says it did), and AC-SGD's fp16-buffer
// passes give the baseline build's maxima, bytes and buffer.
#include "compression/kernels_hwy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compression/bitpack.h"
#include "compression/half.h"
#include "compression/kernels.h"

namespace slowpipe::compression {
namespace {

struct TargetGuard {
  ~TargetGuard() { hwy_kernels::useTarget(""); }
};

TEST(HighwayKernelsTest, EveryTargetGivesTheHandWrittenValues) {
  if (!hwy_kernels::built()) GTEST_SKIP() << "built without libhwy-dev";
  const std::vector<std::string> targets = hwy_kernels::targets();
  ASSERT_FALSE(targets.empty());
  TargetGuard guard;
  const Kernels& base = *baselineKernels();
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const std::string& target : targets) {
    ASSERT_TRUE(hwy_kernels::useTarget(target));
    ASSERT_EQ(hwy_kernels::currentTarget(), target);
    int64_t packedValues = 0;
    for (const int64_t n : {0, 7, 8, 15, 16, 17, 48, 1000, 4099}) {
      std::vector<float> x(n), m(n), inv(n);
      for (int64_t i = 0; i < n; ++i) {
        x[i] = normal(rng) * (i % 17 == 0 ? 100.0f : 1.0f);
        if (i % 101 == 5) x[i] = std::nanf("");
        if (i % 103 == 7) x[i] = (i % 2 ? 1.0f : -1.0f) * INFINITY;
        m[i] = i % 23 == 0 ? 0.0f : 1.0f + static_cast<float>(i % 7);
      }
      std::vector<float> acc(n), want(n);
      for (int64_t i = 0; i < n; ++i) acc[i] = want[i] = 0.25f * static_cast<float>(i % 9);
      base.absMaxAccum(x.data(), n, want.data());
      hwy_kernels::absMaxAccum(x.data(), n, acc.data());
      EXPECT_TRUE(n == 0 || std::memcmp(acc.data(), want.data(), 4 * n) == 0)
          << target << ", n " << n;
      for (const int bits : {1, 2, 3, 4, 8}) {
        const float top = static_cast<float>(1 << bits) - 0.5f;
        for (int64_t i = 0; i < n; ++i)
          inv[i] = m[i] > 0.0f ? static_cast<float>((1 << bits) - 1) / (2.0f * m[i]) : 0.0f;
        std::vector<uint8_t> codes(n), wantBytes(packedBytes(n, bits));
        base.quantVec(x.data(), m.data(), inv.data(), n, top, codes.data());
        packBits(codes.data(), n, bits, wantBytes.data());
        std::vector<uint8_t> got(wantBytes.size() + 64, 0xa5);
        const int64_t done =
            hwy_kernels::quantVecPacked(x.data(), m.data(), inv.data(), n, top, bits, got.data());
        const std::string where =
            target + ", " + std::to_string(bits) + " bits, n " + std::to_string(n);
        ASSERT_TRUE(done >= 0 && done <= n && done % 8 == 0) << where << ": did " << done;
        if (bits == 3) EXPECT_EQ(done, 0) << where;
        packedValues += done;
        for (size_t b = packedBytes(done, bits); b < got.size(); ++b)
          ASSERT_EQ(got[b], 0xa5) << where << ": byte " << b << " written";
        base.quantVec(x.data() + done, m.data() + done, inv.data() + done, n - done, top,
                      codes.data());
        packBits(codes.data(), n - done, bits, got.data() + done / 8 * bits);
        got.resize(wantBytes.size());
        EXPECT_EQ(got, wantBytes) << where;
      }
    }
    // Targets with vectors of 8 floats or more pack (AVX2, AVX-512); narrower ones leave it to the
    // caller.
    if (target.rfind("AVX", 0) == 0) EXPECT_GT(packedValues, 0) << target;
  }
}

// AC-SGD's passes on an fp16 buffer: the Highway forms against the baseline build's way (the
// buffer converted to fp32, its scalar deltaAbsMax / deltaQuantUpdate, rounded back to fp16 in
// software; packBits): maxima, bytes and the updated buffer equal, for x with NaN and infinities
// and buffers with fp16 subnormals, values near 65504 (an update that overflows to infinity) and
// NaN.
TEST(HighwayKernelsTest, AcsgdHalfBufferPassesGiveTheBaselineValues) {
  if (!hwy_kernels::built()) GTEST_SKIP() << "built without libhwy-dev";
  TargetGuard guard;
  const Kernels& base = *baselineKernels();
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const std::string& target : hwy_kernels::targets()) {
    ASSERT_TRUE(hwy_kernels::useTarget(target));
    int64_t done1 = 0, done2 = 0;
    for (const int64_t n : {0, 7, 8, 16, 33, 1000, 4099}) {
      std::vector<float> x(n), mf(n), mx(n), inv(n), step(n);
      for (int64_t i = 0; i < n; ++i) {
        x[i] = normal(rng) * (i % 17 == 0 ? 100.0f : 1.0f);
        mf[i] = x[i] * 0.8f + 0.01f * normal(rng);
        if (i % 31 == 3) mf[i] = 3e-6f * normal(rng);        // fp16 subnormal
        if (i % 37 == 4) x[i] = 65000.0f, mf[i] = 65400.0f;  // m + dq past 65504
        if (i % 101 == 5) x[i] = std::nanf("");
        if (i % 103 == 7) x[i] = (i % 2 ? 1.0f : -1.0f) * INFINITY;
        if (i % 107 == 9) mf[i] = std::nanf("");
      }
      std::vector<uint8_t> mh(2 * n);
      floatToHalfBytes(mf.data(), n, mh.data());
      std::vector<float> m(n), acc(n, 0.0f), want(n, 0.0f);
      halfBytesToFloat(mh.data(), n, m.data());
      base.deltaAbsMax(x.data(), m.data(), n, want.data());
      const int64_t d1 = hwy_kernels::deltaAbsMaxH(x.data(), mh.data(), n, acc.data());
      ASSERT_TRUE(d1 >= 0 && d1 <= n) << target << ", n " << n;
      done1 += d1;
      for (int64_t i = d1; i < n; ++i)
        ASSERT_EQ(acc[i], 0.0f) << target << ", n " << n << ": max " << i << " written";
      // the rest as the caller does it
      base.deltaAbsMax(x.data() + d1, m.data() + d1, n - d1, acc.data() + d1);
      EXPECT_TRUE(n == 0 || std::memcmp(acc.data(), want.data(), 4 * n) == 0)
          << target << ", n " << n;
      for (int64_t i = 0; i < n; ++i) {
        const float a = want[i] == want[i] && want[i] > 0.0f ? std::min(want[i], 1e30f) : 1.0f;
        mx[i] = a;
        step[i] = 2.0f * a / 15.0f;
        inv[i] = 1.0f / step[i];
      }
      for (const int bits : {1, 2, 3, 4, 8}) {
        const float top = static_cast<float>(1 << bits) - 0.5f;
        for (int64_t i = 0; i < n; ++i) {
          step[i] = 2.0f * mx[i] / static_cast<float>((1 << bits) - 1);
          inv[i] = 1.0f / step[i];
        }
        // The baseline's way: the buffer as fp32, its fp32 step, then rounded to fp16.
        std::vector<float> mw = m;
        std::vector<uint8_t> wantH(2 * n), gotH = mh, codes(n), wantBytes(packedBytes(n, bits));
        base.deltaQuantUpdate(x.data(), mw.data(), mx.data(), inv.data(), step.data(), n, top,
                              codes.data());
        floatToHalfBytes(mw.data(), n, wantH.data());
        packBits(codes.data(), n, bits, wantBytes.data());
        std::vector<uint8_t> got(wantBytes.size() + 64, 0xa5);
        const int64_t d2 = hwy_kernels::deltaQuantUpdateHPacked(
            x.data(), gotH.data(), mx.data(), inv.data(), step.data(), n, top, bits, got.data());
        const std::string where =
            target + ", " + std::to_string(bits) + " bits, n " + std::to_string(n);
        ASSERT_TRUE(d2 >= 0 && d2 <= n && d2 % 8 == 0) << where << ": did " << d2;
        if (bits == 3) {
          EXPECT_EQ(d2, 0) << where;
        }
        done2 += d2;
        for (size_t b = packedBytes(d2, bits); b < got.size(); ++b)
          ASSERT_EQ(got[b], 0xa5) << where << ": byte " << b << " written";
        EXPECT_TRUE(std::equal(gotH.begin() + 2 * d2, gotH.end(), mh.begin() + 2 * d2))
            << where << ": buffer written past the values done";
        std::vector<float> rest(m.begin() + d2, m.end());  // the rest as the caller does it
        base.deltaQuantUpdate(x.data() + d2, rest.data(), mx.data() + d2, inv.data() + d2,
                              step.data() + d2, n - d2, top, codes.data());
        floatToHalfBytes(rest.data(), n - d2, gotH.data() + 2 * d2);
        packBits(codes.data(), n - d2, bits, got.data() + d2 / 8 * bits);
        got.resize(wantBytes.size());
        EXPECT_EQ(got, wantBytes) << where;
        EXPECT_EQ(gotH, wantH) << where;
      }
    }
    // AVX2 and AVX-512 convert fp16 in hardware and do the work; SSE4 and below leave it.
    if (target.rfind("AVX", 0) == 0) {
      EXPECT_GT(done1, 0) << target;
      EXPECT_GT(done2, 0) << target;
    } else {
      EXPECT_EQ(done1 + done2, 0) << target;
    }
  }
}

TEST(HighwayKernelsTest, AnUnknownTargetIsRefused) {
  EXPECT_FALSE(hwy_kernels::useTarget("NO_SUCH_TARGET"));
  EXPECT_TRUE(hwy_kernels::useTarget(""));
}

}  // namespace
}  // namespace slowpipe::compression
