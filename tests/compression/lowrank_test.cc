// lowrank: exact payload sizes, an orthonormal basis equal on both ends, exact recovery of data in
// the basis' span, PCA finding a low-rank signal, divergence and spec errors named.
#include "compression/lowrank.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compression/half.h"
#include "tests/compression/spec_error.h"

namespace slowpipe::compression {
namespace {

// rows x d data of rank `rank` (plus `noise`), the kind of structure the codec is for.
std::vector<float> lowRankData(int64_t rows, int64_t d, int rank, float noise, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> a(rows * rank), b(rank * d), x(rows * d);
  for (auto& v : a) v = g(rng);
  for (auto& v : b) v = g(rng) / std::sqrt(static_cast<float>(d));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < d; ++k) {
      float s = noise * g(rng);
      for (int j = 0; j < rank; ++j) s += a[i * rank + j] * b[j * d + k];
      x[i * d + k] = s;
    }
  return x;
}

double relL2(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
    den += x[i] * static_cast<double>(x[i]);
  }
  return std::sqrt(num / den);
}

TEST(LowrankTest, PayloadSizeIsTheFormula) {
  LowrankCodec c({8, false, 0, 2, 1});
  const Shape shape{3, 5, 64};
  const auto x = lowRankData(15, 64, 4, 0.1f, 1);
  Bytes p;
  c.encode(x.data(), shape, {}, p);
  EXPECT_EQ(p.size(), 5u + 2u * 15 * 8);
  EXPECT_EQ(p.size(), c.payloadBytes(shape, false));
  LowrankCodec pca({8, true, 3, 2, 1});
  Bytes q;
  pca.encode(x.data(), shape, {}, q);
  EXPECT_EQ(q.size(), 5u + 2u * 64 * 8 + 2u * 15 * 8);  // the first message carries the basis
  q.clear();
  pca.encode(x.data(), shape, {}, q);
  EXPECT_EQ(q.size(), 5u + 2u * 15 * 8);
  LowrankCodec wide({100, false, 0, 2, 1});  // rank above the width: clipped to it
  Bytes w;
  wide.encode(x.data(), shape, {}, w);
  EXPECT_EQ(w.size(), 5u + 2u * 15 * 64);
}

TEST(LowrankTest, DataInTheRandomBasisSpanComesBackAndBothEndsAgree) {
  // Full rank (r = d): the projection is the identity up to fp16 rounding of the coefficients.
  auto tx = makeCodec("lowrank:rank=32,seed=5"), rx = makeCodec("lowrank:rank=32,seed=5");
  const Shape shape{4, 32};
  const auto x = lowRankData(4, 32, 32, 0.0f, 2);
  Bytes p;
  tx->encode(x.data(), shape, {}, p);
  std::vector<float> y(x.size());
  rx->decode(p.data(), p.size(), shape, {}, y.data());
  EXPECT_LT(relL2(x, y), 2e-3);
  EXPECT_EQ(tx->stateDigest(), rx->stateDigest());
  // Another seed, another basis.
  auto other = makeCodec("lowrank:rank=32,seed=6");
  Bytes q;
  other->encode(x.data(), shape, {}, q);
  EXPECT_NE(other->stateDigest(), tx->stateDigest());
}

TEST(LowrankTest, RefreshedRandomBasesStayInStepOnBothEnds) {
  auto tx = makeCodec("lowrank:rank=4,refresh=2"), rx = makeCodec("lowrank:rank=4,refresh=2");
  const Shape shape{6, 40};
  uint64_t last = 0;
  for (int m = 0; m < 7; ++m) {
    const auto x = lowRankData(6, 40, 3, 0.2f, 10 + m);
    Bytes p;
    tx->encode(x.data(), shape, {}, p);
    std::vector<float> y(x.size());
    rx->decode(p.data(), p.size(), shape, {}, y.data());
    ASSERT_EQ(tx->stateDigest(), rx->stateDigest()) << "message " << m;
    uint32_t epoch;
    std::memcpy(&epoch, p.data() + 1, 4);
    EXPECT_EQ(epoch, static_cast<uint32_t>(m / 2));
    if (m % 2 == 0 && m > 0) EXPECT_NE(tx->stateDigest(), last);
    last = tx->stateDigest();
  }
}

TEST(LowrankTest, PcaFindsALowRankSignalAndTheReceiverFollows) {
  auto tx = makeCodec("lowrank:rank=6,basis=pca,refresh=4,iters=3"),
       rx = makeCodec("lowrank:rank=6,basis=pca,refresh=4,iters=3");
  auto rnd = makeCodec("lowrank:rank=6");
  const Shape shape{64, 96};
  for (int m = 0; m < 6; ++m) {
    const auto x = lowRankData(64, 96, 6, 0.001f,
                               3);  // the same subspace in every message; noise floor ~0.004
    Bytes p, q;
    tx->encode(x.data(), shape, {}, p);
    std::vector<float> y(x.size()), z(x.size());
    rx->decode(p.data(), p.size(), shape, {}, y.data());
    ASSERT_EQ(tx->stateDigest(), rx->stateDigest()) << "message " << m;
    EXPECT_LT(relL2(x, y), 0.01) << "message " << m;
    rnd->encode(x.data(), shape, {}, q);
    rnd->decode(q.data(), q.size(), shape, {}, z.data());
    EXPECT_GT(relL2(x, z), 0.5);  // a random 6-dim subspace of 96 misses most of it
  }
}

TEST(LowrankTest, ACoefficientMessageWithoutItsBasisIsDivergence) {
  auto tx = makeCodec("lowrank:rank=2,basis=pca"), rx = makeCodec("lowrank:rank=2,basis=pca");
  const Shape shape{2, 16};
  const auto x = lowRankData(2, 16, 2, 0.1f, 4);
  Bytes first, second;
  tx->encode(x.data(), shape, {}, first);
  tx->encode(x.data(), shape, {}, second);
  std::vector<float> y(x.size());
  try {
    rx->decode(second.data(), second.size(), shape, {}, y.data());
    FAIL() << "decoded coefficients on a basis it never received";
  } catch (const CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("diverged"), std::string::npos) << e.what();
  }
}

TEST(LowrankTest, BadSpecsAreNamed) {
  EXPECT_NE(errorOf("lowrank").find("missing parameter rank"), std::string::npos);
  EXPECT_NE(errorOf("lowrank:rank=0").find("rank=0"), std::string::npos);
  EXPECT_NE(errorOf("lowrank:rank=4,basis=pca,refresh=0").find("refresh >= 1"), std::string::npos);
  EXPECT_NE(errorOf("lowrank:rank=4,iters=2").find("iters= only applies"), std::string::npos);
  EXPECT_NE(errorOf("lowrank:rank=4,basis=svd").find("basis='svd'"), std::string::npos);
  EXPECT_EQ(errorOf("lowrank:rank=4,basis=pca,refresh=2,iters=1,seed=3"), "");
}

}  // namespace
}  // namespace slowpipe::compression
