// The packet-level link's model (emulator/packet_link.h), by hand and by statistics: rate and
// delay, the drop-tail queue, a Mahimahi delivery trace, jitter with and without reordering, and
// the loss models over 10^6 packets (mean loss and mean burst within 5% of configured).
#include "emulator/packet_link.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/calibrate.h"
#include "emulator/command.h"
#include "emulator/delay_line.h"
#include "emulator/delay_line_probes.h"
#include "emulator/shaped_socket.h"
#include "tests/host_time.h"

namespace slowpipe::emulator {
namespace {

// Everything delivered by `until`, stepping from event to event: (id, delivery time).
std::vector<std::pair<uint64_t, double>> drain(PacketLink& l, double until) {
  std::vector<std::pair<uint64_t, double>> out;
  for (double t = l.nextEvent(); t <= until; t = l.nextEvent())
    for (uint64_t id : l.pop(t)) out.push_back({id, t});
  return out;
}

// 1 Mbit/s = 125 bytes per ms; 1250-byte packets take 10 ms each; 10 ms one way.
TEST(PacketLinkTest, RateAndDelayByHand) {
  PacketLinkSpec s;
  s.rateBps = 1e6;
  s.delayS = 0.010;
  PacketLink l(s);
  for (uint64_t id = 0; id < 3; ++id) EXPECT_TRUE(l.offer(0.0, 1250, id));
  EXPECT_NEAR(l.nextEvent(), 0.010, 1e-12);  // the first departure
  const auto got = drain(l, 1.0);
  ASSERT_EQ(got.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(got[k].first, static_cast<uint64_t>(k));
    EXPECT_NEAR(got[k].second, 0.010 * (k + 1) + 0.010, 1e-12);
  }
  // A packet offered after the link went idle starts at once.
  EXPECT_TRUE(l.offer(2.0, 125, 9));
  const auto late = drain(l, 3.0);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_NEAR(late[0].second, 2.0 + 0.001 + 0.010, 1e-12);
  EXPECT_EQ(l.stats().bytesDelivered, 3 * 1250u + 125u);
  EXPECT_EQ(l.nextEvent(), std::numeric_limits<double>::infinity());
}

// Drop-tail: the limit counts the packet in service; a departure frees its bytes.
TEST(PacketLinkTest, DropTailQueueCountsThePacketInService) {
  PacketLinkSpec s;
  s.rateBps = 1e6;
  s.queueBytes = 2500;
  PacketLink l(s);
  EXPECT_TRUE(l.offer(0.0, 1250, 0));
  EXPECT_TRUE(l.offer(0.0, 1250, 1));
  EXPECT_FALSE(l.offer(0.0, 1, 2));
  EXPECT_TRUE(l.offer(0.010, 1250, 3));  // packet 0 left at 10 ms
  EXPECT_EQ(l.stats().droppedQueue, 1u);
  EXPECT_EQ(l.stats().maxQueueBytes, 2500u);
  PacketLinkSpec p = s;
  p.queueBytes = 0;
  p.queuePackets = 1;
  PacketLink one(p);
  EXPECT_TRUE(one.offer(0.0, 1250, 0));
  EXPECT_FALSE(one.offer(0.005, 1250, 1));
  EXPECT_TRUE(one.offer(0.010, 1250, 2));
}

// A delivery trace (1, 2, 3 ms, repeating every 3 ms), 1500 bytes per opportunity: a 3000-byte
// packet takes the opportunities at 1 and 2 ms, the next one 3 ms; opportunities while the queue
// is empty are lost; after the file's end it starts over (4, 5, 6 ms).
TEST(PacketLinkTest, DeliveryTraceCarriesOneMtuPerOpportunity) {
  const auto path = std::filesystem::temp_directory_path() / "slowpipe_trace_test.txt";
  std::ofstream(path) << "1\n2\n3\n";
  PacketLinkSpec s = packetLinkSpecFromJson({{"trace", path.string()}, {"mtu", 1500}}, "link");
  ASSERT_EQ(s.deliveryMs.size(), 3u);
  PacketLink l(s);
  EXPECT_TRUE(l.offer(0.0, 3000, 0));
  EXPECT_TRUE(l.offer(0.0, 1000, 1));
  auto got = drain(l, 0.0035);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NEAR(got[0].second, 0.002, 1e-12);
  EXPECT_NEAR(got[1].second, 0.003, 1e-12);
  EXPECT_TRUE(l.offer(0.0042, 100, 2));  // 4 ms passed unused: the next is 5 ms
  got = drain(l, 1.0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NEAR(got[0].second, 0.005, 1e-12);
  std::ofstream(path) << "3\n1\n";
  EXPECT_THROW(loadDeliveryTrace(path.string()), std::invalid_argument);
  std::ofstream(path) << "1\nten\n";
  EXPECT_THROW(loadDeliveryTrace(path.string()), std::invalid_argument);
  std::filesystem::remove(path);
}

// Jitter: without reordering nothing overtakes (arrivals never decrease), with it some do; the
// mean one-way delay stays the configured one.
TEST(PacketLinkTest, JitterReordersOnlyWhenAllowed) {
  for (const bool reorder : {false, true}) {
    PacketLinkSpec s;
    s.delayS = 0.020;
    s.jitterS = 0.002;
    s.reorder = reorder;
    PacketLink l(s);
    for (uint64_t id = 0; id < 20000; ++id) l.offer(id * 1e-4, 100, id);
    const auto got = drain(l, 10.0);
    ASSERT_EQ(got.size(), 20000u);
    int inversions = 0;
    double delay = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      if (k > 0 && got[k].first < got[k - 1].first) ++inversions;
      delay += got[k].second - got[k].first * 1e-4;
    }
    delay /= static_cast<double>(got.size());
    if (reorder) {
      EXPECT_GT(inversions, 1000);
      EXPECT_NEAR(delay, 0.020, 1e-4);
    } else {
      EXPECT_EQ(inversions, 0);
      EXPECT_GT(delay, 0.020);  // a wire holds a packet behind a late one
    }
  }
}

// Loss over 10^6 packets: Bernoulli 1% and Gilbert-Elliott (p 0.01, r 0.25, all lost in the bad
// state: mean loss 3.85%, mean burst 4 packets) within 5% of configured.
TEST(PacketLinkTest, LossModelsMeetTheirMeansOverAMillionPackets) {
  constexpr int kPackets = 1000000;
  PacketLinkSpec b;
  b.loss = 0.01;
  PacketLink bern(b);
  int lost = 0;
  for (int i = 0; i < kPackets; ++i) lost += bern.lose();
  EXPECT_NEAR(lost / double(kPackets), 0.01, 0.05 * 0.01);
  const PacketLinkSpec g = packetLinkSpecFromJson(
      {{"loss", {{"p", 0.01}, {"r", 0.25}, {"loss_good", 0.0}, {"loss_bad", 1.0}}}}, "link");
  ASSERT_TRUE(g.gilbertElliott);
  EXPECT_NEAR(g.ge.meanLoss(), 0.01 / 0.26, 1e-12);
  PacketLink ge(g);
  int losses = 0, bursts = 0;
  bool previous = false;
  for (int i = 0; i < kPackets; ++i) {
    const bool l = ge.lose();
    losses += l;
    bursts += l && !previous;
    previous = l;
  }
  EXPECT_NEAR(losses / double(kPackets), g.ge.meanLoss(), 0.05 * g.ge.meanLoss());
  EXPECT_NEAR(losses / double(bursts), 4.0, 0.05 * 4.0);
  EXPECT_THROW(packetLinkSpecFromJson({{"loss", {{"p", 0.1}, {"r", 0.0}}}}, "link"),
               std::invalid_argument);
  EXPECT_THROW(packetLinkSpecFromJson({{"loss", 1.5}}, "link"), std::invalid_argument);
  EXPECT_THROW(packetLinkSpecFromJson({{"delay", 25}}, "link"), std::invalid_argument);
  EXPECT_THROW(packetLinkSpecFromJson({{"mtu", 100}}, "link"), std::invalid_argument);
}

}  // namespace
}  // namespace slowpipe::emulator

