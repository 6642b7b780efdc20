// tcp: every directed link is one TCP connection (ZeroMQ opens one per peer pair), modelled as
// Linux runs it, at the granularity of ACK-clocked bursts rather than whole rounds (a burst is at
// most 2 segments, one ACK per two segments as delayed ACKs give; it is acknowledged one round trip
// after its last byte left, RTT = 2 x the link's one-way latency). What it carries, each from the
// kernel's own rule:
// - segments of the link's MTU (1500 by default) less 52 bytes of IP, TCP and timestamp headers;
//   an initial window of 10 segments (RFC 6928);
// - slow start: the window grows by what each ACK acknowledges, but only while the sender uses
//   it (tcp_is_cwnd_limited: in slow start while cwnd < 2 x the most bytes in flight over the last
//   window; in congestion avoidance while the window was full); CUBIC leaves it by HyStart
//   (hystart_update: the round's ACK train has lasted half the minimum RTT, or its first 8 RTT
//   samples exceed the minimum by clamp(min/8, 4 ms, 16 ms));
// - congestion avoidance: Reno (one segment per window) or CUBIC as bictcp_update runs it
//   (W(t) = origin + C (t - K)^3 from the epoch's first ACK, C = 0.4, beta = 0.7, fast
//   convergence, at least 5% a round before the first loss, never below the Reno-friendly
//   estimate counted per ACK, the epoch shifted by the idle when sending resumes);
// - loss (the link's `loss`, per packet): drawn for every packet from the link's seeded generator,
//   as the delay line drops them (a run is one draw; its repeats with other seeds are others);
//   found one RTT after the burst that carried it (two RTT at the tail of the data, where only a
//   probe timeout finds it), retransmitted then, and the window cut once per window of data (Reno
//   to 1/2, CUBIC to 0.7); until the retransmission is acknowledged (one RTT later) the send
//   buffer keeps the hole and everything acknowledged selectively behind it;
// - restart after idle (tcp_slow_start_after_idle, on by default): with nothing in flight for more
//   than an RTO (srtt + rttvar, rttvar at least 200 ms, in 4 ms jiffies rounded up) the window
//   halves per RTO of idle, not below the initial window; BBR never restarts;
// - the send buffer as Linux autotunes it: it starts at 2 x 10 segments' worth
// (tcp_init_buffer_space)
//   and grows only on an ACK that finds the writer asleep on it and the window not full after the
//   ACK's sending (tcp_new_space), to 2 x max(10, cwnd) x the worst-case memory of one segment
//   (tcp_sndbuf_expand: roundup_pow_of_two(MSS + headers) + the skb, 2304 bytes at MSS 1448 and
//   16640 at MSS 8948 as measured here; BBR 3 x), never above net.ipv4.tcp_wmem's maximum (4 MiB
//   unless network.tcp.wmem_max says). So a window that grew while the writer kept up leaves the
//   buffer behind: a later, larger message waits a round trip for its tail. The buffer is charged
//   the payload plus 768 bytes per skb (fitted to `ss -m` on this kernel: the charge within 1% at
//   the median): queued data in 64 KiB skbs (the GSO size goal), data in flight in the skbs it was
//   sent as, of tcp_tso_autosize's size at the pacing rate (CUBIC and Reno: 2 x cwnd / srtt in slow
//   start, 1.2 x after, tcp_update_pacing_rate), so at long RTTs 2 segments an skb. The writer adds
//   64 KiB while the charge is below the buffer, so it may overshoot by one skb; once full it
//   sleeps until the charge has drained to two thirds (sk_stream_min_wspace), so a long transfer at
//   the cap averages about 5/6 of it;
// - BBR: startup grows as slow start does while the bandwidth estimate (the largest delivery rate
//   measured) rises by 25% a round, pacing at 2.89 x the estimate (from 2.89 x the initial window
//   per RTT, never falling during startup; less 1%); after three rounds without it, the window
//   becomes 2 x estimate x RTT and the pacing the estimate; paced per TSO chunk as Linux does
//   without fq (tcp_tso_autosize: about 1 ms at the pacing rate leaves at once, at most 64 KiB),
//   a chunk that leaves late on the pacing clock paced for its time less the lateness, half its
//   time at least, and a flow's first 10 segments unpaced (tcp_update_skb_after_send);
//   PROBE_RTT as bbr_update_min_rtt: once the minimum RTT sample is 10 s old (not on the first
//   ACK after an idle restart), the window at 4 segments until that little is in flight, then
//   200 ms and a round trip, cut short by sending after idle once the 200 ms are over;
// - messages on one connection queue FIFO behind the previous message's last byte;
// - `network.tcp.streams` N > 1: every message striped evenly over N connections that share the
//   link, as N like flows: one aggregate with N initial windows, N send and receive buffers, N
//   segments of growth per round in congestion avoidance, and a loss cutting one flow's window, 1/N
//   of the aggregate (the MulTCP view of N flows), its stripes ending together at the link's rate:
//   per message against N kernel connections median 2.0%, max 31.4% (results/README.md section 16,
//   "Streams per message": the kernel's stripes finish apart, so the first to finish may idle past
//   their RTO and restart before the next message; the model is faster), end to end
//   section 17 (reno over 4 streams).
// - the receiver's window as Linux grows it (the tcp_rcvbuf_grow tracepoint on this kernel, 6.18,
//   printed every step of it): the receive buffer starts at net.ipv4.tcp_rmem's default (128 KiB,
//   at most rmem_max) and the first window at half of it, at most 65,535 bytes (the SYN's
//   unscaled field); each segment received raises the window by
//   twice its size (tcp_grow_window), up to the buffer times the receiver's scaling ratio. Once a
//   receiver's RTT after the last measure, a read measures what was read since
//   (tcp_rcv_space_adjust); when that exceeds the last such figure s, the buffer grows to hold a
//   window of 2c (1 + 2 (c - s) / s) for c read ("DRS is always one RTT late" and slow start
//   doubles), at most net.ipv4.tcp_rmem's maximum (32 MiB unless network.tcp.rmem_max says: the
//   window's ceiling, receiveWindowCeiling). The window counts from the receiver's next expected
//   byte (the first hole not yet repaired). At MTU 9000 the first window (65,535 bytes at most) is
//   7 segments, not the initial congestion window's 10: per message against the kernel there
//   median 1.1%, max 38.3% (1.5% / 66.6% with the window at its ceiling; results/README.md section
//   16, "The receiver's window as Linux grows it"). Not modelled: what a receiver announces after a
//   loss while it queues data out of order (the main grid's largest miss).
// Not modelled: delayed ACKs beyond the 2-segment bursts, BBR's ProbeBW gain cycle and its loss
// recovery (packet conservation), jitter and bandwidth traces (refused:
// `modelsVariation` false), connections sharing a link (every directed link has its own).
#include "emulator/link_model.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <stdexcept>

