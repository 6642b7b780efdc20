// Transport settings per namespace and TCP_INFO from ss (see tcp_settings.h).
#include "emulator/tcp_settings.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "emulator/command.h"

namespace slowpipe::emulator {

using nlohmann::json;

TcpSettings tcpSettingsFromJson(const json& j, const std::string& where) {
  if (!j.is_object())
    throw std::invalid_argument(where +
                                ": expected {\"congestion_control\", \"slow_start_after_idle\", "
                                "\"wmem_max\", \"rmem_max\", \"streams\"}");
  TcpSettings t;
  for (const auto& [k, v] : j.items()) {
    const std::string f = where + "." + k;
    if (k == "congestion_control") {
      if (!v.is_string() || v.get<std::string>().empty() ||
          v.get<std::string>().find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") !=
              std::string::npos)
        throw std::invalid_argument(
            f + ": expected the name of a congestion control, e.g. \"cubic\", \"bbr\", \"reno\"");
      t.congestionControl = v.get<std::string>();
    } else if (k == "slow_start_after_idle") {
      if (!v.is_boolean()) throw std::invalid_argument(f + ": expected true or false");
      t.slowStartAfterIdle = v.get<bool>();
    } else if (k == "wmem_max" || k == "rmem_max") {
      if (!v.is_number_integer() || v.get<int64_t>() < 65536 ||
          v.get<int64_t>() > (int64_t{1} << 31))
        throw std::invalid_argument(f + ": " + v.dump() +
                                    " must be a byte count in 65536..2147483648");
      (k == "wmem_max" ? t.wmemMax : t.rmemMax) = v.get<uint64_t>();
    } else if (k == "streams") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 64)
        throw std::invalid_argument(f + ": " + v.dump() +
                                    " must be a number of connections in 1..64");
      t.streams = v.get<int>();
    } else {
      throw std::invalid_argument(f +
                                  ": unknown field; expected congestion_control, "
                                  "slow_start_after_idle, wmem_max, rmem_max, streams");
    }
  }
  return t;
}

json tcpBimodality(const std::string& congestionControl, double rttS) {
  if (!(congestionControl.empty() || congestionControl == "cubic") || rttS < 0.0999) return nullptr;
  return {
      {"bimodal_under_tcp", true},
      {"why",
       "cubic's HyStart leaves the connection's first slow start at one of several windows, and "
       "every later "
       "message inherits it: the kernel's time for one message is a draw, the model's one of its "
       "outcomes"},
      {"measured",
       "75 Mbps, 4 MiB messages after 1-2 RTOs of idle, 20 connections per RTT "
       "(results/wan/idle_gap_validation): "
       "RTT 100 ms, 4 of 20 left slow start at 1,055-1,665 segments instead of 750 and their later "
       "messages "
       "were 4-7% faster; RTT 200 ms, 8 of 20 at 1,958-2,907 instead of 1,350, 7-8% faster"},
      {"model_follows",
       "RTT 200 ms: the common, lower exit (the slower mode); RTT 100 ms: the common exit for the "
       "first "
       "message after idle, the faster mode's time for later ones (7% under the kernel's median)"}};
}

json toJson(const TcpSettings& t) {
  json j = json::object();
  if (!t.congestionControl.empty()) j["congestion_control"] = t.congestionControl;
  if (t.slowStartAfterIdle) j["slow_start_after_idle"] = *t.slowStartAfterIdle;
  if (t.wmemMax) j["wmem_max"] = t.wmemMax;
  if (t.rmemMax) j["rmem_max"] = t.rmemMax;
  if (t.streams != 1) j["streams"] = t.streams;
  return j;
}

namespace {

std::string sysctlRead(const std::string& ns, const std::string& key) {
  std::string v = runChecked({"ip", "netns", "exec", ns, "sysctl", "-n", key}, "read " + key);
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  for (char& c : v)
    if (c == '\t') c = ' ';
  return v;
}

void sysctlWrite(const std::string& ns, const std::string& key, const std::string& value,
                 const std::string& field) {
  const CommandResult r =
      runCommand({"ip", "netns", "exec", ns, "sysctl", "-w", key + "=" + value});
  if (r.status != 0)
    throw std::runtime_error(field + ": setting " + key + " = " + value +
                             " in the run's namespace failed: " + r.output);
}

// "4096 16384 4194304" with its maximum replaced.
std::string withMax(const std::string& triple, uint64_t max) {
  std::istringstream in(triple);
  uint64_t lo = 0, mid = 0, hi = 0;
  in >> lo >> mid >> hi;
  return std::to_string(lo) + " " + std::to_string(std::min<uint64_t>(mid, max)) + " " +
         std::to_string(max);
}

}  // namespace

