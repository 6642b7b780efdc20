// A Channel: this rank's links with one peer (see channel.h).
#include "runtime/channel.h"

#include "runtime/security.h"

namespace slowpipe::runtime {

zmq::message_t frameMessage(compression::Bytes&& frame) {
  auto* owned = new compression::Bytes(std::move(frame));
  return zmq::message_t(owned->data(), owned->size(), [](void*, void* hint) { delete static_cast<compression::Bytes*>(hint); },
                        owned);
}

Channel::Channel(zmq::context_t& ctx, const ChannelOptions& opt) : opt_(opt) {
  pull_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pull);
  pull_->set(zmq::sockopt::rcvhwm, 0);
  pull_->set(zmq::sockopt::linger, 0);
  pull_->set(zmq::sockopt::maxmsgsize, opt_.maxMessageBytes);
  if (opt_.security) opt_.security->server(*pull_, opt_.peer);
  pull_->bind("tcp://" + opt_.bindHost + ":*");
  endpoint_ = pull_->get(zmq::sockopt::last_endpoint);
}

void Channel::connect(zmq::context_t& ctx, const std::string& peerEndpoint, const LinkEntry& out, const LinkEntry& in,
                      emulator::LinkModel* inbound, uint64_t senderSeed) {
  if (out.dst != opt_.peer || in.src != opt_.peer || out.src != in.dst)
    throw std::logic_error("channel to rank " + std::to_string(opt_.peer) + ": connected with links " + std::to_string(out.src) +
                           " -> " + std::to_string(out.dst) + " and " + std::to_string(in.src) + " -> " + std::to_string(in.dst));
  push_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::push);
  push_->set(zmq::sockopt::sndhwm, 0);
  // Linger: a rank that finishes first must still deliver its last messages (the final
  // evaluation batches, the last round's frames) before its process exits.
  push_->set(zmq::sockopt::linger, 30000);
  if (opt_.security) opt_.security->client(*push_, opt_.peer);
  push_->connect(peerEndpoint);
  sender_ = std::make_unique<emulator::ShapedSender>(*push_, out.spec, out.model.empty() ? nullptr : &emulator::linkModel(out.model),
                                                     senderSeed);
  receiver_ = std::make_unique<emulator::ShapedReceiver>(*pull_, in.receiverLatencyS, in.receiverJitterS, opt_.receiverSeed);
  if (inbound) receiver_->billWith(inbound, in.spec);
}

void Channel::setTraceOrigin(double origin) {
  if (sender_) sender_->setTraceOrigin(origin);
}

double Channel::send(zmq::message_t frame) {
  if (!sender_) throw std::logic_error("channel to rank " + std::to_string(opt_.peer) + " used before connect()");
  const double t0 = emulator::monotonicNow();
  sender_->send(std::move(frame));
  return emulator::monotonicNow() - t0;
}

std::optional<Channel::Received> Channel::take(const std::function<Verdict(const compression::FrameHeader&)>& judge,
                                               double timeoutS, double* waitedS) {
  if (!receiver_) throw std::logic_error("channel from rank " + std::to_string(opt_.peer) + " read before connect()");
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
    auto m = left > 0 ? receiver_->recv(static_cast<int>(left * 1000)) : std::nullopt;
    if (!m) break;
    Received r{std::move(*m), {}, 0};
    r.header = compression::parseFrame(r.bytes(), r.message.payload.size(), &r.payloadAt);
    const Verdict v = judge(r.header);
    if (v == Verdict::kStash) {
      stash_.push_back(std::move(r));  // ahead of its turn
      continue;
    }
    r.slip = v == Verdict::kSlip;
    got = std::move(r);
  }
  *waitedS = emulator::monotonicNow() - t0;
  return got;
}

}  // namespace slowpipe::runtime
