// The schedules slowpipe knows: one line each. A schedule is one file in runtime/exec/schedules/
// (built by a glob) that builds a stage's action list from the building blocks in
// runtime/exec/schedule.h; the worker, the single-process trainer, the profiler and the simulator
// run every schedule listed here alike. Adding one: its file, its builder's declaration and its
// line below.
#include "runtime/exec/schedule.h"

namespace slowpipe::runtime {

// Builders defined in their own files (gpipe's and 1f1b's are declared in schedule.h).
std::vector<Action> zbH1Schedule(int stages, int microBatches, int stage);
std::vector<Action> interleavedOneFOneBSchedule(int stages, int microBatches, int stage,
                                                int chunks);

const std::vector<ScheduleInfo>& schedules() {
  static const std::vector<ScheduleInfo> all = {
      // all forwards, then all backwards (AC-SGD's schedule)
      {"gpipe", [](int S, int M, int s, int) { return gpipeSchedule(S, M, s); }},
      // PipeDream-flush: S-1-s warm-up forwards, then one forward / one backward
      {"1f1b", [](int S, int M, int s, int) { return oneFOneBSchedule(S, M, s); }},
      // zero-bubble H1: 1F1B with backwards split, weight gradients deferred into the bubbles
      {"zb_h1", [](int S, int M, int s, int) { return zbH1Schedule(S, M, s); }, true},
      // Megatron-LM's interleaved 1F1B over pipeline.virtual_stages model chunks per stage
      {"interleaved_1f1b", interleavedOneFOneBSchedule, false, true},
  };
  return all;
}

}  // namespace slowpipe::runtime