json applyTcpSettings(const std::string& ns, const TcpSettings& t) {
  if (!t.congestionControl.empty()) {
    const std::string available = sysctlRead(ns, "net.ipv4.tcp_available_congestion_control");
    const std::string allowed = sysctlRead(ns, "net.ipv4.tcp_allowed_congestion_control");
    auto has = [](const std::string& list, const std::string& name) {
      return (" " + list + " ").find(" " + name + " ") != std::string::npos;
    };
    if (!has(available, t.congestionControl))
      throw std::invalid_argument("network.tcp.congestion_control: '" + t.congestionControl +
                                  "' is not one this kernel offers (" + available + ")");
    if (!has(allowed, t.congestionControl))
      throw std::invalid_argument(
          "network.tcp.congestion_control: '" + t.congestionControl +
          "' is available but not in the "
          "host's net.ipv4.tcp_allowed_congestion_control (" +
          allowed +
          "), so a run's namespace may "
          "not make it its default (slowpipe never changes the host's settings)");
    sysctlWrite(ns, "net.ipv4.tcp_congestion_control", t.congestionControl,
                "network.tcp.congestion_control");
  }
  if (t.slowStartAfterIdle)
    sysctlWrite(ns, "net.ipv4.tcp_slow_start_after_idle", *t.slowStartAfterIdle ? "1" : "0",
                "network.tcp.slow_start_after_idle");
  if (t.wmemMax)
    sysctlWrite(ns, "net.ipv4.tcp_wmem", withMax(sysctlRead(ns, "net.ipv4.tcp_wmem"), t.wmemMax),
                "network.tcp.wmem_max");
  if (t.rmemMax)
    sysctlWrite(ns, "net.ipv4.tcp_rmem", withMax(sysctlRead(ns, "net.ipv4.tcp_rmem"), t.rmemMax),
                "network.tcp.rmem_max");
  return {{"congestion_control", sysctlRead(ns, "net.ipv4.tcp_congestion_control")},
          {"slow_start_after_idle", sysctlRead(ns, "net.ipv4.tcp_slow_start_after_idle") == "1"},
          {"tcp_wmem", sysctlRead(ns, "net.ipv4.tcp_wmem")},
          {"tcp_rmem", sysctlRead(ns, "net.ipv4.tcp_rmem")}};
}

namespace {
constexpr uint64_t kDefaultRmemMax = 33554432;  // net.ipv4.tcp_rmem's maximum on this kernel
}  // namespace

int receiveScalingRatio(int mtu) {
  const double head = mtu + 384.0;
  double alloc = 1;
  while (alloc < std::min(head, 4096.0)) alloc *= 2;
  if (head > 4096) alloc = std::ceil(head / 4096) * 4096;
  return static_cast<int>(std::floor(256 * (mtu - 52.0) / (alloc + 256)));
}

double receiveWindowCeiling(uint64_t rmemMax, int mtu) {
  return static_cast<double>(rmemMax ? rmemMax : kDefaultRmemMax) * receiveScalingRatio(mtu) / 256;
}

uint64_t receiveBufferAfterMeasure(uint64_t copied, uint64_t space, int ratio, uint64_t rmemMax) {
  if (copied <= space || space == 0 || ratio <= 0)
    throw std::invalid_argument("receiveBufferAfterMeasure: copied must exceed space > 0");
  uint64_t window = copied << 1;
  const uint64_t grow = window * (copied - space) / space;
  window += grow << 1;
  return std::min(window * 256 / static_cast<uint64_t>(ratio), rmemMax ? rmemMax : kDefaultRmemMax);
}

Stripe stripeOf(uint64_t bytes, uint64_t count, uint64_t index) {
  const uint64_t per = (bytes + count - 1) / count, at = std::min(bytes, index * per);
  return {at, std::min(per, bytes - at)};
}

