// A Channel's two ends: this rank's side of one directed link (see channel.h).
#include "runtime/comm/channel.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "emulator/tcp_settings.h"
#include "runtime/launch/listen_guard.h"
#include "runtime/launch/security.h"

namespace slowpipe::runtime {

zmq::message_t frameMessage(compression::Bytes&& frame) {
  auto* owned = new compression::Bytes(std::move(frame));
  return zmq::message_t(
      owned->data(), owned->size(),
      [](void*, void* hint) { delete static_cast<compression::Bytes*>(hint); }, owned);
}

void DelayObserved::add(double d) {
  minS = std::min(minS, d);
  maxS = std::max(maxS, d);
  ++messages;
}

void DelayObserved::merge(const DelayObserved& o) {
  minS = std::min(minS, o.minS);
  maxS = std::max(maxS, o.maxS);
  messages += o.messages;
}

void LinkStats::add(const LinkStats& o) {
  for (int k = 0; k < kKinds; ++k) {
    raw[k] += o.raw[k];
    wire[k] += o.wire[k];
  }
  encodeS += o.encodeS;
  decodeS += o.decodeS;
  waitS += o.waitS;
  delay.merge(o.delay);
}

compression::Codec& CodecHalf::get(const std::string& key, const std::string& spec,
                                   const std::string& instance) {
  auto& c = codecs_[key];
  if (!c) c = compression::makeCodec(spec, instance);
  return *c;
}

ChannelIn::ChannelIn(zmq::context_t& ctx, const ChannelInOptions& opt) : opt_(opt) {
  pull_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pull);
  pull_->set(zmq::sockopt::rcvhwm, 0);
  pull_->set(zmq::sockopt::linger, 0);
  pull_->set(zmq::sockopt::maxmsgsize, opt_.maxMessageBytes);
  if (opt_.security) opt_.security->server(*pull_, opt_.peer);
  if (opt_.guard)
    opt_.guard->watch(*pull_, "data from rank " + std::to_string(opt_.peer),
                      opt_.security != nullptr);
  pull_->bind("tcp://" + opt_.bindHost + ":*");
  endpoint_ = pull_->get(zmq::sockopt::last_endpoint);
}

void ChannelIn::connect(const LinkEntry& in, emulator::LinkModel* inbound) {
  if (in.src != opt_.peer)
    throw std::logic_error("channel from rank " + std::to_string(opt_.peer) +
                           ": connected with link " + std::to_string(in.src) + " -> " +
                           std::to_string(in.dst));
  receiver_ = std::make_unique<emulator::ShapedReceiver>(*pull_, in.receiverLatencyS,
                                                         in.receiverJitterS, opt_.receiverSeed);
  receiver_->refuseArrivalsBeyond(opt_.maxAheadS);
  maxStripes_ = in.model.empty() ? std::max(1, in.spec.tcp.streams) : 1;
  if (inbound) receiver_->billWith(inbound, in.spec);
}

void ChannelIn::decode(compression::Codec& decoder, const compression::FrameHeader& h,
                       const uint8_t* bytes, size_t payloadAt, const compression::CodecContext& ctx,
                       std::vector<float>& out, int64_t maxElements) {
  const double t0 = emulator::monotonicNow();
  compression::decodeParsedFrame(decoder, h, bytes, payloadAt, ctx, out, maxElements);
  stats_.decodeS += emulator::monotonicNow() - t0;
}

LinkStats ChannelIn::takeStats() {
  LinkStats s = stats_;
  stats_ = LinkStats{};
  return s;
}

ChannelOut::~ChannelOut() {
  if (senders_.empty()) return;
  try {  // the first stream's clock: the one a link model stamps with (striping is the kernel's)
    emulator::writeLinkDraws(self_, peer_, senders_[0]->clock());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "slowpipe: %s\n", e.what());
  }
}

