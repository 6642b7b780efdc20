// User-space backend over real ZeroMQ TCP loopback sockets: rate and latency accuracy, FIFO order,
// trace steps. Tolerances are set for a noisy 2-core machine and stated with each check.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "emulator/calibrate.h"
#include "emulator/shaped_socket.h"
#include "tests/host_time.h"

namespace slowpipe::emulator {
namespace {

struct RateCase {
  double bps, latency;
};

class UserRateTest : public ::testing::TestWithParam<RateCase> {};

// The test's clock readings include its own send and receive calls; under AddressSanitizer those
// calls are several times slower, so the latency tolerance widens there, and so does how far the
// rate may fall short (a stall of the instrumented test threads costs a run its rate; the Release
// suite makes the 3% claim, this build checks memory). The rate is bounded above by 3% in both.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kLatencyTolerance = 0.6e-3;
constexpr double kRateShortfall = 0.10;
#else
constexpr double kLatencyTolerance = 0.2e-3;
constexpr double kRateShortfall = 0.03;
#endif

// Measured with the test's own clock readings, not with anything the emulator stamps: the sender
// thread reads the clock just before each send, the receiver right after each recv() returns. A
// receiver that delivered early (or stamped deliveries with their due time) fails this.
// The emulator stamps each message with its arrival time (send + serialisation + latency) and the
// receiver holds it until then, so the transport's own latency (ZeroMQ over TCP loopback, 0.05-0.4
// ms depending on the machine and its load) is hidden inside any emulated latency longer than it,
// and is all there is at latency 0. The expected median is therefore max(latency, transport), where
// the transport's latency is the median of unshaped probes over a second socket pair of the same
// kind, each sent just before a shaped probe. Probes go one at a time (the next waits until the
// last was received), so neither kind waits behind the other.
TEST_P(UserRateTest, RateWithin3PercentLatencyWithin02ms) {
  zmq::context_t ctx(2);
  zmq::socket_t pull(ctx, zmq::socket_type::pull), push(ctx, zmq::socket_type::push);
  zmq::socket_t rawPull(ctx, zmq::socket_type::pull), rawPush(ctx, zmq::socket_type::push);
  for (auto* s : {&pull, &push, &rawPull, &rawPush}) {
    s->set(zmq::sockopt::sndhwm, 0);
    s->set(zmq::sockopt::rcvhwm, 0);
  }
  pull.bind("tcp://127.0.0.1:*");
  push.connect(pull.get(zmq::sockopt::last_endpoint));
  rawPull.bind("tcp://127.0.0.1:*");
  rawPush.connect(rawPull.get(zmq::sockopt::last_endpoint));
  LinkSpec link;
  link.bandwidthBps = GetParam().bps;
  link.latencyS = GetParam().latency;
  const size_t bytes = 256 * 1024, probeBytes = 64;
  const int bulk =
      static_cast<int>(std::max(8.0, 0.5 * link.bandwidthBps / (8.0 * bytes)));  // ~0.5 s
  const int probes = 60;
  ShapedSender tx(push, link, &linkModel("pipelined"), 3);
  ShapedReceiver rx(pull);
  ShapedSender rawTx(rawPush, LinkSpec{}, nullptr, 4);  // unpaced, and the receiver adds no latency
  ShapedReceiver rawRx(rawPull);
  std::vector<double> sentAt(bulk + probes), gotAt(bulk + probes), rawSent(probes), rawGot(probes);
  std::atomic<int> received{0};
  const testsupport::StealMeter meter;
  std::thread sender([&] {
    std::vector<uint8_t> buf(bytes, 1);
    for (int i = 0; i < bulk; ++i) {
      sentAt[i] = monotonicNow();
      tx.send(buf.data(), bytes);
    }
    for (int k = 0; k < probes; ++k) {
      const int i = bulk + k;
      while (received < bulk + 2 * k) std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      rawSent[k] = monotonicNow();
      rawTx.send(buf.data(), probeBytes);
      while (received < bulk + 2 * k + 1)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      sentAt[i] = monotonicNow();
      tx.send(buf.data(), probeBytes);
    }
  });
  // received counts deliveries: bulk messages, then per probe the raw one and the shaped one.
  for (int i = 0; i < bulk; ++i) {
    ASSERT_TRUE(rx.recv(10000).has_value()) << "message " << i;
    gotAt[i] = monotonicNow();
    if (i + 1 == bulk) received = bulk;
  }
  for (int k = 0; k < probes; ++k) {
    ASSERT_TRUE(rawRx.recv(10000).has_value()) << "unshaped probe " << k;
    rawGot[k] = monotonicNow();
    received = bulk + 2 * k + 1;
    ASSERT_TRUE(rx.recv(10000).has_value()) << "probe " << k;
    gotAt[bulk + k] = monotonicNow();
    received = bulk + 2 * k + 2;
  }
  sender.join();
  // From the first send (less the latency) to the last delivery: a stall anywhere, the first
  // receipt's included, can only lower it. Measured from the first delivery, as it was, a first
  // receipt held up 33 ms by the host read 1.067 of 1 Gbps under AddressSanitizer in CI.
  const double achieved = 8.0 * bytes * bulk / (gotAt[bulk - 1] - sentAt[0] - link.latencyS);
  std::vector<double> lat, raw;
  for (int k = 0; k < probes; ++k) {
    const int i = bulk + k;
    lat.push_back(gotAt[i] - sentAt[i] - 8.0 * probeBytes / link.bandwidthBps);
    raw.push_back(rawGot[k] - rawSent[k]);
  }
  std::sort(lat.begin(), lat.end());
  std::sort(raw.begin(), raw.end());
  const double transport = raw[raw.size() / 2], median = lat[lat.size() / 2];
  const double steal = meter.share();
  std::printf("achieved %.4f of the rate; median probe %.3f ms (hypervisor steal %.1f%%)\n",
              achieved / link.bandwidthBps, 1e3 * median, 100 * steal);
  // Never faster than the rate, never earlier than the latency, whatever the host did.
  EXPECT_LE(achieved / link.bandwidthBps, 1.03) << "achieved " << achieved << " bps";
  EXPECT_GE(lat.front(), link.latencyS - 1e-5) << "a probe arrived before its latency had passed";
  EXPECT_GE(median, std::max(link.latencyS, transport) - kLatencyTolerance)
      << "median shaped probe " << median << " s, unshaped transport " << transport << " s";
  // A stall of the host only lowers the rate and lengthens probes (tests/host_time.h).
  const bool missed = achieved / link.bandwidthBps < 1.0 - kRateShortfall ||
                      median > std::max(link.latencyS, transport) + kLatencyTolerance;
  SKIP_IF_HOST_TIME(missed, steal)
      << "achieved " << achieved / link.bandwidthBps << " of the rate, median probe " << median
      << " s (transport " << transport << " s)";
  EXPECT_GE(achieved / link.bandwidthBps, 1.0 - kRateShortfall)
      << "achieved " << achieved << " bps";
  EXPECT_LE(median, std::max(link.latencyS, transport) + kLatencyTolerance)
      << "median shaped probe " << median << " s, unshaped transport " << transport << " s";
}

INSTANTIATE_TEST_SUITE_P(Points, UserRateTest,
                         ::testing::Values(RateCase{100e6, 0.0}, RateCase{100e6, 0.010},
                                           RateCase{1e9, 0.0}, RateCase{1e9, 0.005}),
                         [](const auto& info) {
                           return std::to_string(static_cast<int>(info.param.bps / 1e6)) + "Mbps_" +
                                  std::to_string(static_cast<int>(info.param.latency * 1e3)) + "ms";
                         });

TEST(ShapedSocketTest, FifoOrderWithJitterAndMixedSizes) {
  zmq::context_t ctx(1);
  zmq::socket_t pull(ctx, zmq::socket_type::pull), push(ctx, zmq::socket_type::push);
  pull.bind("tcp://127.0.0.1:*");
  push.connect(pull.get(zmq::sockopt::last_endpoint));
  LinkSpec s;
  s.bandwidthBps = 1e9;
  s.latencyS = 0.002;
  s.jitterS = 0.001;
  ShapedSender tx(push, s, &linkModel("pipelined"), 7);
  ShapedReceiver rx(pull);
  const int n = 300;
  std::thread sender([&] {
    for (int i = 0; i < n; ++i) {
      std::vector<uint32_t> msg((i % 7) * 1000 + 1, static_cast<uint32_t>(i));
      tx.send(msg.data(), msg.size() * 4);
    }
  });
  double last = 0;
  for (int i = 0; i < n; ++i) {
    auto m = rx.recv(5000);
    ASSERT_TRUE(m.has_value()) << "message " << i << " missing";
    uint32_t first;
    std::memcpy(&first, m->payload.data(), 4);
    ASSERT_EQ(first, static_cast<uint32_t>(i)) << "out of order";
    ASSERT_GE(m->deliveredAt + 1e-9, m->due) << "delivered before its arrival time";
    ASSERT_GE(m->deliveredAt, last);
    last = m->deliveredAt;
  }
  sender.join();
}

TEST(ShapedSocketTest, TraceStepChangesAchievedRate) {
  const std::string path = ::testing::TempDir() + "slowpipe-trace.txt";
  std::ofstream(path) << "0 400Mbps\n0.6 100Mbps\n";
  CalibrationOptions o;
  o.link.bandwidthBps = 400e6;
  o.link.trace = BandwidthTrace::load(path);
  o.messageBytes = 256 * 1024;
  o.messages = 150;  // 0.6 s at 400 Mbps = ~114 messages, the rest at 100 Mbps
  o.probes = 10;
  const auto r = calibrateLink(o);
  const auto& seg = r["trace_segments"];
  ASSERT_EQ(seg.size(), 2u) << r.dump(2);
  const double first = seg[0]["achieved_bps"].get<double>() / 400e6,
               second = seg[1]["achieved_bps"].get<double>() / 100e6;
  EXPECT_LE(first, 1.05) << r.dump(2);
  EXPECT_LE(second, 1.05) << r.dump(2);
  SKIP_IF_HOST_TIME(first < 0.95 || second < 0.95, r.value("host_cpu_steal", 0.0)) << seg.dump();
  EXPECT_GE(first, 0.95) << r.dump(2);
  EXPECT_GE(second, 0.95) << r.dump(2);
}

// serial_fifo: one inbound wire per receiving rank, shared by both inbound links and billed in the
// receiver's retrieval order. Two messages sent at the same time on two links arrive one after the
// other: the second one's (serialisation + latency) starts when the first has arrived. Measured
// with the test's own clock.
TEST(ShapedSocketTest, SerialFifoSharesOneInboundWire) {
  zmq::context_t ctx(2);
  zmq::socket_t pullA(ctx, zmq::socket_type::pull), pullB(ctx, zmq::socket_type::pull);
  zmq::socket_t pushA(ctx, zmq::socket_type::push), pushB(ctx, zmq::socket_type::push);
  pullA.bind("tcp://127.0.0.1:*");
  pullB.bind("tcp://127.0.0.1:*");
  pushA.connect(pullA.get(zmq::sockopt::last_endpoint));
  pushB.connect(pullB.get(zmq::sockopt::last_endpoint));
  LinkSpec link;
  link.bandwidthBps = 100e6;
  link.latencyS = 0.010;
  const LinkModelInfo& model = linkModel("serial_fifo");
  ShapedSender txA(pushA, link, &model), txB(pushB, link, &model);
  ShapedReceiver rxA(pullA), rxB(pullB);
  const std::unique_ptr<LinkModel> inbound = model.make();  // the receiving rank's
  rxA.billWith(inbound.get(), link);
  rxB.billWith(inbound.get(), link);
  const size_t bytes = 250000;  // 20 ms at 100 Mbps
  std::vector<uint8_t> buf(bytes, 7);
  const testsupport::StealMeter meter;
  const double sent = monotonicNow();
  txA.send(buf.data(), bytes);
  txB.send(buf.data(), bytes);
  ASSERT_TRUE(rxA.recv(5000).has_value());
  const double gotA = monotonicNow();
  ASSERT_TRUE(rxB.recv(5000).has_value());
  const double gotB = monotonicNow();
  const double one = 8.0 * bytes / link.bandwidthBps + link.latencyS;  // 30 ms
  // Never early, whatever the host did; late by a wake-up at most (a loaded host wakes the test
  // late: 10 ms allowed, a third of what the shared wire adds), unless the hypervisor held this
  // machine meanwhile (a CI run under ASan: 69.4 and 74.4 ms against 30 and 60, the second 5 ms
  // after the first, so both waited on the host, not on the wire).
  EXPECT_GE(gotA - sent, one - 1e-3);
  EXPECT_GE(gotB - sent, 2 * one - 1e-3) << "the second message did not wait for the shared wire";
  SKIP_IF_HOST_TIME(gotA - sent >= one + 10e-3 || gotB - sent >= 2 * one + 10e-3, meter.share())
      << "arrivals after " << gotA - sent << " and " << gotB - sent << " s";
  EXPECT_LT(gotA - sent, one + 10e-3);
  EXPECT_LT(gotB - sent, 2 * one + 10e-3);
}

// The link-model registry: each model's two parts, by hand. pipelined: the sender's link clock
// bills (serialisation behind the link's previous message + latency), the receiver never does;
// serial_fifo: the sender leaves it, the receiving rank's one wire bills in retrieval order,
// whichever link a message came over. An unknown name lists the registered ones.
TEST(LinkModelTest, EachModelBillsByHand) {
  LinkSpec l;
  l.bandwidthBps = 8e6;  // 1 MB/s
  l.latencyS = 0.010;
  LinkClock clock(l, 0.0);
  auto pipelined = linkModel("pipelined").make();
  EXPECT_DOUBLE_EQ(pipelined->stamp(clock, 1.0, 100000), 1.0 + 0.1 + 0.010);
  EXPECT_DOUBLE_EQ(pipelined->stamp(clock, 1.0, 100000), 1.0 + 0.2 + 0.010);  // behind the first
  auto fifo = linkModel("serial_fifo").make();
  LinkClock other(l, 0.0);
  EXPECT_LT(fifo->stamp(other, 1.0, 100000), 0);
  LinkSpec slow = l;
  slow.bandwidthBps = 4e6;
  EXPECT_DOUBLE_EQ(fifo->bill(l, 1.0, 100000), 1.11);
  EXPECT_DOUBLE_EQ(fifo->bill(slow, 1.0, 100000),
                   1.11 + 0.2 + 0.010);  // another link, the same wire
  EXPECT_FALSE(linkModel("serial_fifo").kernelBackends);
  try {
    linkModel("tcp_reno");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("pipelined, serial_fifo, tcp"), std::string::npos)
        << e.what();
  }
}

// A link of `bandwidth` and one-way `latency` under the tcp model's congestion control `cc`.
LinkSpec tcpLink(const char* bandwidth, const char* latency, const char* cc) {
  LinkSpec l = linkSpecFromJson({{"bandwidth", bandwidth}, {"latency", latency}}, "links");
  l.tcp.congestionControl = cc;
  return l;
}

// The tcp model against the ideal pipe, by hand: 8 MB over 1 Gbps with 50 ms one way (RTT 100 ms,
// pipe 12.5 MB) on a connection that starts (or restarts after idle) at the initial window of
// 10 x 1448 bytes. 8e6 bytes are 5524.9 segments; slow start doubles the window each round
// (10 x (2^k - 1) segments after k rounds), so 9 rounds carry 5110 and the 10th the rest: the last
// byte leaves 9 round trips after the first, after at most the message's serialisation (64 ms)
// more, and arrives 50 ms later: within [0.95, 1.014] s. The ideal pipe takes 8e6 x 8 / 1e9 + 0.05
// = 0.114 s: 8.3x-8.9x less. After 100 s idle the window restarts: the same time again.
TEST(LinkModelTest, TcpSlowStartAfterIdleByHand) {
  LinkSpec l;
  l.bandwidthBps = 1e9;
  l.latencyS = 0.050;
  LinkClock clock(l, 0.0);
  auto tcp = linkModel("tcp").make();
  const double first = tcp->stamp(clock, 0.0, 8000000);
  EXPECT_GE(first, 0.95);
  EXPECT_LE(first, 0.95 + 0.064);
  LinkClock ideal(l, 0.0);
  const double pipe = linkModel("pipelined").make()->stamp(ideal, 0.0, 8000000);
  EXPECT_NEAR(pipe, 0.114, 1e-12);
  EXPECT_GT(first / pipe, 8.3);
  // Right behind it (FIFO on the connection): the window is past the send buffer (4 MiB), so the
  // buffer paces it: at least one round trip for the first 4 MiB, then the rest at the rate.
  const double free = first - 0.05;
  const double second = tcp->stamp(clock, free, 8000000) - free;
  EXPECT_GE(second, 0.1 + 8.0 * (8000000 - 4194304) / 1e9 + 0.05);
  EXPECT_LT(second, first / 2);
  // After 100 s idle (hundreds of RTOs) the window is back to 10 segments: as slow as the first
  // (within 0.1 ms: the send buffer the first grew from 2 x 10 segments is kept).
  const double later = 100.0;
  EXPECT_NEAR(tcp->stamp(clock, later, 8000000) - later, first, 1e-4);
  // Without latency there is no round trip to wait for: the ideal pipe.
  LinkSpec lan = l;
  lan.latencyS = 0;
  LinkClock c0(lan, 0.0);
  EXPECT_NEAR(linkModel("tcp").make()->stamp(c0, 1.0, 8000000), 1.064, 1e-9);
  EXPECT_FALSE(linkModel("tcp").kernelBackends);
  EXPECT_FALSE(linkModel("tcp").modelsVariation);
  EXPECT_TRUE(linkModel("tcp").modelsLoss);
  // Jumbo frames (the link's mtu 9000): segments of 8948 bytes, 894.1 of them; the receiver's
  // window holds the first rounds to 7, 10 and 16 segments (its first window 65,535 bytes, its
  // clamp 93,184, then 152,047 after its first measure) and the fourth to 37 (332,353 after the
  // second), so 7 rounds carry 590 and the 8th the rest: 7 round trips + at most 64 ms + 50 ms (the
  // kernel through the delay line: 0.86-0.87 s in three runs; without the receiver's window the
  // model took 6 round trips, 0.67 s).
  LinkSpec jumbo =
      linkSpecFromJson({{"bandwidth", "1Gbps"}, {"latency", "50ms"}, {"mtu", 9000}}, "links");
  EXPECT_EQ(jumbo.mtu, 9000);
  LinkClock cj(jumbo, 0.0);
  cj.setOpenedAt(0.0);  // a fresh connection, as the kernel's
  const double j = linkModel("tcp").make()->stamp(cj, 0.0, 8000000);
  EXPECT_GE(j, 0.75);
  EXPECT_LE(j, 0.75 + 0.064);
  try {
    linkSpecFromJson({{"mtu", 100}}, "links");
    FAIL() << "an mtu of 100 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("links.mtu"), std::string::npos) << e.what();
  }
}

// Loss by hand: a packet in 1/p lost (here drawn per packet, so on average), every loss halving
// Reno's window, makes the sawtooth behind the Mathis formula: W oscillates between W/2 and W with
// 1/p packets a cycle, so 3/8 W^2 = 1/p and the mean rate is MSS / RTT x sqrt(3 / (2p)): 14.19
// Mbit/s at 1448-byte segments, RTT 100 ms, p = 1e-4 (the link's 1 Gbps and the 4 MiB buffer are
// far above it). A 50 MB transfer after 200 MB (slow start's overshoot halved away) takes that rate
// within 10%; CUBIC (beta 0.7, its cubic growth) gets more from the same loss, BBR (which does not
// cut on loss) far more.
TEST(LinkModelTest, TcpLossFollowsMathisUnderReno) {
  auto timeFor = [](const std::string& cc) {
    LinkSpec l =
        linkSpecFromJson({{"bandwidth", "1Gbps"}, {"latency", "50ms"}, {"loss", 1e-4}}, "links");
    l.tcp.congestionControl = cc;
    LinkClock clock(l, 0.0);
    auto tcp = linkModel("tcp").make();
    // The first 200 MB bring the window down from slow start's overshoot (halving per loss);
    // the 50 MB right behind them run in the sawtooth.
    const double settled = tcp->stamp(clock, 0.0, 200000000) - 0.05;
    return tcp->stamp(clock, settled, 50000000) - 0.05 - settled;
  };
  const double mathis = 1448 * 8 / 0.1 * std::sqrt(3 / (2 * 1e-4));
  const double reno = 50000000 * 8 / timeFor("reno");
  EXPECT_NEAR(reno / mathis, 1.0, 0.10) << reno << " bit/s against Mathis' " << mathis;
  EXPECT_GT(50000000 * 8 / timeFor("cubic"), 1.2 * reno);
  EXPECT_GT(50000000 * 8 / timeFor("bbr"), 5 * reno);
  try {
    LinkSpec l;
    l.tcp.congestionControl = "vegas";
    LinkClock clock(l, 0.0);
    linkModel("tcp").make()->stamp(clock, 0.0, 1000);
    FAIL() << "vegas was modelled";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("expected cubic, reno or bbr"), std::string::npos)
        << e.what();
  }
}

