// The single-process trainer: every layer in one process, the pipeline's reference.
#include <cmath>

#include <torch/torch.h>

#include "emulator/shaped_socket.h"
#include "runtime/plan.h"
#include "runtime/schedule.h"
#include "runtime/stage_runner.h"
#include "runtime/worker.h"

namespace slowpipe::runtime {

using nlohmann::json;

namespace {

double now() { return emulator::monotonicNow(); }

json meanLoss(double lossSum, int64_t tokens) { return tokens > 0 ? json(lossSum / static_cast<double>(tokens)) : json(nullptr); }

}  // namespace

void runSingleProcess(const RunSpec& specIn, const std::string& split,
                      const std::function<void(const json&)>& onRecord, const std::string& checkpoint) {
  RunSpec spec = specIn;
  spec.pipeline.stages = 1;
  spec.pipeline.virtualStages = 1;  // every layer in one model chunk
  spec.pipeline.partition.clear();
  // The same global batch in one process: every replica's micro-batches, in replica order.
  spec.pipeline.microBatches *= spec.pipeline.replicas;
  spec.pipeline.replicas = 1;
  tuneAllocator();
  torch::set_num_threads(spec.runtime.threadsPerWorker);
  Plan plan(spec, split);
  StageRunner runner(spec, 0, plan.totalSteps);
  const int M = spec.pipeline.microBatches;
  const auto schedule = makeSchedule(spec.pipeline.schedule, 1, M, 0);
  int64_t g = 0;
  for (int epoch = 0; epoch < spec.training.epochs && g < plan.totalSteps; ++epoch) {
    for (int64_t s = 0; s < plan.epochs.stepsPerEpoch() && g < plan.totalSteps; ++s, ++g) {
      const double t0 = now();
      double loss = 0;
      for (const Action& a : schedule) {
        if (a.kind == Action::Kind::kForward) {
          torch::Tensor in, tgt;
          std::vector<int64_t> ids;
          makeBatch(plan.train, plan.epochs.microBatch(epoch, s, a.microBatch), spec.model.seqLen, &in, &tgt, &ids);
          runner.forward(a.microBatch, in, tgt);
          loss += runner.lossValue(a.microBatch) / M;
        } else if (a.kind == Action::Kind::kBackward) {
          runner.backward(a.microBatch, {});
        } else if (a.kind == Action::Kind::kBackwardInput) {
          runner.backwardInput(a.microBatch, {});
        } else if (a.kind == Action::Kind::kBackwardWeight) {
          runner.backwardWeight(a.microBatch);
        } else if (a.kind == Action::Kind::kStep) {
          runner.step(g, std::sqrt(runner.localGradSquaredNorm()));
        }
      }
      onRecord({{"type", "step"}, {"step", g}, {"epoch", epoch}, {"loss", loss}, {"time_s", now() - t0},
                {"tokens", int64_t{M} * spec.pipeline.microBatchSize * spec.model.seqLen}});
    }
    if (spec.training.evalEachEpoch) {
      double lossSum = 0;
      int64_t tokens = 0;
      for (const std::vector<int64_t>& idx : evalBatches(plan.val.size(), spec.pipeline.microBatchSize)) {
        std::vector<int64_t> ids;
        torch::Tensor in, tgt;
        makeBatch(plan.val, idx, spec.model.seqLen, &in, &tgt, &ids);
        runner.evalForward(in, tgt, &lossSum);
        tokens += tgt.numel();
      }
      onRecord({{"type", "eval"}, {"epoch", epoch}, {"step", g}, {"val_loss", meanLoss(lossSum, tokens)}});
    }
  }
  if (!checkpoint.empty()) saveCheckpoint(runner.model(), checkpoint);
}

}  // namespace slowpipe::runtime
