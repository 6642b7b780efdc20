// StageTransport (protocol in transport.h).
#include "runtime/transport.h"

#include <stdexcept>

#include "compression/error.h"
#include "runtime/security.h"

namespace slowpipe::runtime {

using compression::MessageKind;

namespace {

bool isPlain(MessageKind k) { return k == MessageKind::kEval || k == MessageKind::kControl; }

const char* kindName(MessageKind k) {
  switch (k) {
    case MessageKind::kActivation: return "activation";
    case MessageKind::kGradient: return "gradient";
    case MessageKind::kParamGradient: return "parameter gradient";
    case MessageKind::kControl: return "control";
    case MessageKind::kEval: return "eval activation";
  }
  return "?";
}

std::string describeKey(MessageKind kind, int64_t step, int mb, int chunk) {
  return std::string(kindName(kind)) + " step " + std::to_string(step) + " micro-batch " + std::to_string(mb) +
         (chunk != 0 ? " chunk " + std::to_string(chunk) : "");
}

// Messages that travel forward (activations, evaluation activations, the norm total) or backward.
bool travelsForward(MessageKind kind, bool toNext) { return kind == MessageKind::kControl ? toNext : kind != MessageKind::kGradient; }

}  // namespace

StageTransport::StageTransport(zmq::context_t& ctx, TransportOptions opt) : opt_(std::move(opt)), ctx_(ctx) {
  // One channel per peer rank; with two stages in a ring the previous and the next are one peer.
  for (const auto& [peer, peerStage, fromPrev] : {std::tuple{opt_.prevRank, opt_.prevStage, true},
                                                  std::tuple{opt_.nextRank, opt_.nextStage, false}}) {
    if (peer < 0 || channels_.count(peer)) continue;
    Channel& c = channels_[peer];
    c.peer = peer;
    c.peerStage = peerStage;
    c.pull = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pull);
    c.pull->set(zmq::sockopt::rcvhwm, 0);
    c.pull->set(zmq::sockopt::linger, 0);
    c.pull->set(zmq::sockopt::maxmsgsize, opt_.maxMessageBytes);
    if (opt_.security) opt_.security->server(*c.pull, peer);
    c.pull->bind("tcp://" + (fromPrev ? opt_.bindPrevHost : opt_.bindNextHost) + ":*");
    c.endpoint = c.pull->get(zmq::sockopt::last_endpoint);
    const emulator::ReceiverDelays& d = opt_.delays;
    c.receiver = std::make_unique<emulator::ShapedReceiver>(*c.pull, fromPrev ? d.prevLatencyS : d.nextLatencyS,
                                                            fromPrev ? d.prevJitterS : d.nextJitterS,
                                                            (fromPrev ? 100 : 200) + opt_.rank);
    if (opt_.serialFifo) {
      const auto& l = opt_.topology.link(peerStage, opt_.stage);
      c.receiver->useSerialFifo(&fifo_, l.bandwidthBps, l.latencyS);
    }
  }
}

nlohmann::json StageTransport::endpoints() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [peer, c] : channels_) out[std::to_string(peer)] = c.endpoint;
  return out;
}

void StageTransport::connect(const nlohmann::json& to) {
  for (auto& [peer, c] : channels_) {
    const std::string key = std::to_string(peer);
    if (!to.contains(key) || !to[key].is_string() || to[key].get<std::string>().empty())
      throw std::runtime_error("rank " + std::to_string(opt_.rank) + ": the peer table has no endpoint of rank " + key);
    c.push = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::push);
    c.push->set(zmq::sockopt::sndhwm, 0);
    // Linger: a stage that finishes first must still deliver its last messages (the final
    // evaluation batches) before its process exits.
    c.push->set(zmq::sockopt::linger, 30000);
    if (opt_.security) opt_.security->client(*c.push, peer);
    c.push->connect(to[key].get<std::string>());
    c.sender = std::make_unique<emulator::ShapedSender>(*c.push, opt_.topology.link(opt_.stage, c.peerStage),
                                                        !opt_.kernelPacesRate && !opt_.serialFifo, 1000 * opt_.rank + c.peerStage);
    c.plainEncoder = compression::makeCodec("none");
    c.plainDecoder = compression::makeCodec("none");
  }
}