// HyStart against the kernel: the sequence of the kernel grid's 1 Gbps / RTT 2 ms case
// (results/wan/model_validation, 1Gbps_1ms_cubic_loss0): 64 KiB, 64 KiB 2 ms later, 64 KiB after
// 1.01 s idle (the window restarts), then 1 MiB right behind. The kernel's CUBIC left slow start
// during that 1 MiB at 56 segments (its ssthresh after) and, growing 5% a round from there, took
// 25.3 ms where the pipe (172.7 segments) would carry it in 9.4 ms after the first round trip;
// the model before HyStart took 11.8 ms. The model within 25% of the kernel, and Reno (no HyStart,
// the same window otherwise) under 15 ms.
TEST(LinkModelTest, CubicLeavesSlowStartByHyStart) {
  auto oneMiB = [](const std::string& cc) {
    LinkSpec l;
    l.bandwidthBps =
        1e9 * 1448 / 1500;  // the line's goodput, as slowpipe emulator tcp-rebill bills it
    l.latencyS = 0.001;
    l.tcp.congestionControl = cc;
    LinkClock clock(l, 0.0);
    auto tcp = linkModel("tcp").make();
    for (const double sent : {0.0, 0.0078, 1.0197})
      tcp->stamp(clock, sent, 65536);  // the kernel run's send times
    return tcp->stamp(clock, 1.0255, 1048576) - 1.0255;
  };
  const double reno = oneMiB("reno"), cubic = oneMiB("cubic");
  EXPECT_NEAR(cubic / 0.0253, 1.0, 0.25) << "cubic " << cubic << " s";
  EXPECT_LT(reno, 0.015) << "reno " << reno << " s";
}

