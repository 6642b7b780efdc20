// The data plan of a run, shared by the worker, the single-process trainer and the simulator:
// the training and validation sets, the epochs' step plan (every replica's micro-batches of a
// global batch), the run's steps, and the validation batches. Torch-free.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/data.h"
#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

// The validation set in micro-batches of at most `b` examples, the last one partial: a set
// smaller than one micro-batch is still evaluated (it was skipped, and 0/0 reported).
inline std::vector<std::vector<int64_t>> evalBatches(int64_t n, int b) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t at = 0; at < n; at += b) {
    out.emplace_back();
    for (int64_t i = at; i < std::min<int64_t>(n, at + b); ++i) out.back().push_back(i);
  }
  return out;
}

// The data plan of a step is the global batch of every replica: R x M micro-batches (see
// PipelineSpec::replicas); replica r's micro-batch mb is the plan's micro-batch r*M + mb.
struct Plan {
  ExampleSet train, val;
  EpochPlan epochs;
  int64_t totalSteps;
  Plan(const RunSpec& s, const std::string& split)
      : train(s.data, split, "train", s.model.seqLen),
        val(s.data, split, "val", s.model.seqLen),
        epochs(train.size(), s.pipeline.microBatches * s.pipeline.replicas,
               s.pipeline.microBatchSize, s.training.seed) {
    if (std::max(train.maxToken(), val.maxToken()) >= s.model.vocab)
      throw std::invalid_argument(
          "data: token id " + std::to_string(std::max(train.maxToken(), val.maxToken())) +
          " is beyond the model's vocabulary (" + std::to_string(s.model.vocab) +
          "): data.tokenizer must be the model's");
    totalSteps = epochs.stepsPerEpoch() * s.training.epochs;
    if (s.training.maxSteps > 0) totalSteps = std::min(totalSteps, s.training.maxSteps);
  }
};

}  // namespace slowpipe::runtime