#include "emulator/tcp_settings.h"

namespace slowpipe::emulator {

namespace {

constexpr double kDefaultSendBuffer = 4194304;  // net.ipv4.tcp_wmem's default maximum
constexpr double kBurstSegments = 2;
constexpr double kBbrHighGain = 2.885;  // 2 / ln 2
constexpr double kCubicC = 0.4, kCubicBeta = 0.7;

enum class Cc { kReno, kCubic, kBbr };

Cc ccOf(const std::string& name) {
  checkTcpModelCongestionControl(name, "network.tcp");
  return name == "reno"  ? Cc::kReno
         : name == "bbr" ? Cc::kBbr
                         : Cc::kCubic;  // empty: Linux's default
}

struct Burst {
  double tx, ackAt, bytes;
  bool lost;
  double deliveredAtSend, deliveredTimeAtSend;  // for BBR's delivery-rate sample
  double seq;                                   // its first byte's offset on the connection
  double memory;  // what the send buffer is charged for it (skb overhead included)
};

// A lost burst on its way to repair: its retransmission is acknowledged one RTT after the loss was
// found. Until then the send buffer keeps it and everything acknowledged selectively behind it.
struct Hole {
  double seq, repairAt;
};

class Tcp : public LinkModel {
 public:
  double stamp(LinkClock& clock, double sentAt, uint64_t bytes) override {
    configure(clock);
    const double latency = clock.spec().latencyS;
    double now = std::max(sentAt, free_);
    acknowledge(now);
    shiftCubicEpoch(now);
    restartAfterIdle(now);
    if (cc_ == Cc::kBbr && out_ == 0 && lastTx_ >= 0) bbrTxStart(now);
    double appLeft = static_cast<double>(bytes), arrival = now;
    while (appLeft > 0 || unsent_ > 0) {
      acknowledge(now);
      fillBuffer(appLeft);
      // A burst leaves when its first segment fits (or the message's tail: tcp_snd_wnd_test), up to
      // what the windows leave (tcp_mss_split_point).
      const double room = std::min(this->room(), unsent_);
      if (room >= std::min(unsent_, mss_) && room > 0) {
        // The sender hands the burst to the link at once (BBR: when its pacing allows); the link
        // serialises what it is handed in order at its rate.
        const double n = std::min(room, kBurstSegments * mss_);
        if (cc_ == Cc::kBbr) now = pace(now, n);
        const double linkRate = clock.rateAt(now);
        const double start = std::max(now, free_), end = start + 8 * n / linkRate;
        const bool last = appLeft == 0 && n == unsent_;
        send(now, start, end, n, clock);
        arrival = std::max(arrival, end + latency);
        if (inflight_.back().lost)
          arrival = std::max(arrival, inflight_.back().ackAt + (last ? rtt_ : 0) + latency);
      } else {
        // Wait for the next acknowledgement or repaired hole (with neither the window and the
        // buffer always have room).
        const double next = nextEvent();
        if (next == kInf)
          throw std::logic_error("tcp model: no room in the window and nothing in flight");
        now = std::max(now, next);
      }
    }
    return arrival;
  }
  double bill(const LinkSpec&, double sentAt, uint64_t) override {
    return sentAt;
  }  // never unstamped