// The send buffer keeps a lost packet and everything acknowledged behind it until the
// retransmission is acknowledged (one RTT after the loss is found). A transfer limited by the
// buffer (BBR over 1 Gbps with RTT 100 ms: 4 MiB of buffer against a 12.5 MB pipe) therefore
// stalls for about an RTT per loss, although BBR does not cut its window: the kernel took 0.86-0.90
// s for 16 MiB at 0.1% loss against 0.62-0.67 s without (results/wan/model_validation,
// 1Gbps_50ms_bbr). (a ratio of 1.27-1.45). At 0.1% a 16 MiB message loses about 11.6 packets: at
// least 25% slower here; the model before counted only the retransmissions' own round trips (15%).
TEST(LinkModelTest, LossHoldsTheSendBuffer) {
  auto timeFor = [](double loss) {
    LinkSpec l =
        linkSpecFromJson({{"bandwidth", "1Gbps"}, {"latency", "50ms"}, {"loss", loss}}, "links");
    l.tcp.congestionControl = "bbr";
    LinkClock clock(l, 0.0);
    auto tcp = linkModel("tcp").make();
    const double warm = tcp->stamp(clock, 0.0, 16777216) - 0.05;  // past startup
    return tcp->stamp(clock, warm + 0.1, 16777216) - warm - 0.1;
  };
  const double clean = timeFor(0), lossy = timeFor(0.001);
  EXPECT_GT(lossy, 1.25 * clean) << "lossless " << clean << " s, 0.1% loss " << lossy << " s";
}

