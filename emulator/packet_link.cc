// One direction of a packet-level link (see packet_link.h).
#include "emulator/packet_link.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "emulator/link.h"

namespace slowpipe::emulator {

using nlohmann::json;

std::string PacketLinkSpec::describe() const {
  std::string s = deliveryMs.empty() ? (rateBps > 0 ? formatBandwidth(rateBps) : "unlimited")
                                     : "delivery trace";
  s += ", " + formatDuration(delayS);
  if (jitterS > 0) s += " +-" + formatDuration(jitterS) + (reorder ? " (reordering)" : "");
  if (gilbertElliott)
    s += ", GE loss " + std::to_string(ge.meanLoss());
  else if (loss > 0)
    s += ", loss " + std::to_string(loss);
  if (queueBytes) s += ", queue " + std::to_string(queueBytes) + " B";
  if (queuePackets) s += ", queue " + std::to_string(queuePackets) + " packets";
  return s + ", mtu " + std::to_string(mtu);
}

std::vector<double> loadDeliveryTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("delivery trace '" + path + "': cannot open");
  std::vector<double> ms;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(line, &used);
    } catch (const std::exception&) {
    }
    if (v < 0 || line.find_first_not_of(" \t\r", used) != std::string::npos)
      throw std::invalid_argument("delivery trace '" + path + "' line " + std::to_string(n) +
                                  ": '" + line + "' is not a millisecond (a non-negative integer)");
    if (!ms.empty() && v < ms.back())
      throw std::invalid_argument("delivery trace '" + path + "' line " + std::to_string(n) + ": " +
                                  std::to_string(v) + " comes before " +
                                  std::to_string(static_cast<long long>(ms.back())));
    ms.push_back(static_cast<double>(v));
  }
  if (ms.empty() || ms.back() <= 0)
    throw std::invalid_argument("delivery trace '" + path +
                                "': no delivery opportunities (its last millisecond must be > 0)");
  return ms;
}

PacketLinkSpec packetLinkSpecFromJson(const json& j, const std::string& where) {
  if (!j.is_object())
    throw std::invalid_argument(
        where + ": expected an object like {\"rate\": \"1Gbps\", \"delay\": \"25ms\"}");
  static const std::vector<std::string> kKeys = {"rate",    "trace", "delay",       "jitter",
                                                 "reorder", "loss",  "queue_bytes", "queue_packets",
                                                 "mtu",     "seed"};
  for (const auto& [k, v] : j.items())
    if (std::find(kKeys.begin(), kKeys.end(), k) == kKeys.end())
      throw std::invalid_argument(
          where + "." + k +
          ": unknown field; expected rate, trace, delay, jitter, reorder, loss, "
          "queue_bytes, queue_packets, mtu, seed");
  PacketLinkSpec s;
  auto text = [&](const char* k) {
    if (!j[k].is_string())
      throw std::invalid_argument(where + "." + k +
                                  ": expected a string with a unit, e.g. \"25ms\"");
    return j[k].get<std::string>();
  };
  if (j.contains("rate")) s.rateBps = parseBandwidth(text("rate"), where + ".rate");
  if (j.contains("trace")) s.deliveryMs = loadDeliveryTrace(text("trace"));
  if (j.contains("delay")) s.delayS = parseDuration(text("delay"), where + ".delay");
  if (j.contains("jitter")) s.jitterS = parseDuration(text("jitter"), where + ".jitter");
  if (j.contains("reorder")) {
    if (!j["reorder"].is_boolean())
      throw std::invalid_argument(where + ".reorder: expected true or false");
    s.reorder = j["reorder"].get<bool>();
  }
  auto probability = [&](const json& v, const std::string& field) {
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 1)
      throw std::invalid_argument(field + ": " + v.dump() + " must be a probability in [0, 1]");
    return v.get<double>();
  };
  if (j.contains("loss")) {
    const json& l = j["loss"];
    if (l.is_object()) {
      s.gilbertElliott = true;
      s.ge = gilbertElliottFromJson(l, where + ".loss");
    } else {
      s.loss = probability(l, where + ".loss");
    }
  }
  for (const auto& [k, out] :
       {std::pair{"queue_bytes", &s.queueBytes}, std::pair{"queue_packets", &s.queuePackets}})
    if (j.contains(k)) {
      if (!j[k].is_number_unsigned())
        throw std::invalid_argument(where + "." + k + ": expected a positive integer");
      *out = j[k].get<uint64_t>();
    }
  if (j.contains("mtu")) {
    if (!j["mtu"].is_number_integer() || j["mtu"].get<int64_t>() < 576 ||
        j["mtu"].get<int64_t>() > 65535)
      throw std::invalid_argument(where + ".mtu: " + j["mtu"].dump() +
                                  " must be an integer in 576..65535");
    s.mtu = j["mtu"].get<int>();
  }
  if (j.contains("seed")) {
    if (!j["seed"].is_number_unsigned())
      throw std::invalid_argument(where + ".seed: expected a non-negative integer");
    s.seed = j["seed"].get<uint64_t>();
  }
  return s;
}

PacketLink::PacketLink(PacketLinkSpec spec) : spec_(std::move(spec)), rng_(spec_.seed) {}

