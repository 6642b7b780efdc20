// network.tcp's parsing and what `ss -tin` says of each connection (TCP_INFO), parsed.
#include "emulator/tcp_settings.h"

#include <gtest/gtest.h>

namespace slowpipe::emulator {
namespace {

TEST(TcpSettingsTest, ParsesAndRefusesByName) {
  const TcpSettings t = tcpSettingsFromJson(
      {{"congestion_control", "reno"}, {"slow_start_after_idle", false}, {"wmem_max", 8388608}},
      "network.tcp");
  EXPECT_EQ(t.congestionControl, "reno");
  ASSERT_TRUE(t.slowStartAfterIdle.has_value());
  EXPECT_FALSE(*t.slowStartAfterIdle);
  EXPECT_EQ(t.wmemMax, 8388608u);
  EXPECT_EQ(toJson(t)["wmem_max"], 8388608);
  EXPECT_TRUE(tcpSettingsFromJson(nlohmann::json::object(), "t").empty());
  for (const auto& [bad, field] :
       {std::pair{nlohmann::json{{"congestion_control", "cu bic"}}, "congestion_control"},
        std::pair{nlohmann::json{{"wmem_max", 100}}, "wmem_max"},
        std::pair{nlohmann::json{{"slow_start_after_idle", 0}}, "slow_start_after_idle"},
        std::pair{nlohmann::json{{"streams", 0}}, "streams"},
        std::pair{nlohmann::json{{"rmem", 8}}, "rmem"}}) {
    try {
      tcpSettingsFromJson(bad, "network.tcp");
      FAIL() << bad.dump() << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("network.tcp.") + field), std::string::npos)
          << e.what();
    }
  }
}

TEST(TcpSettingsTest, SsTcpInfoIsParsedPerConnection) {
  const std::string text =
      "ESTAB 0       0               10.213.0.1:53272          10.213.0.2:5202 \n"
      "\t cubic wscale:10,10 rto:204 rtt:20.327/0.278 mss:8948 pmtu:9000 rcvmss:536 advmss:8948 "
      "cwnd:46 ssthresh:51 "
      "bytes_sent:1316290332 bytes_retrans:458487 bytes_acked:1315831846 send 73693406728bps "
      "pacing_rate 79788512160bps "
      "delivery_rate 31076677960bps delivered:24382 busy:656ms retrans:0/8 dsack_dups:8 "
      "minrtt:0.001\n"
      "ESTAB 1572864 0      10.213.0.2:5202  10.213.0.1:53272\n"
      "\t reno wscale:10,10 rto:204 rtt:0.014/0.007 ato:40 mss:32768 cwnd:10 "
      "bytes_received:1321335703\n";
  const nlohmann::json c = parseSsTcpInfo(text);
  ASSERT_EQ(c.size(), 2u) << c.dump();
  EXPECT_EQ(c[0]["congestion_control"], "cubic");
  EXPECT_EQ(c[0]["local"], "10.213.0.1:53272");
  EXPECT_EQ(c[0]["peer"], "10.213.0.2:5202");
  EXPECT_DOUBLE_EQ(c[0]["rtt_ms"].get<double>(), 20.327);
  EXPECT_DOUBLE_EQ(c[0]["cwnd"].get<double>(), 46);
  EXPECT_DOUBLE_EQ(c[0]["ssthresh"].get<double>(), 51);
  EXPECT_DOUBLE_EQ(c[0]["bytes_retrans"].get<double>(), 458487);
  EXPECT_DOUBLE_EQ(c[0]["retransmits"].get<double>(), 8);
  EXPECT_DOUBLE_EQ(c[0]["delivery_rate_bps"].get<double>(), 31076677960.0);
  EXPECT_EQ(c[1]["congestion_control"], "reno");
  EXPECT_FALSE(c[1].contains("retransmits"));
}

}  // namespace
}  // namespace slowpipe::emulator
