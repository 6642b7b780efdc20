// Link model: unit parsing (and its errors), traces, topology overrides, the arrival formula.
#include "emulator/link.h"

#include <gtest/gtest.h>

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
  EXPECT_DOUBLE_EQ(c.send(0.0, 1000), 0.001 + 0.010);   // idle link
  EXPECT_DOUBLE_EQ(c.send(0.0005, 1000), 0.002 + 0.010);  // queued behind the first
  EXPECT_DOUBLE_EQ(c.send(0.5, 1000), 0.501 + 0.010);   // idle again
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

TEST(TraceTest, ParsesAndIntegratesAcrossSteps) {
  const auto t = BandwidthTrace::parse("# drop and recover\n0 1Gbps\n2.0 100Mbps\n3000ms 1Gbit\n", "mem");
  EXPECT_DOUBLE_EQ(t.rateAt(1.0), 1e9);
  EXPECT_DOUBLE_EQ(t.rateAt(2.5), 1e8);
  EXPECT_DOUBLE_EQ(t.rateAt(9.0), 1e9);
  // 1e9 bits starting at 1.5 s: 0.5e9 at 1 Gbps until 2.0, then 1e8 bits/s for 1 s = 1e8, then 1 Gbps.
  EXPECT_NEAR(t.finishTime(1.5, 1e9), 3.0 + 0.4e9 / 1e9, 1e-9);
  EXPECT_NE(errorOf([] { BandwidthTrace::parse("1 1Gbps\n", "f"); }).find("time 0"), std::string::npos);
  EXPECT_NE(errorOf([] { BandwidthTrace::parse("0 1Gbps\n0 2Gbps\n", "f"); }).find("f:2"), std::string::npos);
  EXPECT_NE(errorOf([] { BandwidthTrace::parse("0 fast\n", "f"); }).find("f:1 rate"), std::string::npos);
}

TEST(TopologyTest, OverridesPerLinkInheritDefaults) {
  const auto j = nlohmann::json::parse(R"({"bandwidth": "100Mbps", "latency": "5ms",
      "links": [{"src": 0, "dst": 1, "bandwidth": "10Gbps"}]})");
  const Topology t = topologyFromJson(j, "network");
  EXPECT_DOUBLE_EQ(t.link(0, 1).bandwidthBps, 10e9);
  EXPECT_DOUBLE_EQ(t.link(0, 1).latencyS, 5e-3);
  EXPECT_DOUBLE_EQ(t.link(1, 2).bandwidthBps, 100e6);
  const auto bad = nlohmann::json::parse(R"({"bandwidth": "100Mbs"})");
  EXPECT_NE(errorOf([&] { topologyFromJson(bad, "network"); }).find("network.bandwidth"), std::string::npos);
  const auto unknown = nlohmann::json::parse(R"({"bandwith": "1Gbps"})");
  EXPECT_NE(errorOf([&] { topologyFromJson(unknown, "network"); }).find("network.bandwith: unknown field"), std::string::npos);
}

}  // namespace
}  // namespace slowpipe::emulator