bool PacketLink::lose() {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (!spec_.gilbertElliott) return spec_.loss > 0 && u(rng_) < spec_.loss;
  const bool lost = u(rng_) < (bad_ ? spec_.ge.lossBad : spec_.ge.lossGood);
  bad_ = bad_ ? !(u(rng_) < spec_.ge.r) : u(rng_) < spec_.ge.p;  // then the state moves
  return lost;
}

double PacketLink::opportunity(uint64_t k) const {
  const auto n = static_cast<uint64_t>(spec_.deliveryMs.size());
  return (static_cast<double>(k / n) * spec_.deliveryMs.back() + spec_.deliveryMs[k % n]) * 1e-3;
}

bool PacketLink::offer(double now, uint32_t bytes, uint64_t id) {
  serve(now);
  ++stats_.offered;
  if (lose()) {
    ++stats_.lostIngress;
    return false;
  }
  if ((spec_.queueBytes && queuedBytes_ + bytes > spec_.queueBytes) ||
      (spec_.queuePackets && queue_.size() + 1 > spec_.queuePackets)) {
    ++stats_.droppedQueue;
    return false;
  }
  if (queue_.empty() && !spec_.deliveryMs.empty()) {
    // Opportunities that passed while the queue was empty are gone (Mahimahi's link wastes them).
    while (opportunity(nextOpportunity_) < now) ++nextOpportunity_;
    carried_ = 0;
  }
  queue_.push_back({id, bytes, now});
  queuedBytes_ += bytes;
  stats_.maxQueueBytes = std::max(stats_.maxQueueBytes, queuedBytes_);
  return true;
}

double PacketLink::departureOf(double start, uint32_t bytes) {
  return spec_.rateBps > 0 ? start + 8.0 * bytes / spec_.rateBps : start;
}

void PacketLink::serve(double now) {
  auto depart = [&](double at) {
    const Queued q = queue_.front();
    queue_.pop_front();
    queuedBytes_ -= q.bytes;
    double arrival = at + spec_.delayS;
    if (spec_.jitterS > 0) {
      std::normal_distribution<double> n(0.0, spec_.jitterS);
      arrival += std::clamp(n(rng_), -3 * spec_.jitterS, 3 * spec_.jitterS);
      arrival = std::max(arrival, at);
    }
    if (!spec_.reorder) arrival = std::max(arrival, lastArrival_);
    lastArrival_ = std::max(lastArrival_, arrival);
    const auto pos = std::upper_bound(flight_.begin(), flight_.end(), arrival,
                                      [](double t, const InFlight& f) { return t < f.arrival; });
    flight_.insert(pos, {q.id, q.bytes, arrival});
  };
  if (spec_.deliveryMs.empty()) {
    while (!queue_.empty()) {
      const Queued& head = queue_.front();
      const double leaves = departureOf(std::max(head.offered, linkFree_), head.bytes);
      if (leaves > now) break;
      linkFree_ = leaves;
      depart(leaves);
    }
    return;
  }
  // A delivery trace: each opportunity carries up to one MTU of the queue's bytes in order.
  while (!queue_.empty() && opportunity(nextOpportunity_) <= now) {
    const double t = opportunity(nextOpportunity_++);
    uint32_t capacity = static_cast<uint32_t>(spec_.mtu);
    while (capacity > 0 && !queue_.empty() && queue_.front().offered <= t) {
      const uint32_t take = std::min(capacity, queue_.front().bytes - carried_);
      carried_ += take;
      capacity -= take;
      if (carried_ == queue_.front().bytes) {
        carried_ = 0;
        depart(t);
      }
    }
  }
}

void PacketLink::setRate(double now, double bps) {
  serve(now);
  spec_.rateBps = bps;
}

double PacketLink::nextEvent() const {
  double t = flight_.empty() ? std::numeric_limits<double>::infinity() : flight_.front().arrival;
  if (!queue_.empty()) {
    const Queued& head = queue_.front();
    const double leaves = spec_.deliveryMs.empty()
                              ? (spec_.rateBps > 0 ? std::max(head.offered, linkFree_) +
                                                         8.0 * head.bytes / spec_.rateBps
                                                   : std::max(head.offered, linkFree_))
                              : opportunity(nextOpportunity_);
    t = std::min(t, leaves);
  }
  return t;
}

std::vector<uint64_t> PacketLink::pop(double now, std::vector<double>* due) {
  serve(now);
  std::vector<uint64_t> out;
  while (!flight_.empty() && flight_.front().arrival <= now) {
    out.push_back(flight_.front().id);
    if (due) due->push_back(flight_.front().arrival);
    ++stats_.delivered;
    stats_.bytesDelivered += flight_.front().bytes;
    flight_.pop_front();
  }
  return out;
}

nlohmann::json toJson(const PacketLinkStats& s) {
  return {{"offered", s.offered},
          {"delivered", s.delivered},
          {"lost_ingress", s.lostIngress},
          {"dropped_queue", s.droppedQueue},
          {"bytes_delivered", s.bytesDelivered},
          {"max_queue_bytes", s.maxQueueBytes}};
}

}  // namespace slowpipe::emulator
