// GPipe as in the AC-SGD paper: all M forwards, then all M backwards in reverse order.
#include "runtime/exec/schedule.h"

namespace slowpipe::runtime {

std::vector<Action> gpipeSchedule(int stages, int microBatches, int stage) {
  std::vector<Action> a;
  for (int m = 0; m < microBatches; ++m) appendForward(a, m, stages, stage);
  for (int m = microBatches - 1; m >= 0; --m) appendBackward(a, m, stages, stage);
  appendStepEnd(a, stages, stage);
  return a;
}

}  // namespace slowpipe::runtime
