// quant: error bounds (nearest), unbiasedness (stochastic), exact wire size, degenerate inputs.
#include "compression/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compression/bitpack.h"

namespace slowpipe::compression {
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

INSTANTIATE_TEST_SUITE_P(Bits, QuantTest, ::testing::ValuesIn(allCases()), [](const auto& info) {
  return "b" + std::to_string(info.param.bits) +
         (info.param.channel ? std::string("_channel")
                             : "_group" + std::to_string(info.param.group));
});

}  // namespace
}  // namespace slowpipe::compression
