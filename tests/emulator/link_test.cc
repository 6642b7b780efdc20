// Link model: unit parsing (and its errors), traces, topology overrides, the arrival formula.
#include "emulator/link.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace slowpipe::emulator {
namespace {

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(UnitsTest, ParsesHumanForms) {
  EXPECT_DOUBLE_EQ(parseBandwidth("100Mbps", "bw"), 100e6);
  EXPECT_DOUBLE_EQ(parseBandwidth("500Mbit", "bw"), 500e6);
  EXPECT_DOUBLE_EQ(parseBandwidth("1Gbps", "bw"), 1e9);
  EXPECT_DOUBLE_EQ(parseBandwidth("10Gbit", "bw"), 10e9);
  EXPECT_DOUBLE_EQ(parseBandwidth("2.5gbps", "bw"), 2.5e9);
  EXPECT_DOUBLE_EQ(parseDuration("5ms", "lat"), 5e-3);
  EXPECT_DOUBLE_EQ(parseDuration("250us", "lat"), 250e-6);
  EXPECT_DOUBLE_EQ(parseDuration("0", "lat"), 0.0);
  EXPECT_DOUBLE_EQ(parseDuration("1.5s", "lat"), 1.5);
}

TEST(UnitsTest, BadValuesNameFieldAndAcceptedForms) {
  const auto e1 = errorOf([] { parseBandwidth("100Mbs", "network.bandwidth"); });
  EXPECT_NE(e1.find("network.bandwidth: '100Mbs'"), std::string::npos) << e1;
  EXPECT_NE(e1.find("Mbps"), std::string::npos) << e1;
  const auto e2 = errorOf([] { parseDuration("-1ms", "network.latency"); });
  EXPECT_NE(e2.find("network.latency: '-1ms'"), std::string::npos) << e2;
  EXPECT_NE(e2.find("ms, us"), std::string::npos) << e2;
  EXPECT_NE(errorOf([] { parseDuration("5", "x"); }), "");  // ambiguous bare number
  EXPECT_NE(errorOf([] { parseBandwidth("0Mbps", "x"); }), "");
  EXPECT_NE(errorOf([] { parseBandwidth("fast", "x"); }), "");
}

TEST(LinkClockTest, ArrivalFollowsTheFormulaFifo) {
  LinkSpec s;
  s.bandwidthBps = 8e6;  // 1 byte per microsecond
  s.latencyS = 0.010;
  LinkClock c(s, 0.0);
  EXPECT_DOUBLE_EQ(c.send(0.0, 1000), 0.001 + 0.010);     // idle link
  EXPECT_DOUBLE_EQ(c.send(0.0005, 1000), 0.002 + 0.010);  // queued behind the first
  EXPECT_DOUBLE_EQ(c.send(0.5, 1000), 0.501 + 0.010);     // idle again
  EXPECT_NEAR(c.backlogSeconds(0.5005), 0.0005, 1e-12);
}

TEST(LinkClockTest, JitterNeverReordersAndStaysWithinThreeSigma) {
  LinkSpec s;
  s.bandwidthBps = 1e9;
  s.latencyS = 0.005;
  s.jitterS = 0.002;
  LinkClock c(s, 0.0, 42);
  double last = 0;
  for (int i = 0; i < 10000; ++i) {
    const double t = i * 1e-4;
    const double a = c.send(t, 100);
    ASSERT_GE(a, last);
    ASSERT_LE(a, t + 8 * 100 / 1e9 + 0.005 + 0.006 + 1e-9);
    last = a;
  }
}

// Gilbert-Elliott loss on the user backend's links (and so in the simulator, which bills the same
// clocks): a link's "loss" may be {"p", "r", "loss_good", "loss_bad"}. Over 10^6 draws (p 0.01,
// r 0.25, all lost in the bad state) the mean loss is within 5% of (r lg + p lb) / (p + r) = 3.85%
// and the mean burst within 5% of 1 / r = 4; the spec round-trips, and keeps "loss" as the mean
// for every check that asks whether a link loses anything; netem gets gemodel's arguments.
TEST(LinkClockTest, GilbertElliottLossMeetsItsMeansOverAMillionDraws) {
  const LinkSpec g =
      linkSpecFromJson({{"bandwidth", "1Gbps"}, {"loss", {{"p", 0.01}, {"r", 0.25}}}}, "links");
  ASSERT_TRUE(g.gilbertElliott);
  EXPECT_NEAR(g.loss, 0.01 / 0.26, 1e-12);
  LinkClock clock(g, 0.0, 7);
  int losses = 0, bursts = 0;
  bool previous = false;
  for (int i = 0; i < 1000000; ++i) {
    const bool l = clock.lose();
    losses += l;
    bursts += l && !previous;
    previous = l;
  }
  EXPECT_NEAR(losses / 1e6, g.loss, 0.05 * g.loss);
  EXPECT_NEAR(losses / double(bursts), 4.0, 0.05 * 4.0);
  nlohmann::json j = g;
  const LinkSpec back = linkSpecFromJson({{"bandwidth_bps", 1e9}, {"loss", j["loss"]}}, "links");
  EXPECT_TRUE(back.gilbertElliott);
  EXPECT_EQ(back.ge.r, 0.25);
  EXPECT_EQ(netemLossArgs(g), (std::vector<std::string>{"loss", "gemodel", "1.000000%",
                                                        "25.000000%", "100.000000%", "0.000000%"}));
  for (const auto& [bad, message] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"p", 0.1}, {"r", 0}}, "links.loss.r: must be > 0"},
           {{{"p", 0.1}, {"q", 0.2}},
            "links.loss.q: unknown field; expected p, r, loss_good, loss_bad"},
           {{{"p", 1.5}}, "links.loss.p: 1.5 must be a probability in [0, 1]"},
           {{{"p", 0.5}, {"loss_good", 1.0}}, "links.loss: a mean loss of 1 delivers nothing"}}) {
    try {
      linkSpecFromJson({{"loss", bad}}, "links");
      ADD_FAILURE() << bad.dump() << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// The other trace forms, by hand. Two columns (seconds, Mbit/s; the Pensieve / FCC logs), times
// counted from the first line's, a line of 0 Mbit/s at the 1 kbit/s floor. Mahimahi deliveries
// {0, 0, 1, 5, 10} ms (period 10 ms) in 5 ms windows: 3 opportunities in [0, 5), 2 in [5, 10)
// (the one at 10 ms closes the period), each 1448 payload bytes: 6.9504 and 4.6336 Mbit/s,
// repeated over the 20 ms horizon. A link names either form by {"file", "format", ...}, its JSON
// record keeps the form, and a 3 KB message at time 0 on the Mahimahi link finishes by hand.
TEST(TraceTest, TwoColumnAndMahimahiTracesByHand) {
  const BandwidthTrace m =
      BandwidthTrace::parseMbps("1.5 10\n2.5 20.5  # a comment\n\n3.5 0\n", "fcc");
  ASSERT_EQ(m.points().size(), 3u);
  EXPECT_EQ(m.points()[0], std::make_pair(0.0, 10e6));
  EXPECT_EQ(m.points()[1], std::make_pair(1.0, 20.5e6));
  EXPECT_EQ(m.points()[2], std::make_pair(2.0, 1e3));
  EXPECT_THROW(BandwidthTrace::parseMbps("0 10Mbps\n", "fcc"), std::invalid_argument);
  EXPECT_THROW(BandwidthTrace::parseMbps("1 10\n1 12\n", "fcc"), std::invalid_argument);
  const BandwidthTrace d =
      BandwidthTrace::fromDeliveries({0, 0, 1, 5, 10}, 0.005, 1500, 0.02, "mm");
  const double r0 = 3 * 8 * 1448 / 0.005, r1 = 2 * 8 * 1448 / 0.005;
  ASSERT_EQ(d.points().size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(d.points()[i].first, 0.005 * static_cast<double>(i), 1e-12);
    EXPECT_NEAR(d.points()[i].second, i % 2 ? r1 : r0, 1e-6);
  }
  const auto dir =
      std::filesystem::temp_directory_path() / ("slowpipe-trace-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "link.mahi") << "0\n0\n1\n5\n10\n";
  const nlohmann::json form = {{"file", (dir / "link.mahi").string()},
                               {"format", "mahimahi"},
                               {"window", "5ms"},
                               {"horizon", "20ms"}};
  const LinkSpec l = linkSpecFromJson({{"bandwidth", "1Gbps"}, {"trace", form}}, "links");
  EXPECT_EQ(l.trace.points(), d.points());
  EXPECT_EQ(nlohmann::json(l)["trace"], form);
  LinkClock clock(l, 0.0);
  const double bits = 8 * 3000.0;  // 5 ms at r0 carry 34752 bits: done within the first window
  EXPECT_NEAR(clock.send(0.0, 3000), bits / r0, 1e-12);
  for (const auto& [bad, message] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"file", (dir / "link.mahi").string()}, {"format", "csv"}},
            "links.trace.format: 'csv'; expected slowpipe, mbps or mahimahi"},
           {{{"file", (dir / "none").string()}, {"format", "mbps"}}, "cannot be read"},
           {{{"format", "mbps"}}, "links.trace: expected a file path or"},
           {{{"file", (dir / "link.mahi").string()}, {"format", "mahimahi"}, {"window", "0.1ms"}},
            "links.trace.window"},
           {{{"file", (dir / "link.mahi").string()}, {"every", 1}},
            "links.trace.every: unknown field"}}) {
    try {
      linkSpecFromJson({{"trace", bad}}, "links");
      ADD_FAILURE() << bad.dump() << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(TraceTest, ParsesAndIntegratesAcrossSteps) {
  const auto t =
      BandwidthTrace::parse("# drop and recover\n0 1Gbps\n2.0 100Mbps\n3000ms 1Gbit\n", "mem");
  EXPECT_DOUBLE_EQ(t.rateAt(1.0), 1e9);
  EXPECT_DOUBLE_EQ(t.rateAt(2.5), 1e8);
  EXPECT_DOUBLE_EQ(t.rateAt(9.0), 1e9);
  // 1e9 bits starting at 1.5 s: 0.5e9 at 1 Gbps until 2.0, then 1e8 bits/s for 1 s = 1e8, then 1
  // Gbps.
  EXPECT_NEAR(t.finishTime(1.5, 1e9), 3.0 + 0.4e9 / 1e9, 1e-9);
  EXPECT_NE(errorOf([] { BandwidthTrace::parse("1 1Gbps\n", "f"); }).find("time 0"),
            std::string::npos);
  EXPECT_NE(errorOf([] { BandwidthTrace::parse("0 1Gbps\n0 2Gbps\n", "f"); }).find("f:2"),
            std::string::npos);
  EXPECT_NE(errorOf([] { BandwidthTrace::parse("0 fast\n", "f"); }).find("f:1 rate"),
            std::string::npos);
}

TEST(TopologyTest, OverridesPerLinkInheritDefaults) {
  const auto j = nlohmann::json::parse(R"({"bandwidth": "100Mbps", "latency": "5ms",
      "links": [{"src": 0, "dst": 1, "bandwidth": "10Gbps"}]})");
  const Topology t = topologyFromJson(j, "network");
  EXPECT_DOUBLE_EQ(t.link(0, 1).bandwidthBps, 10e9);
  EXPECT_DOUBLE_EQ(t.link(0, 1).latencyS, 5e-3);
  EXPECT_DOUBLE_EQ(t.link(1, 2).bandwidthBps, 100e6);
  const auto bad = nlohmann::json::parse(R"({"bandwidth": "100Mbs"})");
  EXPECT_NE(errorOf([&] { topologyFromJson(bad, "network"); }).find("network.bandwidth"),
            std::string::npos);
  const auto unknown = nlohmann::json::parse(R"({"bandwith": "1Gbps"})");
  EXPECT_NE(errorOf([&] {
              topologyFromJson(unknown, "network");
            }).find("network.bandwith: unknown field"),
            std::string::npos);
}

}  // namespace
}  // namespace slowpipe::emulator