// Bursty loss under the tcp model: the same mean loss (0.1%) as Bernoulli draws or as bursts of
// 10 packets (Gilbert-Elliott, r = 0.1) over Reno at 1 Gbps / RTT 100 ms. A burst costs one window
// cut (the model cuts once per window of data), so the bursts make a tenth as many cuts: by
// Mathis' rate with a tenth of the loss events, sqrt(10) = 3.2x the throughput; at least 2x here.
TEST(LinkModelTest, TcpLossInBurstsCutsTheWindowOncePerBurst) {
  auto timeFor = [](const nlohmann::json& loss) {
    LinkSpec l =
        linkSpecFromJson({{"bandwidth", "1Gbps"}, {"latency", "50ms"}, {"loss", loss}}, "links");
    l.tcp.congestionControl = "reno";
    LinkClock clock(l, 0.0);
    auto tcp = linkModel("tcp").make();
    const double settled = tcp->stamp(clock, 0.0, 50000000) - 0.05;
    return tcp->stamp(clock, settled, 50000000) - 0.05 - settled;
  };
  const double r = 0.1, p = 0.001 * r / (1 - 0.001);  // mean loss p / (p + r) = 0.1%
  const double bernoulli = timeFor(0.001), bursts = timeFor({{"p", p}, {"r", r}});
  EXPECT_GT(bernoulli, 2 * bursts) << "Bernoulli " << bernoulli << " s, bursts " << bursts << " s";
}

