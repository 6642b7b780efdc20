// The stage transport's channels in one process: ranks as threads over loopback TCP (as gloo's
// tests run ranks), no worker processes. A channel per directed rank link, messages taken by key
// with a stash for those ahead of their turn, codec pairs per (direction, chunk), one channel for
// both routes of a ring of two stages, and a slip named.
#include "runtime/transport.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

namespace slowpipe::runtime {
namespace {

using compression::MessageKind;

// Two ranks (stages 0 and 1) with their transports connected to each other. ring: model chunks
// close the pipeline (stage 1's next is stage 0), so the previous and the next stage of each are
// the same rank.
struct Pair {
  zmq::context_t ctx{1};
  std::unique_ptr<StageTransport> t[2];
  Pair(const std::string& fwd, const std::string& bwd, bool ring) {
    for (int r = 0; r < 2; ++r) {
      TransportOptions o;
      o.rank = o.stage = r;
      o.stages = 2;
      o.forwardCodec = fwd;
      o.backwardCodec = bwd;
      o.topology = emulator::topologyFromJson(nlohmann::json{{"bandwidth", "10Gbps"}, {"latency", "0ms"}}, "links");
      o.recvTimeoutS = 5;
      const int other = 1 - r;
      o.prevRank = r == 1 || ring ? other : -1;
      o.nextRank = r == 0 || ring ? other : -1;
      o.prevStage = o.prevRank >= 0 ? other : -1;
      o.nextStage = o.nextRank >= 0 ? other : -1;
      t[r] = std::make_unique<StageTransport>(ctx, o);
    }
    for (int r = 0; r < 2; ++r) {
      nlohmann::json to = nlohmann::json::object();
      to[std::to_string(1 - r)] = t[1 - r]->endpoints()[std::to_string(r)];
      t[r]->connect(to);
    }
  }
};

std::vector<float> ramp(float base, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = base + 0.25f * static_cast<float>(i % 17) - 2.0f;
  return v;
}

// Messages sent in one order are taken in another: the later one waits in the stash, and both
// decode to what was sent.
TEST(ChannelTest, MessagesAreTakenByKeyWhateverTheirOrderOnTheWire) {
  Pair p("none", "none", false);
  const compression::Shape shape = {2, 3, 4};
  const auto a0 = ramp(1, 24), a1 = ramp(7, 24);
  p.t[0]->send(true, MessageKind::kActivation, 5, 0, 1, a1.data(), shape, {10, 11});
  p.t[0]->send(true, MessageKind::kActivation, 5, 0, 0, a0.data(), shape, {20, 21});
  const Tensor32 got0 = p.t[1]->recv(true, MessageKind::kActivation, 5, 0, 0);
  const Tensor32 got1 = p.t[1]->recv(true, MessageKind::kActivation, 5, 0, 1);
  EXPECT_EQ(got0.data, a0);
  EXPECT_EQ(got1.data, a1);
  EXPECT_EQ(got0.exampleIds, (std::vector<int64_t>{20, 21}));
  EXPECT_EQ(got1.shape, shape);
}

// The same micro-batch crosses two boundaries of the same link (chunks 0 and 1, as interleaving
// does): each has its own codec pair, so an AC-SGD buffer per example is kept per boundary and
// both ends agree; one chunk's message is never taken for another's.
TEST(ChannelTest, EachChunkHasItsOwnCodecPair) {
  Pair p("acsgd:bits=4", "none", false);
  const compression::Shape shape = {2, 4, 8};
  for (int epoch = 0; epoch < 3; ++epoch)
    for (int chunk = 0; chunk < 2; ++chunk) {
      const auto x = ramp(static_cast<float>(chunk * 5 + epoch), 64);
      p.t[0]->send(true, MessageKind::kActivation, epoch, epoch, 0, x.data(), shape, {1, 2}, chunk);
    }
  for (int epoch = 0; epoch < 3; ++epoch)
    for (int chunk = 1; chunk >= 0; --chunk) {  // taken in the other order
      const Tensor32 got = p.t[1]->recv(true, MessageKind::kActivation, epoch, epoch, 0, chunk);
      const auto x = ramp(static_cast<float>(chunk * 5 + epoch), 64);
      double err = 0;
      for (size_t i = 0; i < x.size(); ++i) err = std::max(err, static_cast<double>(std::abs(got.data[i] - x[i])));
      EXPECT_LT(err, 1.0) << "chunk " << chunk << " epoch " << epoch;  // a shared buffer would be off by ~5
    }
  EXPECT_EQ(p.t[0]->codecDigest(true, true), p.t[1]->codecDigest(true, false));
  EXPECT_NE(p.t[0]->codecDigest(true, true), 0u);
}

// A ring of two stages: the previous and the next stage are one peer, so there is one channel
// (one endpoint, one shaped link) carrying both directions' messages, routed by key.
TEST(ChannelTest, ARingOfTwoStagesSharesOneChannel) {
  Pair p("none", "none", true);
  EXPECT_EQ(p.t[0]->endpoints().size(), 1u);
  EXPECT_EQ(p.t[1]->endpoints().size(), 1u);
  const auto act = ramp(3, 8), grad = ramp(-3, 8);
  // Stage 1 sends an activation on (to stage 0's next chunk) and a gradient back, both to rank 0.
  p.t[1]->send(true, MessageKind::kActivation, 0, 0, 0, act.data(), {1, 8}, {4});
  p.t[1]->send(false, MessageKind::kGradient, 0, 0, 0, grad.data(), {1, 8}, {});
  EXPECT_EQ(p.t[0]->recv(false, MessageKind::kGradient, 0, 0, 0).data, grad);
  EXPECT_EQ(p.t[0]->recv(true, MessageKind::kActivation, 0, 0, 0).data, act);
}

// A message of an older step than the one awaited is a protocol slip: named, not stashed.
TEST(ChannelTest, AnOlderStepsMessageIsASlip) {
  Pair p("none", "none", false);
  const auto x = ramp(0, 4);
  p.t[0]->send(true, MessageKind::kActivation, 3, 0, 0, x.data(), {1, 4}, {0});
  try {
    p.t[1]->recv(true, MessageKind::kActivation, 4, 0, 0);
    FAIL() << "took a step-3 message for step 4";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("expected activation step 4 micro-batch 0, got activation step 3"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace slowpipe::runtime
