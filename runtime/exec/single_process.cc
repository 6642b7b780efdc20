// The single-process trainer: every layer in one process, the pipeline's reference.
#include <cmath>

#include <torch/torch.h>

#include "compression/parallel.h"
#include "emulator/shaped_socket.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/protocol.h"
#include "runtime/exec/schedule.h"
#include "runtime/exec/stage_compute.h"
#include "runtime/launch/worker.h"
#include "runtime/model/plan.h"
#include "runtime/records/records.h"

namespace slowpipe::runtime {

using nlohmann::json;

namespace {

// A compute-only backend (runtime/exec/executor.h): every layer in one StageCompute, no messages.
class SingleProcess : public Backend {
 public:
  SingleProcess(const RunSpec& spec, const Plan& plan)
      : compute_(spec, plan, RankLayout{}, RankId{}), exec_(RankLayout{}, 0) {}

  // Runs a list; returns its wall time.
  double run(std::vector<Action> list, const ActionContext& where) {
    compute_.beginList();
    exec_.start(std::move(list), where, now(), false);
    if (!exec_.run(*this))
      throw std::logic_error("the single-process backend left an action pending");
    return now() - exec_.started();
  }
  StageCompute& compute() { return compute_; }

  double now() override { return emulator::monotonicNow(); }
  Progress compute(const Action& a, const ActionContext& c) override {
    compute_.compute(a, c);
    return Progress::kDone;
  }
  Progress step(const Action&, const ActionContext& c) override {
    compute_.step(c);
    return Progress::kDone;
  }
  Progress send(const Action& a, const ActionContext&) override { return none(a); }
  Progress recv(const Action& a, const ActionContext&) override { return none(a); }
  Progress dpBegin(const Action& a, const ActionContext&) override { return none(a); }
  Progress dpEnd(const Action& a, const ActionContext&) override { return none(a); }
  Progress outerStep(const Action& a, const ActionContext&) override { return none(a); }

 private:
  static Progress none(const Action& a) {
    throw std::logic_error(std::string("a single process has no ") + protocol::eventName(a) +
                           " action");
  }
  StageCompute compute_;
  StepExecutor exec_;
};

}  // namespace

void runSingleProcess(const RunSpec& specIn, const std::string& split,
                      const std::function<void(const json&)>& onRecord,
                      const std::string& checkpoint) {
  RunSpec spec = specIn;
  spec.pipeline.stages = 1;
  spec.pipeline.virtualStages = 1;  // every layer in one model chunk
  spec.pipeline.partition.clear();
  // The same global batch in one process: every replica's micro-batches, in replica order.
  spec.pipeline.microBatches *= spec.pipeline.replicas;
  spec.pipeline.replicas = 1;
  tuneAllocator();
  torch::set_num_threads(spec.runtime.threadsPerWorker);
  compression::setCodecThreads(codecThreadsFor(spec, 1));
  const Plan plan(spec, split);
  SingleProcess p(spec, plan);
  const int M = spec.pipeline.microBatches;
  const auto schedule = makeSchedule(spec.pipeline.schedule, 1, M, 0);
  ActionContext where;
  for (int epoch = 0; epoch < spec.training.epochs && where.step < plan.totalSteps; ++epoch) {
    where.epoch = epoch;
    for (int64_t s = 0; s < plan.epochs.stepsPerEpoch() && where.step < plan.totalSteps; ++s) {
      where.stepInEpoch = s;
      const double seconds = p.run(schedule, where);
      onRecord({{"type", "step"},
                {"step", where.step},
                {"epoch", epoch},
                {"loss", p.compute().loss()},
                {"time_s", seconds},
                {"tokens", int64_t{M} * spec.pipeline.microBatchSize * spec.model.seqLen},
                {"total_steps", plan.totalSteps}});
      ++where.step;
      if (!protocol::evaluatesAfter(spec.training, where.step, plan.epochs.stepsPerEpoch(),
                                    plan.totalSteps))
        continue;
      EvalRecord e;
      e.epoch = epoch;
      e.step = where.step;
      e.timeS = p.run(evalSchedule(1, p.compute().evalBatchCount(), 0), where);
      e.valLoss = p.compute().evalLoss();
      json r = toJson(e);
      r["type"] = "eval";
      onRecord(r);
    }
  }
  if (!checkpoint.empty()) saveCheckpoint(p.compute().runner(0).model(), checkpoint);
  if (!spec.training.saveCheckpoint.empty())
    saveHfStage(*p.compute().runner(0).model(), spec.model, spec.training.saveCheckpoint, 0,
                {{0, spec.model.layers}});
}

}  // namespace slowpipe::runtime