// BBR's pacing by hand, as Linux runs it without fq (internal pacing per TSO chunk). A 10 Gbps link
// with 1 ms one way: the first message is the initial window (10 segments, 14480 bytes); the
// pacing rate before any ACK is 2.885 x 14480 B / 2 ms less 1% = 20.68 MB/s, so a chunk is
// 20.68e6 / 1024 + 64 KiB >> (2000 us >> 9) = 28387 bytes, 19 segments: the whole window leaves
// at once at the link's rate and arrives 11.6 us + 1 ms later (paced segment by segment it would
// take 0.56 ms more). PROBE_RTT: a transfer that crosses the 10 s of the minimum RTT's life pays
// the drain to 4 segments (one round trip, nothing new sent), 200 ms at 4 segments and the round
// that ends it: 100 Mbps / 50 ms, 150 MB against 90 MB (7.2 s, over before the 10 s) plus 60 MB at
// the rate: between RTT + 200 ms and 2 RTT + 200 ms + what 4 segments a round trip left unsent.
TEST(LinkModelTest, BbrPacesPerTsoChunkAndProbesRttByTheKernelsRule) {
  LinkSpec fast = linkSpecFromJson({{"bandwidth", "10Gbps"}, {"latency", "1ms"}}, "links");
  fast.tcp.congestionControl = "bbr";
  LinkClock c(fast, 0.0);
  EXPECT_NEAR(linkModel("tcp").make()->stamp(c, 0.0, 14480), 14480 * 8 / 1e10 + 0.001, 1e-9);
  const LinkSpec l = tcpLink("100Mbps", "50ms", "bbr");
  auto timeFor = [&](double bytes) {
    LinkClock clock(l, 0.0);
    return linkModel("tcp").make()->stamp(clock, 0.0, static_cast<uint64_t>(bytes));
  };
  const double shorter = timeFor(90e6), longer = timeFor(150e6);
  ASSERT_LT(shorter, 10.0);
  const double probe = longer - shorter - 60e6 * 8 / 100e6;
  EXPECT_GE(probe, 0.1 + 0.2) << shorter << " s, " << longer << " s";
  EXPECT_LE(probe, 0.2 + 0.2 + 0.02) << shorter << " s, " << longer << " s";
}