void ChannelOut::connect(zmq::context_t& ctx, const std::string& peerEndpoint, const LinkEntry& out,
                         uint64_t senderSeed) {
  if (out.dst != peer_)
    throw std::logic_error("channel to rank " + std::to_string(peer_) + ": connected with link " +
                           std::to_string(out.src) + " -> " + std::to_string(out.dst));
  self_ = out.src;
  // Where the kernel carries the link, network.tcp.streams connections (each its own PUSH socket,
  // so its own TCP connection); a link model's timing is its own business: one.
  const int streams = out.model.empty() ? std::max(1, out.spec.tcp.streams) : 1;
  for (int i = 0; i < streams; ++i) {
    auto push = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::push);
    push->set(zmq::sockopt::sndhwm, 0);
    // Linger: a rank that finishes first must still deliver its last messages (the final
    // evaluation batches, the last round's frames) before its process exits.
    push->set(zmq::sockopt::linger, 30000);
    if (security_) security_->client(*push, peer_);
    push->connect(peerEndpoint);
    senders_.push_back(std::make_unique<emulator::ShapedSender>(
        *push, out.spec, out.model.empty() ? nullptr : &emulator::linkModel(out.model),
        senderSeed + 7919 * i));
    if (out.access.active())
      senders_.back()->shareAccess(&emulator::processAccessLinks(), out.access);
    pushes_.push_back(std::move(push));
  }
}

void ChannelOut::setTraceOrigin(double origin) {
  for (auto& sender : senders_) sender->setTraceOrigin(origin);
}

zmq::message_t ChannelOut::encode(compression::Codec& encoder, const float* x,
                                  const compression::FrameHeader& h,
                                  const compression::CodecContext& ctx) {
  const double t0 = emulator::monotonicNow();
  zmq::message_t frame = frameMessage(compression::encodeFrame(encoder, x, h, ctx));
  stats_.encodeS += emulator::monotonicNow() - t0;
  return frame;
}

void ChannelOut::send(zmq::message_t frame, compression::MessageKind kind, int64_t raw) {
  if (senders_.empty())
    throw std::logic_error("channel to rank " + std::to_string(peer_) + " used before connect()");
  const auto k = static_cast<size_t>(kind) % LinkStats::kKinds;
  stats_.raw[k] += raw;
  stats_.wire[k] += static_cast<int64_t>(frame.size());
  const double t0 = emulator::monotonicNow();
  if (senders_.size() == 1)
    senders_[0]->send(std::move(frame));
  else
    sendStriped(std::move(frame));
  stats_.waitS += emulator::monotonicNow() - t0;  // queue-limit blocking counts as waiting
}

LinkStats ChannelOut::takeStats() {
  LinkStats s = stats_;
  stats_ = LinkStats{};
  return s;
}

namespace {

constexpr uint32_t kStripeMagic = 0x54535053;  // "SPST"
constexpr size_t kStripeHeader = 16;           // magic u32, index u16, count u16, sequence u64

}  // namespace

void ChannelOut::sendStriped(zmq::message_t frame) {
  const size_t bytes = frame.size(), count = senders_.size();
  const uint64_t seq = stripeSeq_++;
  const auto* data = static_cast<const uint8_t*>(frame.data());
  for (size_t i = 0; i < count; ++i) {
    const emulator::Stripe stripe = emulator::stripeOf(bytes, count, i);
    const size_t at = stripe.offset, len = stripe.bytes;
    zmq::message_t part(kStripeHeader + len);
    auto* p = static_cast<uint8_t*>(part.data());
    const uint16_t index = static_cast<uint16_t>(i), n = static_cast<uint16_t>(count);
    std::memcpy(p, &kStripeMagic, 4);
    std::memcpy(p + 4, &index, 2);
    std::memcpy(p + 6, &n, 2);
    std::memcpy(p + 8, &seq, 8);
    if (len) std::memcpy(p + kStripeHeader, data + at, len);
    senders_[i]->send(std::move(part));
  }
}

