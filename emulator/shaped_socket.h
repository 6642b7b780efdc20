// User-space shaping on the project's own ZeroMQ sockets.
//
// Protocol: every message is two ZeroMQ frames, an Envelope and the payload. The sender keeps the
// LinkClock of its link and stamps each message with the time it may be delivered; the receiver
// holds the message until then (sleep, then spin for the last ~100 us). Because the stamp is
// computed from the send time, the real loopback transfer is absorbed into the emulated time
// instead of added to it; a message that really arrives later than its stamp is delivered at once.
// With the kernel backend the kernel paces the rate: the sender stamps arrival = 0 and the
// receiver adds only latency/jitter to the real receipt time (DelayLine).
// All times are the run's clock (monotonicNow): CLOCK_MONOTONIC, which every process on a host
// shares, also across network namespaces; across hosts corrected by the offset the rendezvous
// estimated (runtime/launch/rendezvous.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <zmq.hpp>

#include "emulator/link.h"
#include "emulator/link_model.h"
#include "emulator/nodes.h"

namespace slowpipe::emulator {

// The run's clock: this host's CLOCK_MONOTONIC plus the offset to the run's reference clock (0 on
// one host; across hosts the offset to the coordinator's clock estimated at the rendezvous, so
// envelope times mean the same thing on both ends of a link).
double monotonicNow();
// This host's clock alone (CLOCK_MONOTONIC; tests may skew it with SLOWPIPE_TEST_CLOCK_SKEW_S).
double hostClockNow();
// Set once, before any link is built.
void setClockOffset(double offsetS);
// Sleeps until monotonic time t: clock_nanosleep to ~100 us before, then spins.
void sleepUntil(double t);

struct Envelope {
  double sendTime = 0;     // when the sender handed the message over
  double arrivalTime = 0;  // when the receiver may deliver it; 0: receiver applies its DelayLine
  uint64_t bytes = 0;      // payload size, checked on receipt
};

struct ShapedMessage {
  Envelope envelope;
  double receivedAt = 0;  // when it came off the socket
  double due = 0;         // when it may be delivered
  double deliveredAt = 0;
  zmq::message_t payload;
};

// Shapes what the owner sends on one socket to one peer.
class ShapedSender {
 public:
  // model: the link model that stamps each message's arrival (emulator/link_model.h); nullptr: the
  // kernel shapes the rate, only stamp the send time (the receiver adds latency and jitter).
  ShapedSender(zmq::socket_t& socket, LinkSpec spec, const LinkModelInfo* model, uint64_t seed = 1);
  // Sends one message. A model that paces at the sender blocks while the emulated link holds more
  // than spec.queueBytes.
  void send(const void* data, size_t size);
  // Variant taking ownership of a zmq message (no copy).
  void send(zmq::message_t payload);
  const LinkClock& clock() const { return clock_; }
  void setTraceOrigin(double origin) { clock_.setTraceOrigin(origin); }
  // network.nodes: every message also books the access links of `path` on `links` (shared by the
  // node's connections); it arrives at the later of the model's stamp and the access links'.
  void shareAccess(AccessLinks* links, const AccessPath& path) {
    access_ = links;
    path_ = path;
  }

 private:
  zmq::socket_t& socket_;
  LinkClock clock_;
  const LinkModelInfo* info_;
  std::unique_ptr<LinkModel> model_;  // the sender's part (stamp)
  AccessLinks* access_ = nullptr;
  AccessPath path_;
};

// Delivers messages at their emulated arrival times. While it waits for one message's time it keeps
// draining the socket, so receipt times (which the kernel-paced DelayLine adds latency to) are
// stamped when messages really arrive, not when the previous one was delivered.
class ShapedReceiver {
 public:
  // latencyS/jitterS are applied by the receiver only for messages stamped with arrivalTime 0.
  ShapedReceiver(zmq::socket_t& socket, double latencyS = 0, double jitterS = 0, uint64_t seed = 2);
  // Waits up to timeoutMs (-1: forever) for a message; empty if none came.
  std::optional<ShapedMessage> recv(int timeoutMs = -1);
  // A link model whose receiver bills (serial_fifo): each retrieved message the sender left
  // unstamped is billed on `model` (the receiving rank's, shared by its inbound links; it outlives
  // the receiver) as having come over `link`.
  void billWith(LinkModel* model, const LinkSpec& link) {
    model_ = model;
    link_ = link;
  }
  // A message stamped to arrive more than `seconds` from now is refused at once (an error naming
  // the envelope's arrivalTime): a receiver that waits at most that long could never take it, and
  // a peer that sends one would otherwise hold the receiver until its timeout. 0: no limit.
  void refuseArrivalsBeyond(double seconds) { maxAheadS_ = seconds; }

 private:
  bool pull(bool wait, int timeoutMs);  // moves one message from the socket into pending_
  void drainFor(double until);          // pulls whatever arrives until `until`

  zmq::socket_t& socket_;
  double latencyS_, jitterS_;
  double lastDue_ = 0;
  double maxAheadS_ = 0;
  std::mt19937_64 rng_;
  std::deque<ShapedMessage> pending_;
  LinkModel* model_ = nullptr;  // billWith
  LinkSpec link_;
};

}  // namespace slowpipe::emulator