 private:
  void configure(const LinkClock& clock) {
    if (configured_) return;
    configured_ = true;
    const LinkSpec& link = clock.spec();
    mss_ = (link.mtu > 0 ? link.mtu : 1500) - 52.0;
    rtt_ = 2 * link.latencyS;
    cc_ = ccOf(link.tcp.congestionControl);
    bufferMax_ = link.tcp.wmemMax ? static_cast<double>(link.tcp.wmemMax) : kDefaultSendBuffer;
    const int mtu = link.mtu > 0 ? link.mtu : 1500;
    restartAfterIdle_ = link.tcp.slowStartAfterIdle.value_or(true) && cc_ != Cc::kBbr;
    loss_ = link.loss;
    flows_ = std::max(1, link.tcp.streams);
    bufferMax_ *= flows_;
    // The receiver (per flow, times the flows): its scaling ratio, its buffer at the start
    // (tcp_rmem's default, at most its maximum), the window it first announces (the buffer at the
    // default ratio of 1/2, at most 65,535 bytes: at MTU 9000 7 segments, not 10), and the first
    // measure's figure (tcp_init_buffer_space: that window less a segment, at most 10 segments;
    // 56,588 bytes at MTU 9000 in the tracepoint).
    rcvRatio_ = receiveScalingRatio(mtu);
    rmemMax_ = link.tcp.rmemMax;
    rcvBuf_ =
        (rmemMax_ ? std::min<double>(kReceiveBufferDefault, rmemMax_) : kReceiveBufferDefault) *
        flows_;
    rcvClamp_ = std::max(mss_ * flows_, rcvBuf_ * rcvRatio_ / 256);
    rcvSsthresh_ = std::min(rcvBuf_ / 2, 65535.0 * flows_);  // the SYN's window field is not scaled
    rcvSpace_ = std::max(mss_, std::min(rcvBuf_ / 2 / flows_ - mss_, 10 * mss_)) * flows_;
    cwnd_ = initialWindow();
    segmentMemory_ = 1;
    while (segmentMemory_ < mss_ + 576)
      segmentMemory_ *= 2;               // roundup_pow_of_two(MSS + MAX_TCP_HEADER + shared info)
    segmentMemory_ += 256;               // + the sk_buff
    sendBuffer_ = sendBufferFor(cwnd_);  // tcp_init_buffer_space at the handshake
    bbrPacing_ =
        kBbrHighGain * initialWindow() / std::max(rtt_, 1e-3);  // bbr_init_pacing_rate_from_rtt
    srtt_ = rtt_;                                               // the handshake's sample
    mdev_ = 2 * rtt_;
    mdevMax_ = rttvar_ = std::max(mdev_, kRtoMin);
    // The receiver's first measure runs from the handshake (the clock's openedAt; on the ACKs'
    // clock a round trip later): a fresh connection's first read within a round trip of it
    // measures nothing, one that idled since (the default) measures its first read and starts
    // again from it.
    rcvSpaceTime_ = clock.openedAt() + rtt_;
  }

  // Linux's RTT estimator (tcp_rtt_estimator, in seconds; mdev and rttvar hold 4 x the mean
  // deviation): every ACK's sample includes the time its burst queued at the link, and the RTO is
  // srtt + rttvar, rttvar at least 200 ms and decaying a quarter per round towards the round's
  // largest deviation.
  void sampleRtt(double m) {
    double err = m - srtt_;
    srtt_ += err / 8;
    if (err < 0) {
      err = -err - mdev_ / 4;
      if (err > 0) err /= 8;
    } else {
      err -= mdev_ / 4;
    }
    mdev_ += err;
    if (mdev_ > mdevMax_) rttvar_ = std::max(rttvar_, mdevMax_ = mdev_);
    if (sndUna_ > rttSeq_) {
      if (mdevMax_ < rttvar_) rttvar_ -= (rttvar_ - mdevMax_) / 4;
      rttSeq_ = sndNxt_;
      mdevMax_ = kRtoMin;
    }
  }
  // In jiffies, rounded up (usecs_to_jiffies): 4 ms at Debian's CONFIG_HZ=250.
  double rto() const { return std::ceil((srtt_ + rttvar_) / kJiffy - 1e-9) * kJiffy; }
  double initialWindow() const {
    return 10 * mss_ * flows_;
  }  // RFC 6928, Linux's default, per flow