StageTransport::Channel& StageTransport::route(bool next) {
  const int peer = next ? opt_.nextRank : opt_.prevRank;
  const auto it = channels_.find(peer);
  if (it == channels_.end() || !it->second.push)
    throw std::logic_error("transport: rank " + std::to_string(opt_.rank) + " has no " + (next ? "next" : "previous") + " stage");
  return it->second;
}

// The codec of (direction, chunk) on channel c, made at its first use: "r<rank>-<fwd|bwd>-
// <send|recv>", plus "-c<chunk>" past chunk 0.
compression::Codec& StageTransport::codec(Channel& c, bool encoder, bool forward, int chunk) {
  auto& codecs = encoder ? c.encoders : c.decoders;
  auto it = codecs.find({forward, chunk});
  if (it != codecs.end()) return *it->second;
  std::string name = "r" + std::to_string(opt_.rank) + (forward ? "-fwd" : "-bwd") + (encoder ? "-send" : "-recv");
  if (chunk > 0) name += "-c" + std::to_string(chunk);
  auto made = compression::makeCodec(forward ? opt_.forwardCodec : opt_.backwardCodec, name);
  return *codecs.emplace(std::pair{forward, chunk}, std::move(made)).first->second;
}

// The context of one pipeline message, built alike by its sender and its receiver.
compression::CodecContext messageContext(bool forward, int64_t step, int epoch, int mb) {
  compression::CodecContext ctx;
  ctx.direction = forward ? compression::Direction::kForward : compression::Direction::kBackward;
  ctx.step = step;
  ctx.epoch = epoch;
  ctx.microBatch = mb;
  ctx.key = std::string(forward ? "fwd" : "bwd") + "/mb" + std::to_string(mb);
  return ctx;
}

void StageTransport::send(bool toNext, MessageKind kind, int64_t step, int epoch, int mb, const float* data,
                          const compression::Shape& shape, const std::vector<int64_t>& exampleIds, int chunk) {
  Channel& c = route(toNext);
  compression::FrameHeader h;
  h.kind = kind;
  h.step = step;
  h.microBatch = mb;
  if (chunk < 0 || chunk > 255) throw std::logic_error("transport: chunk " + std::to_string(chunk) + " is outside 0..255");
  h.chunk = static_cast<uint8_t>(chunk);
  h.src = opt_.rank;
  h.dst = c.peer;
  h.shape = shape;
  h.exampleIds = exampleIds;
  compression::CodecContext ctx = messageContext(toNext, step, epoch, mb);
  ctx.exampleIds = exampleIds;
  const double t0 = emulator::monotonicNow();
  compression::Bytes* frame = nullptr;
  try {
    compression::Codec& enc = isPlain(kind) ? *c.plainEncoder : codec(c, true, travelsForward(kind, toNext), chunk);
    frame = new compression::Bytes(compression::encodeFrame(enc, data, h, ctx));
  } catch (const compression::NonFiniteError& e) {
    throw std::runtime_error(std::string("non-finite ") + kindName(kind) + " at step " + std::to_string(step) +
                             ", stage " + std::to_string(opt_.stage) + ", micro-batch " + std::to_string(mb) + " (" +
                             e.what() + ")");
  }
  stats_.encodeS += emulator::monotonicNow() - t0;
  const int64_t raw = 4 * compression::numelOf(shape), wire = static_cast<int64_t>(frame->size());
  if (kind == MessageKind::kActivation) {
    stats_.fwdRaw += raw;
    stats_.fwdWire += wire;
  } else if (kind == MessageKind::kGradient) {
    stats_.bwdRaw += raw;
    stats_.bwdWire += wire;
  }
  const double t1 = emulator::monotonicNow();
  // ZeroMQ owns the frame from here and frees it once it is on the socket.
  zmq::message_t msg(frame->data(), frame->size(), [](void*, void* hint) { delete static_cast<compression::Bytes*>(hint); }, frame);
  c.sender->send(std::move(msg));
  stats_.waitS += emulator::monotonicNow() - t1;  // queue-limit blocking counts as waiting
}

