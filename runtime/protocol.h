// The meaning of a data-parallel action, answered once for every executor (the worker's
// DpExchange, the simulator's replay, the tests): which values a chunk holds and which replica
// encodes a message. Pure functions, torch-free; an executor asks here and never works it out.
// (The first slice of runtime/protocol in ../shared/DESIGN.md "The executor shape".)
#pragma once

#include <cstdint>

#include "runtime/schedule.h"

namespace slowpipe::runtime::protocol {

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

}  // namespace slowpipe::runtime::protocol
