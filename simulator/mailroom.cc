// The replay's messages between send and receipt (see mailroom.h).
#include "simulator/mailroom.h"

#include <algorithm>
#include <stdexcept>

namespace slowpipe::simulator {

Mailroom::Mailroom(const runtime::RunSpec& spec, const runtime::RankLayout& layout,
                   bool recordMessages)
    : spec_(spec), layout_(layout), record_(recordMessages), inbound_(layout.size()) {}

void Mailroom::usePacketNetwork() { packet_ = makeNs3Network(spec_, linkTable_); }

Mailroom::Link& Mailroom::link(int from, int to) {
  const uint64_t k = static_cast<uint64_t>(from) << 32 | static_cast<uint32_t>(to);
  auto it = links_.find(k);
  if (it == links_.end()) {
    runtime::LinkEntry e = linkTable_.at(from, to);
    const uint64_t seed = e.dataParallel ? runtime::dpLinkSeed(from, layout_.id(to).replica)
                                         : runtime::pipelineLinkSeed(from, to);
    emulator::LinkClock c(e.spec, 0.0, seed);
    auto sender = emulator::linkModel(e.model).make();
    it = links_.emplace(k, Link{std::move(e), std::move(c), std::move(sender)}).first;
  }
  return it->second;
}

void Mailroom::log(const MailKey& k, const Message& m, double arrival) {
  messages_.push_back({k.from, k.to, k.step, k.microBatch, k.chunk, k.round,
                       static_cast<int>(k.message), m.bytes, m.sentAt, arrival});
}

bool Mailroom::post(const MailKey& k, int64_t bytes, double now,
                    std::function<void(const MailKey&, double)> delivered) {
  Message m{now, -1, bytes};
  if (packet_) {  // the packet network delivers it; whoever waits for it wakes then
    m.inFlight = true;
    mail_[k] = m;
    packet_->send(k.from, k.to, static_cast<uint64_t>(bytes),
                  [k, delivered = std::move(delivered)](double t) { delivered(k, t); });
    return false;
  }
  Link& l = link(k.from, k.to);
  m.arrival = l.sender->stamp(l.clock, now, static_cast<uint64_t>(bytes));
  if (l.entry.access.active() &&
      m.arrival >= 0)  // network.nodes: the path's access links, shared by the nodes' connections
    m.arrival =
        std::max(m.arrival, access_.send(l.entry.access, now, static_cast<uint64_t>(bytes)));
  mail_[k] = m;
  if (record_ && m.arrival >= 0) log(k, m, m.arrival);
  return true;
}

void Mailroom::arrived(const MailKey& k, double t) {
  auto it = mail_.find(k);
  it->second.inFlight = false;
  it->second.arrival = t;
  if (record_) log(k, it->second, t);
}

Mailroom::Found Mailroom::take(const MailKey& k, double* arrival, int64_t* bytes) {
  const auto it = mail_.find(k);
  if (it == mail_.end()) return Found::kNotYet;
  if (it->second.inFlight) return Found::kInFlight;  // posted, still in the packet network
  Message m = it->second;
  mail_.erase(it);
  if (m.arrival < 0) {  // the sender's part left it to the receiving rank's (serial_fifo)
    const Link& l = link(k.from, k.to);
    auto& inbound = inbound_[static_cast<size_t>(k.to)];
    if (!inbound) inbound = emulator::linkModel(l.entry.model).make();
    m.arrival = inbound->bill(l.entry.spec, m.sentAt, static_cast<uint64_t>(m.bytes));
    if (record_) log(k, m, m.arrival);  // billed only now
  }
  *arrival = m.arrival;
  *bytes = m.bytes;
  return Found::kHere;
}

std::optional<int> Mailroom::waiter(const MailKey& k) {
  const auto w = waiting_.find(k);
  if (w == waiting_.end()) return std::nullopt;
  const int rank = w->second;
  waiting_.erase(w);
  return rank;
}

void Mailroom::writeDraws() const {
  for (const auto& [k, l] : links_)
    emulator::writeLinkDraws(static_cast<int>(k >> 32), static_cast<int>(k & 0xffffffffu), l.clock);
}

}  // namespace slowpipe::simulator
