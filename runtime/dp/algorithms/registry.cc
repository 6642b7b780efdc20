// The data-parallel algorithms slowpipe knows: one line each. An algorithm is one file in
// runtime/dp/algorithms/ (built by a glob) that appends one round's messages of a replica; the
// worker's DpExchange, the simulator and the spec check use every algorithm listed here alike.
#include "runtime/exec/schedule.h"

namespace slowpipe::runtime {

// Builders defined in their own files.
void ringAllreduceRound(std::vector<Action>& a, int replicas, int replica);
void shardedPsRound(std::vector<Action>& a, int replicas, int replica);

const std::vector<DpAlgorithmInfo>& dpAlgorithms() {
  static const std::vector<DpAlgorithmInfo> all = {
      // ring allreduce: reduce-scatter, then an all-gather that relays one encoded frame per chunk
      {"allreduce", ringAllreduceRound, false},
      // sharded parameter server: replica r serves shard r (push, then pull of its one encoded
      // average)
      {"sharded_ps", shardedPsRound, true},
  };
  return all;
}

}  // namespace slowpipe::runtime
