// The compute of one pipeline stage: its slice of the model, AdamW with warm-up and linear decay,
// gradient clipping by the *global* norm (all stages' gradients), per-micro-batch activation
// bookkeeping between forward and backward. A single-process run is a runner that owns every
// layer; a pipeline runs one runner per process and moves tensors between them.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>

#include "runtime/exec/weight_grad.h"
#include "runtime/model/data.h"
#include "runtime/model/model.h"
#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

class StageRunner {
 public:
  // `stage`: the virtual stage (its layers are stageLayers(spec)[stage]; with one model chunk per
  // stage, the stage).
  StageRunner(const RunSpec& spec, int stage, int64_t totalSteps);
  bool first() const { return model_->first; }
  bool last() const { return model_->last; }

  // Forward of micro-batch mb. first stage: input = tokens [B, T]; otherwise hidden [B, T, C]
  // (a gradient leaf is made of it). Returns the output hidden state, or on the last stage the
  // micro-batch loss (scaled by 1/M for the backward; lossValue() gives the unscaled mean).
  torch::Tensor forward(int mb, const torch::Tensor& input, const torch::Tensor& targets);
  // Backward of mb; gradOut is ignored on the last stage. Returns d loss / d input (undefined on
  // the first stage).
  torch::Tensor backward(int mb, const torch::Tensor& gradOut);
  // The same backward in two parts (schedules that split it; the runner must have been built for
  // one, splitBackward()): backwardInput returns what backward returns and leaves the linear
  // layers' weight gradients to backwardWeight(mb) (runtime/exec/weight_grad.h).
  torch::Tensor backwardInput(int mb, const torch::Tensor& gradOut);
  void backwardWeight(int mb);
  bool splitBackward() const { return weightGrads_ != nullptr; }
  // Splits this runner's backwards from now on (the constructor does so for a schedule that
  // splits them; the profiler for measuring the parts). Before the first forward.
  void enableSplitBackward();
  double lossValue(int mb) const { return losses_.at(mb); }

  double localGradSquaredNorm() const;
  // Clips with the global norm, sets this step's learning rate, steps AdamW, zeroes gradients.
  void step(int64_t step, double globalNorm);
  double learningRate(int64_t step) const;

  // Evaluation forward (no autograd): returns hidden, or on the last stage the summed token loss.
  torch::Tensor evalForward(const torch::Tensor& input, const torch::Tensor& targets,
                            double* lossSum);

  StageModel& model() { return model_; }

  torch::optim::AdamW& optimizer() { return *opt_; }

 private:
  // runtime.device: inputs move there, outputs (activations, input gradients) come back to host
  // memory; on CUDA each call returns when the device is done, so its time is the stage's.
  void sync() const;  // waits for the device (CUDA); nothing on the CPU
  const RunSpec& spec_;
  torch::Device device_;
  StageModel model_{nullptr};
  std::unique_ptr<torch::optim::AdamW> opt_;
  int64_t totalSteps_;
  std::map<int, torch::Tensor> inputs_, outputs_;
  std::map<int, double> losses_;
  std::unique_ptr<WeightGradStore> weightGrads_;  // the schedule splits backwards
};

// Builds the [B, T] input and target tensors and the example ids of one micro-batch.
void makeBatch(const ExampleSet& set, const std::vector<int64_t>& indices, int seqLen,
               torch::Tensor* inputs, torch::Tensor* targets, std::vector<int64_t>* ids);

}  // namespace slowpipe::runtime
