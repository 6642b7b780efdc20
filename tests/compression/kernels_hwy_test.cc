// The Highway kernels (compression/kernels_hwy.h) give the hand-written kernels' values on every
// Highway target this CPU runs: absMaxAccum's maxima and quantVecPacked's bytes equal the baseline
// build's quantVec codes put through packBits (NaN, infinities, zero scales, lengths that are not a
// whole vector; nothing written past the values a call says it did).
#include "compression/kernels_hwy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compression/bitpack.h"
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

TEST(HighwayKernelsTest, AnUnknownTargetIsRefused) {
  EXPECT_FALSE(hwy_kernels::useTarget("NO_SUCH_TARGET"));
  EXPECT_TRUE(hwy_kernels::useTarget(""));
}

}  // namespace
}  // namespace slowpipe::compression
