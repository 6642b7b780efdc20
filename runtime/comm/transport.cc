// StageTransport (protocol in transport.h).
#include "runtime/comm/transport.h"

#include <stdexcept>

#include "compression/error.h"
#include "runtime/exec/protocol.h"
#include "runtime/exec/ranks.h"
#include "runtime/launch/security.h"

namespace slowpipe::runtime {

using compression::MessageKind;

namespace {

const char* kindName(MessageKind k) {
  switch (k) {
    case MessageKind::kActivation:
      return "activation";
    case MessageKind::kGradient:
      return "gradient";
    case MessageKind::kParamGradient:
      return "parameter gradient";
    case MessageKind::kControl:
      return "control";
    case MessageKind::kEval:
      return "eval activation";
  }
  return "?";
}

std::string describeKey(MessageKind kind, int64_t step, int mb, int chunk) {
  return std::string(kindName(kind)) + " step " + std::to_string(step) + " micro-batch " +
         std::to_string(mb) + (chunk != 0 ? " chunk " + std::to_string(chunk) : "");
}

}  // namespace

StageTransport::StageTransport(zmq::context_t& ctx, TransportOptions opt)
    : opt_(std::move(opt)), ctx_(ctx) {
  // One channel per peer rank; with two stages in a ring the previous and the next are one peer.
  for (const auto& [peer, peerStage, fromPrev] :
       {std::tuple{opt_.prevRank, opt_.prevStage, true},
        std::tuple{opt_.nextRank, opt_.nextStage, false}}) {
    if (peer < 0 || peers_.count(peer)) continue;
    Peer& p = peers_[peer];
    p.rank = peer;
    p.stage = peerStage;
    ChannelOptions c;
    c.peer = peer;
    c.bindHost = fromPrev ? opt_.bindPrevHost : opt_.bindNextHost;
    c.security = opt_.security;
    c.guard = opt_.guard;
    c.maxAheadS = opt_.recvTimeoutS;
    c.maxMessageBytes = opt_.maxMessageBytes;
    c.receiverSeed = (fromPrev ? 100 : 200) + opt_.rank;
    p.channel = std::make_unique<Channel>(ctx, c);
  }
}

nlohmann::json StageTransport::endpoints() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [rank, p] : peers_) out[std::to_string(rank)] = p.channel->endpoint();
  return out;
}

void StageTransport::connect(const nlohmann::json& to, const RankLinks& links) {
  std::string inboundModel;
  for (auto& [rank, p] : peers_) {
    const std::string key = std::to_string(rank);
    if (!to.contains(key) || !to[key].is_string() || to[key].get<std::string>().empty())
      throw std::runtime_error("rank " + std::to_string(opt_.rank) +
                               ": the peer table has no endpoint of rank " + key);
    const LinkEntry& in = links.at(rank, opt_.rank);
    if (!in.model.empty() && !inbound_) {
      inbound_ = emulator::linkModel(in.model).make();
      inboundModel = in.model;
    }
    if (in.model != inboundModel)  // one receiving part per rank: its inbound links share a model
      throw std::runtime_error("rank " + std::to_string(opt_.rank) +
                               ": its inbound links have models '" + inboundModel + "' and '" +
                               in.model + "'");
    p.channel->connect(ctx_, to[key].get<std::string>(), links.at(opt_.rank, rank), in,
                       inbound_.get(), pipelineLinkSeed(opt_.rank, rank));
    p.plainEncoder = compression::makeCodec("none");
    p.plainDecoder = compression::makeCodec("none");
  }
}

StageTransport::Peer& StageTransport::route(bool next) {
  const int peer = next ? opt_.nextRank : opt_.prevRank;
  const auto it = peers_.find(peer);
  if (it == peers_.end() || !it->second.channel->connected())
    throw std::logic_error("transport: rank " + std::to_string(opt_.rank) + " has no " +
                           (next ? "next" : "previous") + " stage");
  return it->second;
}

