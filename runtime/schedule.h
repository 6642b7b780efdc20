// Pipeline schedules as per-stage action lists. The executor in runtime/worker.cc runs them, and a
// simulator can replay the very same lists, so it predicts what the runtime does.
//
// Forward(mb): receive mb's activation from the previous stage (stage > 0), compute, send the
// output to the next stage (stage < S-1) or compute the loss (last stage).
// Backward(mb): receive the gradient of mb's output (stage < S-1), back-propagate, send the input
// gradient to the previous stage (stage > 0).
// SyncGradNorm: global gradient-norm reduction along the pipeline (for clipping), then Step.
// Every stage runs the forwards in micro-batch order and the backwards in one common order, so
// each link's FIFO order matches what the receiver expects.
#pragma once

#include <string>
#include <vector>

namespace slowpipe::runtime {

struct Action {
  enum class Kind { kForward, kBackward, kSyncGradNorm, kStep };
  Kind kind;
  int microBatch = -1;
  bool operator==(const Action& o) const { return kind == o.kind && microBatch == o.microBatch; }
};

// GPipe as in the AC-SGD paper: all M forwards, then all M backwards (reverse order).
std::vector<Action> gpipeSchedule(int stages, int microBatches, int stage);
// 1F1B (PipeDream-flush): S-1-s warm-up forwards, then alternate one forward / one backward.
std::vector<Action> oneFOneBSchedule(int stages, int microBatches, int stage);
// By name: "gpipe" or "1f1b". Throws std::invalid_argument naming the valid ones.
std::vector<Action> makeSchedule(const std::string& name, int stages, int microBatches, int stage);
std::string describe(const std::vector<Action>& actions);

}  // namespace slowpipe::runtime
