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

}  // namespace

StageTransport::StageTransport(zmq::context_t& ctx, TransportOptions opt)
    : opt_(std::move(opt)), ctx_(ctx), fromPrev_(ctx, zmq::socket_type::pull), fromNext_(ctx, zmq::socket_type::pull) {
  for (auto* s : {&fromPrev_, &fromNext_}) {
    s->set(zmq::sockopt::rcvhwm, 0);
    s->set(zmq::sockopt::linger, 0);
  }
  if (opt_.stage > 0) {
    fromPrev_.set(zmq::sockopt::maxmsgsize, opt_.maxMessageBytes);
    if (opt_.security) opt_.security->server(fromPrev_, opt_.prevRank);
    fromPrev_.bind("tcp://" + opt_.bindPrevHost + ":*");
    fromPrevEp_ = fromPrev_.get(zmq::sockopt::last_endpoint);
    rxPrev_ = std::make_unique<emulator::ShapedReceiver>(fromPrev_, opt_.prevLatencyS, opt_.prevJitterS, 100 + opt_.rank);
    if (opt_.serialFifo) {
      const auto& l = opt_.topology.link(opt_.stage - 1, opt_.stage);
      rxPrev_->useSerialFifo(&fifo_, l.bandwidthBps, l.latencyS);
    }
  }
  if (opt_.stage + 1 < opt_.stages) {
    fromNext_.set(zmq::sockopt::maxmsgsize, opt_.maxMessageBytes);
    if (opt_.security) opt_.security->server(fromNext_, opt_.nextRank);
    fromNext_.bind("tcp://" + opt_.bindNextHost + ":*");
    fromNextEp_ = fromNext_.get(zmq::sockopt::last_endpoint);
    rxNext_ = std::make_unique<emulator::ShapedReceiver>(fromNext_, opt_.nextLatencyS, opt_.nextJitterS, 200 + opt_.rank);
    if (opt_.serialFifo) {
      const auto& l = opt_.topology.link(opt_.stage + 1, opt_.stage);
      rxNext_->useSerialFifo(&fifo_, l.bandwidthBps, l.latencyS);
    }
  }
}

void StageTransport::connect(const std::string& prevFromNext, const std::string& nextFromPrev, int prevRank, int nextRank) {
  const std::string me = "r" + std::to_string(opt_.rank);
  prevRank_ = prevRank;
  nextRank_ = nextRank;
  auto make = [&](Peer& p, const std::string& ep, int peerStage, const std::string& sendSpec, const std::string& recvSpec,
                  const char* sendDir, const char* recvDir) {
    p.push = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::push);
    p.push->set(zmq::sockopt::sndhwm, 0);
    // Linger: a stage that finishes first must still deliver its last messages (the final
    // evaluation batches) before its process exits.
    p.push->set(zmq::sockopt::linger, 30000);
    if (opt_.security) opt_.security->client(*p.push, peerStage < opt_.stage ? prevRank : nextRank);
    p.push->connect(ep);
    p.sender = std::make_unique<emulator::ShapedSender>(*p.push, opt_.topology.link(opt_.stage, peerStage),
                                                         !opt_.kernelPacesRate && !opt_.serialFifo, 1000 * opt_.rank + peerStage);
    p.encoder = compression::makeCodec(sendSpec, me + "-" + sendDir + "-send");
    p.decoder = compression::makeCodec(recvSpec, me + "-" + recvDir + "-recv");
    p.plainEncoder = compression::makeCodec("none");
    p.plainDecoder = compression::makeCodec("none");
  };
  if (opt_.stage > 0) make(prev_, prevFromNext, opt_.stage - 1, opt_.backwardCodec, opt_.forwardCodec, "bwd", "fwd");
  if (opt_.stage + 1 < opt_.stages) make(next_, nextFromPrev, opt_.stage + 1, opt_.forwardCodec, opt_.backwardCodec, "fwd", "bwd");
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
                          const compression::Shape& shape, const std::vector<int64_t>& exampleIds) {
  Peer& p = toNext ? next_ : prev_;
  if (!p.push) throw std::logic_error(std::string("transport: rank ") + std::to_string(opt_.rank) + " has no peer for " + kindName(kind));
  compression::FrameHeader h;
  h.kind = kind;
  h.step = step;
  h.microBatch = mb;
  h.src = opt_.rank;
  h.dst = toNext ? nextRank_ : prevRank_;
  h.shape = shape;
  h.exampleIds = exampleIds;
  compression::CodecContext ctx = messageContext(toNext, step, epoch, mb);
  ctx.exampleIds = exampleIds;
  const double t0 = emulator::monotonicNow();
  compression::Bytes* frame = nullptr;
  try {
    frame = new compression::Bytes(compression::encodeFrame(isPlain(kind) ? *p.plainEncoder : *p.encoder, data, h, ctx));
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
  p.sender->send(std::move(msg));
  stats_.waitS += emulator::monotonicNow() - t1;  // queue-limit blocking counts as waiting
}

Tensor32 StageTransport::recv(bool fromPrev, MessageKind kind, int64_t step, int epoch, int mb) {
  emulator::ShapedReceiver* rx = fromPrev ? rxPrev_.get() : rxNext_.get();
  Peer& p = fromPrev ? prev_ : next_;
  if (!rx) throw std::logic_error("transport: rank " + std::to_string(opt_.rank) + " has no " + (fromPrev ? "previous" : "next") + " stage");
  const int from = fromPrev ? prevRank_ : nextRank_;
  const double t0 = emulator::monotonicNow();
  auto m = rx->recv(static_cast<int>(opt_.recvTimeoutS * 1000));
  const double t1 = emulator::monotonicNow();
  stats_.waitS += t1 - t0;
  if (!m) throw std::runtime_error("rank " + std::to_string(opt_.rank) + ": no " + kindName(kind) + " from rank " +
                                   std::to_string(from) + " for " +
                                   std::to_string(opt_.recvTimeoutS) + " s");
  (fromPrev ? stats_.fromPrev : stats_.fromNext).add(m->deliveredAt - m->envelope.sendTime);
  size_t at = 0;
  const auto* bytes = static_cast<const uint8_t*>(m->payload.data());
  const compression::FrameHeader h = compression::parseFrame(bytes, m->payload.size(), &at);
  if (h.kind != kind || h.step != step || h.microBatch != mb)
    throw std::runtime_error("rank " + std::to_string(opt_.rank) + ": expected " + kindName(kind) + " step " + std::to_string(step) +
                             " micro-batch " + std::to_string(mb) + ", got " + kindName(h.kind) + " step " +
                             std::to_string(h.step) + " micro-batch " + std::to_string(h.microBatch));
  Tensor32 t;
  // What arrives from the previous stage travelled forward: the sender's context, field by field
  // (decodeParsedFrame adds the header's example ids).
  const compression::CodecContext ctx = messageContext(fromPrev, step, epoch, mb);
  compression::decodeParsedFrame(isPlain(kind) ? *p.plainDecoder : *p.decoder, h, bytes, at, ctx, t.data);
  t.shape = h.shape;
  t.exampleIds = h.exampleIds;
  stats_.decodeS += emulator::monotonicNow() - t1;
  return t;
}

TransportStats StageTransport::takeStats() {
  TransportStats s = stats_;
  stats_ = TransportStats{};
  return s;
}

uint64_t StageTransport::codecDigest(bool forward, bool sender) const {
  const Peer& p = forward == sender ? next_ : prev_;
  const auto& c = sender ? p.encoder : p.decoder;
  return c ? c->stateDigest() : 0;
}

}  // namespace slowpipe::runtime
