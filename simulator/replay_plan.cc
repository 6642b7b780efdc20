// What a replay's run does step by step (see replay_plan.h).
#include "simulator/replay_plan.h"

#include "runtime/exec/protocol.h"

namespace slowpipe::simulator {

ReplayPlan::ReplayPlan(const runtime::RunSpec& spec, const SimOptions& opt,
                       const runtime::RankLayout& layout, int steps)
    : spec_(spec), opt_(opt), layout_(layout), dp_(runtime::dpShape(spec)), steps_(steps) {}

std::vector<runtime::Action> ReplayPlan::stepList(int i, int step) const {
  const runtime::RankId id = layout_.id(i);
  return runtime::makeSchedule(spec_.pipeline.schedule, layout_.stages, spec_.pipeline.microBatches,
                               id.stage, dp_, id.replica, step, layout_.chunks);
}

std::vector<runtime::Action> ReplayPlan::evalList(int i) const {
  return runtime::evalSchedule(layout_.stages, static_cast<int>(opt_.evalRows.size()),
                               layout_.id(i).stage, layout_.chunks);
}

int ReplayPlan::epochOf(int64_t k) const {
  return opt_.stepsPerEpoch > 0 ? static_cast<int>(k / opt_.stepsPerEpoch) : 0;
}

std::optional<double> ReplayPlan::curveLossAt(int64_t k) const {
  const auto& c = opt_.quality;
  if (c.empty() || opt_.runSteps <= 0) return std::nullopt;
  // By progress: the curve's point at its step s of qualitySteps lands at s * runSteps /
  // qualitySteps.
  const double scale =
      opt_.qualitySteps > 0 ? static_cast<double>(opt_.runSteps) / opt_.qualitySteps : 1.0;
  const double x = static_cast<double>(k);
  if (x < c.front().first * scale - 1e-9) return std::nullopt;
  for (size_t j = 1; j < c.size(); ++j) {
    const double x0 = c[j - 1].first * scale, x1 = c[j].first * scale;
    if (x <= x1 + 1e-9)
      return x1 > x0 ? c[j - 1].second + (c[j].second - c[j - 1].second) * (x - x0) / (x1 - x0)
                     : c[j].second;
  }
  return x <= c.back().first * scale + 1e-9 ? std::optional<double>(c.back().second) : std::nullopt;
}

bool ReplayPlan::evaluatesAfter(int k) const {
  if (opt_.evalRows.empty() || opt_.stepsPerEpoch <= 0) return false;
  return runtime::protocol::evaluatesAfter(spec_.training, k + 1, opt_.stepsPerEpoch,
                                           opt_.runSteps);
}

std::vector<runtime::EvalRecord> ReplayPlan::evals(const std::vector<double>& times,
                                                   const std::vector<double>& ends) const {
  std::vector<runtime::EvalRecord> out;
  for (int k = 0; k < steps_; ++k)
    if (evaluatesAfter(k)) {
      runtime::EvalRecord e;  // no loss (nothing is computed) unless a quality curve gives one
      e.epoch = static_cast<int>(k / opt_.stepsPerEpoch);
      e.valLoss = curveLossAt(k + 1);
      e.step = k + 1;
      e.timeS = times[k];
      e.wallS = ends[k];
      out.push_back(e);
    }
  return out;
}

}  // namespace slowpipe::simulator
