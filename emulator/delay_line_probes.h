// Measurements through a delay line (emulator/delay_line.h): UDP round trips and an iperf3 stream
// ("the delay line alone"), and messages over TCP against the tcp link model. Apart from the line
// itself: they measure it, it does not need them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "emulator/delay_line.h"

namespace slowpipe::emulator {

// The delay line alone (results/README: "the delay line alone"): round trips of UDP probes from a
// to b and back (`probes`, one every `gapS`), and, with iperf3 installed, one TCP stream from a to
// b for `iperfS` seconds under congestion control `cc` (default: the kernel's). JSON: the line,
// rtt_s {min, median, p99, max, mean}, expected_rtt_s (2 x delay), iperf3 {bits_per_second,
// retransmits, ...} and each direction's stats.
struct DelayLineProbe {
  int probes = 200;
  double gapS = 0.005;
  double iperfS = 0;  // 0: no iperf3
  std::string cc;
  int probeBytes = 64;
};
nlohmann::json probeDelayLine(const DelayLineOptions& line, const DelayLineProbe& probe);

// Messages over one TCP connection through the delay line against the `tcp` link model (issue 25:
// the model per message against the kernel path): each message of `bytes[k]` is written after
// `idleS[k]` without traffic; its completion is when the receiver in b has read its last byte (one
// host, one monotonic clock). The model bills the same messages at their send times on a link of
// the line's goodput (rate x (mtu - 52) / mtu), one-way delay and mtu. congestion control `cc` is
// set on the client's socket (TCP_CONGESTION). JSON: per message bytes, idle_s, measured_s,
// model_s, error (model / measured - 1).
struct MessageProbe {
  std::vector<uint64_t> bytes;
  std::vector<double> idleS;
  std::string cc;
  double traceS = 0;  // > 0: the sender's cwnd and bytes in flight sampled this often ("trace")
  // The maxima of net.ipv4.tcp_wmem and tcp_rmem set in both namespaces (0: the kernel's), and
  // given to the model as network.tcp.wmem_max / rmem_max; recorded as "tcp".
  uint64_t wmemMax = 0, rmemMax = 0;
  // Connections a message is striped over, as the runtime's channel stripes a frame (network.tcp.
  // streams; the model bills N flows): each message is done when its last stripe is read; the
  // kernel's TCP_INFO per message is connection 0's, and every connection's at the end is in
  // "connections_at_end".
  int streams = 1;
};
nlohmann::json messageTimes(const DelayLineOptions& line, const MessageProbe& probe);
// Bills the tcp link model on the messages of a messageTimes result (their send times, the line's
// goodput, delay, mtu, loss and seed, the socket's congestion control): sets each message's
// model_s and error. `slowpipe emulator tcp-rebill` runs it on saved results, so a change to the
// model is checked against measurements without measuring again.
void billTcpModel(nlohmann::json& run);

}  // namespace slowpipe::emulator
