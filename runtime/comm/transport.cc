// StageTransport (protocol in transport.h).
#include "runtime/comm/transport.h"

#include <cstdio>
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
  // A pair of channels per peer rank; with two stages in a ring the previous and the next are one
  // peer.
  for (const auto& [peer, fromPrev] :
       {std::pair{opt_.prevRank, true}, std::pair{opt_.nextRank, false}}) {
    if (peer < 0 || in_.count(peer)) continue;
    ChannelInOptions c;
    c.peer = peer;
    c.bindHost = fromPrev ? opt_.bindPrevHost : opt_.bindNextHost;
    c.security = opt_.security;
    c.guard = opt_.guard;
    c.maxAheadS = opt_.recvTimeoutS;
    c.maxMessageBytes = opt_.maxMessageBytes;
    c.receiverSeed = (fromPrev ? 100 : 200) + opt_.rank;
    in_[peer] = std::make_unique<ChannelIn>(ctx, c);
    out_[peer] = std::make_unique<ChannelOut>(peer, opt_.security);
  }
}

nlohmann::json StageTransport::endpoints() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [rank, c] : in_) out[std::to_string(rank)] = c->endpoint();
  return out;
}

void StageTransport::connect(const nlohmann::json& to, const RankLinks& links) {
  std::string inboundModel;
  for (auto& [rank, o] : out_) {
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
    in_.at(rank)->connect(in, inbound_.get());
    o->connect(ctx_, to[key].get<std::string>(), links.at(opt_.rank, rank),
               pipelineLinkSeed(opt_.rank, rank));
  }
}

ChannelOut& StageTransport::out(bool next) {
  const int peer = next ? opt_.nextRank : opt_.prevRank;
  const auto it = out_.find(peer);
  if (it == out_.end() || !it->second->connected())
    throw std::logic_error("transport: rank " + std::to_string(opt_.rank) + " has no " +
                           (next ? "next" : "previous") + " stage");
  return *it->second;
}

ChannelIn& StageTransport::in(bool prev) {
  const int peer = prev ? opt_.prevRank : opt_.nextRank;
  const auto it = in_.find(peer);
  if (it == in_.end())
    throw std::logic_error("transport: rank " + std::to_string(opt_.rank) + " has no " +
                           (prev ? "previous" : "next") + " stage");
  return *it->second;
}

compression::Codec& StageTransport::codec(CodecHalf& half, bool encoder, bool forward, int chunk) {
  char key[16];
  std::snprintf(key, sizeof key, "%s/c%03d", forward ? "fwd" : "bwd", chunk);
  return half.get(key, forward ? opt_.forwardCodec : opt_.backwardCodec, [&] {
    std::string name = "r" + std::to_string(opt_.rank) + (forward ? "-fwd" : "-bwd") +
                       (encoder ? "-send" : "-recv");
    if (chunk > 0) name += "-c" + std::to_string(chunk);
    return name;
  });
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
  ChannelOut& link = out(toNext);
  compression::FrameHeader h;
  h.kind = kind;
  h.step = step;
  h.microBatch = mb;
  if (chunk < 0 || chunk > 255)
    throw std::logic_error("transport: chunk " + std::to_string(chunk) + " is outside 0..255");
  h.chunk = static_cast<uint8_t>(chunk);
  h.src = opt_.rank;
  h.dst = link.peer();
  h.shape = shape;
  h.exampleIds = exampleIds;
  compression::CodecContext ctx = messageContext(toNext, step, epoch, mb);
  ctx.exampleIds = exampleIds;
  zmq::message_t frame;
  try {
    compression::Codec& enc =
        protocol::plainFrame(kind)
            ? link.encoders().get("plain", "none",
                                  [&] { return "r" + std::to_string(opt_.rank) + "-plain-send"; })
            : codec(link.encoders(), true, protocol::forwardCodec(kind, toNext), chunk);
    frame = link.encode(enc, data, h, ctx);
  } catch (const compression::NonFiniteError& e) {
    throw std::runtime_error(std::string("non-finite ") + kindName(kind) + " at step " +
                             std::to_string(step) + ", stage " + std::to_string(opt_.stage) +
                             ", micro-batch " + std::to_string(mb) + " (" + e.what() + ")");
  }
  link.send(std::move(frame), kind, 4 * compression::numelOf(shape));
}

