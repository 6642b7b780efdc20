// What each host action of a replay costs (see compute_bill.h).
#include "simulator/compute_bill.h"

#include <algorithm>

#include "runtime/exec/protocol.h"

namespace slowpipe::simulator {

using runtime::Action;

double ComputeBill::compute(const Action& a, const runtime::ActionContext& c, RankState& st) {
  const StageCost& cost = profile_.stages[c.virtualStage];
  if (a.kind == Action::Kind::kEvalForward)  // the batch's rows (no autograd: billed as one)
    return slowed(st,
                  cost.runFactor * cost.forwardS * opt_.evalRows.at(a.microBatch) /
                          spec_.pipeline.microBatchSize +
                      afterIdle(st, cost, "forward"),
                  c.rank, c.step - 1);
  return slowed(st,
                cost.runFactor * cost.of(a) + warmup(c, c.virtualStage, a, st) +
                    afterIdle(st, cost, runtime::protocol::eventName(a)),
                c.rank, c.step);
}

double ComputeBill::step(const Action& a, const runtime::ActionContext& c, RankState& st) {
  const int stage = layout_.id(c.rank).stage;
  const StageCost& cost = profile_.stages[static_cast<size_t>(stage)];
  const double s =
      stepSeconds(profile_.stages, static_cast<size_t>(stage), static_cast<size_t>(layout_.stages));
  return slowed(st, cost.runFactor * s + warmup(c, stage, a, st) + afterIdle(st, cost, "step"),
                c.rank, c.step);
}

static double perRound(const std::vector<double>& v, int round) {
  return round < static_cast<int>(v.size()) ? v[round] : 0.0;
}

double ComputeBill::dpBegin(int rank, int round) const {
  return perRound(messages_.dpCost(layout_.id(rank).stage).beginS, round);
}

double ComputeBill::dpEnd(int rank, int round) const {
  return perRound(messages_.dpCost(layout_.id(rank).stage).endS, round);
}

double ComputeBill::outerStep(int rank) const {
  return messages_.dpCost(layout_.id(rank).stage).outerStepS;
}

double ComputeBill::slowed(RankState& st, double seconds, int rank, int64_t step) const {
  const double speed = spec_.runtime.slowdown.speedAt(rank, std::max<int64_t>(step, 0));
  st.slowdown.computeS += seconds;
  st.slowdown.stalledS += seconds / speed - seconds;
  st.slowdown.owedS += seconds / speed - seconds;
  return seconds / speed;
}

double ComputeBill::afterIdle(RankState& st, const StageCost& cost, const char* what) {
  const double extra = cost.idle.at(what, st.waitedS);
  st.waitedS = 0;
  return extra;
}

double ComputeBill::warmup(const runtime::ActionContext& c, int v, const Action& a, RankState& st) {
  const auto& extra = profile_.stages[static_cast<size_t>(v)].warmupS;
  if (c.step != 0 || extra.empty()) return 0;
  const char* what = runtime::protocol::eventName(a);
  const auto it = extra.find(what);
  if (it == extra.end() || !st.warmed.insert({v, what}).second) return 0;
  return it->second;
}

}  // namespace slowpipe::simulator
