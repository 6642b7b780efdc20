// The meaning of an action, answered once for every executor (the worker, its DpExchange, the
// simulator's replay, the tests): the rank it talks to, the key of its message, its virtual
// stage, what its message carries and which codec encodes it, which values a DP chunk holds,
// which replica encodes a DP message, its event's name.
// Pure functions, torch-free; an executor asks here and never works it out.
#pragma once

#include <cstdint>
#include <string>

#include "compression/frame.h"
#include "runtime/exec/ranks.h"
#include "runtime/exec/schedule.h"
#include "runtime/spec/spec.h"

namespace slowpipe::runtime::protocol {

// The stage before / after `stage`: with several model chunks per rank the pipeline is a ring
// (stage S-1 feeds stage 0's next chunk); -1 past an end of a chain.
inline int neighbourStage(const RankLayout& layout, int stage, Action::Peer side) {
  const int s = side == Action::Peer::kPrev ? stage - 1 : stage + 1;
  if (layout.chunks > 1) return (s + layout.stages) % layout.stages;
  return s >= 0 && s < layout.stages ? s : -1;
}

// The rank a pipeline or DP action of `rank` talks to: the previous / next stage of the same
// replica, or replica a.replica of the same stage; -1 when that stage does not exist.
inline int peerRank(const RankLayout& layout, int rank, const Action& a) {
  const RankId me = layout.id(rank);
  if (a.isDataParallel()) return layout.rank({me.stage, a.replica});
  const int stage = neighbourStage(layout, me.stage, a.peer);
  return stage >= 0 ? layout.rank({stage, me.replica}) : -1;
}

// The key of a pipeline message's boundary: the model chunk of its lower virtual stage (virtual
// stage k = chunk * S + stage; a message of chunk v's compute at `stage` crosses boundary
// v S + stage - 1 (from / to the previous stage) or v S + stage (next)). Sender and receiver
// compute the same value; 0 throughout with one chunk per rank.
inline int boundaryChunk(const RankLayout& layout, int stage, const Action& a) {
  const int b = layout.virtualStage(a.chunk, stage) - (a.peer == Action::Peer::kPrev ? 1 : 0);
  return b < 0 ? 0 : layout.chunkOfVirtual(b);
}

// The virtual stage of a compute action of `stage` (the index of its layers in stageLayers).
inline int virtualStage(const RankLayout& layout, int stage, const Action& a) {
  return layout.virtualStage(a.chunk, stage);
}

// The previous / next stage's rank of `rank` (same replica), -1 at the ends of the pipeline.
inline int pipelinePeer(const RankLayout& layout, int rank, Action::Peer side) {
  Action a{};
  a.peer = side;
  return peerRank(layout, rank, a);
}

// Chunk c of an n-value round buffer split among R replicas: [c n / R, (c + 1) n / R).
inline int64_t dpChunkBegin(int64_t n, int c, int replicas) { return n * c / replicas; }
inline int64_t dpChunkValues(int64_t n, int c, int replicas) {
  return dpChunkBegin(n, c + 1, replicas) - dpChunkBegin(n, c, replicas);
}
// The most values any chunk of an n-value round holds.
inline int64_t dpLargestChunk(int64_t n, int replicas) { return (n + replicas - 1) / replicas; }

// The ring all-gather chunk that `replica` reduced (and so encodes once per round and sends
// first): (replica + 1) mod R.
inline int dpOwnedChunk(int replica, int replicas) { return (replica + 1) % replicas; }

// Whether the DP send `a` of `replica` carries the frame that replica encodes once per round and
// decodes itself (the ring all-gather of its own chunk; the parameter server's shard average):
// the others relay a frame they received (all-gather) or encode per message (reduce, push).
inline bool dpSendsOwnFrame(const Action& a, int replica, int replicas) {
  return (a.message == Action::Message::kDpGather && a.shard == dpOwnedChunk(replica, replicas)) ||
         a.message == Action::Message::kDpPull;
}

// What a pipeline message carries: an activation or its gradient, a tensor through the boundary's
// codecs (compressed); an evaluation activation, a tensor sent plain; or a control message
// (kControlValues floats, plain).
inline bool carriesTensor(Action::Message m) {
  return m == Action::Message::kActivation || m == Action::Message::kGradient ||
         m == Action::Message::kEval;
}
inline bool compressed(Action::Message m) {
  return m == Action::Message::kActivation || m == Action::Message::kGradient;
}
// The frame kind a pipeline message travels as (compression/frame.h).
inline compression::MessageKind frameKind(Action::Message m) {
  return m == Action::Message::kActivation ? compression::MessageKind::kActivation
         : m == Action::Message::kGradient ? compression::MessageKind::kGradient
         : m == Action::Message::kEval     ? compression::MessageKind::kEval
                                           : compression::MessageKind::kControl;
}
// Frames sent without the boundary's codecs: evaluation activations and control scalars.
inline bool plainFrame(compression::MessageKind k) {
  return k == compression::MessageKind::kEval || k == compression::MessageKind::kControl;
}
// Which of a boundary's codec pairs a frame goes through: the forward pair (compression.forward)
// for what travels down the pipeline (activations, evaluation activations, a control message to
// the next stage), the backward pair (compression.backward) for gradients.
inline bool forwardCodec(compression::MessageKind k, bool toNext) {
  return k == compression::MessageKind::kControl ? toNext
                                                 : k != compression::MessageKind::kGradient;
}
// The codec spec of a compressed message: an activation's compression.forward, a gradient's
// compression.backward.
inline const std::string& codecOf(const CompressionSpec& c, Action::Message m) {
  return m == Action::Message::kActivation ? c.forward : c.backward;
}

// A DP message's key on the wire (its frame's micro-batch field): the exchange's round, the
// message's kind within it (reduce, gather, push, pull) and the shard.
inline int32_t dpTag(Action::Message m, int round, int shard) {
  const int kind = m == Action::Message::kDpReduce   ? 0
                   : m == Action::Message::kDpGather ? 1
                   : m == Action::Message::kDpPush   ? 2
                                                     : 3;
  return ((round * 4 + kind) << 16) | shard;
}
// A message's key on a link besides its kind and step: its micro-batch (a DP message: its shard)
// and, for a DP message, the round (-1 for a pipeline message).
inline int keySlot(const Action& a) { return a.isDataParallel() ? a.shard : a.microBatch; }
inline int keyRound(const Action& a, int round) { return a.isDataParallel() ? round : -1; }

// When a run evaluates: after `done` steps (>= 1) of a run of `totalSteps` with `stepsPerEpoch`
// steps an epoch, as training.eval_each_epoch and eval_every_steps say (the end of an epoch, or of
// the run); replica 0 of every stage evaluates (with local steps: its own parameters).
inline bool evaluatesAfter(const TrainingSpec& t, int64_t done, int64_t stepsPerEpoch,
                           int64_t totalSteps) {
  return t.evaluatesAfter(done, done % stepsPerEpoch == 0 || done == totalSteps);
}
inline bool evaluatingReplica(int replica) { return replica == 0; }

// A control message (the two norm messages, the evaluation barrier) is kControlValues floats (a
// double as hi + lo) under a negative tag in its micro-batch field, never a micro-batch's.
inline constexpr int kControlValues = 2;
inline int controlTag(Action::Message m) {
  return m == Action::Message::kNormPartial ? -1
         : m == Action::Message::kNormTotal ? -2
                                            : -3;  // -3: the barrier
}

// The timeline's name of an action's event (runtime and simulator alike for compute; a
// send is its encode + hand-off, a receive its wait + decode).
inline const char* eventName(const Action& a) {
  switch (a.kind) {
    case Action::Kind::kRecv:
      return a.isDataParallel() ? "dp_recv" : "recv";
    case Action::Kind::kSend:
      return a.isDataParallel() ? "dp_send" : "send";
    case Action::Kind::kForward:
      return "forward";
    case Action::Kind::kBackward:
      return "backward";
    case Action::Kind::kBackwardInput:
      return "backward_input";
    case Action::Kind::kBackwardWeight:
      return "backward_weight";
    case Action::Kind::kEvalForward:
      return "eval_forward";
    case Action::Kind::kGradNorm:
      return "gradnorm";
    case Action::Kind::kStep:
      return "step";
    case Action::Kind::kDpBegin:
    case Action::Kind::kDpEnd:
      return "dp";  // packing / unpacking what is synchronised
    case Action::Kind::kOuterStep:
      return "outer_step";
  }
  return "?";
}

}  // namespace slowpipe::runtime::protocol