std::optional<emulator::ShapedMessage> ChannelIn::joinStripes(emulator::ShapedMessage m) {
  const auto* p = static_cast<const uint8_t*>(m.payload.data());
  uint32_t magic = 0;
  if (m.payload.size() >= kStripeHeader) std::memcpy(&magic, p, 4);
  if (magic != kStripeMagic) return m;  // a whole frame
  uint16_t index = 0, count = 0;
  uint64_t seq = 0;
  std::memcpy(&index, p + 4, 2);
  std::memcpy(&count, p + 6, 2);
  std::memcpy(&seq, p + 8, 8);
  // Built only for an error: this runs for every stripe received.
  auto what = [&] {
    return "channel from rank " + std::to_string(opt_.peer) + ": stripe " + std::to_string(index) +
           " of " + std::to_string(count) + " of frame " + std::to_string(seq);
  };
  // Checked before anything is kept: the count against the link's streams, the number and bytes
  // of incomplete frames against their bounds.
  if (count == 0 || count > maxStripes_)
    throw std::runtime_error(
        what() + ": a frame of this link comes in 1 to " + std::to_string(maxStripes_) +
        " stripes (network.tcp.streams), the header says " + std::to_string(count));
  if (!stripes_.count(seq) && stripes_.size() >= kMaxPartialFrames)
    throw std::runtime_error(what() + ": more than " + std::to_string(kMaxPartialFrames) +
                             " frames are incomplete");
  if (partialBytes_ + m.payload.size() > maxPartialBytes())
    throw std::runtime_error(what() + ": incomplete frames would hold " +
                             std::to_string(partialBytes_ + m.payload.size()) +
                             " bytes, more than " + std::to_string(maxPartialBytes()));
  Stripes& s = stripes_[seq];
  if (s.parts.empty()) s.parts.resize(count);
  if (index >= count || s.parts.size() != count || s.parts[index].payload.size() > 0)
    throw std::runtime_error(what() + " does not fit the stripes received");
  partialBytes_ += m.payload.size();
  s.parts[index] = std::move(m);
  if (++s.got < count) return std::nullopt;
  // All stripes are in: the frame, sent when its first stripe was, delivered with its last.
  size_t bytes = 0;
  for (const auto& part : s.parts) bytes += part.payload.size() - kStripeHeader;
  emulator::ShapedMessage whole;
  whole.payload = zmq::message_t(bytes);
  whole.envelope = s.parts[0].envelope;
  whole.envelope.bytes = bytes;
  auto* out = static_cast<uint8_t*>(whole.payload.data());
  for (const auto& part : s.parts) {
    const size_t len = part.payload.size() - kStripeHeader;
    std::memcpy(out, static_cast<const uint8_t*>(part.payload.data()) + kStripeHeader, len);
    out += len;
    whole.envelope.sendTime = std::min(whole.envelope.sendTime, part.envelope.sendTime);
    whole.receivedAt = std::max(whole.receivedAt, part.receivedAt);
    whole.due = std::max(whole.due, part.due);
    whole.deliveredAt = std::max(whole.deliveredAt, part.deliveredAt);
  }
  for (const auto& part : s.parts) partialBytes_ -= part.payload.size();
  stripes_.erase(seq);
  return whole;
}

// What incomplete frames may hold: 64 frames of the largest size (a step's micro-batches racing
// over their connections, one connection behind), at least 256 MiB; 4 GiB where messages have no
// size limit.
size_t ChannelIn::maxPartialBytes() const {
  if (opt_.maxMessageBytes <= 0) return size_t{4} << 30;
  return std::max<size_t>(size_t{256} << 20, 64 * static_cast<size_t>(opt_.maxMessageBytes));
}

std::optional<ChannelIn::Received> ChannelIn::take(
    const std::function<Verdict(const compression::FrameHeader&)>& judge, double timeoutS) {
  if (!receiver_)
    throw std::logic_error("channel from rank " + std::to_string(opt_.peer) +
                           " read before connect()");
  const double t0 = emulator::monotonicNow();
  std::optional<Received> got;
  for (auto it = stash_.begin(); it != stash_.end(); ++it)
    if (judge(it->header) == Verdict::kTake) {
      got = std::move(*it);
      stash_.erase(it);
      break;
    }
  while (!got) {
    const double left = timeoutS - (emulator::monotonicNow() - t0);
    std::optional<emulator::ShapedMessage> got0;
    Received r;
    try {  // what the peer sent is refused in its name
      got0 = left > 0 ? receiver_->recv(static_cast<int>(left * 1000)) : std::nullopt;
      if (!got0) break;
      auto m = joinStripes(std::move(*got0));
      if (!m) continue;  // a stripe of a frame not yet whole
      r = Received{std::move(*m), {}, 0};
      r.header = compression::parseFrame(r.bytes(), r.message.payload.size(), &r.payloadAt);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (what.rfind("channel from rank", 0) == 0) throw;
      throw std::runtime_error("channel from rank " + std::to_string(opt_.peer) + ": " + what);
    }
    const Verdict v = judge(r.header);
    if (v == Verdict::kStash) {
      stash_.push_back(std::move(r));  // ahead of its turn
      continue;
    }
    r.slip = v == Verdict::kSlip;
    got = std::move(r);
  }
  stats_.waitS += emulator::monotonicNow() - t0;
  if (got && !got->slip) stats_.delay.add(got->oneWayS());
  return got;
}

}  // namespace slowpipe::runtime
