// The meaning of a data-parallel action, answered once for every executor (the worker's
// DpExchange, the simulator's replay, the tests): which values a chunk holds and which replica
// encodes a message. Pure functions, torch-free; an executor asks here and never works it out.
// (The first slice of runtime/protocol in ../shared/DESIGN.md "The executor shape".)
#pragma once

#include <cstdint>

#include "runtime/ranks.h"
#include "runtime/schedule.h"

namespace slowpipe::runtime::protocol {

// The rank a pipeline or DP action of `rank` talks to: the previous / next stage of the same
// replica, or replica a.replica of the same stage; -1 when that stage does not exist.
inline int peerRank(const RankLayout& layout, int rank, const Action& a) {
  const RankId me = layout.id(rank);
  if (a.isDataParallel()) return layout.rank({me.stage, a.replica});
  const int stage = a.peer == Action::Peer::kPrev ? me.stage - 1 : me.stage + 1;
  return stage >= 0 && stage < layout.stages ? layout.rank({stage, me.replica}) : -1;
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

// The ring all-gather chunk that `replica` reduced (and so encodes once per round and sends
// first): (replica + 1) mod R.
inline int dpOwnedChunk(int replica, int replicas) { return (replica + 1) % replicas; }

// Whether the DP send `a` of `replica` carries the frame that replica encodes once per round and
// decodes itself (the ring all-gather of its own chunk; the parameter server's shard average):
// the others relay a frame they received (all-gather) or encode per message (reduce, push).
inline bool dpSendsOwnFrame(const Action& a, int replica, int replicas) {
  return (a.message == Action::Message::kDpGather && a.microBatch == dpOwnedChunk(replica, replicas)) ||
         a.message == Action::Message::kDpPull;
}

// The timeline's name of an action's event (runtime and simulator alike for compute; a
// send is its encode + hand-off, a receive its wait + decode).
inline const char* eventName(const Action& a) {
  switch (a.kind) {
    case Action::Kind::kRecv: return a.isDataParallel() ? "dp_recv" : "recv";
    case Action::Kind::kSend: return a.isDataParallel() ? "dp_send" : "send";
    case Action::Kind::kForward: return "forward";
    case Action::Kind::kBackward: return "backward";
    case Action::Kind::kBackwardInput: return "backward_input";
    case Action::Kind::kBackwardWeight: return "backward_weight";
    case Action::Kind::kGradNorm: return "gradnorm";
    case Action::Kind::kStep: return "step";
    case Action::Kind::kDpBegin:
    case Action::Kind::kDpEnd: return "dp";  // packing / unpacking what is synchronised
    case Action::Kind::kOuterStep: return "outer_step";
  }
  return "?";
}

}  // namespace slowpipe::runtime::protocol
