// tcp: every directed link is one TCP connection (ZeroMQ opens one per peer pair), modelled at
// flow level, round by round, with Linux's defaults (segments of the link's MTU, 1500 by default,
// less 52 bytes of headers; an initial window of 10 segments): a message of B bytes handed over at t waits
// for the connection's previous messages (FIFO), then goes out in rounds of one round trip
// (RTT = 2 x the link's one-way latency): each round sends one congestion window (at most the
// link's rate x RTT, the pipe; at most the send-buffer cap, Linux's tcp_wmem maximum of 4 MiB),
// and in slow start the window grows by what the round sent (doubling) up to ssthresh (infinite
// until a loss), then by one MSS per round (congestion avoidance). Once a window fills the pipe the
// rest streams at the link's rate. The message arrives when its last byte has been serialised and
// crossed the link's latency. After an idle period the window restarts as Linux's
// tcp_slow_start_after_idle does: halved for every RTO (max(200 ms, RTT + 200 ms)) that passed,
// not below the initial window. Not modelled: loss (the link's loss is refused by the
// spec check, `modelsVariation` false), pacing, BBR, connections sharing a link (every directed
// link here has its own).
#include "emulator/link_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace slowpipe::emulator {

namespace {

class Tcp : public LinkModel {
 public:
  static constexpr double kSendBufferCap = 4194304;  // net.ipv4.tcp_wmem's default maximum

  double stamp(LinkClock& clock, double sentAt, uint64_t bytes) override {
    const LinkSpec& link = clock.spec();
    // Segments of the link's MTU (1500 by default) less IP, TCP and timestamp headers.
    mss_ = (link.mtu > 0 ? link.mtu : 1500) - 52.0;
    if (cwnd_ < 0) cwnd_ = initialWindow();
    const double rtt = 2 * link.latencyS;
    double t = std::max(sentAt, free_);
    restartAfterIdle(t, rtt);
    double left = static_cast<double>(bytes);
    while (left > 0) {
      const double rate = clock.rateAt(t);
      const double pipe = rate * rtt / 8;
      const double window = std::min({cwnd_, kSendBufferCap, std::max(pipe, mss_)});
      if (window >= pipe || left <= window) {
        // The window covers the pipe (or the rest of the message): the rest streams at the rate.
        const double send = left;
        t += 8 * send / rate;
        grow(std::min(send, window));
        left = 0;
      } else {
        // One window this round, then wait for its acknowledgements.
        left -= window;
        grow(window);
        t += rtt;
      }
    }
    free_ = t;
    lastSend_ = t;
    return t + link.latencyS;
  }
  double bill(const LinkSpec&, double sentAt, uint64_t) override { return sentAt; }  // never unstamped

 private:
  void grow(double acked) {
    if (cwnd_ < ssthresh_) cwnd_ += acked;            // slow start: doubles per round
    else cwnd_ += mss_ * acked / std::max(cwnd_, mss_);  // congestion avoidance: one MSS per round
  }
  // Linux's tcp_cwnd_restart: the window halves for every RTO of idle, down to the initial window.
  void restartAfterIdle(double t, double rtt) {
    if (lastSend_ < 0) return;
    const double rto = std::max(0.2, rtt + 0.2);
    for (double idle = t - lastSend_; idle > rto && cwnd_ > initialWindow(); idle -= rto) cwnd_ = std::max(initialWindow(), cwnd_ / 2);
  }

  double initialWindow() const { return 10 * mss_; }  // RFC 6928, Linux's default

  double mss_ = 1448, cwnd_ = -1, ssthresh_ = std::numeric_limits<double>::infinity();
  double free_ = 0, lastSend_ = -1;
};

}  // namespace

std::unique_ptr<LinkModel> makeTcp() { return std::make_unique<Tcp>(); }

}  // namespace slowpipe::emulator