json parseSsTcpInfo(const std::string& text) {
  json out = json::array();
  std::istringstream in(text);
  std::string line, head;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] != ' ' && line[0] != '\t') {  // "ESTAB 0 0 local peer"
      head = line;
      continue;
    }
    std::istringstream h(head);
    std::string state, recvq, sendq, local, peer;
    h >> state >> recvq >> sendq >> local >> peer;
    json c = {{"state", state}, {"local", local}, {"peer", peer}};
    std::istringstream fields(line);
    std::string tok, prev;
    bool first = true;
    while (fields >> tok) {
      if (first && tok.find(':') == std::string::npos) c["congestion_control"] = tok;
      first = false;
      const size_t colon = tok.find(':');
      const std::string key = colon == std::string::npos ? tok : tok.substr(0, colon),
                        val = colon == std::string::npos ? "" : tok.substr(colon + 1);
      auto num = [](const std::string& s) {
        try {
          return std::stod(s);
        } catch (const std::exception&) {
          return -1.0;
        }
      };
      if (key == "rtt") {
        c["rtt_ms"] = num(val.substr(0, val.find('/')));
        c["rttvar_ms"] = num(val.substr(val.find('/') + 1));
      } else if (key == "cwnd" || key == "ssthresh" || key == "mss" || key == "bytes_acked" ||
                 key == "bytes_retrans") {
        c[key] = num(val);
      } else if (key == "retrans") {
        c["retransmits"] = num(val.substr(val.find('/') + 1));
      } else if (prev == "delivery_rate") {
        c["delivery_rate_bps"] = num(tok.substr(0, tok.find("bps")));
      }
      prev = tok;
    }
    out.push_back(c);
  }
  return out;
}

json tcpInfo(const std::string& ns) {
  const CommandResult r = runCommand({"ip", "netns", "exec", ns, "ss", "-tinH"});
  if (r.status != 0) return {{"error", "ss -tin in " + ns + " failed: " + r.output}};
  return parseSsTcpInfo(r.output);
}

json socketTcpInfo(int fd) {
  tcp_info i{};
  socklen_t len = sizeof i;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &i, &len) != 0)
    throw std::runtime_error(std::string("getsockopt TCP_INFO: ") + std::strerror(errno));
  int sndbuf = 0;  // sk_sndbuf: what the send buffer may hold (truesize), as autotuning left it
  socklen_t sndbufLen = sizeof sndbuf;
  if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sndbufLen) != 0)
    throw std::runtime_error(std::string("getsockopt SO_SNDBUF: ") + std::strerror(errno));
  constexpr uint32_t kInfiniteSsthresh = 0x7fffffff;
  return {{"cwnd", i.tcpi_snd_cwnd},
          {"ssthresh",
           i.tcpi_snd_ssthresh >= kInfiniteSsthresh ? json(nullptr) : json(i.tcpi_snd_ssthresh)},
          {"snd_wnd", i.tcpi_snd_wnd},
          {"mss", i.tcpi_snd_mss},
          {"rtt_s", i.tcpi_rtt * 1e-6},
          {"rto_s", i.tcpi_rto * 1e-6},
          {"unacked", i.tcpi_unacked},
          {"bytes_sent", i.tcpi_bytes_sent},
          {"bytes_acked", i.tcpi_bytes_acked},
          {"bytes_retrans", i.tcpi_bytes_retrans},
          {"total_retrans", i.tcpi_total_retrans},
          {"busy_s", i.tcpi_busy_time * 1e-6},
          {"rwnd_limited_s", i.tcpi_rwnd_limited * 1e-6},
          {"sndbuf_limited_s", i.tcpi_sndbuf_limited * 1e-6},
          {"sndbuf", sndbuf},
          {"notsent_bytes", i.tcpi_notsent_bytes},
          {"min_rtt_s", i.tcpi_min_rtt * 1e-6},
          {"pacing_rate_bps", 8.0 * static_cast<double>(i.tcpi_pacing_rate)},
          {"delivery_rate_bps", 8.0 * static_cast<double>(i.tcpi_delivery_rate)}};
}

}  // namespace slowpipe::emulator