// BBR's pacing by tcp_update_skb_after_send's two rules, by hand (100 Mbps, 125 ms one way, so
// tcp_tso_autosize gives 2-segment chunks). A fresh connection's first 10 segments are not paced:
// they leave at once. The pacing rate then stays at its start, 2.885 x 10 segments / RTT less 1%
// (the first flight's delivery rate, 10 segments over an RTT and their serialisation, times 2.885
// is below it), and the window is 20 segments. A 20-segment message 0.87 s later: its first chunk
// is late on the pacing clock by far more than its time, so it moves the clock by half of it; the
// other nine by t each: the last leaves 8.5 t after the first, where the model before (every chunk
// paced, no credit) took 4 t for the first message and 9 t here.
TEST(LinkModelTest, BbrPacingSparesTheFirstTenSegmentsAndCreditsLateness) {
  const LinkSpec l = tcpLink("100Mbps", "125ms", "bbr");
  LinkClock clock(l, 0.0);
  auto model = linkModel("tcp").make();
  const double segment = 8 * 1448 / 1e8;
  EXPECT_NEAR(model->stamp(clock, 1.0, 14480) - 1.0, 10 * segment + 0.125, 1e-9)
      << "the first 10 segments were paced";
  const double t =
      2 * 1448 / (0.99 * 2.885 * 14480 / 0.25);  // one 2-segment chunk at the pacing rate
  EXPECT_NEAR(model->stamp(clock, 2.0, 28960) - 2.0, 8.5 * t + 2 * segment + 0.125, 1e-9);
}

