// Transport settings of a run's namespaces (network.tcp, tc backend): the kernel's TCP as the
// workers' connections use it, set per network namespace (these are namespace sysctls, never the
// host's), and what the kernel says of each connection at the end (`ss -tin`: TCP_INFO).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace slowpipe::emulator {

struct TcpSettings {
  std::string congestionControl;           // empty: the kernel's default
  std::optional<bool> slowStartAfterIdle;  // net.ipv4.tcp_slow_start_after_idle
  uint64_t wmemMax = 0,
           rmemMax = 0;  // the maxima of net.ipv4.tcp_wmem / tcp_rmem (0: the kernel's)
  int streams = 1;       // connections per peer pair a message is striped over
  bool empty() const {
    return congestionControl.empty() && !slowStartAfterIdle && !wmemMax && !rmemMax && streams == 1;
  }
};

// {"congestion_control": "reno", "slow_start_after_idle": false, "wmem_max": bytes, "rmem_max":
// bytes, "streams": 1..64}; errors name "<where>.<field>".
TcpSettings tcpSettingsFromJson(const nlohmann::json& j, const std::string& where);
nlohmann::json toJson(const TcpSettings& t);

// Where the kernel's TCP has two outcomes that the tcp link model bills as one. Measured
// (results/wan/idle_gap_validation: 75 Mbps, 4 MiB messages after 1-2 RTOs of idle, 20
// connections per RTT and congestion control): under cubic, HyStart leaves the connection's first
// slow start at one of several windows, and every later message inherits it. At RTT 100 ms 4 of
// 20 connections left at 1,055-1,665 segments instead of 750 (later messages 4-7% faster); at
// 200 ms 8 of 20 at 1,958-2,907 instead of 1,350 (7-8% faster); issue 43 saw 1,106 and 1,716 at
// 120 ms. At 50 ms one of 20 left elsewhere and no message moved by 1%; reno and bbr had one
// outcome. Returns, for a link of round trip `rttS` under `congestionControl` ("" is Linux's
// default, cubic), {"bimodal_under_tcp": true, "why", "measured", "model_follows"} or null.
nlohmann::json tcpBimodality(const std::string& congestionControl, double rttS);

// Applies `t` in namespace `ns` (sysctl -w) and returns the values read back. A congestion control
// the namespace may not use (not in the kernel's tcp_available_congestion_control, or, outside
// the initial namespace, not in tcp_allowed_congestion_control) is refused naming what it offers.
nlohmann::json applyTcpSettings(const std::string& ns, const TcpSettings& t);

// Every TCP connection in namespace `ns` as `ss -tin` reports it: local, peer, congestion control,
// rtt_ms, rttvar_ms, cwnd, ssthresh, mss, bytes_acked, bytes_retrans, retransmits (total),
// delivery_rate_bps, and the raw line.
nlohmann::json tcpInfo(const std::string& ns);
// The same from `ss -tin` output (exposed for tests).
nlohmann::json parseSsTcpInfo(const std::string& text);

// TCP_INFO of one connected socket, read directly (getsockopt): cwnd and ssthresh (segments;
// ssthresh null while infinite), snd_wnd (the peer's advertised window, bytes), mss, rtt_s, rto_s,
// packets unacked, the counters bytes_sent, bytes_acked, bytes_retrans, total_retrans, and the
// times (s) the connection was busy, limited by the receive window, limited by the send buffer.
// Throws naming errno.
nlohmann::json socketTcpInfo(int fd);

// The largest window a Linux receiver advertises: net.ipv4.tcp_rmem's maximum (`rmemMax`; 0: 32
// MiB, this kernel's default, 6.18; older kernels have 6 MiB) times its scaling ratio, a segment's
// payload over the memory the kernel charges for it (skb->truesize; tcp_measure_rcv_mss: 256 x
// len / truesize, rounded down). Packets the delay line writes into a TUN device are charged a head
// buffer of the packet plus 384 bytes (NET_SKB_PAD and skb_shared_info), rounded up to a power of
// two up to a page and to whole pages above, plus 256 for the sk_buff: 2304 bytes at MTU 1500
// (ratio 160/256), 12544 at MTU 9000 (182/256); a NIC's driver charges its own. Measured here: the
// peer's window at the end of a long transfer with the send buffer out of the way (`slowpipe
// emulator tcp-messages --wmem-max 67108864 --rmem-max R --trace-ms 50`) was R x the ratio within a
// segment at MTU 1500, 3000, 4000, 6000 and 9000. The tcp link model and the simulator's ns-3 tier
// both cap a connection at it.
double receiveWindowCeiling(uint64_t rmemMax, int mtu);
// That scaling ratio x 256 for MTU-sized packets off a TUN device: 160 at MTU 1500, 182 at 9000.
int receiveScalingRatio(int mtu);

// The receive buffer Linux 6.18 sizes when a read finds `copied` bytes read in the receiver's last
// RTT, more than the last such figure `space` (tcp_rcv_space_adjust, tcp_rcvbuf_grow): room for a
// window of 2 copied ("DRS is always one RTT late") plus twice its growth over space (slow start),
// in the kernel's integer arithmetic, at most net.ipv4.tcp_rmem's maximum (`rmemMax`, 0: 32 MiB).
// The window's clamp follows as the buffer x ratio / 256. Transcribed from the tcp_rcvbuf_grow
// tracepoint here: copied 31,856 after 14,480 -> 346,592 at ratio 160 (clamp 216,620).
uint64_t receiveBufferAfterMeasure(uint64_t copied, uint64_t space, int ratio, uint64_t rmemMax);

// Where stripe `index` of `count` lies in a message of `bytes` (network.tcp.streams): ceil(bytes /
// count) bytes each, the last what is left (possibly none). The runtime's channel cuts its frames
// so, and `slowpipe emulator tcp-messages --streams` its messages.
struct Stripe {
  uint64_t offset, bytes;
};
Stripe stripeOf(uint64_t bytes, uint64_t count, uint64_t index);

// The congestion controls the tcp link model runs (emulator/link_models/tcp.cc): cubic, reno, bbr,
// or empty (Linux's default, cubic); anything else throws naming "<where>.congestion_control".
void checkTcpModelCongestionControl(const std::string& name, const std::string& where);

}  // namespace slowpipe::emulator
