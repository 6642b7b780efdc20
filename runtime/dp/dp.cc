// Data-parallel links, codecs and collectives (see dp.h).
#include "runtime/dp/dp.h"

#include <stdexcept>

#include "compression/frame.h"
#include "runtime/exec/ranks.h"
#include "runtime/launch/security.h"
#include "runtime/model/model_size.h"

namespace slowpipe::runtime {

using compression::Bytes;
using compression::MessageKind;
using Msg = Action::Message;
using nlohmann::json;

DpShape dpShape(const RunSpec& spec) {
  DpShape d;
  d.replicas = spec.pipeline.replicas;
  d.algorithm = spec.dp.algorithm;
  const std::unique_ptr<GradientCompressor> g = gradientCompressor(spec.dp);
  d.rounds = g->rounds();
  d.localSteps = spec.dp.localSteps;
  d.afterStepFrom = g->afterStepFrom();
  return d;
}

std::vector<std::vector<int64_t>> stageParameterShapes(const RunSpec& spec, int stage) {
  const auto ranges = stageLayers(spec);
  if (stage < 0 || stage >= static_cast<int>(ranges.size()))
    throw std::invalid_argument("stage " + std::to_string(stage) + " is not a stage of this run");
  return stageParameterShapes(spec.model, ranges[stage].first, ranges[stage].second, stage == 0,
                              stage + 1 == static_cast<int>(ranges.size()));
}

std::vector<std::vector<int64_t>> rankParameterShapes(const RunSpec& spec, int stage) {
  std::vector<std::vector<int64_t>> out;
  for (int v = 0; v < spec.pipeline.virtualStages; ++v)
    for (auto& shape : stageParameterShapes(spec, rankLayout(spec).virtualStage(v, stage)))
      out.push_back(std::move(shape));
  return out;
}

int64_t dpRoundValues(const RunSpec& spec, int stage, int round) {
  return gradientCompressor(spec.dp)->roundValues(rankParameterShapes(spec, stage), round);
}

std::string dpRoundCodec(const RunSpec& spec, int64_t step) {
  return gradientCompressor(spec.dp)->roundCodec(step);
}

emulator::Topology dpTopology(const RunSpec& spec) {
  json links = spec.network.dpLinks;
  if (links.is_null()) {
    links = spec.network.links;
    if (links.is_object()) links.erase("links");
  }
  return emulator::topologyFromJson(links, "network.dp_links");
}

DpExchange::DpExchange(zmq::context_t& ctx, DpOptions opt) : opt_(std::move(opt)), ctx_(ctx) {
  for (int q = 0; q < opt_.replicas; ++q) {
    if (q == opt_.replica) continue;
    ChannelInOptions c;
    c.peer = rankOf(opt_.stage, q, opt_.replicas);
    c.bindHost = opt_.bindHost;
    c.security = opt_.security;
    c.guard = opt_.guard;
    c.maxAheadS = opt_.recvTimeoutS;
    c.maxMessageBytes = opt_.maxMessageBytes;
    c.receiverSeed = 300 + 1000 * opt_.rank + q;
    in_[q] = std::make_unique<ChannelIn>(ctx_, c);
    out_[q] = std::make_unique<ChannelOut>(c.peer, opt_.security);
  }
}

json DpExchange::endpoints() const {
  json j = json::object();
  for (const auto& [q, c] : in_) j[std::to_string(q)] = c->endpoint();
  return j;
}

void DpExchange::connect(const json& peers, const RankLinks& links) {
  for (auto& [q, o] : out_) {
    const std::string key = std::to_string(q);
    if (!peers.contains(key))
      throw std::runtime_error("stage " + std::to_string(opt_.stage) + " replica " +
                               std::to_string(opt_.replica) + ": no endpoint of replica " + key +
                               " in the peer table");
    const int peer = o->peer();
    const LinkEntry& in = links.at(peer, opt_.rank);
    if (!in.model.empty() && !inbound_) inbound_ = emulator::linkModel(in.model).make();
    in_.at(q)->connect(in, inbound_.get());
    o->connect(ctx_, peers[key].get<std::string>(), links.at(opt_.rank, peer),
               dpLinkSeed(opt_.rank, q));
  }
}

int32_t DpExchange::tag(Msg m, int chunk) const { return protocol::dpTag(m, round_, chunk); }

compression::Codec& DpExchange::codec(CodecHalf& half, const std::string& key,
                                      const std::string& role) {
  return half.get(exact_ ? "exact/" + key : key, exact_ ? "none" : opt_.codec, [&] {
    std::string instance =
        "r" + std::to_string(opt_.rank) + "-dp-" + (exact_ ? "exact-" : "") + key + "-" + role;
    for (char& ch : instance)
      if (ch == '/' || ch == '>') ch = '_';
    return instance;
  });
}

void DpExchange::begin(float* buf, int64_t n, int64_t step, int round, bool exact) {
  exact_ = exact;
  buf_ = buf;
  n_ = n;
  step_ = step;
  round_ = round;
  pushes_ = 0;
  relay_.clear();
  own_.reset();
  pushed_.clear();
}

// A DP message's context, the same at its encoder and its decoders: gradients, this step, the
// message's tag, a key per round and chunk (ef keeps one residual per chunk).
compression::CodecContext DpExchange::context(int chunk, int tag) const {
  compression::CodecContext ctx;
  ctx.direction = compression::Direction::kGradient;
  ctx.step = step_;
  ctx.microBatch = tag;
  ctx.key = "dp/round" + std::to_string(round_) + "/c" + std::to_string(chunk);
  return ctx;
}

// Encoded on the link to `peer` (the encode time is that link's), whoever holds the codec.
zmq::message_t DpExchange::encode(compression::Codec& c, Msg m, int chunk, const float* x,
                                  int peer) {
  compression::FrameHeader h;
  h.kind = MessageKind::kParamGradient;
  h.step = step_;
  h.microBatch = tag(m, chunk);
  h.src = opt_.rank;
  h.dst = out_.at(peer)->peer();
  h.shape = {chunkLen(chunk)};
  return out_.at(peer)->encode(c, x, h, context(chunk, h.microBatch));
}

void DpExchange::sendFrame(int peer, zmq::message_t frame, int chunk) {
  out_.at(peer)->send(std::move(frame), MessageKind::kParamGradient, 4 * chunkLen(chunk));
}

void DpExchange::sendShared(int peer, zmq::message_t& frame, int chunk) {
  zmq::message_t copy;
  copy.copy(frame);  // shares the bytes (zmq_msg_copy)
  sendFrame(peer, std::move(copy), chunk);
}

zmq::message_t DpExchange::recvFrame(int peer, Msg m, int chunk) {
  // A DP link is a FIFO of one round's messages in the schedule's order: any other is a slip.
  auto judge = [&](const compression::FrameHeader& h) {
    const bool expected = h.kind == MessageKind::kParamGradient && h.step == step_ &&
                          h.microBatch == tag(m, chunk) &&
                          h.shape == compression::Shape{chunkLen(chunk)};
    return expected ? ChannelIn::Verdict::kTake : ChannelIn::Verdict::kSlip;
  };
  std::optional<ChannelIn::Received> got = in_.at(peer)->take(judge, opt_.recvTimeoutS);
  const std::string who =
      "stage " + std::to_string(opt_.stage) + " replica " + std::to_string(opt_.replica);
  if (!got)
    throw std::runtime_error(who + ": no data-parallel message from replica " +
                             std::to_string(peer) + " for " + std::to_string(opt_.recvTimeoutS) +
                             " s");
  if (got->slip)
    throw std::runtime_error(
        who + ": expected data-parallel message " + std::to_string(tag(m, chunk)) + " of step " +
        std::to_string(step_) + " (" + std::to_string(chunkLen(chunk)) + " values) from replica " +
        std::to_string(peer) + ", got tag " + std::to_string(got->header.microBatch) + " of step " +
        std::to_string(got->header.step));
  return std::move(got->message.payload);
}

// Every DP decode goes through here, with the encoder's context (a push decoded with an empty
// one made a plug-in's mirrored state differ between the ends): on the channel the frame came in
// on (its statistics), or, for a frame of this replica's own, here.
void DpExchange::decodeMessage(compression::Codec& c, ChannelIn* from, const zmq::message_t& frame,
                               int chunk, std::vector<float>& out) {
  const double t0 = emulator::monotonicNow();
  size_t at = 0;
  const auto* bytes = static_cast<const uint8_t*>(frame.data());
  const compression::FrameHeader h = compression::parseFrame(bytes, frame.size(), &at);
  const int64_t maxElements =
      opt_.maxMessageBytes > 0 ? opt_.maxMessageBytes / 4 : compression::kMaxFrameElements;
  const compression::CodecContext ctx = context(chunk, h.microBatch);
  if (from)
    from->decode(c, h, bytes, at, ctx, out, maxElements);
  else
    compression::decodeParsedFrame(c, h, bytes, at, ctx, out, maxElements);
  if (!from) ownDecodeS_ += emulator::monotonicNow() - t0;
}

void DpExchange::decodeInto(compression::Codec& c, ChannelIn* from, const zmq::message_t& frame,
                            int chunk, bool add) {
  decodeMessage(c, from, frame, chunk, tmp_);
  const double t0 = emulator::monotonicNow();
  float* dst = buf_ + chunkBegin(chunk);
  const int64_t len = chunkLen(chunk);
  if (add)
    for (int64_t i = 0; i < len; ++i) dst[i] += tmp_[i];
  else
    std::copy(tmp_.begin(), tmp_.begin() + len, dst);
  ownDecodeS_ += emulator::monotonicNow() - t0;
}

// sharded_ps: every replica's shard is here; this server's shard becomes their mean (replica
// order).
void DpExchange::aggregateShard() {
  const int r = opt_.replica, R = opt_.replicas;
  float* dst = buf_ + chunkBegin(r);
  const int64_t len = chunkLen(r);
  std::vector<float> sum(len, 0.0f);
  for (int q = 0; q < R; ++q) {
    const float* src = q == r ? dst : pushed_.at(q).data();
    for (int64_t i = 0; i < len; ++i) sum[i] += src[i];
  }
  const float inv = 1.0f / static_cast<float>(R);
  for (int64_t i = 0; i < len; ++i) dst[i] = sum[i] * inv;
}

void DpExchange::execute(const Action& a) {
  const int r = opt_.replica, R = opt_.replicas, c = a.shard, q = a.replica;
  const std::string me = std::to_string(r);
  const bool send = a.kind == Action::Kind::kSend;
  switch (a.message) {
    case Msg::kDpReduce:
      if (send)
        sendFrame(
            q,
            encode(codec(out_.at(q)->encoders(), "rs/" + me + "->" + std::to_string(q), "send"),
                   a.message, c, buf_ + chunkBegin(c), q),
            c);
      else
        decodeInto(codec(in_.at(q)->decoders(), "rs/" + std::to_string(q) + "->" + me, "recv"),
                   in_.at(q).get(), recvFrame(q, a.message, c), c, true);
      break;
    case Msg::kDpGather:
      if (send) {
        // This replica's reduced chunk: averaged, encoded once, decoded here too.
        if (protocol::dpSendsOwnFrame(a, r, R)) {
          if (!own_) {
            float* x = buf_ + chunkBegin(c);
            const float inv = 1.0f / static_cast<float>(R);
            for (int64_t i = 0; i < chunkLen(c); ++i) x[i] *= inv;
            own_ =
                encode(codec(ownEncoders_, "ag/c" + std::to_string(c), "send"), a.message, c, x, q);
            decodeInto(codec(ownDecoders_, "ag/c" + std::to_string(c), "recv"), nullptr, *own_, c,
                       false);
          }
          sendShared(q, *own_, c);
        } else {  // relayed as received: every replica decodes the same bytes
          sendFrame(q, std::move(relay_.at(c)), c);
        }
      } else {
        zmq::message_t f = recvFrame(q, a.message, c);
        decodeInto(codec(in_.at(q)->decoders(), "ag/c" + std::to_string(c), "recv"),
                   in_.at(q).get(), f, c, false);
        relay_[c] = std::move(f);
      }
      break;
    case Msg::kDpPush:
      if (send) {
        sendFrame(
            q,
            encode(codec(out_.at(q)->encoders(), "push/" + me + "->" + std::to_string(q), "send"),
                   a.message, c, buf_ + chunkBegin(c), q),
            c);
      } else {
        const zmq::message_t f = recvFrame(q, a.message, c);
        decodeMessage(codec(in_.at(q)->decoders(), "push/" + std::to_string(q) + "->" + me, "recv"),
                      in_.at(q).get(), f, c, pushed_[q]);
        if (++pushes_ == R - 1) aggregateShard();
      }
      break;
    case Msg::kDpPull:
      if (send) {
        if (!own_) {
          if (pushes_ != R - 1)
            throw std::logic_error("dp: shard average sent before every push arrived");
          own_ = encode(codec(ownEncoders_, "pull/c" + me, "send"), a.message, c,
                        buf_ + chunkBegin(c), q);
          decodeInto(codec(ownDecoders_, "pull/c" + me, "recv"), nullptr, *own_, c, false);
        }
        sendShared(q, *own_, c);
      } else {
        decodeInto(codec(in_.at(q)->decoders(), "pull/c" + std::to_string(q), "recv"),
                   in_.at(q).get(), recvFrame(q, a.message, c), c, false);
      }
      break;
    default:
      throw std::logic_error("dp: not a data-parallel message");
  }
}

void DpExchange::end() {
  if (dpAlgorithm(opt_.algorithm).servesShards && opt_.replicas > 1 && !own_)
    throw std::logic_error("dp: round ended before this server sent its shard");
  buf_ = nullptr;
  relay_.clear();
  own_.reset();
  pushed_.clear();
}

void DpExchange::setTraceOrigin(double origin) {
  for (auto& [q, o] : out_) o->setTraceOrigin(origin);
}

DpStats DpExchange::takeStats() {
  DpStats s;
  for (auto& [q, o] : out_) {
    const LinkStats l = o->takeStats();
    s.raw += l.rawOf(MessageKind::kParamGradient);
    s.wire += l.wireOf(MessageKind::kParamGradient);
    s.encodeS += l.encodeS;
    s.waitS += l.waitS;
  }
  for (auto& [q, i] : in_) {
    const LinkStats l = i->takeStats();
    s.decodeS += l.decodeS;
    s.waitS += l.waitS;
  }
  s.decodeS += ownDecodeS_;
  ownDecodeS_ = 0;
  return s;
}

json DpExchange::digests() const {
  json j = json::object();
  auto put = [&](const CodecHalf& half, const char* role) {
    for (const auto& [k, c] : half.all()) j[k][role] = std::to_string(c->stateDigest());
  };
  for (const auto& [q, o] : out_) put(o->encoders(), "send");
  for (const auto& [q, i] : in_) put(i->decoders(), "recv");
  put(ownEncoders_, "send");
  put(ownDecoders_, "recv");
  return j;
}

}  // namespace slowpipe::runtime