// The send buffer as Linux autotunes it, by hand (Reno, 1 Gbps, 10 ms one way, MSS 1448). The
// buffer starts at 2 x 10 segments x 2304 bytes = 46080 and grows only while the writer waits on
// it. Three 45-segment messages (65160 bytes, one 64 KiB skb, charged 65928: the writer never
// waits), each 20 ms after the last arrived (an RTT, far below the RTO), grow the window to 2 x 45
// = 90 segments (slow start grows it only while it is under twice what was in flight) and leave the
// buffer at 46080. A 90-segment message then fits the window but not the buffer: its first skb
// leaves at once, the second when the first ACK (an RTT later) finds the writer waiting and grows
// the buffer to 2 x 90 x 2304: RTT + its 45 segments + the one-way delay, where a buffer at its 4
// MiB maximum (the model before) sent all 90 at once.
TEST(LinkModelTest, TcpSendBufferGrowsOnlyWhileTheWriterWaits) {
  const LinkSpec l = tcpLink("1Gbps", "10ms", "reno");
  LinkClock clock(l, 0.0);
  auto model = linkModel("tcp").make();
  const double segment = 8 * 1448 / 1e9;
  double at = 0;
  for (int k = 0; k < 3; ++k) {
    const double arrived = model->stamp(clock, at, 65160);
    if (k > 0)
      EXPECT_NEAR(arrived - at, 45 * segment + 0.010, 1e-6) << "message " << k << " waited";
    at = arrived + 0.020;
  }
  const double t = model->stamp(clock, at, 130320) - at;
  // The first skb's first 2 segments are acknowledged 20 ms + 2 segments after they left.
  EXPECT_NEAR(t, 0.020 + 2 * segment + 45 * segment + 0.010, 1e-6);
  // Written again with the buffer at its maximum, all 90 segments leave at once.
  LinkSpec big = l;
  big.tcp.wmemMax = 4194304;
  LinkClock clock2(big, 0.0);
  auto model2 = linkModel("tcp").make();
  at = 0;
  for (int k = 0; k < 3; ++k) at = model2->stamp(clock2, at, 65160) + 0.020;
  EXPECT_NEAR(model2->stamp(clock2, at, 130320) - at, 0.020 + 2 * segment + 45 * segment + 0.010,
              1e-6)
      << "the maximum is a cap: autotuning starts small whatever it is";
}

// The receiver's window by hand: with the send buffer out of the way (64 MiB), a connection over
// 1 Gbps / 50 ms each way (BDP 12.5 MB) whose receiver may buffer 2 MiB (net.ipv4.tcp_rmem's
// maximum) has at most 2 MiB x 160/256 = 1310720 bytes in flight (the kernel's window at the end
// of the same transfer through the delay line: 1309312), so 64 MiB take at least 51.2 round trips
// of 100 ms, and at most 8 more for slow start (10 segments to 905 doubling) and the last byte's
// way. At MTU 9000 a segment's memory is 12544 bytes, not 2304: the ratio is 182/256 (the kernel's
// window with 4 MiB: 2973056). With the kernel's default (32 MiB: 20.9 MB) the link is the limit.
TEST(LinkModelTest, TcpReceiveWindowCapsALongFatConnectionByHand) {
  const double bytes = 67108864;
  auto transfer = [&](uint64_t rmem, int mtu) {
    LinkSpec l = tcpLink("1Gbps", "50ms", "cubic");
    l.mtu = mtu;
    l.tcp.wmemMax = 67108864;
    l.tcp.rmemMax = rmem;
    LinkClock clock(l, 0.0);
    return linkModel("tcp").make()->stamp(clock, 0.0, static_cast<uint64_t>(bytes));
  };
  const double capped = bytes / (2097152 * 160.0 / 256) * 0.1;  // 5.12 s
  EXPECT_GE(transfer(2097152, 1500), capped);
  EXPECT_LE(transfer(2097152, 1500), capped + 0.8);
  const double jumbo = bytes / (4194304 * 182.0 / 256) * 0.1;  // 2.25 s
  EXPECT_GE(transfer(4194304, 9000), jumbo);
  EXPECT_LE(transfer(4194304, 9000), jumbo + 0.8);
  EXPECT_LT(transfer(0, 1500), 1.5)
      << "the default receive buffer held back a link the send buffer does not";
  EXPECT_NEAR(transfer(0, 1500), transfer(33554432, 1500), 1e-9) << "the default is 32 MiB";
}

