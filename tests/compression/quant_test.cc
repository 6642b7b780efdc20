// quant: error bounds (nearest), unbiasedness (stochastic), exact wire size, degenerate inputs.
#include "compression/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "compression/bitpack.h"
#include "compression/kernels.h"
#include "compression/parallel.h"

namespace slowpipe::compression {

struct QuantCodecTestAccess {
  static void setDrawn(QuantCodec& q, uint64_t drawn) { q.drawn_ = drawn; }
};

namespace {

std::vector<float> randomTensor(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

struct Case {
  int bits;
  bool channel;
  int64_t group;
};

class QuantTest : public ::testing::TestWithParam<Case> {
 protected:
  QuantOptions options(QuantOptions::Round round = QuantOptions::Round::kNearest) const {
    QuantOptions o;
    o.bits = GetParam().bits;
    o.scale = GetParam().channel ? QuantOptions::Scale::kChannel : QuantOptions::Scale::kGroup;
    o.group = GetParam().group;
    o.round = round;
    o.seed = 7;
    return o;
  }
};

// Per-element step of the level grid, recomputed independently from the definition.
std::vector<float> stepsFor(const QuantOptions& o, const std::vector<float>& x,
                            const Shape& shape) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t cols = o.scale == QuantOptions::Scale::kChannel ? shape.back() : o.group;
  std::vector<float> maxabs(o.scale == QuantOptions::Scale::kChannel ? cols : (n + cols - 1) / cols,
                            0);
  auto slot = [&](int64_t i) {
    return o.scale == QuantOptions::Scale::kChannel ? i % cols : i / cols;
  };
  for (int64_t i = 0; i < n; ++i) maxabs[slot(i)] = std::max(maxabs[slot(i)], std::fabs(x[i]));
  std::vector<float> step(n);
  for (int64_t i = 0; i < n; ++i) step[i] = 2 * maxabs[slot(i)] / ((1 << o.bits) - 1);
  return step;
}

TEST_P(QuantTest, NearestErrorAtMostHalfStep) {
  const Shape shape{3, 17, 40};
  const auto x = randomTensor(3 * 17 * 40, 1);
  QuantCodec q(options());
  Bytes payload;
  q.encode(x.data(), shape, {}, payload);
  EXPECT_EQ(payload.size(), quantPayloadBytes(q.options(), shape));
  EXPECT_EQ(payload.size(),
            4 * quantScaleCount(q.options(), shape) + packedBytes(x.size(), q.options().bits));
  std::vector<float> y(x.size());
  q.decode(payload.data(), payload.size(), shape, {}, y.data());
  const auto step = stepsFor(q.options(), x, shape);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_LE(std::fabs(x[i] - y[i]), step[i] / 2 * (1 + 1e-5f) + 1e-7f) << "i=" << i;
}

TEST_P(QuantTest, StochasticIsUnbiased) {
  const Shape shape{4, 64};
  const auto x = randomTensor(256, 2);
  QuantCodec q(options(QuantOptions::Round::kStochastic));
  const int draws = 4000;
  std::vector<double> sum(x.size(), 0.0);
  std::vector<float> y(x.size());
  for (int d = 0; d < draws; ++d) {
    Bytes payload;
    q.encode(x.data(), shape, {}, payload);
    q.decode(payload.data(), payload.size(), shape, {}, y.data());
    for (size_t i = 0; i < x.size(); ++i) sum[i] += y[i] - x[i];
  }
  // Each draw's error is within one step and has variance <= step^2/4, so the mean error over
  // `draws` draws has standard deviation <= step / (2 sqrt(draws)). Allow 5 sigma per element and
  // a much tighter bound on the average over all elements.
  const auto step = stepsFor(q.options(), x, shape);
  double total = 0.0, totalStep = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double mean = sum[i] / draws;
    ASSERT_LE(std::fabs(mean), 5 * step[i] / (2 * std::sqrt(double(draws))) + 1e-7) << "i=" << i;
    total += mean;
    totalStep += step[i];
  }
  EXPECT_LE(std::fabs(total / x.size()),
            5 * (totalStep / x.size()) / (2 * std::sqrt(double(draws) * x.size())));
}

TEST_P(QuantTest, ZerosAndEmptyTensors) {
  QuantCodec q(options());
  for (const Shape& shape : {Shape{0, 8}, Shape{5, 8}, Shape{1, 1}}) {
    std::vector<float> x(numelOf(shape), 0.0f), y(x.size(), 1.0f);
    Bytes payload;
    q.encode(x.data(), shape, {}, payload);
    ASSERT_EQ(payload.size(), quantPayloadBytes(q.options(), shape));
    q.decode(payload.data(), payload.size(), shape, {}, y.data());
    for (float v : y) EXPECT_EQ(v, 0.0f);
  }
}

TEST_P(QuantTest, RejectsWrongLengthAndBadScale) {
  const Shape shape{2, 16};
  const auto x = randomTensor(32, 3);
  QuantCodec q(options());
  Bytes payload;
  q.encode(x.data(), shape, {}, payload);
  std::vector<float> y(32);
  EXPECT_THROW(q.decode(payload.data(), payload.size() - 1, shape, {}, y.data()), CodecError);
  Bytes longer = payload;
  longer.push_back(0);
  EXPECT_THROW(q.decode(longer.data(), longer.size(), shape, {}, y.data()), CodecError);
  const float nan = std::nanf("");
  std::memcpy(payload.data(), &nan, 4);
  EXPECT_THROW(q.decode(payload.data(), payload.size(), shape, {}, y.data()), CodecError);
}

std::vector<Case> allCases() {
  std::vector<Case> c;
  for (int b = 1; b <= 8; ++b) {
    c.push_back({b, true, 128});
    c.push_back({b, false, 128});
    c.push_back({b, false, 7});
  }
  return c;
}

// Stochastic rounding's stream position crossing a multiple of 2^32 inside a message, inside one
// of its 16384-value chunks and between two values of one packed byte: every value's code is the
// definition's (quant.h: u_j from value j's own position, its key from hi32(j)), computed here
// value by value with no runs or chunks, on 1 and 2 codec threads; the next message continues the
// stream where this one ended.
TEST(QuantStochasticStream, CrossingAMultipleOf2To32InsideAChunkUsesEachValuesOwnKey) {
  const Shape shape{3, 16, 1024};  // 49152 values: three chunks of QuantCodec::kChunk
  const int64_t n = 3 * 16 * 1024, cols = 1024;
  const auto x = randomTensor(static_cast<size_t>(n), 11);
  const int64_t grain = parallelGrain();
  // 2 and 4 bits: codes packed in registers where the CPU has AVX-512; 3: codes, then packBits.
  for (const int bits : {2, 3, 4}) {
    QuantOptions o;
    o.bits = bits;
    o.round = QuantOptions::Round::kStochastic;
    o.seed = 0x123456789abcull;
    std::vector<float> maxabs(cols, 0.0f);
    for (int64_t i = 0; i < n; ++i) maxabs[i % cols] = std::max(maxabs[i % cols], std::fabs(x[i]));
    auto expected = [&](uint64_t start) {
      std::vector<uint8_t> codes(static_cast<size_t>(n));
      const float top = static_cast<float>(1 << o.bits) - 1.0f;
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t at = start + static_cast<uint64_t>(i);
        const uint32_t key = quantStreamKey(o.seed, static_cast<uint32_t>(at >> 32));
        const float u =
            static_cast<float>(static_cast<int32_t>(hash32(static_cast<uint32_t>(at) ^ key) >> 8)) *
            0x1.0p-24f;
        const float m = maxabs[i % cols], step = 2.0f * m / static_cast<float>((1 << o.bits) - 1);
        const float v = (x[i] + m) * (1.0f / step) + u;
        codes[i] = static_cast<uint8_t>(std::min(top, std::max(0.0f, v)));
      }
      std::vector<uint8_t> packed(packedBytes(static_cast<size_t>(n), o.bits));
      packBits(codes.data(), codes.size(), o.bits, packed.data());
      return packed;
    };
    const uint64_t wrap = uint64_t{1} << 32;
    // The crossing at value 5003 (chunk 0, inside a byte), 16384 + 8000 (chunk 1), and a message
    // that starts one value before it; then one that ends on it exactly.
    for (const uint64_t start : {wrap - 5003, 3 * wrap - 24384, 7 * wrap - 1, 2 * wrap - n})
      for (const int threads : {1, 2}) {
        setCodecThreads(threads);
        setParallelGrain(threads == 1 ? grain : 4096);
        QuantCodec q(o);
        QuantCodecTestAccess::setDrawn(q, start);
        Bytes payload;
        q.encode(x.data(), shape, {}, payload);
        const auto want = expected(start);
        ASSERT_EQ(payload.size(), 4 * cols + want.size());
        EXPECT_EQ(0, std::memcmp(payload.data() + 4 * cols, want.data(), want.size()))
            << bits << " bits, start " << start << ", threads " << threads;
        Bytes next;
        q.encode(x.data(), shape, {}, next);
        const auto wantNext = expected(start + static_cast<uint64_t>(n));
        EXPECT_EQ(0, std::memcmp(next.data() + 4 * cols, wantNext.data(), wantNext.size()))
            << bits << " bits, the message after start " << start << ", threads " << threads;
      }
  }
  setCodecThreads(1);
  setParallelGrain(grain);
}

INSTANTIATE_TEST_SUITE_P(Bits, QuantTest, ::testing::ValuesIn(allCases()), [](const auto& info) {
  return "b" + std::to_string(info.param.bits) +
         (info.param.channel ? std::string("_channel")
                             : "_group" + std::to_string(info.param.group));
});

}  // namespace
}  // namespace slowpipe::compression
