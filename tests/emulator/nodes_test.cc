// Nodes and access links (emulator/nodes.h): the network file's rules, the paths they give, and
// the access links' booking rule by hand, in one process and across processes.
#include "emulator/nodes.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

namespace slowpipe::emulator {
namespace {

using nlohmann::json;

json consumer() {
  return json::parse(R"({
    "name": "two homes and a server",
    "nodes": [{"name": "home", "count": 2, "up": "10Mbps", "down": "50Mbps"},
              {"name": "server", "up": "1Gbps", "down": "1Gbps"}],
    "core": {"default": {"latency": "20ms"},
             "pairs": [{"a": "home", "b": "home", "latency": "5ms"},
                       {"a": "home-0", "b": "server", "latency": "30ms", "bandwidth": "40Mbps", "directed": true}]}
  })");
}

TEST(NodesTest, PairsResolveByNodeThenRegionThenDefault) {
  const NodeNetwork net = NodeNetwork::fromJson(consumer(), "network.nodes");
  ASSERT_EQ(net.size(), 3);
  EXPECT_EQ(net.node(1).name, "home-1");
  EXPECT_EQ(net.node(1).region, "home");
  const int h0 = net.index("home-0", "x"), h1 = net.index(json(1), "x"),
            srv = net.index("server", "x");
  // home-0 -> server: the directed node pair (30 ms, core 40 Mbps), bottleneck min(10, 40, 1000).
  EXPECT_DOUBLE_EQ(net.path(h0, srv).latencyS, 0.030);
  EXPECT_DOUBLE_EQ(net.path(h0, srv).bandwidthBps, 10e6);
  EXPECT_EQ(net.access(h0, srv).coreSlot, 6);  // 2 x 3 node calendars, then the one rated core
  // server -> home-0: directed, so the default (20 ms, no core rate); down 50 Mbps limits.
  EXPECT_DOUBLE_EQ(net.path(srv, h0).latencyS, 0.020);
  EXPECT_DOUBLE_EQ(net.path(srv, h0).bandwidthBps, 50e6);
  EXPECT_EQ(net.access(srv, h0).coreSlot, -1);
  // home-0 <-> home-1: the region pair (5 ms).
  EXPECT_DOUBLE_EQ(net.path(h1, h0).latencyS, 0.005);
  EXPECT_EQ(net.calendars(), 7);
  // One node: its local link.
  EXPECT_DOUBLE_EQ(net.path(h0, h0).bandwidthBps, 100e9);
  EXPECT_FALSE(net.access(h0, h0).active());
}

TEST(NodesTest, BadNetworksNameTheFieldAndValue) {
  auto expectError = [](json j, const std::string& needle) {
    try {
      NodeNetwork::fromJson(j, "network.nodes");
      FAIL() << "accepted " << j.dump();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  json j = consumer();
  j["core"]["pairs"][0]["b"] = "mars";
  expectError(j, "network.nodes.core.pairs[0].b: 'mars' is neither a node nor a region");
  j = consumer();
  j["nodes"][1]["up"] = "fast";
  expectError(j, "network.nodes.nodes[1].up: 'fast' is not a bandwidth");
  j = consumer();
  j["nodes"][0].erase("up");
  j["nodes"][1].erase("down");
  EXPECT_THROW(NodeNetwork::fromJson(j, "network.nodes").path(1, 2),
               std::invalid_argument);  // only a used pair fails
  try {
    NodeNetwork::fromJson(j, "network.nodes").path(1, 2);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("nothing limits the rate from node 'home-1' to 'server'"),
              std::string::npos)
        << e.what();
  }
  expectError(json("/nonexistent/net.json"),
              "cannot read the network file '/nonexistent/net.json'");
  j = consumer();
  j["nodez"] = 1;
  expectError(j, "network.nodes.nodez: unknown field");
  const NodeNetwork net = NodeNetwork::fromJson(consumer(), "network.nodes");
  EXPECT_THROW(net.index("mars", "pipeline.placement[0]"), std::invalid_argument);
  EXPECT_THROW(net.index(json(3), "pipeline.placement[0]"), std::invalid_argument);
}

TEST(NodesTest, NetworkFileIsReadInlineWithItsPath) {
  const std::string path = ::testing::TempDir() + "/slowpipe_nodes_test.json";
  std::ofstream(path) << consumer().dump();
  const NodeNetwork net = NodeNetwork::fromJson(json(path), "network.nodes");
  EXPECT_EQ(net.document()["file"], path);
  EXPECT_EQ(net.name, "two homes and a server");
  EXPECT_EQ(net.size(), 3);
}

// The booking rule by hand. home-0 and home-1 each send 125000 bytes (1 Mbit) to the server at
// t = 0: each crosses its own 10 Mbps uplink (0.1 s) and 20-30 ms, the server's 1 Gbps downlink
// shares nothing slow. Then two messages from the server to home-0 share its 50 Mbps downlink.
TEST(NodesTest, AccessLinksShareByHand) {
  const NodeNetwork net = NodeNetwork::fromJson(consumer(), "network.nodes");
  AccessLinks links(net.calendars());
  const int h0 = 0, h1 = 1, srv = 2;
  const uint64_t mbit = 125000;
  // home-0 -> server: up 0.1 s, core 40 Mbps (0.025 s, cut through behind the uplink), 30 ms,
  // down 1 ms: arrival 0.1 + 0.03 (the downlink's 1 ms ends before the uplink's last bit lands).
  EXPECT_NEAR(links.send(net.access(h0, srv), 0, mbit), 0.130, 1e-12);
  EXPECT_NEAR(links.send(net.access(h1, srv), 0, mbit), 0.120, 1e-12);  // own uplink, 20 ms
  // A second message on home-0's uplink queues behind the first: 0.2 + 0.03.
  EXPECT_NEAR(links.send(net.access(h0, srv), 0.05, mbit), 0.230, 1e-12);
  // server -> home-0 twice at t = 1: up 1 ms each (back to back), down 20 ms each at 50 Mbps:
  // the first 1.001 + 0.020 + ... : s3 = 1.0 + 0.020, f3 = 1.040; the second s3 = 1.040, f3
  // = 1.060.
  EXPECT_NEAR(links.send(net.access(srv, h0), 1.0, mbit), 1.040, 1e-12);
  EXPECT_NEAR(links.send(net.access(srv, h0), 1.0, mbit), 1.060, 1e-12);
}

// A downlink serves messages in the order they reach it, not the order they were booked: far's
// message (50 ms away) is booked first and takes the sink's 8 Mbps downlink (a byte a
// microsecond) over [0.050, 0.060); near's, booked after it but 1 ms away, reaches the downlink at
// 0.002 and fits in the gap before: [0.002, 0.012).
TEST(NodesTest, DownlinkServesInArrivalOrder) {
  const NodeNetwork net = NodeNetwork::fromJson(json::parse(R"({
    "nodes": [{"name": "far", "up": "1Gbps"}, {"name": "near", "up": "1Gbps"}, {"name": "sink", "down": "8Mbps"}],
    "core": {"default": {"latency": "50ms"}, "pairs": [{"a": "near", "b": "sink", "latency": "1ms"}]}})"),
                                                "n");
  AccessLinks links(net.calendars());
  EXPECT_NEAR(links.send(net.access(0, 2), 0, 10000), 0.060, 1e-12);
  EXPECT_NEAR(links.send(net.access(1, 2), 0.001, 10000), 0.012, 1e-12);
  // A third, booked last from far, waits for the first's end: [0.060, 0.070).
  EXPECT_NEAR(links.send(net.access(0, 2), 0.0, 10000), 0.070, 1e-12);
}

// A calendar that fills (more future bookings than it keeps) closes its smallest gaps rather
// than forgetting a booking: no later booking overlaps an earlier one. At t = 0, 60 senders 2k ms
// away each send 1 ms of the sink's 8 Mbps downlink (60 intervals with 1 ms gaps), then a sender
// 0 ms away sends 60 more: each lands in a gap or after the last, never on top of another.
TEST(NodesTest, AFullCalendarNeverDoubleBooks) {
  json pairs = json::array();
  for (int k = 0; k < 60; ++k)
    pairs.push_back({{"a", "src-" + std::to_string(k)},
                     {"b", "sink"},
                     {"latency", std::to_string(2 * k) + "ms"},
                     {"directed", true}});
  const NodeNetwork net = NodeNetwork::fromJson(
      {{"nodes", json::parse(R"([{"name": "src", "count": 60, "up": "100Gbps"},
      {"name": "near", "up": "100Gbps"}, {"name": "sink", "down": "8Mbps"}])")},
       {"core", {{"default", {{"latency", "0ms"}}}, {"pairs", pairs}}}},
      "n");
  AccessLinks links(net.calendars());
  const int near = net.index("near", "n"), sink = net.index("sink", "n");
  std::vector<std::pair<double, double>> busy;
  for (int k = 0; k < 60; ++k) {
    const double end = links.send(net.access(k, sink), 0.0, 1000);  // 1 ms at 8 Mbps
    busy.emplace_back(end - 0.001, end);
  }
  for (int k = 0; k < 60; ++k) {
    const double end = links.send(net.access(near, sink), 0.0, 1000), start = end - 0.001;
    for (const auto& [s, e] : busy)
      EXPECT_FALSE(start < e - 1e-9 && s < end - 1e-9)
          << "[" << start << ", " << end << ") on [" << s << ", " << e << ")";
    busy.emplace_back(start, end);
  }
}

// Across processes: a child books through the shared descriptor, the parent sees its booking.
TEST(NodesTest, SharedAccessLinksSpanProcesses) {
  const NodeNetwork net = NodeNetwork::fromJson(consumer(), "network.nodes");
  const int fd = AccessLinks::createShared(net.calendars());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    AccessLinks child = AccessLinks::attach(fd);
    _exit(std::abs(child.send(net.access(0, 2), 0, 125000) - 0.130) < 1e-12 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  AccessLinks parent = AccessLinks::attach(fd);
  EXPECT_NEAR(parent.send(net.access(0, 2), 0, 125000), 0.230,
              1e-12);  // behind the child's message
  close(fd);
}

}  // namespace
}  // namespace slowpipe::emulator
