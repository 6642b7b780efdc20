// Stragglers (`runtime.slowdown`): the speed at which a rank computes, as a fraction of its own
// full speed, constant or as a trace over training steps. The same table drives the emulation
// (runtime/exec/pipeline_worker.cc: after each compute action that took t seconds the worker stays
// off the CPU for t x (1/speed - 1): a duty cycle, so the rank really computes slower) and the
// simulator (simulator/compute_bill.cc: the profile's cost / speed). Torch-free.
//
//   "runtime": {"slowdown": [{"rank": 1, "speed": 0.5},
//                            {"rank": 2, "trace": [[0, 1.0], [80, 0.5], [120, 1.0]]}]}
// A trace holds (first training step, speed) pairs in increasing step order; before the first
// pair the rank runs at full speed; an evaluation runs at the speed of the step before it.
// Speeds are in (0, 1]: a rank cannot be made faster than it is.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace slowpipe::runtime {

struct RankSlowdown {
  int rank = 0;
  std::vector<std::pair<int64_t, double>> trace;  // (first step, speed), steps increasing
};

struct SlowdownSpec {
  std::vector<RankSlowdown> ranks;  // at most one entry per rank
  bool empty() const { return ranks.empty(); }
  // The speed of `rank` at training step `step` (1 for a rank not listed).
  double speedAt(int rank, int64_t step) const;
};

// `where`: the field's path for errors ("spec.runtime.slowdown"); `ranks`: how many ranks the run
// has (stages x replicas), which a listed rank must be below.
SlowdownSpec slowdownFromJson(const nlohmann::json& j, const std::string& where, int ranks);
nlohmann::json toJson(const SlowdownSpec& s);

// What a rank's compute actually ran at over a run: its compute time at full speed over the time
// it took with the stalls (1 for a rank never slowed).
struct SlowdownMeter {
  double computeS = 0, stalledS = 0;
  double owedS = 0;  // what the speeds asked for: sum of t x (1/speed - 1) over the compute actions
  double effectiveSpeed() const {
    return computeS + stalledS > 0 ? computeS / (computeS + stalledS) : 1.0;
  }
};

}  // namespace slowpipe::runtime