// The codec of (direction, chunk) with peer p, made at its first use: "r<rank>-<fwd|bwd>-
// <send|recv>", plus "-c<chunk>" past chunk 0.
compression::Codec& StageTransport::codec(Peer& p, bool encoder, bool forward, int chunk) {
  auto& codecs = encoder ? p.encoders : p.decoders;
  auto it = codecs.find({forward, chunk});
  if (it != codecs.end()) return *it->second;
  std::string name =
      "r" + std::to_string(opt_.rank) + (forward ? "-fwd" : "-bwd") + (encoder ? "-send" : "-recv");
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

void StageTransport::send(bool toNext, MessageKind kind, int64_t step, int epoch, int mb,
                          const float* data, const compression::Shape& shape,
                          const std::vector<int64_t>& exampleIds, int chunk) {
  Peer& p = route(toNext);
  compression::FrameHeader h;
  h.kind = kind;
  h.step = step;
  h.microBatch = mb;
  if (chunk < 0 || chunk > 255)
    throw std::logic_error("transport: chunk " + std::to_string(chunk) + " is outside 0..255");
  h.chunk = static_cast<uint8_t>(chunk);
  h.src = opt_.rank;
  h.dst = p.rank;
  h.shape = shape;
  h.exampleIds = exampleIds;
  compression::CodecContext ctx = messageContext(toNext, step, epoch, mb);
  ctx.exampleIds = exampleIds;
  const double t0 = emulator::monotonicNow();
  zmq::message_t frame;
  try {
    compression::Codec& enc = protocol::plainFrame(kind)
                                  ? *p.plainEncoder
                                  : codec(p, true, protocol::forwardCodec(kind, toNext), chunk);
    frame = frameMessage(compression::encodeFrame(enc, data, h, ctx));
  } catch (const compression::NonFiniteError& e) {
    throw std::runtime_error(std::string("non-finite ") + kindName(kind) + " at step " +
                             std::to_string(step) + ", stage " + std::to_string(opt_.stage) +
                             ", micro-batch " + std::to_string(mb) + " (" + e.what() + ")");
  }
  stats_.encodeS += emulator::monotonicNow() - t0;
  const int64_t raw = 4 * compression::numelOf(shape), wire = static_cast<int64_t>(frame.size());
  if (kind == MessageKind::kActivation) {
    stats_.fwdRaw += raw;
    stats_.fwdWire += wire;
  } else if (kind == MessageKind::kGradient) {
    stats_.bwdRaw += raw;
    stats_.bwdWire += wire;
  }
  stats_.waitS += p.channel->send(std::move(frame));  // queue-limit blocking counts as waiting
}

Tensor32 StageTransport::recv(bool fromPrev, MessageKind kind, int64_t step, int epoch, int mb,
                              int chunk) {
  Peer& p = route(!fromPrev);
  // Every message of a step is taken within that step: an older step's is a slip.
  auto judge = [&](const compression::FrameHeader& h) {
    if (h.kind == kind && h.step == step && h.microBatch == mb && h.chunk == chunk)
      return Channel::Verdict::kTake;
    return h.step < step ? Channel::Verdict::kSlip : Channel::Verdict::kStash;
  };
  double waited = 0;
  std::optional<Channel::Received> got = p.channel->take(judge, opt_.recvTimeoutS, &waited);
  stats_.waitS += waited;
  if (!got)
    throw std::runtime_error(
        "rank " + std::to_string(opt_.rank) + ": no " + describeKey(kind, step, mb, chunk) +
        " from rank " + std::to_string(p.rank) + " for " + std::to_string(opt_.recvTimeoutS) +
        " s (" + std::to_string(p.channel->stashed()) + " other messages of that rank waiting)");
  if (got->slip)
    throw std::runtime_error(
        "rank " + std::to_string(opt_.rank) + ": expected " + describeKey(kind, step, mb, chunk) +
        ", got " +
        describeKey(got->header.kind, got->header.step, got->header.microBatch, got->header.chunk));
  const double t1 = emulator::monotonicNow();
  (fromPrev ? stats_.fromPrev : stats_.fromNext).add(got->oneWayS());
  Tensor32 t;
  // What arrives from the previous stage travelled forward: the sender's context, field by field
  // (decodeParsedFrame adds the header's example ids).
  const bool forward = protocol::forwardCodec(kind, !fromPrev);
  const compression::CodecContext ctx = messageContext(forward, step, epoch, mb);
  compression::Codec& dec =
      protocol::plainFrame(kind) ? *p.plainDecoder : codec(p, false, forward, chunk);
  // No legal message of this run holds more fp32 values than its largest frame has bytes / 4.
  const int64_t maxElements =
      opt_.maxMessageBytes > 0 ? opt_.maxMessageBytes / 4 : compression::kMaxFrameElements;
  try {
    compression::decodeParsedFrame(dec, got->header, got->bytes(), got->payloadAt, ctx, t.data,
                                   maxElements);
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(opt_.rank) + ": the " +
                             describeKey(kind, step, mb, chunk) + " from rank " +
                             std::to_string(p.rank) + " was refused: " + e.what());
  }
  t.shape = got->header.shape;
  t.exampleIds = got->header.exampleIds;
  stats_.decodeS += emulator::monotonicNow() - t1;
  return t;
}

void StageTransport::setTraceOrigin(double origin) {
  for (auto& [rank, p] : peers_) p.channel->setTraceOrigin(origin);
}

TransportStats StageTransport::takeStats() {
  TransportStats s = stats_;
  stats_ = TransportStats{};
  return s;
}

uint64_t StageTransport::codecDigest(bool forward, bool sender) const {
  uint64_t h = 0;
  bool any = false;
  for (const auto& [rank, p] : peers_)
    for (const auto& [key, codec] : sender ? p.encoders : p.decoders)
      if (key.first == forward) {
        h = any ? h * 1099511628211ull ^ codec->stateDigest() : codec->stateDigest();
        any = true;
      }
  return h;
}

}  // namespace slowpipe::runtime
