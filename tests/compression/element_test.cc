// The per-value functions the CUDA kernels use (compression/element.h) against the CPU path, bit
// for bit: every CPU kernel build (baseline and AVX2), the scalar fp16 / bf16 reference over all
// 65536 halves and a sweep of floats, bit packing for 1..8 bits. If these agree, a GPU computing
// with element.h writes the CPU's payload bytes.
#include "compression/element.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "compression/bitpack.h"
#include "compression/half.h"
#include "compression/kernels.h"

namespace slowpipe::compression {
namespace {

std::vector<float> inputs(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  // Ties and edges: exact halves, zeros of both signs, the clamps, subnormals, huge values.
  const float edges[] = {0.0f, -0.0f,  0.5f,    -0.5f,    1.5f,     2.5f,  -2.5f,
                         7.5f, 1e-40f, -1e-40f, 65504.0f, 65520.0f, 1e30f, -1e30f};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0] && i < x.size(); ++i)
    x[i * 7 % n] = edges[i];
  return x;
}

// Little-endian fp16 bytes of the values (an fp16 buffer as the kernels address it).
std::vector<uint8_t> halfBytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(2 * v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = element::halfFromFloat(v[i]);
    b[2 * i] = static_cast<uint8_t>(h & 0xff);
    b[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
  return b;
}

std::vector<const Kernels*> cpuPaths() {
  std::vector<const Kernels*> k;
  if (baselineKernels()) k.push_back(baselineKernels());
  if (avx2Kernels() && cpuPathAvailable(CpuPath::kAvx2)) k.push_back(avx2Kernels());
  return k;
}

TEST(ElementTest, QuantizerCodesAndValuesAreTheCpuKernels) {
  const int64_t n = 4099;
  const std::vector<float> x = inputs(n, 1);
  std::vector<float> m(n), inv(n), step(n), d(n), s(n);
  for (int64_t i = 0; i < n; ++i) {
    m[i] = 0.5f + static_cast<float>(i % 13);
    inv[i] = 7.0f / (2 * m[i]);
    step[i] = 1 / inv[i];
    d[i] = m[i] + 1e-6f;
    s[i] = m[i];
  }
  for (const Kernels* k : cpuPaths()) {
    std::vector<uint8_t> codes(n);
    std::vector<float> out(n);
    k->quantVec(x.data(), m.data(), inv.data(), n, 7.0f, codes.data());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(codes[i], element::symCode(x[i], m[i], inv[i], 7.0f)) << k->name << " " << i;
    k->stochVec(x.data(), m.data(), inv.data(), n, 8.0f, 12345u, 0x9e3779b9u, codes.data());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(codes[i], element::symCodeStochastic(x[i], m[i], inv[i], 8.0f,
                                                     element::uniform24(12345u, 0x9e3779b9u, i)))
          << k->name << " " << i;
    k->dequantVec(codes.data(), m.data(), step.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(element::floatBits(out[i]),
                element::floatBits(element::symValue(codes[i], m[i], step[i])))
          << k->name << " " << i;
    for (int bits : {2, 4, 8}) {
      const float mult = static_cast<float>(1 << (bits - 1)), lo = -mult, hi = mult - 1;
      k->fixVec(x.data(), d.data(), n, mult, lo, hi, codes.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(codes[i], element::fixCode(x[i], d[i], mult, lo, hi))
            << k->name << " bits " << bits << " " << i;
      k->fixDequantVec(codes.data(), s.data(), n, lo, 1.0f / mult, out.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(element::floatBits(out[i]),
                  element::floatBits(element::fixValue(codes[i], s[i], lo, 1.0f / mult)))
            << i;
    }
  }
  // NaN maps to code 0 / lo, as on the CPU.
  EXPECT_EQ(element::symCode(std::numeric_limits<float>::quiet_NaN(), 1.0f, 3.0f, 7.0f), 0);
  EXPECT_EQ(element::fixCode(std::numeric_limits<float>::quiet_NaN(), 1.0f, 2.0f, -2.0f, 1.0f), 0);
}

// The fused steps of AC-SGD (fp32 and fp16 buffers) and of ef, value by value: codes and the
// state they leave (m, r) are the CPU kernels', bit for bit.
TEST(ElementTest, FusedDeltaAndErrorFeedbackStepsAreTheCpuKernels) {
  const int64_t n = 3001;
  const std::vector<float> x = inputs(n, 4), m0 = inputs(n, 5);
  std::vector<float> mx(n), inv(n), step(n), d(n), rd(n), s(n);
  for (int64_t i = 0; i < n; ++i) {
    mx[i] = 1.0f + static_cast<float>(i % 7);
    inv[i] = 3.0f / (2 * mx[i]);
    step[i] = 1 / inv[i];
    d[i] = mx[i] + 1e-6f;
    rd[i] = 1.0f / d[i];
    s[i] = mx[i];
  }
  const float mult = 2.0f, lo = -2.0f, hi = 1.0f, finv = 0.5f;
  for (const Kernels* k : cpuPaths()) {
    std::vector<uint8_t> codes(n);
    std::vector<float> m = m0, mine = m0;
    k->deltaQuantUpdate(x.data(), m.data(), mx.data(), inv.data(), step.data(), n, 3.0f,
                        codes.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(codes[i], element::deltaSymStep(x[i], mine[i], mx[i], inv[i], step[i], 3.0f))
          << k->name << " " << i;
      ASSERT_EQ(element::floatBits(m[i]), element::floatBits(mine[i])) << k->name << " " << i;
    }
    m = mine = m0;
    k->deltaFixUpdate(x.data(), m.data(), d.data(), rd.data(), s.data(), n, mult, lo, hi, finv,
                      codes.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(codes[i], element::deltaFixStep(x[i], mine[i], d[i], s[i], mult, lo, hi, finv))
          << k->name << " " << i;
      ASSERT_EQ(element::floatBits(m[i]), element::floatBits(mine[i])) << k->name << " " << i;
    }
    m = mine = m0;
    k->efQuantUpdate(x.data(), m.data(), mx.data(), inv.data(), step.data(), n, 3.0f, codes.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(codes[i], element::efSymStep(x[i], mine[i], mx[i], inv[i], step[i], 3.0f))
          << k->name << " " << i;
      ASSERT_EQ(element::floatBits(m[i]), element::floatBits(mine[i])) << k->name << " " << i;
    }
    m = mine = m0;
    k->efFixUpdate(x.data(), m.data(), d.data(), rd.data(), s.data(), n, mult, lo, hi, finv,
                   codes.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(codes[i], element::efFixStep(x[i], mine[i], d[i], s[i], mult, lo, hi, finv))
          << k->name << " " << i;
      ASSERT_EQ(element::floatBits(m[i]), element::floatBits(mine[i])) << k->name << " " << i;
    }
    if (k->deltaFixUpdateH) {  // fp16 buffers (the AVX2 build; the baseline converts through a
                               // buffer)
      std::vector<uint8_t> mh = halfBytes(m0);
      k->deltaFixUpdateH(x.data(), mh.data(), d.data(), rd.data(), s.data(), n, mult, lo, hi, finv,
                         codes.data());
      for (int64_t i = 0; i < n; ++i) {
        float mi = element::floatFromHalf(element::halfFromFloat(m0[i]));
        ASSERT_EQ(codes[i], element::deltaFixStep(x[i], mi, d[i], s[i], mult, lo, hi, finv))
            << k->name << " " << i;
        ASSERT_EQ(mh[2 * i] | (mh[2 * i + 1] << 8), element::halfFromFloat(mi))
            << k->name << " " << i;
      }
    }
  }
}

// The fp16-buffer fixpoint step multiplies by rd = 1 / d instead of dividing wherever the product
// provably rounds as the quotient does (kernels_avx2.cc). Inputs placed on and a few ulps around
// every half-integer the codes can round at, for scales across the range the reference produces
// (fp16 scale + its 1e-6): the codes and buffers are the division's, bit for bit.
TEST(ElementTest, FixpointStepWithoutDivisionMatchesTheQuotientAtTies) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> logScale(-20.0f, 15.0f);
  for (int bits : {2, 3, 4, 8}) {
    const float mult = static_cast<float>(1 << (bits - 1)), lo = -mult, hi = mult - 1,
                finv = 1.0f / mult;
    std::vector<float> x, d, rd, s, m0;
    for (int scale = 0; scale < 400; ++scale) {
      const uint16_t sh = element::halfFromFloat(std::exp2(logScale(rng)));
      const float sv = element::floatFromHalf(sh);
      const float dv = element::floatFromHalf(
          element::halfFromFloat(sv + element::floatFromHalf(element::halfFromFloat(1e-6f))));
      const float mv = scale % 2 ? element::floatFromHalf(element::halfFromFloat(
                                       sv * 0.25f * static_cast<float>(scale % 5)))
                                 : 0.0f;
      for (int k = static_cast<int>(lo) - 2; k <= static_cast<int>(hi) + 1; ++k) {
        const float at =
            (static_cast<float>(k) + 0.5f) / mult * dv;  // (x - m) / d * mult ~ k + 0.5
        for (int ulps = -6; ulps <= 6; ++ulps) {
          float v = at;
          for (int u = 0; u < std::abs(ulps); ++u)
            v = std::nextafter(v, ulps > 0 ? INFINITY : -INFINITY);
          x.push_back(mv + v);
          d.push_back(dv);
          rd.push_back(1.0f / dv);
          s.push_back(sv);
          m0.push_back(mv);
        }
      }
    }
    const int64_t n = static_cast<int64_t>(x.size());
    for (const Kernels* k : cpuPaths()) {
      std::vector<uint8_t> codes(n);
      std::vector<float> m = m0;
      k->deltaFixUpdate(x.data(), m.data(), d.data(), rd.data(), s.data(), n, mult, lo, hi, finv,
                        codes.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(codes[i], element::fixCode(x[i] - m0[i], d[i], mult, lo, hi))
            << k->name << " bits " << bits << " " << i;
      if (!k->deltaFixUpdateH) continue;
      std::vector<uint8_t> mh = halfBytes(m0);
      k->deltaFixUpdateH(x.data(), mh.data(), d.data(), rd.data(), s.data(), n, mult, lo, hi, finv,
                         codes.data());
      for (int64_t i = 0; i < n; ++i) {
        float mi = m0[i];
        ASSERT_EQ(codes[i], element::deltaFixStep(x[i], mi, d[i], s[i], mult, lo, hi, finv))
            << k->name << " bits " << bits << " " << i << " x " << x[i] << " d " << d[i];
        ASSERT_EQ(mh[2 * i] | (mh[2 * i + 1] << 8), element::halfFromFloat(mi))
            << k->name << " " << i;
      }
    }
  }
}

// fp16 against each CPU path's bulk conversion (F16C hardware on the AVX2 path: an independent
// implementation) over all 65536 halves and every 997th float bit pattern; bf16 at its ties.
TEST(ElementTest, HalfAndBf16AreTheCpusConversions) {
  std::vector<uint8_t> all(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    all[2 * h] = static_cast<uint8_t>(h & 0xff);
    all[2 * h + 1] = static_cast<uint8_t>(h >> 8);
  }
  std::vector<float> sweep;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 997)
    sweep.push_back(element::bitsFloat(static_cast<uint32_t>(u)));
  std::vector<float> back(65536);
  std::vector<uint8_t> bytes(2 * sweep.size());
  for (const Kernels* k : cpuPaths()) {
    k->fromHalf(all.data(), 65536, back.data());
    for (uint32_t h = 0; h < 65536; ++h) {
      const float mine = element::floatFromHalf(static_cast<uint16_t>(h));
      if (std::isnan(mine)) {  // F16C quiets signalling NaNs; frames never carry NaN anyway
        ASSERT_TRUE(std::isnan(back[h])) << k->name << " " << h;
        continue;
      }
      ASSERT_EQ(element::floatBits(mine), element::floatBits(back[h])) << k->name << " " << h;
    }
    k->toHalf(sweep.data(), sweep.size(), bytes.data());
    for (size_t i = 0; i < sweep.size(); ++i) {
      const int got = bytes[2 * i] | (bytes[2 * i + 1] << 8);
      if (std::isnan(sweep[i])) {  // F16C keeps NaN payload bits; a NaN either way
        ASSERT_TRUE((got & 0x7c00) == 0x7c00 && (got & 0x3ff) != 0) << k->name;
        continue;
      }
      ASSERT_EQ(got, element::halfFromFloat(sweep[i]))
          << k->name << " " << std::hex << element::floatBits(sweep[i]);
    }
  }
  EXPECT_EQ(element::bf16FromFloat(1.0f), 0x3f80);
  EXPECT_EQ(element::bf16FromFloat(element::bitsFloat(0x3f808000u)), 0x3f80);  // tie: to even
  EXPECT_EQ(element::bf16FromFloat(element::bitsFloat(0x3f818000u)), 0x3f82);  // tie: to even (up)
  EXPECT_EQ(element::bf16FromFloat(element::bitsFloat(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(element::bf16FromFloat(element::bitsFloat(0x7f7fffffu)), 0x7f80);  // rounds to inf
  EXPECT_EQ(element::bf16FromFloat(element::bitsFloat(0x7f800001u)), 0x7fc0);  // NaN stays NaN
  EXPECT_EQ(element::floatBits(element::floatFromBf16(0xc0a0)), 0xc0a00000u);
}

TEST(ElementTest, PackedBytesAreBitpacks) {
  std::mt19937 rng(3);
  for (int bits = 1; bits <= 8; ++bits)
    for (int64_t n : {1, 7, 8, 9, 63, 1001}) {
      std::vector<uint8_t> codes(n);
      for (auto& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
      std::vector<uint8_t> packed(packedBytes(n, bits));
      packBits(codes.data(), n, bits, packed.data());
      for (size_t j = 0; j < packed.size(); ++j)
        ASSERT_EQ(element::packedByte(codes.data(), n, bits, static_cast<int64_t>(j)), packed[j])
            << bits << " bits, n " << n << ", byte " << j;
      // and back: code i of the packed stream, as the GPU's unpack reads it.
      std::vector<uint8_t> unpacked(n);
      unpackBits(packed.data(), n, bits, unpacked.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(element::codeAt(packed.data(), i, bits), unpacked[i])
            << bits << " bits, n " << n << ", value " << i;
    }
}

}  // namespace
}  // namespace slowpipe::compression
