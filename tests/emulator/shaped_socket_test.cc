// User-space backend over real ZeroMQ TCP loopback sockets: rate and latency accuracy, FIFO order,
// trace steps. Tolerances are set for a noisy 2-core machine and stated with each check.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "emulator/calibrate.h"
#include "emulator/shaped_socket.h"

namespace slowpipe::emulator {
namespace {

struct RateCase {
  double bps, latency;
};

class UserRateTest : public ::testing::TestWithParam<RateCase> {};

TEST_P(UserRateTest, RateWithin3PercentLatencyWithin02ms) {
  CalibrationOptions o;
  o.link.bandwidthBps = GetParam().bps;
  o.link.latencyS = GetParam().latency;
  o.messageBytes = 256 * 1024;
  o.messages = static_cast<int>(std::max(8.0, 0.5 * o.link.bandwidthBps / (8.0 * o.messageBytes)));  // ~0.5 s
  o.probes = 100;
  const auto r = calibrateLink(o);
  EXPECT_NEAR(r["achieved_bps"].get<double>() / o.link.bandwidthBps, 1.0, 0.03) << r.dump(2);
  EXPECT_NEAR(r["latency_median_s"].get<double>(), o.link.latencyS, 0.2e-3) << r.dump(2);
}

INSTANTIATE_TEST_SUITE_P(Points, UserRateTest,
                         ::testing::Values(RateCase{100e6, 0.0}, RateCase{100e6, 0.010}, RateCase{1e9, 0.0},
                                           RateCase{1e9, 0.005}),
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
  ShapedSender tx(push, s, true, 7);
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
  EXPECT_NEAR(seg[0]["achieved_bps"].get<double>() / 400e6, 1.0, 0.05) << r.dump(2);
  EXPECT_NEAR(seg[1]["achieved_bps"].get<double>() / 100e6, 1.0, 0.05) << r.dump(2);
}

}  // namespace
}  // namespace slowpipe::emulator
