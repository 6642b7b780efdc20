// Rank layout: every worker is a (stage, replica) pair (pipeline.replicas data-parallel replicas
// per stage), numbered stage-major: rank = stage * replicas + replica.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace slowpipe::runtime {

struct RankId {
  int stage = 0;
  int replica = 0;
};

// The rank of a stage's replica, replicas per stage (rank = stage x replicas + replica).
inline int rankOf(int stage, int replica, int replicas) { return stage * replicas + replica; }

struct RankLayout {
  int stages = 1;
  int replicas = 1;
  // Model chunks per rank (pipeline.virtual_stages): above 1 the pipeline is a ring (the last
  // stage's chunk v feeds the first stage's chunk v + 1).
  int chunks = 1;
  int size() const { return stages * replicas; }
  int rank(RankId id) const {
    if (id.stage < 0 || id.stage >= stages || id.replica < 0 || id.replica >= replicas)
      throw std::out_of_range("rank layout: (stage " + std::to_string(id.stage) + ", replica " +
                              std::to_string(id.replica) + ") is outside " +
                              std::to_string(stages) + " x " + std::to_string(replicas));
    return rankOf(id.stage, id.replica, replicas);
  }
  RankId id(int rank) const { return {rank / replicas, rank % replicas}; }
  // Virtual stage k = chunk * stages + stage (pipeline.virtual_stages > 1: chunk v of every stage,
  // in pipeline order), and back.
  int virtualStage(int chunk, int stage) const { return chunk * stages + stage; }
  int stageOfVirtual(int k) const { return k % stages; }
  int chunkOfVirtual(int k) const { return k / stages; }
};

// Position v on a ring of n (replicas of a stage): v mod n, also for v < 0.
inline int ringIndex(int v, int n) { return ((v % n) + n) % n; }

// The seed of a directed link's jitter and loss draws, the same in every tier (the emulator's
// links, the simulator's replay): a pipeline link by its two ranks, a data-parallel link by the
// sender's rank and the receiving replica (kept apart from pipeline links by its offset).
inline uint64_t pipelineLinkSeed(int fromRank, int toRank) {
  return 1000ull * static_cast<uint64_t>(fromRank) + static_cast<uint64_t>(toRank);
}
inline uint64_t dpLinkSeed(int fromRank, int toReplica) {
  return 5000ull + 1000ull * static_cast<uint64_t>(fromRank) + static_cast<uint64_t>(toReplica);
}

}  // namespace slowpipe::runtime
