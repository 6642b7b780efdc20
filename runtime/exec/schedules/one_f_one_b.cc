// 1F1B (PipeDream-flush): stage s runs S-1-s warm-up forwards, then alternates one forward and one
// backward, then drains the remaining backwards. At most S-s micro-batches are in flight on stage
// s.
#include <algorithm>

#include "runtime/exec/schedule.h"

namespace slowpipe::runtime {

std::vector<Action> oneFOneBSchedule(int stages, int microBatches, int stage) {
  std::vector<Action> a;
  const int warmup = std::min(stages - 1 - stage, microBatches);
  int f = 0, b = 0;
  for (; f < warmup; ++f) appendForward(a, f, stages, stage);
  while (f < microBatches) {
    appendForward(a, f++, stages, stage);
    appendBackward(a, b++, stages, stage);
  }
  while (b < microBatches) appendBackward(a, b++, stages, stage);
  appendStepEnd(a, stages, stage);
  return a;
}

}  // namespace slowpipe::runtime
