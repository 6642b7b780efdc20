// The compute half of a real backend (runtime/exec/executor.h): a rank's StageRunners (one per
// model chunk) on the run's data plan, and the tensors a list holds between its actions (inputs
// received, outputs to send, per (model chunk, micro-batch)). The pipeline worker adds channels
// to it; the single-process trainer runs it alone.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "runtime/exec/executor.h"
#include "runtime/exec/stage_runner.h"
#include "runtime/model/plan.h"

namespace slowpipe::runtime {

class StageCompute {
 public:
  // Stage id.stage's runners of replica id.replica, on `plan` (both outlive this).
  StageCompute(const RunSpec& spec, const Plan& plan, const RankLayout& layout, RankId id);

  // Clears what a list holds (its tensors, norm, compute time, evaluation sums).
  void beginList();
  // Forward, Backward(Input|Weight), EvalForward or GradNorm (c: the action's context).
  void compute(const Action& a, const ActionContext& c);
  // The step's loss and global norm (sqrt of squaredNorm()); with runOptimizer, the optimizer step
  // of every model chunk, clipped with that norm (qadam's steps after its warm-up are its own).
  void step(const ActionContext& c, bool runOptimizer = true);
  // What a received message brings (activation, gradient, evaluation input) and what a send takes.
  void input(const Action& a, torch::Tensor t);
  torch::Tensor output(const Action& a);

  // The example ids of micro-batch mb of the step in hand (from the data plan; an evaluation
  // batch's once its forward ran).
  std::vector<int64_t> planIds(const ActionContext& c, int mb) const;
  const std::vector<int64_t>& ids(int mb) const { return ids_.at(mb); }
  // Squared gradient norm: GradNorm sets the local part, the norm messages add / replace it.
  double& squaredNorm() { return sq_; }
  double norm() const { return norm_; }
  double computeSeconds() const { return compute_; }
  // The last stage: the step's mean loss; an evaluation's summed token loss and tokens.
  double loss() const { return loss_; }
  // Mean loss per token of the evaluation in hand (none: no token was evaluated here), and how
  // many batches an evaluation of the plan's validation set has.
  std::optional<double> evalLoss() const {
    return evalTokens_ > 0 ? std::optional<double>(evalLossSum_ / static_cast<double>(evalTokens_))
                           : std::nullopt;
  }
  int evalBatchCount() const { return static_cast<int>(evalBatches_.size()); }
  bool holdsLastStage() const { return runners_.back()->last(); }
  StageRunner& runner(int chunk) { return *runners_.at(chunk); }
  std::vector<StageRunner*> runners() const {
    std::vector<StageRunner*> out;
    for (const auto& r : runners_) out.push_back(r.get());
    return out;
  }
  int chunks() const { return static_cast<int>(runners_.size()); }

 private:
  void forward(const Action& a, const ActionContext& c);
  void evalForward(const Action& a);
  void backward(const Action& a);
  int globalMb(int mb) const { return id_.replica * spec_.pipeline.microBatches + mb; }

  const RunSpec& spec_;
  const Plan& plan_;
  RankId id_;
  std::vector<std::unique_ptr<StageRunner>> runners_;  // by model chunk
  std::vector<std::vector<int64_t>> evalBatches_;      // the validation plan's batches
  // By (chunk, micro-batch): activations (or evaluation inputs) received, gradients received,
  // outputs to send.
  std::map<std::pair<int, int>, torch::Tensor> in_, grad_, out_;
  std::map<int, std::vector<int64_t>> ids_;  // example ids by micro-batch / batch
  double compute_ = 0, sq_ = 0, norm_ = 0, loss_ = 0, evalLossSum_ = 0;
  int64_t evalTokens_ = 0;
};

}  // namespace slowpipe::runtime
