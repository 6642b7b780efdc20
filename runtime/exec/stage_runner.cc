// StageRunner: forward/backward bookkeeping, optimizer, schedule of the learning rate.
#include "runtime/exec/stage_runner.h"

#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "runtime/exec/schedule.h"

namespace slowpipe::runtime {
namespace {

torch::Device deviceOf(const RunSpec& spec) {
  const std::string& d = spec.runtime.device;
  if (d == "cpu") return torch::kCPU;
  if (!torch::cuda::is_available())
    throw std::runtime_error(
        "runtime.device = '" + d +
        "': this libtorch sees no CUDA device (torch::cuda::is_available() is false; Debian's "
        "libtorch is CPU-only: build with tools/gpu-build.sh against a CUDA libtorch)");
  const torch::Device dev(d);
  if (dev.has_index() && dev.index() >= static_cast<int>(torch::cuda::device_count()))
    throw std::runtime_error("runtime.device = '" + d + "': this machine has " +
                             std::to_string(torch::cuda::device_count()) + " CUDA device(s)");
  return dev;
}

}  // namespace

StageRunner::StageRunner(const RunSpec& spec, int stage, int64_t totalSteps)
    : spec_(spec), device_(deviceOf(spec)), totalSteps_(totalSteps) {
  const auto ranges = stageLayers(spec);
  const int last = static_cast<int>(ranges.size()) - 1;  // virtual stages (stages x virtual_stages)
  model_ = StageModel(spec.model, ranges.at(stage).first, ranges.at(stage).second, stage == 0,
                      stage == last);
  if (!spec.training.initCheckpoint.empty()) loadCheckpoint(model_, spec.training.initCheckpoint);
  model_->to(device_);
  if (scheduleInfo(spec.pipeline.schedule).splitsBackward) enableSplitBackward();
  opt_ = std::make_unique<torch::optim::AdamW>(
      model_->parameters(),
      torch::optim::AdamWOptions(spec.training.lr).weight_decay(spec.training.weightDecay));
}

void StageRunner::enableSplitBackward() {
  if (!outputs_.empty()) throw std::logic_error("enableSplitBackward after a forward");
  weightGrads_ = std::make_unique<WeightGradStore>();
  model_->deferWeightGradients(weightGrads_.get());
}

void StageRunner::sync() const {
  if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
}

torch::Tensor StageRunner::forward(int mb, const torch::Tensor& input,
                                   const torch::Tensor& targets) {
  torch::Tensor x = input.to(device_);
  if (!first()) {
    x = x.detach().requires_grad_(true);  // the leaf on the stage's device, whose grad goes back
    inputs_[mb] = x;
  }
  if (weightGrads_) weightGrads_->setMicroBatch(mb);
  torch::Tensor y = model_->forward(x);
  if (last()) {
    const torch::Tensor loss = lmLoss(y, targets.to(device_));
    losses_[mb] = loss.item<double>();
    y = loss / static_cast<double>(spec_.pipeline.microBatches);
  }
  outputs_[mb] = y;
  return last() ? y.detach().to(torch::kCPU) : y.detach().contiguous().to(torch::kCPU);
}

torch::Tensor StageRunner::backward(int mb, const torch::Tensor& gradOut) {
  if (weightGrads_) {  // a schedule that splits backwards, run whole (the single-process trainer)
    torch::Tensor g = backwardInput(mb, gradOut);
    backwardWeight(mb);
    return g;
  }
  return backwardInput(mb, gradOut);
}

void StageRunner::backwardWeight(int mb) {
  if (!weightGrads_)
    throw std::logic_error("BackwardWeight on a stage whose schedule does not split backwards");
  weightGrads_->runWeightGradients(mb);
  sync();
}

torch::Tensor StageRunner::backwardInput(int mb, const torch::Tensor& gradOut) {
  const torch::Tensor y = outputs_.at(mb);
  if (last()) {
    y.backward();
  } else {
    y.backward(gradOut.to(device_));
  }
  outputs_.erase(mb);
  if (first()) {
    sync();
    return {};
  }
  torch::Tensor g = inputs_.at(mb).grad().contiguous().to(torch::kCPU);
  inputs_.erase(mb);
  return g;
}

double StageRunner::localGradSquaredNorm() const {
  double s = 0.0;
  for (const auto& p : model_->parameters())
    if (p.grad().defined()) s += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
  return s;
}

double StageRunner::learningRate(int64_t step) const {
  const double base = spec_.training.lr;
  const int64_t warm = spec_.training.warmupSteps;
  if (step < warm) return base * static_cast<double>(step + 1) / static_cast<double>(warm);
  const double left = static_cast<double>(totalSteps_ - step),
               span = static_cast<double>(std::max<int64_t>(1, totalSteps_ - warm));
  return base * std::clamp(left / span, 0.0, 1.0);
}

void StageRunner::step(int64_t step, double globalNorm) {
  torch::NoGradGuard guard;
  const double clip = spec_.training.clipNorm;
  if (clip > 0) {
    const double coef = clip / (globalNorm + 1e-6);
    if (coef < 1.0)
      for (auto& p : model_->parameters())
        if (p.grad().defined()) p.grad().mul_(coef);
  }
  for (auto& g : opt_->param_groups())
    static_cast<torch::optim::AdamWOptions&>(g.options()).lr(learningRate(step));
  opt_->step();
  opt_->zero_grad();
  losses_.clear();
  sync();
}

torch::Tensor StageRunner::evalForward(const torch::Tensor& input, const torch::Tensor& targets,
                                       double* lossSum) {
  torch::NoGradGuard guard;
  torch::Tensor y = model_->forward(input.to(device_));
  if (last()) {
    const torch::Tensor loss = lmLoss(y, targets.to(device_));
    *lossSum += loss.item<double>() * static_cast<double>(targets.numel());
  }
  return y.contiguous().to(torch::kCPU);
}

void makeBatch(const ExampleSet& set, const std::vector<int64_t>& indices, int seqLen,
               torch::Tensor* inputs, torch::Tensor* targets, std::vector<int64_t>* ids) {
  const auto b = static_cast<int64_t>(indices.size());
  *inputs = torch::empty({b, seqLen}, torch::kLong);
  *targets = torch::empty({b, seqLen}, torch::kLong);
  ids->clear();
  for (int64_t i = 0; i < b; ++i) {
    set.example(indices[i], inputs->data_ptr<int64_t>() + i * seqLen,
                targets->data_ptr<int64_t>() + i * seqLen);
    ids->push_back(set.id(indices[i]));
  }
}

}  // namespace slowpipe::runtime