  // The writer puts the message into the send buffer while it has room; once full it sleeps
  // until the charge for what the buffer holds (in flight, queued, and acknowledged behind a hole)
  // is at most 2/3 of the buffer.
  void fillBuffer(double& appLeft) {
    const double unit = std::floor(65536.0 / mss_) * mss_ * flows_;  // a 64 KiB skb per flow
    const double unitMemory = unit + kSkbOverhead * flows_;
    const double held = outMemory_ + unsent_ * unitMemory / unit + heldMemory_;
    if (writerAsleep_ && held <= sendBuffer_ * 2 / 3) writerAsleep_ = false;
    if (writerAsleep_ || appLeft <= 0) return;
    // Whole skbs while the charge is below the buffer (sk_stream_memory_free before each new skb).
    const double room =
        held < sendBuffer_ ? std::ceil((sendBuffer_ - held) / unitMemory) * unit : 0;
    const double take = std::min(appLeft, room);
    appLeft -= take;
    unsent_ += take;
    if (appLeft > 0) writerAsleep_ = true;
  }
  // tcp_sndbuf_expand: 2 (BBR 3) x max(10, cwnd in segments) x the worst-case memory of one
  // segment, per flow; never below what it was, never above the maximum.
  double sendBufferFor(double cwnd) const {
    const double segments = std::max(10.0, std::floor(cwnd / mss_ / flows_ + 1e-9));
    return std::min(bufferMax_, std::max(sendBuffer_, (cc_ == Cc::kBbr ? 3 : 2) * segments *
                                                          segmentMemory_ * flows_));
  }
  // tcp_tso_autosize: the segments an skb leaves in, about 1 ms at the pacing rate (CUBIC and Reno:
  // 2 x cwnd / srtt in slow start, 1.2 x after, tcp_update_pacing_rate), at least 2, at most 64
  // KiB.
  double tsoSegments() const {
    const double perFlowRate =
        cc_ == Cc::kBbr ? pacingRate() / 8 / flows_
                        : (cwnd_ < ssthresh_ ? 2.0 : 1.2) * cwnd_ / flows_ / std::max(srtt_, 1e-6);
    const long minRttUs = std::lround(1e6 * (minRtt_ < kInf ? minRtt_ : rtt_)) >> 9;
    const double bytes =
        perFlowRate / 1024 + (minRttUs < 32 ? 65536.0 / std::pow(2.0, minRttUs) : 0);
    return std::clamp(std::floor(std::min(bytes, 65536.0) / mss_), 2.0, std::floor(65536.0 / mss_));
  }
  // What the buffer is charged for n bytes sent now: the payload and an skb's overhead per chunk.
  double sentMemory(double n) const { return n * (1 + kSkbOverhead / (tsoSegments() * mss_)); }
  // tcp_check_space after an ACK's sending: an ACK that finds the writer asleep on the buffer grows
  // it unless the sender then fills the window. It does not fill it when the buffer ran dry, nor
  // when TSO deferral holds the segments back (tcp_tso_should_defer: the room is less than one
  // autosized skb and less than a third of the window; with 2-segment skbs, at long RTTs, never).
  void expandSendBufferOnAck() {
    if (!writerAsleep_) return;
    const double room = this->room();
    if (unsent_ < room || room < std::min(tsoSegments() * mss_ * flows_, window() / 3))
      sendBuffer_ = sendBufferFor(cwnd_);
  }

  // The congestion window (BBR in PROBE_RTT: 4 segments); window(): with the receiver's.
  double congestionWindow() const {
    if (cc_ == Cc::kBbr && probeRtt_) return std::min(cwnd_, kProbeRttSegments * mss_ * flows_);
    return cwnd_;
  }
  double window() const { return std::min(congestionWindow(), receiveWindow()); }
  // What the receiver announces (__tcp_select_window; it reads at once, so its buffer is free).
  double receiveWindow() const { return std::min(rcvSsthresh_, rcvClamp_); }
  // What may be sent now: the congestion window less what is in flight, and the receiver's window
  // from its next expected byte (the first hole not yet repaired) less what was sent beyond it.
  double room() const {
    const double rcvNxt = holes_.empty() ? sndUna_ : holes_.front().seq;
    return std::min(congestionWindow() - out_, rcvNxt + receiveWindow() - sndNxt_);
  }
  // BBR's pacing rate (bit/s): the bandwidth estimate (before any, the initial window per RTT)
  // times its gain (2.89 in startup, 1 after), less bbr_pacing_margin_percent (1%).
  double pacingRate() const { return 0.99 * 8 * bbrPacing_; }
  // Linux paces per TSO chunk (tcp_tso_autosize): a chunk of about 1 ms at the pacing rate (plus
  // 64 KiB >> (min RTT in us >> 9) on short paths; at most 64 KiB, at least 2 segments) leaves at
  // once when the pacing clock allows (tcp_wstamp_ns), which then moves on by the chunk's bytes at
  // the pacing rate. A burst joins the chunk in hand while it fits and the sender did not wait.
  // tcp_update_skb_after_send, two rules of it: a chunk that leaves late on the pacing clock (after
  // an idle, or held by the window) moves the clock on by its time less what it was late, by half
  // its time at most ("take into account OS jitter"); and a flow's first 10 segments are not paced
  // (data_segs_out < 10, counted with the chunk; here with the chunk's size as allotted).
  // Returns when the burst of n bytes leaves.
  double pace(double now, double n) {
    if (now > chunkAt_ || chunkLeft_ < n) {
      const double prior = paceFree_;
      now = std::max(now, paceFree_);
      chunkAt_ = now;
      paceCredit_ = now - prior;
      const long minRttUs = std::lround(1e6 * (minRtt_ < kInf ? minRtt_ : rtt_)) >> 9;
      double bytes =
          pacingRate() / 8 / 1024 + (minRttUs < 32 ? 65536.0 / std::pow(2.0, minRttUs) : 0);
      chunkLeft_ = std::max(2.0, std::floor(std::min(bytes, 65536.0) / mss_)) * mss_ * flows_;
      chunkPaced_ = (sndNxt_ + chunkLeft_) / (mss_ * flows_) >= 10 - 1e-9;
    }
    chunkLeft_ -= n;
    paceFree_ = std::max(paceFree_, chunkAt_);
    if (chunkPaced_) {
      const double t = 8 * n / pacingRate(), credit = std::min(t / 2, paceCredit_);
      paceCredit_ -= credit;
      paceFree_ += t - credit;
    }
    return now;
  }
  double nextEvent() const {
    return std::min(inflight_.empty() ? kInf : inflight_.front().ackAt,
                    holes_.empty() ? kInf : holes_.front().repairAt);
  }