// The delay line itself: two namespaces joined through TUN devices (root; skipped elsewhere).
// UDP round trips equal 2 x the one-way delay within 0.3 ms at the median (the line's own cost:
// 0.03-0.14 ms in Release; 0.6 ms under ASan, where 0.10-0.34 ms were seen in CI) and never come
// early; one cubic stream draws 1 Gbps at MTU 1500 from the line within 3% (or the machine could
// not forward it, which the probe says: link_ok false with the rate it reached); nothing is left
// behind.
namespace slowpipe::emulator {
namespace {

bool lineUsable(std::string* why) {
  const auto& f = kernelFeatures();
  if (!f.root)
    *why = "the delay line needs root: " + f.note;
  else if (access("/dev/net/tun", R_OK | W_OK) != 0)
    *why = "no /dev/net/tun";
  return f.root && access("/dev/net/tun", R_OK | W_OK) == 0;
}

TEST(DelayLineTest, RoundTripsAreTwiceTheDelay) {
  std::string why;
  if (!lineUsable(&why)) GTEST_SKIP() << why;
  DelayLineOptions o;
  o.aToB = packetLinkSpecFromJson({{"rate", "100Mbps"}, {"delay", "10ms"}}, "line");
  o.bToA = o.aToB;
  DelayLineProbe p;
  p.probes = 100;
  const nlohmann::json r = probeDelayLine(o, p);
  ASSERT_TRUE(r.contains("rtt_s")) << r.dump();
  EXPECT_EQ(r["rtt_s"]["probes"], 100);
  EXPECT_GE(r["rtt_s"]["min"].get<double>(), 0.020) << r["rtt_s"].dump();
  EXPECT_EQ(r["stats"]["a_to_b"]["lost_ingress"], 0);
  EXPECT_TRUE(cleanupNamespaces(false).empty()) << "a namespace was left behind";
  // A stalled forwarding thread only lengthens round trips (checked above that none came early).
  // The 0.3 ms bound on the line's own cost is the Release suite's claim; under AddressSanitizer
  // the probe's echo and the forwarding thread are instrumented and share 2 cores (two CI runs
  // there read medians of 20.34 ms, the line's own lateness 26-30 us a way at the median), so this
  // build bounds it at 0.6 ms, as the shaped socket's latency test does.
#if defined(__SANITIZE_ADDRESS__)
  constexpr double kOwnCost = 6e-4;
#else
  constexpr double kOwnCost = 3e-4;
#endif
  const double median = r["rtt_s"]["median"].get<double>();
  SKIP_IF_HOST_TIME(median > 0.020 + kOwnCost, r.value("host_cpu_steal", 0.0)) << r["rtt_s"].dump();
  EXPECT_LE(median, 0.020 + kOwnCost) << r.dump();
}

TEST(DelayLineTest, OneStreamDrawsTheRateAtMtu1500) {
  std::string why;
  if (!lineUsable(&why)) GTEST_SKIP() << why;
  if (runCommand({"iperf3", "--version"}).status != 0) GTEST_SKIP() << "no iperf3";
  DelayLineOptions o;
  o.aToB = packetLinkSpecFromJson({{"rate", "1Gbps"}, {"delay", "1ms"}, {"mtu", 1500}}, "line");
  o.bToA = o.aToB;
  DelayLineProbe p;
  p.probes = 5;
  p.iperfS = 3;
  p.cc = "cubic";
  const nlohmann::json r = probeDelayLine(o, p);
  ASSERT_TRUE(r.contains("link_ok")) << r.dump();
  // What forwarding cost: the thread's own CPU clock, which one thread cannot run past its wall
  // time, and which 3 s of a stream at 1 Gbps (some 80000 packets a second one way) do not leave
  // near 0.
  ASSERT_TRUE(r["stats"].contains("forwarding")) << r["stats"].dump();
  const auto& fw = r["stats"]["forwarding"];
  EXPECT_GT(fw["wall_s"].get<double>(), 3.0) << fw.dump();
  EXPECT_LE(fw["cpu_s"].get<double>(), fw["wall_s"].get<double>() * 1.001) << fw.dump();
  EXPECT_GT(fw["cpu_share"].get<double>(), 0.02) << fw.dump();
  // Its wake-ups: each one a packet read or a packet due (both directions), a few more to stop.
  const double packets =
      r["stats"]["a_to_b"]["offered"].get<double>() + r["stats"]["b_to_a"]["offered"].get<double>();
  EXPECT_GT(fw["wakeups"].get<double>(), 0) << fw.dump();
  EXPECT_LE(fw["wakeups"].get<double>(), 2 * packets + 10)
      << fw.dump() << " for " << packets << " packets";
  EXPECT_NEAR(fw["wakeups_per_s"].get<double>(),
              fw["wakeups"].get<double>() / fw["wall_s"].get<double>(), 1e-6)
      << fw.dump();
  std::printf("forwarding: %s\n", fw.dump().c_str());
  const double err = r["rate_error"].get<double>();
  EXPECT_EQ(r["link_ok"].get<bool>(), std::fabs(err) <= 0.03) << r.dump();
  EXPECT_LE(err, 0.03) << "the line carried more than its rate: " << r.dump();
  EXPECT_EQ(r["stats"]["a_to_b"]["dropped_queue"], 0);
  EXPECT_TRUE(cleanupNamespaces(false).empty()) << "a namespace was left behind";
  SKIP_IF_HOST_TIME(!r["link_ok"].get<bool>(), r.value("host_cpu_steal", 0.0))
      << r["iperf3"].dump();
  // A forwarding thread that ran through the whole stream without a pause (its CPU time within 3%
  // of the stream's seconds) and still fell short: this host cannot forward 1 Gbps of MTU 1500
  // packets beside the two iperf3 ends (2 cores; one such day fell short in 7 of 12 runs alone,
  // line rate 0.84-0.97 Gbps, the thread busy 3.01-3.03 s of 3 in every run), which the probe's
  // link_ok says, as checked above; the rate is judged where the thread had time to spare.
  if (!r["link_ok"].get<bool>() && fw["cpu_s"].get<double>() >= 0.97 * p.iperfS)
    GTEST_SKIP() << "the forwarding thread was busy for the whole stream ("
                 << fw["cpu_s"].get<double>() << " s of " << p.iperfS << " s) and the line carried "
                 << r["iperf3"].dump() << ": this host cannot forward 1 Gbps at MTU 1500";
#ifndef __SANITIZE_ADDRESS__
  // Under AddressSanitizer the forwarding thread runs 2-3x slower (a CI run on a slower host read
  // 0.86 of 1 Gbps, 0.96 past slow start): there the probe must only say so, as checked above.
  EXPECT_TRUE(r["link_ok"].get<bool>())
      << "1 Gbps at MTU 1500 not reached here: " << r["iperf3"].dump();
#endif
}

// Interrupt moderation (DelayLineOptions::batchS): a lone packet after a quiet spell goes on time;
// a stream is written in batches at most batchS apart, none before its due time and none more than
// batchS after it. Without moderation the same stream arrives a packet every 114 us, one gap of a
// millisecond or more at most where the host stalled.
TEST(DelayLineTest, ModerationBatchesAStreamAndKeepsALonePacketOnTime) {
  std::string why;
  if (!lineUsable(&why)) GTEST_SKIP() << why;
  EXPECT_DOUBLE_EQ(moderationFor(0.025), 100e-6);
  EXPECT_DOUBLE_EQ(moderationFor(0.001), 20e-6);
  EXPECT_DOUBLE_EQ(moderationFor(0), 0);
  testsupport::StealMeter steal;
  DelayLineOptions o;
  o.aToB = packetLinkSpecFromJson({{"rate", "100Mbps"}, {"delay", "5ms"}}, "line");
  o.bToA = o.aToB;
  o.bToA.delayS = 0.002;
  {  // negative: "auto", resolved by the line from its shorter direction (2 ms / 50)
    o.batchS = -1;
    EXPECT_DOUBLE_EQ(DelayLine(o).describe()["moderation_us"].get<double>(), 40.0);
    o.bToA.delayS = o.aToB.delayS;
  }
  o.batchS = 2e-3;
  DelayLine line(o);
  EXPECT_DOUBLE_EQ(line.describe()["moderation_us"].get<double>(), 2000);
  constexpr int kBurst = 200, kLone = 5, kPort = 9123;
  constexpr size_t kPayload = 1400;  // 1428 bytes on the line (IPv4 + UDP)
  const double tx = (kPayload + 28) * 8 / 100e6, delay = 0.005;
  struct Seen {
    int index;
    double sent, arrived;
  };
  std::vector<Seen> seen;
  std::atomic<bool> ready{false}, bound{false};
  sockaddr_in a{};  // b's end
  a.sin_family = AF_INET;
  a.sin_port = htons(kPort);
  inet_pton(AF_INET, line.addressB().c_str(), &a.sin_addr);
  std::thread receiver([&] {
    inNamespace(line.nsB(), [&] {
      const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      const int size = 4 << 20;
      setsockopt(s, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
      if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ready = true;
        close(s);
        return;
      }
      timeval tv{0, 300000};
      setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      bound = true;
      ready = true;
      char b[2048];
      for (ssize_t n; (n = recv(s, b, sizeof b, 0)) > 0;) {
        Seen x{};
        std::memcpy(&x.index, b, sizeof x.index);
        std::memcpy(&x.sent, b + sizeof x.index, sizeof x.sent);
        x.arrived = hostClockNow();
        seen.push_back(x);
      }
      close(s);
    });
  });
  while (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!bound) receiver.join();
  ASSERT_TRUE(bound) << "could not bind " << line.addressB() << ":" << kPort << " in "
                     << line.nsB();
  double burstStart = 0;
  inNamespace(line.nsA(), [&] {
    const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    std::vector<char> b(kPayload);
    auto send = [&](int index) {
      const double t = hostClockNow();
      std::memcpy(b.data(), &index, sizeof index);
      std::memcpy(b.data() + sizeof index, &t, sizeof t);
      sendto(s, b.data(), b.size(), 0, reinterpret_cast<const sockaddr*>(&a), sizeof a);
      return t;
    };
    for (int k = 0; k < kLone; ++k) {  // lone packets, 20 ms apart
      send(-1 - k);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    burstStart = send(0);
    for (int i = 1; i < kBurst; ++i) send(i);
    close(s);
  });
  receiver.join();
  line.stop();
  // How late the line itself wrote each packet (not the receiver's wake-up): its p99.
  const double lineLateP99 = 1e-6 * line.stats()["a_to_b"]["lateness_us"]["p99"].get<double>();
  const double stealShare = steal.share();
  ASSERT_EQ(seen.size(), kBurst + kLone + 0u) << "packets lost on an unlossy line";
  // Never early: a lone packet not before its delay, the burst's i-th not before the rate allows.
  std::vector<double> loneLate;
  for (int k = 0; k < kLone; ++k) {
    ASSERT_EQ(seen[k].index, -1 - k);
    EXPECT_GE(seen[k].arrived - seen[k].sent, delay);
    loneLate.push_back(seen[k].arrived - seen[k].sent - delay - tx);
  }
  std::sort(loneLate.begin(), loneLate.end());
  int gaps = 0;
  for (int i = 0; i < kBurst; ++i) {
    const Seen& x = seen[kLone + i];
    ASSERT_EQ(x.index, i) << "reordered";
    EXPECT_GE(x.arrived, burstStart + delay + (i + 1) * tx - 1e-6)
        << "burst packet " << i << " came before its due time";
    if (i > 0 && x.arrived - seen[kLone + i - 1].arrived >= 1e-3) ++gaps;
  }
  // Batches at most batchS apart: a stall merges batches, it never splits one.
  const double span = seen.back().arrived - seen[kLone].arrived;
  EXPECT_LE(gaps + 1, span / o.batchS + 2) << gaps << " gaps over " << span << " s";
  // What a stall can mimic or spoil: the batches themselves (a stream of 23 ms in batches of 2 ms),
  // the lone packets' promptness (the median; a receiver woken from idle takes 0.5 ms here), the
  // line's own lateness.
  const double loneMedian = loneLate[kLone / 2];
  SKIP_IF_HOST_TIME(gaps < 5 || loneMedian > 1e-3 || lineLateP99 > o.batchS + 5e-4, stealShare)
      << gaps << " gaps of 1 ms or more, the lone packets' median " << 1e6 * loneMedian
      << " us late, the line's p99 " << 1e6 * lineLateP99 << " us";
  EXPECT_GE(gaps, 5) << "the stream was not batched (span " << span << " s)";
  EXPECT_LE(loneMedian, 1e-3) << "packets after a quiet spell were held";
#ifndef __SANITIZE_ADDRESS__
  // Under AddressSanitizer the forwarding thread runs 2-3x slower and reads a whole burst before it
  // delivers what is due (a CI run: p99 6.4 ms late with 2 ms moderation, steal under 3%; another
  // passed): there the batches, never-early and the lone packets are what is checked.
  EXPECT_LE(lineLateP99, o.batchS + 5e-4) << "packets held longer than the moderation allows";
#endif
}

// Both ways 1 Gbps, 10 ms, MTU 1500 unless said: the message probes' line.
DelayLineOptions lineOf1GbpsAnd10ms(int mtu = 1500) {
  DelayLineOptions o;
  o.aToB = packetLinkSpecFromJson({{"rate", "1Gbps"}, {"delay", "10ms"}, {"mtu", mtu}}, "line");
  o.bToA = o.aToB;
  return o;
}

// The message probe records what the sender's kernel had before each message (TCP_INFO and
// SO_SNDBUF) and, traced, every sample's send buffer and pacing: the evidence that showed a send
// buffer autotuned behind the window (results/README.md section 16).
TEST(DelayLineTest, MessageProbeRecordsTheSendBufferAndPacing) {
  std::string why;
  if (!lineUsable(&why)) GTEST_SKIP() << why;
  const DelayLineOptions o = lineOf1GbpsAnd10ms();
  MessageProbe p;
  p.bytes = {65536, 1048576, 1048576};
  p.idleS = {0, 0, 0.02};
  p.cc = "cubic";
  p.traceS = 0.002;
  const nlohmann::json r = messageTimes(o, p);
  ASSERT_EQ(r["messages"].size(), 3u) << r.dump();
  double lastBuffer = 0;
  for (const auto& m : r["messages"]) {
    const auto& k = m["kernel"];
    // The initial buffer holds at least the initial window; autotuning never shrinks it.
    EXPECT_GE(k["sndbuf_before"].get<double>(), 10 * 1448.0) << k.dump();
    EXPECT_GE(k["sndbuf_before"].get<double>(), lastBuffer) << k.dump();
    lastBuffer = k["sndbuf_before"].get<double>();
    EXPECT_GE(k["min_rtt_before_s"].get<double>(), 0.020) << k.dump();
    EXPECT_LE(k["min_rtt_before_s"].get<double>(), 0.025) << k.dump();
    EXPECT_GT(k["pacing_rate_before_bps"].get<double>(), 0) << k.dump();
  }
  const auto& columns = r["trace"]["columns"];
  ASSERT_EQ(columns.size(), 9u) << columns.dump();
  EXPECT_EQ(columns[6], "sndbuf");
  double tracedBuffer = 0;
  for (const auto& row : r["trace"]["rows"]) {
    ASSERT_EQ(row.size(), columns.size()) << row.dump();
    tracedBuffer = std::max(tracedBuffer, row[6].get<double>());
  }
  EXPECT_GE(tracedBuffer, lastBuffer)
      << "the trace's send buffer never reached what the last message started with";
  EXPECT_TRUE(cleanupNamespaces(false).empty()) << "a namespace was left behind";
}

// The receive buffer's maximum, set through the probe as a user would (`tcp-messages --wmem-max
// --rmem-max`): applied in both namespaces and recorded, the kernel's window stops at the ceiling
// the tcp model uses (rmem_max x 160/256 at MTU 1500, less a segment at most), and the model,
// given the same settings, bills the capped message within the grid's bound (25%). Fails on a
// model without a receive window: 8 MiB at 1 Gbps / RTT 20 ms would take it 0.09 s, not 0.25.
TEST(DelayLineTest, TheReceiveBufferCapsTheWindowAsTheModelSays) {
  std::string why;
  if (!lineUsable(&why)) GTEST_SKIP() << why;
  const DelayLineOptions o = lineOf1GbpsAnd10ms();
  MessageProbe p;
  p.bytes = {1048576, 8388608};
  p.idleS = {0, 0};
  p.cc = "cubic";
  p.traceS = 0.005;
  p.wmemMax = 67108864;
  p.rmemMax = 1048576;
  const testsupport::StealMeter steal;
  const nlohmann::json r = messageTimes(o, p);
  ASSERT_EQ(r["messages"].size(), 2u) << r.dump();
  EXPECT_EQ(r["tcp"]["rmem_max"], 1048576) << r.dump();
  EXPECT_NE(r["tcp_applied"]["b"]["tcp_rmem"].get<std::string>().find("1048576"), std::string::npos)
      << r["tcp_applied"].dump();
  EXPECT_NE(r["tcp_applied"]["a"]["tcp_wmem"].get<std::string>().find("67108864"),
            std::string::npos)
      << r["tcp_applied"].dump();
  double window = 0;
  for (const auto& row : r["trace"]["rows"])
    window = std::max(window, row[7].get<double>());  // snd_wnd
  const double ceiling = 1048576 * 160.0 / 256;
  EXPECT_LE(window, ceiling) << "the kernel's window passed the model's ceiling";
  EXPECT_GE(window, ceiling - 1448) << "the kernel's window stopped short of the model's ceiling";
  const auto& m = r["messages"][1];
  EXPECT_GT(m["kernel"]["rwnd_limited_s"].get<double>(), 0) << m.dump();
  // A window a round trip: the last of 12.8 windows leaves 11.8 round trips in and takes 10 ms.
  EXPECT_GE(m["model_s"].get<double>(), (8388608 / ceiling - 1) * 0.020 + 0.010) << m.dump();
  EXPECT_LE(m["error"].get<double>(), 0.25)
      << m.dump();  // the model slower than the kernel: no stall does that
  SKIP_IF_HOST_TIME(m["error"].get<double>() < -0.25, steal.share()) << m.dump();
  EXPECT_GE(m["error"].get<double>(), -0.25) << m.dump();
  EXPECT_TRUE(cleanupNamespaces(false).empty()) << "a namespace was left behind";
}

// The receiver's first window in the kernel (LinkModelTest.TcpFirstReceiveWindowHoldsBack...): at
// MTU 9000 a new connection's initial congestion window (10 x 8948 bytes) is more than the 64 KiB
// its receiver first announces, so 80,000 bytes over 1 Gbps / 10 ms each way take a round trip
// more than one flight (at least 20 + 10 ms, where one flight arrives in 10.7 ms), and 60,000
// bytes one flight; the model bills both within the grid's bound (25%). Fails on a model without
// the receiver's first window (80,000 bytes in 10.7 ms, -64%).
TEST(DelayLineTest, AJumboInitialWindowWaitsForTheReceiversFirstWindow) {
  std::string why;
  if (!lineUsable(&why)) GTEST_SKIP() << why;
  const DelayLineOptions o = lineOf1GbpsAnd10ms(9000);
  const testsupport::StealMeter steal;
  auto first = [&](uint64_t bytes) {
    MessageProbe p;
    p.bytes = {bytes};
    p.idleS = {0};
    p.cc = "cubic";
    const nlohmann::json r = messageTimes(o, p);
    EXPECT_EQ(r["messages"].size(), 1u) << r.dump();
    return r["messages"].at(0);
  };
  const nlohmann::json wide = first(80000), narrow = first(60000);
  EXPECT_GE(wide["measured_s"].get<double>(), 0.030) << wide.dump();
  EXPECT_GE(wide["model_s"].get<double>(), 0.030) << wide.dump();
  EXPECT_LT(narrow["model_s"].get<double>(), 0.012) << narrow.dump();
  for (const auto& m : {wide, narrow}) {
    EXPECT_LE(m["error"].get<double>(), 0.25) << m.dump();
    SKIP_IF_HOST_TIME(m["error"].get<double>() < -0.25, steal.share()) << m.dump();
    EXPECT_GE(m["error"].get<double>(), -0.25) << m.dump();
  }
  EXPECT_TRUE(cleanupNamespaces(false).empty()) << "a namespace was left behind";
}

// A message striped over 4 connections as the runtime's channel stripes a frame (`tcp-messages
// --streams 4`): a 1 MiB message of an odd size arrives whole, the run records the streams, and
// the 4 connections' 4 initial windows take it in fewer round trips than one connection (1 Gbps,
// RTT 20 ms: 7 rounds of slow start for 725 segments from 10, 5 from 40), in the kernel and in
// the model billed with the same streams.
TEST(DelayLineTest, StreamsStripeAMessageOverConnections) {
  std::string why;
  if (!lineUsable(&why)) GTEST_SKIP() << why;
  const DelayLineOptions o = lineOf1GbpsAnd10ms();
  auto once = [&](int streams) {
    MessageProbe p;
    p.bytes = {1048579};
    p.idleS = {0};
    p.cc = "cubic";
    p.streams = streams;
    return messageTimes(o, p);
  };
  // Three of each, alternated, the fastest kept: another process can only slow a run down.
  const testsupport::StealMeter steal;
  nlohmann::json m1, m4;
  for (int round = 0; round < 3; ++round) {
    const nlohmann::json one = once(1), four = once(4);
    EXPECT_FALSE(one.contains("tcp")) << one.dump();
    ASSERT_EQ(four["tcp"]["streams"], 4) << four.dump();
    ASSERT_EQ(four["connections_at_end"].size(), 4u) << four.dump();
    for (const auto& c : four["connections_at_end"])  // every stripe went over its own connection
      EXPECT_GE(c["bytes_sent"].get<double>(), 1048579 / 4) << c.dump();
    if (m1.is_null() || one["messages"][0]["measured_s"] < m1["measured_s"])
      m1 = one["messages"][0];
    if (m4.is_null() || four["messages"][0]["measured_s"] < m4["measured_s"])
      m4 = four["messages"][0];
  }
  EXPECT_LT(m4["model_s"].get<double>(), m1["model_s"].get<double>() - 0.030)
      << m1.dump() << m4.dump();
  SKIP_IF_HOST_TIME(m4["measured_s"].get<double>() >= m1["measured_s"].get<double>() - 0.020,
                    steal.share())
      << m1.dump() << m4.dump();
  EXPECT_LT(m4["measured_s"].get<double>(), m1["measured_s"].get<double>() - 0.020)
      << m1.dump() << m4.dump();
  EXPECT_TRUE(cleanupNamespaces(false).empty()) << "a namespace was left behind";
}

}  // namespace
}  // namespace slowpipe::emulator
