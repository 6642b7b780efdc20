// One direction of a packet-level link (issue: real TCP on emulated WANs), the model the delay
// line (emulator/delay_line.h) runs between two namespaces' TUN devices, as Mahimahi's mm-loss,
// mm-link and mm-delay do in a chain: a packet offered at time t is
//   1. lost at the ingress with the loss model's probability (Bernoulli, or Gilbert-Elliott's
//      two-state chain: good and bad states with their own loss rates);
//   2. dropped if the bottleneck queue (drop-tail, bytes or packets, the packet in service
//      included) is full;
//   3. serialised in FIFO order at the link's rate: a constant rate (its bytes take 8B/R), or a
//      packet-delivery trace in Mahimahi's format (each line a millisecond at which one MTU-sized
//      delivery opportunity occurs, the file repeating after its last line; a packet leaves once
//      opportunities have carried all its bytes);
//   4. delivered one-way delay (+ a normal jitter, clipped at 3 sigma) after it left the queue;
//      without reordering (the default) never before the packet ahead of it, as a wire does.
// Pure: times are passed in, randomness comes from a seeded generator, so tests replay it exactly.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "emulator/link.h"

namespace slowpipe::emulator {

struct PacketLinkSpec {
  double rateBps = 0;              // 0: no rate limit (unless a trace is set)
  std::vector<double> deliveryMs;  // Mahimahi trace: delivery opportunities (ms, non-decreasing)
  double delayS = 0, jitterS = 0;  // one way
  bool reorder = false;            // jitter may deliver a packet before the one ahead of it
  double loss = 0;                 // Bernoulli loss probability (ignored when ge is set)
  bool gilbertElliott = false;
  GilbertElliott ge;
  uint64_t queueBytes = 0,
           queuePackets = 0;  // drop-tail limits (0: none); bytes include the packet in service
  int mtu = 1500;             // bytes one delivery opportunity carries
  uint64_t seed = 1;

  std::string describe() const;
};

// Parses {"rate": "1Gbps" | bits/s, "trace": "<Mahimahi file>", "delay": "25ms", "jitter": "1ms",
// "reorder": bool, "loss": 0.01 | {"p", "r", "loss_good", "loss_bad"}, "queue_bytes",
// "queue_packets", "mtu", "seed"}; errors name "<where>.<field>".
PacketLinkSpec packetLinkSpecFromJson(const nlohmann::json& j, const std::string& where);
// A Mahimahi packet-delivery trace: one integer millisecond per line (non-decreasing, last > 0).
std::vector<double> loadDeliveryTrace(const std::string& path);

struct PacketLinkStats {
  uint64_t offered = 0, delivered = 0, lostIngress = 0, droppedQueue = 0, bytesDelivered = 0;
  uint64_t maxQueueBytes = 0;
};
// {"offered", "delivered", "lost_ingress", "dropped_queue", "bytes_delivered", "max_queue_bytes"}
nlohmann::json toJson(const PacketLinkStats& s);

class PacketLink {
 public:
  explicit PacketLink(PacketLinkSpec spec);
  // A packet of `bytes` offered at `now` (seconds); false if lost or dropped. `id`: the caller's
  // handle, returned by pop().
  bool offer(double now, uint32_t bytes, uint64_t id);
  // The earliest time something is due (a delivery, or a departure that frees the queue); +inf if
  // none.
  double nextEvent() const;
  // The ids of packets delivered by `now`, in delivery order (with `due`: each one's delivery
  // time).
  std::vector<uint64_t> pop(double now, std::vector<double>* due = nullptr);
  const PacketLinkStats& stats() const { return stats_; }
  // A constant rate from `now` on (what left by now left at the old one).
  void setRate(double now, double bps);
  const PacketLinkSpec& spec() const { return spec_; }
  // Whether the loss model drops the next packet (advances its state): exposed for tests.
  bool lose();

 private:
  struct Queued {
    uint64_t id;
    uint32_t bytes;
    double offered;
  };
  struct InFlight {
    uint64_t id;
    uint32_t bytes;
    double arrival;
  };
  void serve(double now);  // moves packets whose service ended by `now` into flight
  double departureOf(double start,
                     uint32_t bytes);    // when a packet entering service at start leaves
  double opportunity(uint64_t k) const;  // time of the trace's k-th delivery opportunity (s)

  PacketLinkSpec spec_;
  std::mt19937_64 rng_;
  bool bad_ = false;          // Gilbert-Elliott state
  std::deque<Queued> queue_;  // waiting or in service (front)
  uint64_t queuedBytes_ = 0;
  double headStart_ = -1, headDeparture_ = -1;  // the packet in service
  double linkFree_ = 0;                         // constant rate: when the previous packet finished
  uint64_t nextOpportunity_ = 0;                // trace: the first unused delivery opportunity
  uint32_t carried_ = 0;                        // trace: bytes of the head packet already carried
  std::deque<InFlight> flight_;                 // in delivery order
  double lastArrival_ = 0;
  PacketLinkStats stats_;
};

}  // namespace slowpipe::emulator