  void send(double tx, double start, double end, double n, LinkClock& clock) {
    if (out_ == 0)
      deliveredTime_ = tx;  // Linux restarts the delivery clock when nothing is in flight
    lastTx_ =
        tx;  // lsndtime: the TUN device orphans what it queues, so TCP small queues never hold it
    free_ = end;
    unsent_ -= n;
    bool lost = false;
    for (double p = 0; loss_ > 0 && p < n; p += mss_) lost = clock.lose() || lost;
    inflight_.push_back(
        {tx, end + rtt_, n, lost, delivered_, deliveredTime_, sndNxt_, sentMemory(n)});
    outMemory_ += inflight_.back().memory;
    out_ += n;
    sndNxt_ += n;
    // tcp_cwnd_validate: the most in flight over the last window, and whether the window was full.
    if (sndUna_ >= usageSeq_ || out_ > maxOut_) {
      maxOut_ = out_;
      usageSeq_ = sndNxt_;
    }
    if (out_ + mss_ > congestionWindow())
      cwndLimited_ = true;  // tcp_cwnd_validate: limited by cwnd, not the receiver
  }

  void acknowledge(double now) {
    while (nextEvent() <= now) {
      if (!holes_.empty() &&
          holes_.front().repairAt <= (inflight_.empty() ? kInf : inflight_.front().ackAt)) {
        const double at = holes_.front().repairAt, before = holes_.front().seq;
        repairHole();
        receiverRead(at, before);
        continue;
      }
      const Burst b = inflight_.front();
      inflight_.pop_front();
      out_ -= b.bytes;
      outMemory_ = inflight_.empty() ? 0 : outMemory_ - b.memory;
      const double readBefore = holes_.empty() ? sndUna_ : holes_.front().seq;
      sndUna_ += b.bytes;
      delivered_ += b.bytes;
      deliveredTime_ = b.ackAt;
      const double sample = b.ackAt - b.tx;
      sampleRtt(sample);
      minRtt_ = std::min(minRtt_, sample);
      if (b.lost) holes_.push_back({b.seq, b.ackAt + rtt_});
      if (!holes_.empty()) {  // selectively acknowledged (or lost): the buffer keeps it
        held_.push_back({b.seq, b.memory});
        heldMemory_ += b.memory;
      }
      receive(b.bytes, b.ackAt, readBefore);
      if (b.lost && sndUna_ > recoveryEnd_) enterRecovery(b.ackAt);
      if (cc_ == Cc::kBbr) {
        bbrOnAck(b);
      } else {
        if (cc_ == Cc::kCubic && !hystartFound_ && cwnd_ < ssthresh_) hystart(b, sample);
        grow(b.bytes, b.ackAt);
      }
      if (sndUna_ >= usageSeq_) cwndLimited_ = false;
      expandSendBufferOnAck();
    }
  }

  // The hole's retransmission acknowledged: the buffer frees what it held up to the next hole.
  void repairHole() {
    holes_.pop_front();
    const double limit = holes_.empty() ? kInf : holes_.front().seq;
    while (!held_.empty() && held_.front().first < limit) {
      heldMemory_ -= held_.front().second;
      held_.pop_front();
    }
  }

