// Ring allreduce (`dp.algorithm: allreduce`): R-1 reduce-scatter hops, then R-1 all-gather hops
// around the ring of replicas. Replica r sends chunk (r-t) mod R to r+1 and adds the chunk
// (r-t-1) mod R it receives from r-1; after the reduce-scatter it holds chunk (r+1) mod R
// (protocol::dpOwnedChunk), encodes it once, and that frame is relayed unchanged around the ring
// (Send(r+1, chunk (r+1-t) mod R) / Recv(r-1, chunk (r-t) mod R)), so every replica decodes the
// same bytes.
#include "runtime/exec/ranks.h"
#include "runtime/exec/schedule.h"

namespace slowpipe::runtime {

void ringAllreduceRound(std::vector<Action>& a, int replicas, int r) {
  const int R = replicas;
  auto mod = [R](int v) { return ringIndex(v, R); };
  for (int t = 0; t + 1 < R; ++t) {
    a.push_back(dpMessage(Action::Kind::kSend, Action::Message::kDpReduce, mod(r - t), mod(r + 1)));
    a.push_back(
        dpMessage(Action::Kind::kRecv, Action::Message::kDpReduce, mod(r - t - 1), mod(r - 1)));
  }
  for (int t = 0; t + 1 < R; ++t) {
    a.push_back(
        dpMessage(Action::Kind::kSend, Action::Message::kDpGather, mod(r + 1 - t), mod(r + 1)));
    a.push_back(dpMessage(Action::Kind::kRecv, Action::Message::kDpGather, mod(r - t), mod(r - 1)));
  }
}

}  // namespace slowpipe::runtime
