// Rank layout: every worker is a (stage, replica) pair (pipeline.replicas data-parallel replicas
// per stage), numbered stage-major: rank = stage * replicas + replica.
#pragma once

#include <stdexcept>
#include <string>

namespace slowpipe::runtime {

struct RankId {
  int stage = 0;
  int replica = 0;
};

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
                              std::to_string(id.replica) + ") is outside " + std::to_string(stages) + " x " +
                              std::to_string(replicas));
    return id.stage * replicas + id.replica;
  }
  RankId id(int rank) const { return {rank / replicas, rank % replicas}; }
};

}  // namespace slowpipe::runtime
