// The link model: what one directed link between two ranks promises.
//
// Units: bandwidth in bits per second (goodput of message bytes), times in seconds (double).
// Human forms parse: "100Mbps", "500Mbit", "1Gbps", "10Gbit", "5ms", "250us". A message of B bytes
// handed to a link at time t is available to the receiver at
//     max(t, link_free) + 8B / R(t) + latency (+ jitter),
// FIFO per link, where link_free is when the previous message finished serialising and R(t) may
// follow a bandwidth trace. LinkClock implements exactly that.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "emulator/tcp_settings.h"

namespace slowpipe::emulator {

// Parses "100Mbps" etc. into bits/s. `field` names the setting in error messages.
double parseBandwidth(const std::string& text, const std::string& field);
// Parses "5ms", "250us", "0", "1.5s" into seconds.
double parseDuration(const std::string& text, const std::string& field);
std::string formatBandwidth(double bps);
std::string formatDuration(double seconds);

// Piecewise-constant bandwidth over time, from a text file of "time rate" lines (time in seconds
// from the link's start or with a unit: "0 1Gbps", "2.5 100Mbps", "3s 1Gbit"); '#' starts a
// comment.
class BandwidthTrace {
 public:
  static BandwidthTrace load(const std::string& path);
  static BandwidthTrace parse(const std::string& text, const std::string& source);
  bool empty() const { return points_.empty(); }
  double rateAt(double t) const;  // rate in force at t seconds after start
  // Earliest time >= start at which `bits` have been serialised, starting at `start`.
  double finishTime(double start, double bits) const;
  const std::vector<std::pair<double, double>>& points() const { return points_; }
  std::string source;
  std::string
      form;  // the "trace" JSON it was read from where not a plain path (compact), for the record

  // Other trace forms, turned into the same piecewise-constant rate:
  // - "mbps": two columns, seconds and Mbit/s (the Pensieve / FCC throughput logs); times count
  //   from the first line's; the last rate holds after the end.
  // - "mahimahi": one millisecond per line, each an MTU-sized delivery opportunity (Mahimahi's
  //   packet-delivery traces), the file repeating after its last line as Mahimahi replays it: the
  //   rate of each `windowS` is its opportunities x (mtu - 52) payload bytes (goodput, as every
  //   LinkSpec rate), unrolled for `horizonS`.
  // A window or line without capacity runs at 1 kbit/s (no shaper takes a rate of 0).
  static BandwidthTrace parseMbps(const std::string& text, const std::string& source);
  static BandwidthTrace fromDeliveries(const std::vector<double>& deliveryMs, double windowS,
                                       int mtu, double horizonS, const std::string& source);
  // A link's "trace": a path (this project's "<time> <rate>" lines), or {"file": PATH, "format":
  // "slowpipe" | "mbps" | "mahimahi", "window": "100ms", "mtu": 1500, "horizon": "1h"}.
  static BandwidthTrace fromJson(const nlohmann::json& j, const std::string& where);

 private:
  static BandwidthTrace fromObject(const nlohmann::json& j, const std::string& where);
  std::vector<std::pair<double, double>> points_;  // (start second, bits/s), sorted
};

// Gilbert-Elliott loss: per packet (per message where a model has no packets) the state moves
// good -> bad with probability p and bad -> good with r; a packet is lost with lossGood in the
// good state, lossBad in the bad one. Mean loss = (r lossGood + p lossBad) / (p + r); with
// lossGood 0 and lossBad 1 the mean burst of consecutive losses is 1 / r.
struct GilbertElliott {
  double p = 0, r = 1, lossGood = 0, lossBad = 1;
  double meanLoss() const { return p + r > 0 ? (r * lossGood + p * lossBad) / (p + r) : lossGood; }
};
// {"p": .., "r": .., "loss_good": .., "loss_bad": ..} (loss_good 0 and loss_bad 1 by default);
// errors name "<where>.<field>".
GilbertElliott gilbertElliottFromJson(const nlohmann::json& j, const std::string& where);
nlohmann::json toJson(const GilbertElliott& ge);

struct LinkSpec {
  double bandwidthBps = 1e9;
  double latencyS = 0.0;  // one way
  double jitterS =
      0.0;            // standard deviation of a normal delay added to latency (clipped at 3 sigma)
  double loss = 0.0;  // probability a message (the tcp model: a packet) is lost; with GE its mean
  // "loss": {"p", "r", "loss_good", "loss_bad"}: bursts of loss (Gilbert-Elliott) instead of
  // Bernoulli.
  bool gilbertElliott = false;
  GilbertElliott ge;
  double retransmitS = 0.2;           // delay a lost message adds (an RTO), on a reliable transport
  uint64_t queueBytes = 64ull << 20;  // sender blocks while more than this is waiting on the link
  BandwidthTrace trace;               // if set, overrides bandwidthBps over time
  // Bytes per packet where there are packets (the tc backend's path, the tcp model's segments);
  // 0: the default (tc: 9000; the tcp model: 1500). Whole-message models do not use it.
  int mtu = 0;
  // The connection's TCP settings where a model runs TCP (network.model tcp; the run's
  // network.tcp, copied into every link of the table): congestion control, send buffer, restart
  // after idle. Empty: Linux's defaults.
  TcpSettings tcp;