Tensor32 StageTransport::recv(bool fromPrev, MessageKind kind, int64_t step, int epoch, int mb, int chunk) {
  Channel& c = route(!fromPrev);
  auto matches = [&](const compression::FrameHeader& h) {
    return h.kind == kind && h.step == step && h.microBatch == mb && h.chunk == chunk;
  };
  const double t0 = emulator::monotonicNow();
  std::optional<Received> got;
  for (auto it = c.stash.begin(); it != c.stash.end(); ++it)
    if (matches(it->header)) {
      got = std::move(*it);
      c.stash.erase(it);
      break;
    }
  while (!got) {
    const double left = opt_.recvTimeoutS - (emulator::monotonicNow() - t0);
    auto m = left > 0 ? c.receiver->recv(static_cast<int>(left * 1000)) : std::nullopt;
    if (!m) throw std::runtime_error("rank " + std::to_string(opt_.rank) + ": no " + describeKey(kind, step, mb, chunk) +
                                     " from rank " + std::to_string(c.peer) + " for " + std::to_string(opt_.recvTimeoutS) + " s (" +
                                     std::to_string(c.stash.size()) + " other messages of that rank waiting)");
    Received r{std::move(*m), {}, 0};
    const auto* bytes = static_cast<const uint8_t*>(r.message.payload.data());
    r.header = compression::parseFrame(bytes, r.message.payload.size(), &r.payloadAt);
    if (matches(r.header)) {
      got = std::move(r);
    } else if (r.header.step < step) {
      // An older step's message: every message of a step is taken within that step, so a slip.
      throw std::runtime_error("rank " + std::to_string(opt_.rank) + ": expected " + describeKey(kind, step, mb, chunk) + ", got " +
                               describeKey(r.header.kind, r.header.step, r.header.microBatch, r.header.chunk));
    } else {
      c.stash.push_back(std::move(r));  // ahead of its turn on a shared channel
    }
  }
  const double t1 = emulator::monotonicNow();
  stats_.waitS += t1 - t0;
  (fromPrev ? stats_.fromPrev : stats_.fromNext).add(got->message.deliveredAt - got->message.envelope.sendTime);
  Tensor32 t;
  // What arrives from the previous stage travelled forward: the sender's context, field by field
  // (decodeParsedFrame adds the header's example ids).
  const bool forward = travelsForward(kind, !fromPrev);
  const compression::CodecContext ctx = messageContext(forward, step, epoch, mb);
  compression::Codec& dec = isPlain(kind) ? *c.plainDecoder : codec(c, false, forward, chunk);
  const auto* bytes = static_cast<const uint8_t*>(got->message.payload.data());
  compression::decodeParsedFrame(dec, got->header, bytes, got->payloadAt, ctx, t.data);
  t.shape = got->header.shape;
  t.exampleIds = got->header.exampleIds;
  stats_.decodeS += emulator::monotonicNow() - t1;
  return t;
}

void StageTransport::setTraceOrigin(double origin) {
  for (auto& [peer, c] : channels_)
    if (c.sender) c.sender->setTraceOrigin(origin);
}

TransportStats StageTransport::takeStats() {
  TransportStats s = stats_;
  stats_ = TransportStats{};
  return s;
}

uint64_t StageTransport::codecDigest(bool forward, bool sender) const {
  uint64_t h = 0;
  bool any = false;
  for (const auto& [peer, c] : channels_)
    for (const auto& [key, codec] : sender ? c.encoders : c.decoders)
      if (key.first == forward) {
        h = any ? h * 1099511628211ull ^ codec->stateDigest() : codec->stateDigest();
        any = true;
      }
  return h;
}

}  // namespace slowpipe::runtime