// The receive buffer Linux grows, transcribed from the kernel's tcp_rcvbuf_grow tracepoint on this
// kernel (6.18; `echo 1 > /sys/kernel/tracing/events/tcp/tcp_rcvbuf_grow/enable` around `slowpipe
// emulator tcp-messages --rate 1Gbps --delay 50ms --mtu M --bytes 1048576 --idle 0 --bytes
// 16777216 --idle 0`): per event the bytes read in the receiver's last RTT (copied less inq), the
// figure before (space) and the buffer the next event printed (rcvbuf) or its window_clamp at MTU
// 9000, to the byte; at 24,386,988 the previous figure gives less than the buffer has, and the
// maximum (here 32 MiB) caps what it gives.
TEST(LinkModelTest, TcpReceiveBufferGrowsAsTheKernelsTracepointPrinted) {
  EXPECT_EQ(receiveScalingRatio(1500), 160);
  EXPECT_EQ(receiveScalingRatio(9000), 182);
  const struct {
    uint64_t copied, space, rcvbuf;
  } mtu1500[] = {{31856, 14480, 346592},      {55024, 31856, 432185},
                 {217200, 115840, 1911360},   {463360, 217200, 4843654},
                 {925496, 463360, 8869113},   {1853440, 925496, 17824396},
                 {3160984, 1853440, 24386988}};
  for (const auto& e : mtu1500)
    EXPECT_EQ(receiveBufferAfterMeasure(e.copied, e.space, 160, 0), e.rcvbuf)
        << e.copied << " after " << e.space;
  const struct {
    uint64_t copied, space, clamp;
  } mtu9000[] = {{71584, 56588, 219045}, {84992, 71584, 233659}, {214016, 84992, 1727597}};
  for (const auto& e : mtu9000)
    EXPECT_EQ(receiveBufferAfterMeasure(e.copied, e.space, 182, 0) * 182 / 256, e.clamp)
        << e.copied << " after " << e.space;
  EXPECT_EQ(receiveBufferAfterMeasure(3341208, 3160984, 160, 0), 11911059u)
      << "sized below the 24,386,988 it had, which stays";
  EXPECT_EQ(receiveBufferAfterMeasure(3160984, 1853440, 160, 4194304), 4194304u)
      << "tcp_rmem's maximum caps it";
  EXPECT_THROW(receiveBufferAfterMeasure(100, 100, 160, 0), std::invalid_argument);
}

// The receiver's first window by hand: at MTU 9000 the initial congestion window is 10 segments of
// 8948 bytes (89,480) but a new receiver announces half its 128 KiB buffer (64 KiB), so 80,000
// bytes over 1 Gbps / 50 ms each way take a first flight of 64 KiB and the rest a round trip later:
// at least 100 + 50 ms, where the congestion window alone gives 50.6 ms. The kernel does the same
// (DelayLineTest.AJumboInitialWindowWaitsForTheReceiversFirstWindow). At MTU 1500 (10 segments,
// 14,480 bytes) the first window is not what limits: 3 round trips (10 + 20 + 40 segments) carry
// 70 segments.
TEST(LinkModelTest, TcpFirstReceiveWindowHoldsBackAJumboInitialWindowByHand) {
  auto first = [](int mtu, uint64_t bytes) {
    LinkSpec l = tcpLink("1Gbps", "50ms", "cubic");
    l.mtu = mtu;
    LinkClock clock(l, 0.0);
    clock.setOpenedAt(0.0);
    return linkModel("tcp").make()->stamp(clock, 0.0, bytes);
  };
  EXPECT_GE(first(9000, 80000), 0.150);
  EXPECT_LE(first(9000, 80000), 0.152);
  EXPECT_GE(first(9000, 60000), 0.050);
  EXPECT_LE(first(9000, 60000), 0.051) << "within the first window: one flight";
  EXPECT_GE(first(1500, 70 * 1448), 0.250);
  EXPECT_LE(first(1500, 70 * 1448), 0.252);
}

// Streams by hand: 8 connections carry the 8 MB of TcpSlowStartAfterIdleByHand, 1 MB each, from
// 8 initial windows (80 segments in all): 80 x (2^k - 1) segments after k rounds, so 6 rounds carry
// 5040 of the 5524.9 and the 7th the rest: 6 round trips + at most 64 ms + 50 ms, where one
// connection needs 9 round trips. A loss cuts one flow of the 8: the aggregate keeps 15/16 (Reno).
TEST(LinkModelTest, TcpStreamsStartEightWindowsAtOnce) {
  LinkSpec l = linkSpecFromJson({{"bandwidth", "1Gbps"}, {"latency", "50ms"}}, "links");
  l.tcp.streams = 8;
  LinkClock clock(l, 0.0);
  const double t = linkModel("tcp").make()->stamp(clock, 0.0, 8000000);
  EXPECT_GE(t, 0.65);
  EXPECT_LE(t, 0.65 + 0.064);
  EXPECT_EQ(tcpSettingsFromJson({{"streams", 8}}, "network.tcp").streams, 8);
  for (const nlohmann::json bad : {nlohmann::json(0), nlohmann::json(65), nlohmann::json("8")}) {
    try {
      tcpSettingsFromJson({{"streams", bad}}, "network.tcp");
      ADD_FAILURE() << "streams " << bad.dump() << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("network.tcp.streams"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace slowpipe::emulator
