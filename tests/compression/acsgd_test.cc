// AC-SGD delta codec: sender and receiver stores stay bit-identical; deltas converge; budgets,
// warm-up and state-divergence errors behave.
#include "compression/acsgd.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "compression/frame.h"

namespace slowpipe::compression {
namespace {

constexpr int64_t kSeq = 8, kHidden = 32, kRow = kSeq * kHidden;

// Activation of one example at a given round: a fixed pattern plus a drift that shrinks.
void activation(int64_t id, int round, float drift, float* out) {
  std::mt19937 rng(static_cast<uint32_t>(id * 7919 + round));
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < kRow; ++i)
    out[i] = std::sin(0.01f * (id + 1) * (i + 1)) * 3.0f + drift * d(rng);
}

struct Pair {
  std::unique_ptr<Codec> sender, receiver;
  AcsgdCodec& s() { return static_cast<AcsgdCodec&>(*sender); }
  AcsgdCodec& r() { return static_cast<AcsgdCodec&>(*receiver); }
};

// Each end built for its own instance, as the transport does (file-backed stores get their own
// files).
Pair makePair(const std::string& spec) {
  return {makeCodec(spec, "send"), makeCodec(spec, "recv")};
}

// Sends one micro-batch through a real frame; returns the receiver's output.
std::vector<float> roundTrip(Pair& p, const std::vector<int64_t>& ids, const std::vector<float>& x,
                             int epoch, size_t* wireBytes = nullptr) {
  FrameHeader h;
  h.shape = {static_cast<int64_t>(ids.size()), kSeq, kHidden};
  h.exampleIds = ids;
  CodecContext ctx;
  ctx.exampleIds = ids;
  ctx.epoch = epoch;
  const Bytes frame = encodeFrame(*p.sender, x.data(), h, ctx);
  if (wireBytes) *wireBytes = frame.size();
  std::vector<float> y;
  decodeFrame(*p.receiver, frame.data(), frame.size(), ctx, y);
  return y;
}

class AcsgdStateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AcsgdStateTest, StatesIdenticalOver100RoundsWithRepeatingAndNewIds) {
  Pair p = makePair(GetParam());
  std::mt19937 rng(11);
  int64_t nextNew = 1000;
  for (int round = 0; round < 100; ++round) {
    // Half the micro-batch repeats ids from a small pool, half may be new.
    std::vector<int64_t> ids;
    while (ids.size() < 4) {
      const int64_t id = (rng() % 3 == 0) ? nextNew++ : static_cast<int64_t>(rng() % 12);
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    std::vector<float> x(ids.size() * kRow);
    for (size_t j = 0; j < ids.size(); ++j) activation(ids[j], round, 0.3f, x.data() + j * kRow);
    std::vector<bool> buffered(ids.size());
    for (size_t j = 0; j < ids.size(); ++j) buffered[j] = p.s().store().contains(ids[j]);
    const auto y = roundTrip(p, ids, x, round / 10);
    ASSERT_EQ(p.s().stateDigest(), p.r().stateDigest()) << "round " << round;
    ASSERT_EQ(p.s().store().size(), p.r().store().size());
    // FULL rows come out as x exactly; DELTA rows as exactly the m both sides now hold.
    std::vector<float> m(kRow);
    for (size_t j = 0; j < ids.size(); ++j) {
      const float* want = x.data() + j * kRow;
      if (buffered[j]) {
        p.s().store().load(ids[j], m.data(), kRow);
        want = m.data();
      }
      for (int64_t i = 0; i < kRow; ++i)
        ASSERT_EQ(y[j * kRow + i], want[i]) << "round " << round << " row " << j << " i " << i;
    }
  }
  EXPECT_GT(p.s().deltaRows(), 0);
  EXPECT_GT(p.s().fullRows(), 0);
  EXPECT_EQ(p.s().deltaRows(), p.r().deltaRows());
}

TEST_P(AcsgdStateTest, ReconstructionErrorShrinksEveryRoundForFixedActivation) {
  Pair p = makePair(GetParam());
  const std::vector<int64_t> ids{3, 9, 4};
  std::vector<float> x(ids.size() * kRow);
  for (size_t j = 0; j < ids.size(); ++j) activation(ids[j], 0, 0.0f, x.data() + j * kRow);
  roundTrip(p, ids, x, 0);  // first sighting: full precision, m = x (up to the store's rounding)
  // Perturb the buffers to a known wrong state by sending a different activation once.
  std::vector<float> other(x.size());
  for (size_t j = 0; j < ids.size(); ++j) activation(ids[j] + 50, 0, 1.0f, other.data() + j * kRow);
  roundTrip(p, ids, other, 1);
  // A lossy store cannot hold m more precisely than its own rounding: stop at that floor
  // (fp16: 2^-11 relative on values up to ~4; q8: half a step of max/127 per 64 values).
  // fp16 is the default store; store=fp32 has no floor.
  const double floor = GetParam().find("store=q8") != std::string::npos     ? 0.02
                       : GetParam().find("store=fp32") != std::string::npos ? 0.0
                                                                            : 0.003;
  double previous = INFINITY, err = INFINITY;
  for (int round = 0; round < 12; ++round) {
    const auto y = roundTrip(p, ids, x, 2 + round);
    err = 0.0;
    for (size_t i = 0; i < x.size(); ++i) err = std::max(err, double(std::fabs(y[i] - x[i])));
    if (err <= floor) break;
    ASSERT_LT(err, previous) << "round " << round;
    previous = err;
  }
  EXPECT_LE(err, std::max(floor, 1e-3));
}

INSTANTIATE_TEST_SUITE_P(Specs, AcsgdStateTest,
                         ::testing::Values("acsgd:bits=2", "acsgd:bits=2,store=fp32",
                                           "acsgd:bits=4,store=fp16",
                                           "acsgd:bits=3,group=64,store=q8",
                                           "acsgd:bits=2,round=stochastic,seed=5",
                                           "acsgd:bits=2,backing=mmap,budget=1MiB"));

TEST(AcsgdTest, WarmupEpochsSendFullPrecision) {
  Pair p = makePair("acsgd:bits=2,warmup_epochs=2");
  const std::vector<int64_t> ids{1, 2};
  std::vector<float> x(2 * kRow);
  activation(1, 0, 0, x.data());
  activation(2, 0, 0, x.data() + kRow);
  size_t fullBytes = 0, deltaBytes = 0;
  roundTrip(p, ids, x, 0, &fullBytes);
  size_t second = 0;
  roundTrip(p, ids, x, 1, &second);
  EXPECT_EQ(second, fullBytes);  // epoch 1 < warmup 2: still full
  const auto y = roundTrip(p, ids, x, 2, &deltaBytes);
  EXPECT_LT(deltaBytes * 4, fullBytes);  // tiny tensor: the header dominates
  EXPECT_EQ(p.s().fullRows(), 4);
  EXPECT_EQ(p.s().deltaRows(), 2);
}

TEST(AcsgdTest, BudgetFullKeepsNewExamplesUnbufferedOnBothSides) {
  // One row of fp32 is 1 KiB: a 3 KiB budget holds three examples.
  Pair p = makePair("acsgd:bits=2,store=fp32,budget=3KiB");
  std::vector<float> x(4 * kRow);
  for (int j = 0; j < 4; ++j) activation(j, 0, 0, x.data() + j * kRow);
  for (int round = 0; round < 3; ++round) roundTrip(p, {0, 1, 2, 3}, x, round);
  EXPECT_EQ(p.s().store().size(), 3u);
  EXPECT_EQ(p.s().store().bytesUsed(), 3u * kRow * 4);
  EXPECT_EQ(p.s().stateDigest(), p.r().stateDigest());
  EXPECT_EQ(p.s().fullRows(), 4 + 2);  // round 0 all four; later only the unbuffered one
}

TEST(AcsgdTest, DeltaForUnknownExampleIsAnError) {
  Pair p = makePair("acsgd:bits=2");
  auto fresh = makeCodec("acsgd:bits=2");
  std::vector<float> x(kRow);
  activation(1, 0, 0, x.data());
  roundTrip(p, {1}, x, 0);
  FrameHeader h;
  h.shape = {1, kSeq, kHidden};
  h.exampleIds = {1};
  CodecContext ctx;
  ctx.exampleIds = {1};
  const Bytes frame = encodeFrame(*p.sender, x.data(), h, ctx);  // a DELTA frame
  std::vector<float> y;
  try {
    decodeFrame(*fresh, frame.data(), frame.size(), ctx, y);
    FAIL() << "expected CodecError";
  } catch (const CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("no buffer"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fresh->stateDigest(), makeCodec("acsgd:bits=2")->stateDigest());  // state untouched
}

TEST(AcsgdTest, MmapStoreWritesItsFileAndReportsBytes) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("slowpipe-acsgd-test-" + std::to_string(getpid()) + ".bin");
  const std::filesystem::path sendFile = path.string() + ".send",
                              recvFile = path.string() + ".recv";
  {
    Pair p =
        makePair("acsgd:bits=2,backing=mmap,path=" + path.string() + ",store=fp16,budget=64KiB");
    EXPECT_FALSE(std::filesystem::exists(sendFile));  // nothing is created before the first row
    std::vector<float> x(2 * kRow);
    activation(1, 0, 0, x.data());
    activation(2, 0, 0, x.data() + kRow);
    roundTrip(p, {1, 2}, x, 0);
    // Without keep=true the files are unlinked as soon as they are open (nothing can be left).
    EXPECT_FALSE(std::filesystem::exists(sendFile));
    EXPECT_FALSE(std::filesystem::exists(recvFile));
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_EQ(p.s().store().bytesUsed(), 2u * kRow * 2);
    EXPECT_EQ(p.s().stateDigest(), p.r().stateDigest());
  }
  {
    Pair p = makePair("acsgd:bits=2,backing=mmap,path=" + path.string() + ",keep=true");
    std::vector<float> x(kRow);
    activation(1, 0, 0, x.data());
    roundTrip(p, {1}, x, 0);
    // The two ends own two files (the old code opened one file for both, so they shared a buffer).
    EXPECT_TRUE(std::filesystem::exists(sendFile));
    EXPECT_TRUE(std::filesystem::exists(recvFile));
  }
  EXPECT_TRUE(std::filesystem::exists(sendFile)) << "keep=true keeps it";
  // A store never opens a file that exists: two codecs given one file is an error, not a shared
  // buffer.
  auto a = makeCodec("acsgd:bits=2,backing=mmap,path=" + path.string(), "send");
  std::vector<float> x(kRow);
  activation(1, 0, 0, x.data());
  Pair p{std::move(a), makeCodec("acsgd:bits=2")};
  try {
    roundTrip(p, {1}, x, 0);
    ADD_FAILURE() << "an existing file was reused";
  } catch (const CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  }
  std::filesystem::remove(sendFile);
  std::filesystem::remove(recvFile);
}

// Whatever ids arrive, a store with a budget never holds more than the budget.
TEST(AcsgdTest, StoresStayWithinTheirBudget) {
  for (const char* backing : {"ram", "mmap"}) {
    Pair p = makePair(std::string("acsgd:bits=2,store=fp32,budget=40000,backing=") + backing);
    std::mt19937_64 rng(7);
    for (int round = 0; round < 40; ++round) {
      std::vector<int64_t> ids;
      while (ids.size() < 4) {
        const int64_t id = static_cast<int64_t>(rng() % 1000000) - 500000;  // any id, negative too
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
      }
      std::vector<float> x(ids.size() * kRow);
      for (size_t r = 0; r < ids.size(); ++r)
        activation(ids[r], round, 0.01f * round, x.data() + r * kRow);
      roundTrip(p, ids, x, 1);
      ASSERT_LE(p.s().store().bytesUsed(), 40000u) << backing;
      ASSERT_LE(p.r().store().bytesUsed(), 40000u) << backing;
    }
    EXPECT_EQ(p.s().stateDigest(), p.r().stateDigest()) << backing;
  }
}

TEST(ErrorFeedbackTest, ResidualCarriesWhatWasNotSent) {
  auto ef = makeCodec("ef(quant:bits=2)");
  std::vector<float> x(256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * i);
  CodecContext ctx;
  ctx.key = "w";
  const Shape shape{8, 32};
  // Over many steps the sum of what was sent tracks the sum of the inputs: error feedback's point.
  std::vector<double> sentSum(x.size(), 0.0);
  const int steps = 50;
  std::vector<float> y(x.size());
  for (int s = 0; s < steps; ++s) {
    Bytes payload;
    ef->encode(x.data(), shape, ctx, payload);
    ef->decode(payload.data(), payload.size(), shape, ctx, y.data());
    for (size_t i = 0; i < x.size(); ++i) sentSum[i] += y[i];
  }
  const std::vector<float> r = static_cast<ErrorFeedbackCodec&>(*ef).residual("w");
  ASSERT_EQ(r.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(sentSum[i] + r[i], steps * double(x[i]), 1e-3) << "i=" << i;
}

// The state contract: stateDigest covers what both ends hold. An ef sender holds residuals the
// receiver never has, so the old digest (of the residuals) differed between the ends after any
// message, and every run with ef failed at the end.
TEST(ErrorFeedbackTest, SenderAndReceiverDigestsAgree) {
  for (const char* spec :
       {"ef(quant:bits=4)", "ef(topk:ratio=0.05)", "ef(fp16)", "ef(quant:bits=4;store=bf16)"}) {
    auto tx = makeCodec(spec), rx = makeCodec(spec);
    std::vector<float> x(256), y(256);
    const Shape shape{8, 32};
    for (int step = 0; step < 10; ++step) {
      for (int mb = 0; mb < 3; ++mb) {
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * i + step + mb);
        CodecContext ctx;
        ctx.key = "fwd/mb" + std::to_string(mb);
        const Bytes frame = encodeFrame(*tx, x.data(), FrameHeader{.shape = shape}, ctx);
        std::vector<float> out;
        decodeFrame(*rx, frame.data(), frame.size(), ctx, out);
      }
      ASSERT_EQ(tx->stateDigest(), rx->stateDigest()) << spec << " step " << step;
    }
    const auto& ef = static_cast<ErrorFeedbackCodec&>(*tx);
    EXPECT_EQ(ef.residual("fwd/mb2").size(), x.size()) << spec;  // one residual per key
    EXPECT_NE(ef.residualDigest(), static_cast<ErrorFeedbackCodec&>(*rx).residualDigest()) << spec;
  }
}

}  // namespace
}  // namespace slowpipe::compression
