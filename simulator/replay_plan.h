// What a replay's run does step by step (simulate.cc): each rank's action list of a step, the
// run's epoch of a step, when the run evaluates and, from a quality curve, with what loss.
// Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/dp/dp.h"
#include "runtime/exec/ranks.h"
#include "runtime/exec/schedule.h"
#include "runtime/records/records.h"
#include "runtime/spec/spec.h"
#include "simulator/simulate.h"

namespace slowpipe::simulator {

class ReplayPlan {
 public:
  ReplayPlan(const runtime::RunSpec& spec, const SimOptions& opt, const runtime::RankLayout& layout,
             int steps);

  // Rank i's action list of `step` (the worker's own, runtime/exec/schedule.h).
  std::vector<runtime::Action> stepList(int i, int step) const;
  // Rank i's list of the evaluation after a step (replica 0 of every stage evaluates).
  std::vector<runtime::Action> evalList(int i) const;
  // The run's epoch of step k (without a data plan: 0, the first steps of any run).
  int epochOf(int64_t k) const;
  // Whether the run evaluates after step k (the end of an epoch; the run's last step when the
  // whole run is replayed).
  bool evaluatesAfter(int k) const;
  // The evaluations of the replay, given how long each took and when it ended (by step).
  std::vector<runtime::EvalRecord> evals(const std::vector<double>& times,
                                         const std::vector<double>& ends) const;

 private:
  // The quality curve's validation loss at the run's step k (after k steps), or none.
  std::optional<double> curveLossAt(int64_t k) const;

  const runtime::RunSpec& spec_;
  const SimOptions& opt_;
  const runtime::RankLayout& layout_;
  runtime::DpShape dp_;
  int steps_;
};

}  // namespace slowpipe::simulator