  // The receiver gets a burst (its ACK, one way later, carries the window it then announces; the
  // receiver's clock here is the ACKs', a constant one-way latency later): tcp_grow_window raises
  // the window by twice what arrived, up to the buffer's window (window_clamp); then the receiving
  // application reads what is in order.
  void receive(double bytes, double at, double readBefore) {
    rcvSsthresh_ = std::min(rcvClamp_, rcvSsthresh_ + 2 * bytes);
    receiverRead(at, readBefore);
  }
  // tcp_rcv_space_adjust: a read at least the receiver's RTT (its smallest sample) after the last
  // measure measures what was read since (c), not counting what this read finds (`read`: the
  // kernel subtracts what is still queued; in its trace c is the previous round trip's data, as
  // 62,636 bytes, the first flight at MTU 9000); above the last figure s it grows the buffer to
  // hold a window of 2c (1 + 2 (c - s) / s) (tcp_rcvbuf_grow), at most tcp_rmem's maximum, and the
  // window's clamp follows.
  void receiverRead(double at, double read) {
    const double rtt = rtt_ > 0 ? rtt_ : minRtt_;
    if (!(rtt < kInf) || at - rcvSpaceTime_ < rtt) return;
    const double copied = read - rcvSpaceSeq_;
    if (copied > rcvSpace_) {
      const auto c = static_cast<uint64_t>(std::ceil(copied / flows_)),
                 sp = static_cast<uint64_t>(std::ceil(rcvSpace_ / flows_));
      const double buf =
          c > sp
              ? flows_ * static_cast<double>(receiveBufferAfterMeasure(c, sp, rcvRatio_, rmemMax_))
              : 0;
      rcvSpace_ = copied;
      if (buf > rcvBuf_) {
        rcvBuf_ = buf;
        rcvClamp_ = std::max(rcvClamp_, rcvBuf_ * rcvRatio_ / 256);
      }
    }
    rcvSpaceSeq_ = read;
    rcvSpaceTime_ = at;
  }

  void enterRecovery(double) {
    recoveryEnd_ = sndNxt_;
    if (cc_ == Cc::kBbr) return;  // BBR does not cut on loss (it bounds the window by its model)
    // CUBIC's fast convergence: a loss below the last maximum remembers less of it.
    wMax_ = cc_ == Cc::kCubic && cwnd_ < wMax_ ? cwnd_ * (1 + kCubicBeta) / 2 : cwnd_;
    const double beta = cc_ == Cc::kCubic ? kCubicBeta : 0.5;  // one flow of the N cut
    cwnd_ = std::max(2 * mss_ * flows_, cwnd_ * (1 - (1 - beta) / flows_));
    ssthresh_ = cwnd_;
    epoch_ = -1;  // the cubic epoch starts at the first ACK that grows the window again
  }

  // CUBIC's HyStart (hystart_update, Linux >= 5.7, both detectors): in slow start from 16 segments,
  // leave it when the round's ACK train (ACKs at most 2 ms apart) has lasted half the minimum RTT
  // (plus the ACK delay allowance), or when the round's first 8 RTT samples all exceed the
  // minimum by clamp(min/8, 4 ms, 16 ms).
  void hystart(const Burst& b, double sample) {
    if (sndUna_ > hsEndSeq_) {  // a new round (counted from the first ACK on)
      hsRoundStart_ = hsLastAck_ = b.ackAt;
      hsEndSeq_ = sndNxt_;
      hsCurrRtt_ = kInf;
      hsSamples_ = 0;
    }
    if (cwnd_ < 16 * mss_ * flows_) return;  // hystart_low_window
    bool found = false;
    if (b.ackAt - hsLastAck_ <= 0.002) {
      hsLastAck_ = b.ackAt;
      const double pacing =
          2 * cwnd_ / std::max(srtt_, 1e-6);  // tcp_update_pacing_rate in slow start
      const double ackDelay = std::min(1e-3, 4 * 65536 / pacing);
      found = b.ackAt - hsRoundStart_ > (minRtt_ + ackDelay) / 2;
    }
    hsCurrRtt_ = std::min(hsCurrRtt_, sample);
    if (hsSamples_ < 8)
      ++hsSamples_;
    else
      found = found || hsCurrRtt_ > minRtt_ + std::clamp(minRtt_ / 8, 0.004, 0.016);
    if (found) {
      hystartFound_ = true;
      ssthresh_ = cwnd_;
    }
  }

  // cubictcp_cwnd_event(CA_EVENT_TX_START): sending again after idle shifts the epoch by the idle.
  void shiftCubicEpoch(double now) {
    if (cc_ != Cc::kCubic || epoch_ < 0 || lastTx_ < 0 || out_ > 0 || now <= lastTx_) return;
    epoch_ = std::min(now, epoch_ + (now - lastTx_));
  }

  void grow(double acked, double at) {
    const bool inSlowStart = cwnd_ < ssthresh_;
    if (inSlowStart ? cwnd_ >= 2 * maxOut_ : !cwndLimited_) return;  // the window was not used
    if (sndUna_ <= recoveryEnd_) return;                             // recovery holds the window
    if (inSlowStart) {
      cwnd_ = std::min(cwnd_ + acked, ssthresh_ == kInf ? kInf : std::max(ssthresh_, cwnd_ + mss_));
      return;
    }
    if (cc_ == Cc::kReno) {
      cwnd_ += flows_ * mss_ * acked / cwnd_;
      return;
    }
    cubicGrow(acked, at);
  }