Tensor32 StageTransport::recv(bool fromPrev, MessageKind kind, int64_t step, int epoch, int mb,
                              int chunk) {
  ChannelIn& link = in(fromPrev);
  // Every message of a step is taken within that step: an older step's is a slip.
  auto judge = [&](const compression::FrameHeader& h) {
    if (h.kind == kind && h.step == step && h.microBatch == mb && h.chunk == chunk)
      return ChannelIn::Verdict::kTake;
    return h.step < step ? ChannelIn::Verdict::kSlip : ChannelIn::Verdict::kStash;
  };
  std::optional<ChannelIn::Received> got = link.take(judge, opt_.recvTimeoutS);
  if (!got)
    throw std::runtime_error(
        "rank " + std::to_string(opt_.rank) + ": no " + describeKey(kind, step, mb, chunk) +
        " from rank " + std::to_string(link.peer()) + " for " + std::to_string(opt_.recvTimeoutS) +
        " s (" + std::to_string(link.stashed()) + " other messages of that rank waiting)");
  if (got->slip)
    throw std::runtime_error(
        "rank " + std::to_string(opt_.rank) + ": expected " + describeKey(kind, step, mb, chunk) +
        ", got " +
        describeKey(got->header.kind, got->header.step, got->header.microBatch, got->header.chunk));
  Tensor32 t;
  // What arrives from the previous stage travelled forward: the sender's context, field by field
  // (decodeParsedFrame adds the header's example ids).
  const bool forward = protocol::forwardCodec(kind, !fromPrev);
  const compression::CodecContext ctx = messageContext(forward, step, epoch, mb);
  compression::Codec& dec =
      protocol::plainFrame(kind)
          ? link.decoders().get("plain", "none",
                                [&] { return "r" + std::to_string(opt_.rank) + "-plain-recv"; })
          : codec(link.decoders(), false, forward, chunk);
  // No legal message of this run holds more fp32 values than its largest frame has bytes / 4.
  const int64_t maxElements =
      opt_.maxMessageBytes > 0 ? opt_.maxMessageBytes / 4 : compression::kMaxFrameElements;
  try {
    link.decode(dec, got->header, got->bytes(), got->payloadAt, ctx, t.data, maxElements);
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(opt_.rank) + ": the " +
                             describeKey(kind, step, mb, chunk) + " from rank " +
                             std::to_string(link.peer()) + " was refused: " + e.what());
  }
  t.shape = got->header.shape;
  t.exampleIds = got->header.exampleIds;
  return t;
}

void StageTransport::setTraceOrigin(double origin) {
  for (auto& [rank, o] : out_) o->setTraceOrigin(origin);
}

TransportStats StageTransport::takeStats() {
  TransportStats s;
  for (auto& [rank, o] : out_) {
    const LinkStats l = o->takeStats();
    s.fwdRaw += l.rawOf(MessageKind::kActivation);
    s.fwdWire += l.wireOf(MessageKind::kActivation);
    s.bwdRaw += l.rawOf(MessageKind::kGradient);
    s.bwdWire += l.wireOf(MessageKind::kGradient);
    s.encodeS += l.encodeS;
    s.waitS += l.waitS;  // queue-limit blocking counts as waiting
  }
  for (auto& [rank, i] : in_) {
    const LinkStats l = i->takeStats();
    s.decodeS += l.decodeS;
    s.waitS += l.waitS;
    if (rank == opt_.prevRank) s.fromPrev.merge(l.delay);
    if (rank == opt_.nextRank) s.fromNext.merge(l.delay);
  }
  return s;
}

uint64_t StageTransport::codecDigest(bool forward, bool sender) const {
  uint64_t h = 0;
  bool any = false;
  const std::string prefix = forward ? "fwd/" : "bwd/";
  auto fold = [&](const CodecHalf& half) {
    for (const auto& [key, codec] : half.all())
      if (key.rfind(prefix, 0) == 0) {
        h = any ? h * 1099511628211ull ^ codec->stateDigest() : codec->stateDigest();
        any = true;
      }
  };
  if (sender)
    for (const auto& [rank, o] : out_) fold(o->encoders());
  else
    for (const auto& [rank, i] : in_) fold(i->decoders());
  return h;
}

}  // namespace slowpipe::runtime
