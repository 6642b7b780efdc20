// Zero-bubble H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): 1F1B's forwards and
// backwards, with each backward split into BackwardInput (the input gradient, on the critical
// path: sent on at once) and BackwardWeight (the linear layers' weight gradients, deferred to fill
// the bubbles). Stage s runs 1F1B's S-1-s warm-up forwards, then F / B pairs; after each B it runs
// the oldest deferred W while more than s are deferred, and the last s at the end of the step. So
// stage s holds at most S micro-batches between their forward and their W, 1F1B's peak (stage 0's),
// and the later stages, which idle longest in 1F1B's cool-down, fill it with their Ws.
#include <algorithm>
#include <deque>

#include "runtime/exec/schedule.h"

namespace slowpipe::runtime {

std::vector<Action> zbH1Schedule(int stages, int microBatches, int stage) {
  std::vector<Action> a;
  std::deque<int> deferred;  // micro-batches whose W is still to run, oldest first
  auto backward = [&](int mb) {
    appendBackwardInput(a, mb, stages, stage);
    deferred.push_back(mb);
    for (; static_cast<int>(deferred.size()) > stage; deferred.pop_front())
      appendBackwardWeight(a, deferred.front());
  };
  const int warmup = std::min(stages - 1 - stage, microBatches);
  int f = 0, b = 0;
  for (; f < warmup; ++f) appendForward(a, f, stages, stage);
  while (f < microBatches) {
    appendForward(a, f++, stages, stage);
    backward(b++);
  }
  while (b < microBatches) backward(b++);
  for (; !deferred.empty(); deferred.pop_front()) appendBackwardWeight(a, deferred.front());
  appendStepEnd(a, stages, stage);
  return a;
}

}  // namespace slowpipe::runtime
