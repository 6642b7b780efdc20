// Sharded parameter server (`dp.algorithm: sharded_ps`): replica r serves shard r. It pushes
// shard q to every other server q, receives shard r from every replica (summed in replica order),
// then sends the one encoded average of its shard to every replica and receives every other
// server's average of its shard.
#include "runtime/exec/ranks.h"
#include "runtime/exec/schedule.h"

namespace slowpipe::runtime {

void shardedPsRound(std::vector<Action>& a, int replicas, int r) {
  const int R = replicas;
  auto mod = [R](int v) { return ringIndex(v, R); };
  for (int k = 1; k < R; ++k)
    a.push_back(dpMessage(Action::Kind::kSend, Action::Message::kDpPush, mod(r + k), mod(r + k)));
  for (int q = 0; q < R; ++q)
    if (q != r) a.push_back(dpMessage(Action::Kind::kRecv, Action::Message::kDpPush, r, q));
  for (int k = 1; k < R; ++k)
    a.push_back(dpMessage(Action::Kind::kSend, Action::Message::kDpPull, r, mod(r + k)));
  for (int q = 0; q < R; ++q)
    if (q != r) a.push_back(dpMessage(Action::Kind::kRecv, Action::Message::kDpPull, q, q));
}

}  // namespace slowpipe::runtime