  std::string describe() const;
};

void to_json(nlohmann::json& j, const LinkSpec& s);
// The link's loss as netem arguments: {"loss", "P%"}, or {"loss", "gemodel", p, r, 1-h, 1-k} in
// percent for Gilbert-Elliott (tc-netem(8): 1-h the loss in the bad state, 1-k in the good one).
std::vector<std::string> netemLossArgs(const LinkSpec& s);
// Accepts strings with units or plain numbers (bits/s, seconds). Errors name "<where>.<field>".
LinkSpec linkSpecFromJson(const nlohmann::json& j, const std::string& where);

// A default link plus overrides per directed (src, dst) rank pair.
struct Topology {
  LinkSpec defaultLink;
  std::map<std::pair<int, int>, LinkSpec> overrides;
  const LinkSpec& link(int src, int dst) const;
};
// Where the tiers write their links' draw logs (SLOWPIPE_LINK_DRAWS; empty: not logged), and the
// write: DIR/link-<from>-<to>.json {"from", "to", "bytes": [...], "delay_s": [...]}, from and to
// ranks. Nothing when off or when the clock sent nothing.
std::string linkDrawsDir();
class LinkClock;
void writeLinkDraws(int fromRank, int toRank, const LinkClock& clock);

Topology topologyFromJson(const nlohmann::json& j, const std::string& where);
void to_json(nlohmann::json& j, const Topology& t);
// The links of `t` the tcp model bills as one figure where the kernel has two (tcpBimodality under
// congestion control `cc`), each with its name ("default", "a->b") and RTT; an empty array if none.
nlohmann::json tcpBimodalLinks(const Topology& t, const std::string& cc);

// Arrival-time bookkeeping of one directed link (the sender side keeps it).
class LinkClock {
 public:
  LinkClock(LinkSpec spec, double startTime, uint64_t seed = 1);
  // Message of `bytes` handed over at time `now`: returns the time the receiver may have it.
  double send(double now, uint64_t bytes);
  // Bytes handed over but not yet serialised at time `now` (for the queue limit).
  double backlogSeconds(double now) const { return linkFree_ > now ? linkFree_ - now : 0.0; }
  // Bandwidth in force at `now` (follows the trace if there is one).
  double rateAt(double now) const {
    return spec_.trace.empty() ? spec_.bandwidthBps : spec_.trace.rateAt(now - start_);
  }
  const LinkSpec& spec() const { return spec_; }
  // Time 0 of the bandwidth trace (a run aligns it with its first step, so the trace's phases
  // fall alike in every rank, every repeat and the simulator). Before the first message only.
  void setTraceOrigin(double origin) { start_ = origin; }
  // When the connection this link carries was opened (its handshake), for a model that keeps
  // connection state (tcp: the receiver's first buffer measure). -infinity (the default): long
  // before its first message, as the runtime's connections, opened at start-up.
  void setOpenedAt(double t) { opened_ = t; }
  double openedAt() const { return opened_; }
  // A uniform draw in [0, 1) from the link's seeded generator.
  double uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  // Whether the next packet (message) is lost: Bernoulli at `loss`, or a step of the link's
  // Gilbert-Elliott chain. Draws from the link's seeded generator, as the delay line does.
  bool lose();

  // The draw log (SLOWPIPE_LINK_DRAWS=DIR, read when the clock is made): each message's size and
  // the delay its draws gave it (latency, jitter, a loss's retransmission), in send order, so
  // that the tiers' draws on one link can be compared message by message. Empty when off.
  struct Draws {
    std::vector<uint64_t> bytes;
    std::vector<double> delayS;
  };
  const Draws& draws() const { return draws_; }
  bool logsDraws() const { return logDraws_; }

 private:
  bool logDraws_;
  Draws draws_;
  LinkSpec spec_;
  double start_;
  double opened_ = -std::numeric_limits<double>::infinity();
  double linkFree_;
  double lastArrival_ = 0.0;
  bool bad_ = false;  // Gilbert-Elliott state
  std::mt19937_64 rng_;
};

}  // namespace slowpipe::emulator