  // bictcp_update, per flow in segments and seconds, times the flows: the epoch starts at the first
  // ACK in congestion avoidance (origin the last maximum, or the window if above it); the window
  // moves towards W(t) = origin + C (t - K)^3, t counted from the epoch plus the minimum RTT;
  // before any loss at least 5% a round; never slower than the Reno-friendly estimate (one segment
  // per 1.875 windows acknowledged, counted per ACK); at most half a segment per segment
  // acknowledged.
  void cubicGrow(double acked, double at) {
    const double cwndSeg = cwnd_ / mss_ / flows_, wMaxSeg = wMax_ / mss_ / flows_;
    if (epoch_ < 0) {
      epoch_ = at;
      renoCwnd_ = cwnd_;
      cubicK_ = wMaxSeg <= cwndSeg ? 0 : std::cbrt((wMaxSeg - cwndSeg) / kCubicC);
      originSeg_ = std::max(wMaxSeg, cwndSeg);
    }
    const double t = at - epoch_ + (minRtt_ < kInf ? minRtt_ : rtt_);
    const double target = flows_ * (originSeg_ + kCubicC * std::pow(t - cubicK_, 3)) * mss_;
    double inc = target > cwnd_ ? acked * (target - cwnd_) / cwnd_ : acked * mss_ / (100 * cwnd_);
    if (wMax_ == 0) inc = std::max(inc, acked / 20);
    renoCwnd_ += flows_ * mss_ * acked / (1.875 * cwnd_);
    if (renoCwnd_ > cwnd_) inc = std::max(inc, acked * (renoCwnd_ - cwnd_) / cwnd_);
    cwnd_ += std::min(inc, acked / 2);
  }

  // BBR: the delivery rate of each acknowledged burst; the bandwidth estimate its largest; startup
  // ends after three rounds without 25% growth; PROBE_RTT as bbr_update_min_rtt runs it.
  void bbrOnAck(const Burst& b) {
    const double interval = std::max(b.ackAt - b.deliveredTimeAtSend, rtt_);
    if (interval > 0) btlBw_ = std::max(btlBw_, (delivered_ - b.deliveredAtSend) / interval);
    if (sndUna_ >= roundEnd_) {  // a round trip ended
      roundEnd_ = sndNxt_;
      if (!fullBw_ && cwndLimited_) {
        if (btlBw_ >= 1.25 * bwAtLastGrowth_) {
          bwAtLastGrowth_ = btlBw_;
          flatRounds_ = 0;
        } else if (++flatRounds_ >= 3) {
          fullBw_ = true;
        }
      }
    }
    // Pacing: the gain times the estimate; in startup it never falls (bbr_set_pacing_rate).
    const double rate = (fullBw_ ? 1.0 : kBbrHighGain) * btlBw_;
    if (btlBw_ > 0) bbrPacing_ = fullBw_ ? rate : std::max(bbrPacing_, rate);
    const double target = (fullBw_ ? 2.0 : kBbrHighGain) * btlBw_ * rtt_;
    if (fullBw_)
      cwnd_ = std::min(cwnd_ + b.bytes, std::max(target, 4 * mss_));
    else if (cwnd_ < target || delivered_ < initialWindow() || btlBw_ == 0)
      cwnd_ += b.bytes;
    bbrMinRtt(b);
  }

  // bbr_update_min_rtt: the minimum RTT sample is kept 10 s (a lower sample, or any once it
  // expired, renews it); on expiry, unless this is the first ACK after an idle restart, PROBE_RTT:
  // the window at 4 segments until no more than that is in flight, then 200 ms and a round trip
  // more; leaving it renews the minimum's stamp.
  void bbrMinRtt(const Burst& b) {
    const double sample = b.ackAt - b.tx;
    const bool expired = minRttStamp_ >= 0 && b.ackAt > minRttStamp_ + 10;
    if (minRttStamp_ < 0 || sample < bbrMinRtt_ || expired) {
      bbrMinRtt_ = sample;
      minRttStamp_ = b.ackAt;
    }
    if (expired && !idleRestart_ && !probeRtt_) {
      probeRtt_ = true;
      probeRttDone_ = -1;
    }
    if (probeRtt_) {
      if (probeRttDone_ < 0 && out_ <= kProbeRttSegments * mss_ * flows_) {
        probeRttDone_ = b.ackAt + 0.2;
        probeRttRoundEnd_ = sndNxt_;
      } else if (probeRttDone_ >= 0 && b.seq >= probeRttRoundEnd_) {
        probeRttCheckDone(b.ackAt);
      }
    }
    idleRestart_ = false;
  }
  void probeRttCheckDone(double now) {
    if (probeRttDone_ < 0 || now <= probeRttDone_) return;
    probeRtt_ = false;
    minRttStamp_ = now;
  }
  // bbr_cwnd_event(CA_EVENT_TX_START): sending after idle; PROBE_RTT ends if its time is up.
  void bbrTxStart(double now) {
    idleRestart_ = true;
    if (probeRtt_) probeRttCheckDone(now);
  }

  // Linux's tcp_cwnd_restart: the window halves for every RTO of idle, down to the initial window.
  void restartAfterIdle(double now) {
    if (!restartAfterIdle_ || lastTx_ < 0 || out_ > 0) return;
    const double rto = this->rto(), initial = initialWindow();
    double idle = now - lastTx_;
    if (idle <= rto) return;
    ssthresh_ = std::max(ssthresh_, 0.75 * cwnd_);  // tcp_current_ssthresh
    for (idle -= rto; idle > 0 && cwnd_ > initial; idle -= rto)
      cwnd_ = std::max(initial, cwnd_ / 2);
  }

