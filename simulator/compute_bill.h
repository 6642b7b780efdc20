// What each host action of a replay costs (simulate.cc): a compute action's seconds from the
// profile (its stage's factor in a real pipeline, the first step's warm-up, the extra after a
// wait) slowed by a straggler's speed (runtime.slowdown), and a data-parallel round's packing and
// outer step. Torch-free.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/exec/executor.h"
#include "runtime/exec/ranks.h"
#include "runtime/exec/schedule.h"
#include "runtime/spec/spec.h"
#include "simulator/message_bill.h"
#include "simulator/profile.h"
#include "simulator/replay_state.h"
#include "simulator/simulate.h"

namespace slowpipe::simulator {

class ComputeBill {
 public:
  ComputeBill(const runtime::RunSpec& spec, const Profile& profile, const SimOptions& opt,
              const runtime::RankLayout& layout, const MessageBill& messages)
      : spec_(spec), profile_(profile), opt_(opt), layout_(layout), messages_(messages) {
    const int virtualStages = layout.stages * layout.chunks;  // a profile entry each
    if (static_cast<int>(profile.stages.size()) != virtualStages)
      throw std::invalid_argument("profile has " + std::to_string(profile.stages.size()) +
                                  " stages, the spec " + std::to_string(virtualStages) +
                                  " (profile the same partition)");
  }

  // A compute action (Forward, Backward and its parts, EvalForward) of the rank in state `st`.
  double compute(const runtime::Action& a, const runtime::ActionContext& c, RankState& st);
  // The optimizer step of every model chunk of the rank.
  double step(const runtime::Action& a, const runtime::ActionContext& c, RankState& st);
  // A DP round's begin (packing) and end (unpacking) in round `round`, and the outer step.
  double dpBegin(int rank, int round) const;
  double dpEnd(int rank, int round) const;
  double outerStep(int rank) const;

 private:
  // runtime.slowdown: a straggler's compute takes its cost / its speed at that step.
  double slowed(RankState& st, double seconds, int rank, int64_t step) const;
  // What the wait since the rank's last compute event adds to this one (StageCost::idle).
  static double afterIdle(RankState& st, const StageCost& cost, const char* what);
  // The first step's extra (StageCost::warmupS) on the first event of its kind of virtual stage v.
  double warmup(const runtime::ActionContext& c, int v, const runtime::Action& a, RankState& st);

  const runtime::RunSpec& spec_;
  const Profile& profile_;
  const SimOptions& opt_;
  const runtime::RankLayout& layout_;
  const MessageBill& messages_;
};

}  // namespace slowpipe::simulator
