// The stage transport's channels in one process: ranks as threads over loopback TCP (as gloo's
// tests run ranks), no worker processes. A channel per directed rank link whose two ends hold the
// link's codec pair and statistics, messages taken by key with a stash for those ahead of their
// turn, codec pairs per (direction, chunk), one pair of channels for both routes of a ring of two
// stages, and a slip named.
#include "runtime/comm/link_table.h"
#include "runtime/comm/transport.h"
#include "runtime/spec/spec.h"

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <cstring>
#include <functional>
#include <thread>

#include "compression/frame.h"
#include "emulator/shaped_socket.h"
#include "tests/runtime/impostor.h"

namespace slowpipe::runtime {
namespace {

using compression::MessageKind;

// Two ranks (stages 0 and 1) with their transports connected to each other. ring: model chunks
// close the pipeline (stage 1's next is stage 0), so the previous and the next stage of each are
// the same rank.
// Rank r's links as the launcher sends them: the link table of a 2-stage run at 10 Gbps (with
// model chunks for the ring).
// streams > 1: the links as the kernel carries them (tc), each frame striped over that many
// connections.
RankLinks linksOf(int r, bool ring, int streams = 1) {
  nlohmann::json pipeline = {{"stages", 2}, {"micro_batches", 2}, {"micro_batch_size", 2}};
  if (ring) pipeline.update({{"schedule", "interleaved_1f1b"}, {"virtual_stages", 2}});
  nlohmann::json network = {{"links", {{"bandwidth", "10Gbps"}, {"latency", "0ms"}}}};
  if (streams > 1) network.update({{"backend", "tc"}, {"tcp", {{"streams", streams}}}});
  const nlohmann::json j = {{"name", "channel"},
                            {"model", {{"seq_len", 4}, {"layers", 4}, {"width", 8}, {"heads", 2}}},
                            {"pipeline", pipeline},
                            {"compression", {{"forward", "none"}, {"backward", "none"}}},
                            {"network", network}};
  LinkCarriage carriage;
  carriage.kernelPacesRate = streams > 1;
  return RankLinks(LinkTable(runSpecFromJson(j, "spec", true), carriage).ofRankJson(r), r);
}

struct Pair {
  zmq::context_t ctx{1};
  std::unique_ptr<StageTransport> t[2];
  Pair(const std::string& fwd, const std::string& bwd, bool ring, int streams = 1,
       int64_t maxMessageBytes = -1) {
    for (int r = 0; r < 2; ++r) {
      TransportOptions o;
      o.rank = o.stage = r;
      o.stages = 2;
      o.forwardCodec = fwd;
      o.backwardCodec = bwd;
      o.recvTimeoutS = 5;
      o.maxMessageBytes = maxMessageBytes;
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
      t[r]->connect(to, linksOf(r, ring, streams));
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

// Striped over 3 connections (network.tcp.streams on a kernel-carried link): frames of every size
// (smaller than, equal to and larger than the stripe count's multiple) cut into stripes, sent in
// one order and taken in another, come back whole and equal; the stash holds whole frames only.
TEST(ChannelTest, StripedFramesAreJoinedWholeWhateverTheirOrder) {
  Pair p("none", "none", false, 3);
  std::vector<std::vector<float>> sent;
  for (int mb = 0; mb < 6; ++mb) sent.push_back(ramp(static_cast<float>(mb), 1 + 7 * mb * mb));
  for (int mb = 5; mb >= 0; --mb)
    p.t[0]->send(true, MessageKind::kActivation, 2, 0, mb, sent[mb].data(),
                 {1, static_cast<int64_t>(sent[mb].size())}, {mb});
  for (int mb = 0; mb < 6; ++mb) {
    const Tensor32 got = p.t[1]->recv(true, MessageKind::kActivation, 2, 0, mb);
    EXPECT_EQ(got.data, sent[mb]) << "micro-batch " << mb;
    EXPECT_EQ(got.exampleIds, (std::vector<int64_t>{mb}));
  }
  // And back, the other direction's three connections.
  const auto g = ramp(3, 4096);
  p.t[1]->send(false, MessageKind::kGradient, 2, 0, 0, g.data(), {1, 64, 64}, {7});
  EXPECT_EQ(p.t[0]->recv(false, MessageKind::kGradient, 2, 0, 0).data, g);
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
      for (size_t i = 0; i < x.size(); ++i)
        err = std::max(err, static_cast<double>(std::abs(got.data[i] - x[i])));
      EXPECT_LT(err, 1.0) << "chunk " << chunk << " epoch "
                          << epoch;  // a shared buffer would be off by ~5
    }
  EXPECT_EQ(p.t[0]->codecDigest(true, true), p.t[1]->codecDigest(true, false));
  EXPECT_NE(p.t[0]->codecDigest(true, true), 0u);
}

// One directed link's two ends, on their own: the sending end frames and encodes with its half
// of the codec pair and counts the bytes by kind, the receiving end takes, decodes with the other
// half and observes the one-way time; both halves hold the same state afterwards.
TEST(ChannelTest, EachEndOfALinkHoldsItsHalfOfTheCodecPairAndItsStatistics) {
  zmq::context_t ctx{1};
  ChannelInOptions io;
  io.peer = 0;
  io.maxAheadS = 5;
  ChannelIn in(ctx, io);
  ChannelOut out(1, nullptr);
  in.connect(linksOf(1, false).at(0, 1), nullptr);
  out.connect(ctx, in.endpoint(), linksOf(0, false).at(0, 1), 1);
  const compression::Shape shape = {2, 4, 8};
  int64_t wire = 0;
  for (int step = 0; step < 3; ++step) {
    const auto x = ramp(static_cast<float>(step), 64);
    compression::FrameHeader h;
    h.kind = MessageKind::kActivation;
    h.step = step;
    h.src = 0;
    h.dst = 1;
    h.shape = shape;
    h.exampleIds = {3, 4};
    compression::CodecContext ctx0 = messageContext(true, step, step, 0);
    ctx0.exampleIds = h.exampleIds;
    zmq::message_t frame =
        out.encode(out.encoders().get("fwd/c000", "acsgd:bits=4", "t-send"), x.data(), h, ctx0);
    wire += static_cast<int64_t>(frame.size());
    out.send(std::move(frame), MessageKind::kActivation, 4 * 64);
    auto got = in.take(
        [&](const compression::FrameHeader& g) {
          return g.step == step ? ChannelIn::Verdict::kTake : ChannelIn::Verdict::kSlip;
        },
        5);
    ASSERT_TRUE(got && !got->slip);
    std::vector<float> y;
    in.decode(in.decoders().get("fwd/c000", "acsgd:bits=4", "t-recv"), got->header, got->bytes(),
              got->payloadAt, messageContext(true, step, step, 0), y, 1 << 20);
    ASSERT_EQ(y.size(), x.size());
  }
  const LinkStats sent = out.takeStats(), received = in.takeStats();
  EXPECT_EQ(sent.rawOf(MessageKind::kActivation), 3 * 4 * 64);
  EXPECT_EQ(sent.wireOf(MessageKind::kActivation), wire);
  EXPECT_EQ(sent.rawOf(MessageKind::kGradient), 0);
  EXPECT_GT(sent.encodeS, 0);
  EXPECT_EQ(received.delay.messages, 3);
  EXPECT_GT(received.decodeS, 0);
  EXPECT_EQ(out.takeStats().wireOf(MessageKind::kActivation), 0);  // taken: reset
  const auto& e = out.encoders().all().at("fwd/c000");
  const auto& d = in.decoders().all().at("fwd/c000");
  EXPECT_NE(e->stateDigest(), 0u);
  EXPECT_EQ(e->stateDigest(), d->stateDigest());
}

// A ring of two stages: the previous and the next stage are one peer, so there is one pair of
// channels (one endpoint, one shaped link each way) carrying both directions' messages, routed by
// key.
TEST(ChannelTest, ARingOfTwoStagesSharesOnePairOfChannels) {
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
    EXPECT_NE(std::string(e.what()).find(
                  "expected activation step 4 micro-batch 0, got activation step 3"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace slowpipe::runtime

namespace slowpipe::runtime {
namespace {

RunSpec tableSpec(const std::string& backend, int replicas) {
  nlohmann::json links = {{"bandwidth", "1Gbps"}, {"latency", "5ms"}};
  if (backend != "user") links["jitter"] = "1ms";  // (serial_fifo models no jitter)
  links["links"] = nlohmann::json::array(
      {{{"src", 2}, {"dst", 1}, {"bandwidth", "20Mbps"}, {"latency", "7ms"}}});
  nlohmann::json network = {{"backend", backend},
                            {"model", backend == "user" ? "serial_fifo" : "pipelined"},
                            {"links", links}};
  network["dp_links"] = {{"bandwidth", "10Gbps"}, {"latency", "1ms"}};
  const nlohmann::json j = {
      {"name", "table"},
      {"model", {{"seq_len", 4}, {"layers", 6}, {"width", 8}, {"heads", 2}}},
      {"pipeline",
       {{"stages", 3}, {"replicas", replicas}, {"micro_batches", 2}, {"micro_batch_size", 2}}},
      {"compression", {{"forward", "none"}, {"backward", "none"}}},
      {"network", network}};
  return runSpecFromJson(j, "spec", true);
}

// The link table decides once what each link is and who carries what: the pipeline's links by
// stage pair (an override per direction) under network.model, the replicas' links by dp_links
// under pipelined; a pair that is no link is refused by name; a rank's entries are exactly the
// links it sends or receives on, and they survive the peer table's JSON.
TEST(LinkTableTest, EachLinkIsItsStagePairsUnderTheRunsModel) {
  const RunSpec spec = tableSpec("user", 2);  // rank = stage * 2 + replica
  const LinkTable t(spec, {});
  const LinkEntry fwd = t.at(2, 4), back = t.at(4, 2);  // stage 1 -> 2 and 2 -> 1, replica 0
  EXPECT_EQ(fwd.model, "serial_fifo");
  EXPECT_FALSE(fwd.dataParallel);
  EXPECT_DOUBLE_EQ(fwd.spec.bandwidthBps, 1e9);
  EXPECT_DOUBLE_EQ(back.spec.bandwidthBps, 20e6);
  EXPECT_DOUBLE_EQ(back.spec.latencyS, 0.007);
  EXPECT_EQ(back.receiverLatencyS, 0.0);
  const LinkEntry dp = t.at(3, 2);  // stage 1, replica 1 -> replica 0
  EXPECT_TRUE(dp.dataParallel);
  EXPECT_EQ(dp.model, "pipelined");
  EXPECT_DOUBLE_EQ(dp.spec.bandwidthBps, 10e9);
  EXPECT_DOUBLE_EQ(dp.spec.latencyS, 0.001);
  try {
    t.at(0, 4);  // stage 0 -> 2: no link
    FAIL() << "a link between stages 0 and 2 was made up";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("link 0 -> 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.at(1, 2), std::out_of_range);  // stage 0 replica 1 -> stage 1 replica 0
  // Rank 2 (stage 1, replica 0): to and from stage 0, stage 2 and its other replica.
  const std::vector<LinkEntry> mine = t.ofRank(2);
  EXPECT_EQ(mine.size(), 6u);
  const RankLinks links(t.ofRankJson(2), 2);
  for (const auto& [src, dst] : {std::pair{0, 2}, {2, 0}, {2, 4}, {4, 2}, {2, 3}, {3, 2}}) {
    const LinkEntry e = links.at(src, dst), want = t.at(src, dst);
    EXPECT_EQ(e.model, want.model);
    EXPECT_EQ(e.dataParallel, want.dataParallel);
    EXPECT_EQ(nlohmann::json(e.spec), nlohmann::json(want.spec));
  }
  EXPECT_THROW(links.at(0, 1), std::runtime_error);  // not one of rank 2's
}

// Kernel-paced links (tc): no user-space model; without netem at the sender the receiver adds the
// direction's latency and jitter, with it nobody in user space does.
TEST(LinkTableTest, KernelPacedLinksSayWhoAddsTheDelay) {
  const RunSpec spec = tableSpec("tc", 1);
  LinkCarriage noNetem;
  noNetem.kernelPacesRate = true;
  const LinkEntry e = LinkTable(spec, noNetem).at(2, 1);
  EXPECT_TRUE(e.model.empty());
  EXPECT_DOUBLE_EQ(e.receiverLatencyS, 0.007);  // the override's latency, the default's jitter
  EXPECT_DOUBLE_EQ(e.receiverJitterS, 0.001);
  const LinkEntry f = LinkTable(spec, noNetem).at(0, 1);
  EXPECT_DOUBLE_EQ(f.receiverLatencyS, 0.005);
  EXPECT_DOUBLE_EQ(f.receiverJitterS, 0.001);
  const LinkEntry back = linkEntryFromJson(toJson(f), "f");
  EXPECT_DOUBLE_EQ(back.receiverLatencyS, 0.005);
  EXPECT_TRUE(back.model.empty());
  LinkCarriage netemAt2 = noNetem;
  netemAt2.pathDelays = [](int src) { return src == 2; };
  EXPECT_EQ(LinkTable(spec, netemAt2).at(2, 1).receiverLatencyS, 0.0);
  EXPECT_DOUBLE_EQ(LinkTable(spec, netemAt2).at(1, 2).receiverLatencyS, 0.005);
  nlohmann::json bad = toJson(f);
  bad["model"] = "ideal";
  EXPECT_THROW(linkEntryFromJson(bad, "links[0]"), std::invalid_argument);
}

// A holder of the right to send on a data socket (rank 0's socket to rank 1) who lies in its
// headers. Each lie is refused at once, in rank 0's name and naming the field, and costs the
// receiver no memory the lie announced: a shape of 1 G elements over a 96-byte payload (rank 0
// allocated 4.33 GB before checking), stripes "of 65,535" on a link of one stream (100 of them
// held 717 MB), an arrival a million seconds ahead (held until the step timeout).
class ImpostorTest : public ::testing::Test {
 protected:
  // 1 MiB frames at most, as largestFrameBytes gives a small run.
  Pair p{"none", "none", false, 1, int64_t{1} << 20};
  zmq::socket_t push{p.ctx, zmq::socket_type::push};

  void SetUp() override {
    push.set(zmq::sockopt::linger, 0);
    push.connect(p.t[1]->endpoints()["0"].get<std::string>());
  }
  // A genuine frame of activation (step 3, micro-batch 0) of shape [2, 3, 4], then `patch`.
  static compression::Bytes frame() {
    const auto codec = compression::makeCodec("none");
    compression::FrameHeader h;
    h.step = 3;
    h.src = 0;
    h.dst = 1;
    h.shape = {2, 3, 4};
    h.exampleIds = {5, 6};
    const auto x = ramp(1, 24);
    return compression::encodeFrame(*codec, x.data(), h, {});
  }
  void sendRaw(const std::string& payload, double arrival) {
    sendShaped(push, payload.data(), payload.size(), arrival);
  }
  // Receives the activation rank 1 waits for: the error it fails with, the seconds it took and
  // the peak-memory growth of this process (MiB).
  std::string refusal(double* seconds, double* grewMiB) {
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    const double t0 = emulator::monotonicNow();
    std::string what = "(no error)";
    try {
      p.t[1]->recv(true, MessageKind::kActivation, 3, 0, 0);
    } catch (const std::exception& e) {
      what = e.what();
    }
    *seconds = emulator::monotonicNow() - t0;
    getrusage(RUSAGE_SELF, &after);
    *grewMiB = (after.ru_maxrss - before.ru_maxrss) / 1024.0;
    return what;
  }
};

TEST_F(ImpostorTest, AShapeLargerThanAnyFrameOfTheRunIsRefusedBeforeItIsAllocated) {
  const compression::Bytes f = withShape(frame(), {2, 128, 4194304}, 2);
  sendRaw(std::string(f.begin(), f.end()), 0);
  double s = 0, grew = 0;
  const std::string what = refusal(&s, &grew);
  std::printf("%.3f s, +%.1f MiB: %s\n", s, grew, what.c_str());
  EXPECT_NE(what.find("from rank 0"), std::string::npos) << what;
  EXPECT_NE(what.find("shape [2, 128, 4194304]"), std::string::npos) << what;
  EXPECT_NE(what.find("refused before anything was allocated"), std::string::npos) << what;
  EXPECT_LT(s, 5.0);
  EXPECT_LT(grew, 64.0);
}

TEST_F(ImpostorTest, StripesOfMoreConnectionsThanTheLinkHasAreRefusedAtTheFirst) {
  for (int i = 0; i < 100; ++i) {
    std::string stripe(16 + 150, 'x');
    const uint32_t magic = 0x54535053;
    const uint16_t index = 0, count = 65535;
    const uint64_t seq = static_cast<uint64_t>(i);
    std::memcpy(stripe.data(), &magic, 4);
    std::memcpy(stripe.data() + 4, &index, 2);
    std::memcpy(stripe.data() + 6, &count, 2);
    std::memcpy(stripe.data() + 8, &seq, 8);
    sendRaw(stripe, 0);
  }
  double s = 0, grew = 0;
  const std::string what = refusal(&s, &grew);
  std::printf("%.3f s, +%.1f MiB: %s\n", s, grew, what.c_str());
  EXPECT_NE(what.find("channel from rank 0"), std::string::npos) << what;
  EXPECT_NE(what.find("the header says 65535"), std::string::npos) << what;
  EXPECT_LT(s, 5.0);
  EXPECT_LT(grew, 64.0);
}

TEST_F(ImpostorTest, AnArrivalBeyondTheReceiveTimeoutIsRefusedAtOnce) {
  const compression::Bytes f = frame();
  sendRaw(std::string(f.begin(), f.end()), emulator::monotonicNow() + 1e6);
  double s = 0, grew = 0;
  const std::string what = refusal(&s, &grew);
  std::printf("%.3f s: %s\n", s, what.c_str());
  EXPECT_NE(what.find("channel from rank 0"), std::string::npos) << what;
  EXPECT_NE(what.find("arrivalTime"), std::string::npos) << what;
  EXPECT_LT(s, 1.0);  // not the 5 s receive timeout
}

}  // namespace
}  // namespace slowpipe::runtime