  static constexpr double kInf = std::numeric_limits<double>::infinity();
  static constexpr double kRtoMin = 0.2;
  static constexpr double kSkbOverhead =
      768;  // bytes charged per skb beyond its payload (fitted to ss -m here)
  static constexpr double kReceiveBufferDefault = 131072;  // net.ipv4.tcp_rmem's default
  static constexpr double kJiffy = 0.004;         // 1 / CONFIG_HZ (250 in Debian's kernels)
  static constexpr double kProbeRttSegments = 4;  // bbr_cwnd_min_target
  bool configured_ = false, restartAfterIdle_ = true, writerAsleep_ = false, cwndLimited_ = false,
       fullBw_ = false;
  Cc cc_ = Cc::kCubic;
  double mss_ = 1448, rtt_ = 0, bufferMax_ = kDefaultSendBuffer, sendBuffer_ = 0, loss_ = 0;
  // The receiver, all flows: scaling ratio, tcp_rmem's maximum, the buffer, the window's clamp and
  // what the window has grown to (rcv_ssthresh), the last measure's figure, where and when it was
  // taken.
  int rcvRatio_ = 160;    // x 256
  uint64_t rmemMax_ = 0;  // net.ipv4.tcp_rmem's maximum (0: the kernel's default)
  double rcvBuf_ = 0, rcvClamp_ = 0, rcvSsthresh_ = 0;
  double rcvSpace_ = 0, rcvSpaceSeq_ = 0, rcvSpaceTime_ = -kInf;
  double segmentMemory_ = 0;  // tcp_sndbuf_expand's worst-case memory of one segment
  double cwnd_ = 0, ssthresh_ = kInf, wMax_ = 0, epoch_ = -1, cubicK_ = 0, originSeg_ = 0,
         renoCwnd_ = 0;
  bool hystartFound_ = false;
  double hsRoundStart_ = 0, hsLastAck_ = 0, hsEndSeq_ = -1, hsCurrRtt_ = kInf, minRtt_ = kInf;
  int hsSamples_ = 0;
  std::deque<Hole> holes_;
  std::deque<std::pair<double, double>> held_;  // (seq, memory) acknowledged behind a hole
  double heldMemory_ = 0, outMemory_ = 0, bbrPacing_ = 0;
  double out_ = 0, unsent_ = 0, sndNxt_ = 0, sndUna_ = 0, maxOut_ = 0, usageSeq_ = 0,
         recoveryEnd_ = -1;
  double free_ = 0, paceFree_ = 0, chunkAt_ = -1, chunkLeft_ = 0,
         lastTx_ = -1;     // lastTx_: when the sender last handed data over (-1: never)
  double paceCredit_ = 0;  // what the chunk in hand may still take off the pacing clock
  bool chunkPaced_ = true;
  double delivered_ = 0, deliveredTime_ = 0, btlBw_ = 0, bwAtLastGrowth_ = 0, roundEnd_ = 0;
  double bbrMinRtt_ = kInf, minRttStamp_ = -1, probeRttDone_ = -1, probeRttRoundEnd_ = 0;
  bool probeRtt_ = false, idleRestart_ = false;
  double srtt_ = 0, mdev_ = 0, mdevMax_ = kRtoMin, rttvar_ = kRtoMin, rttSeq_ = 0;
  int flatRounds_ = 0, flows_ = 1;
  std::deque<Burst> inflight_;
};

}  // namespace

void checkTcpModelCongestionControl(const std::string& name, const std::string& where) {
  if (!name.empty() && name != "cubic" && name != "reno" && name != "bbr")
    throw std::invalid_argument(where + ".congestion_control: '" + name +
                                "' has no tcp model; expected cubic, reno or bbr");
}

std::unique_ptr<LinkModel> makeTcp() { return std::make_unique<Tcp>(); }

// It runs network.tcp's fields (buffers, restart after idle, streams) and its congestion control
// where it is one of the model's.
LinkModelInfo tcpModel() {
  LinkModelInfo m{
      "tcp",
      "every directed link one TCP connection, ACK-clocked: slow start, Reno / CUBIC / BBR, packet "
      "loss, the send buffer and the receive window's ceiling, restart after idle (Linux's "
      "defaults unless network.tcp says)",
      makeTcp};
  m.kernelBackends = false;
  m.modelsVariation = false;
  m.modelsLoss = true;
  m.checkSettings = [](const nlohmann::json& network, const std::string& where) {
    if (!network.is_object() || !network.contains("tcp") || network["tcp"].is_null()) return;
    const TcpSettings t = tcpSettingsFromJson(network["tcp"], where + ".tcp");
    checkTcpModelCongestionControl(t.congestionControl, where + ".tcp");
  };
  return m;
}

}  // namespace slowpipe::emulator
