// GPT-2-style decoder, built per pipeline stage: token + position embeddings (first stage),
// pre-LayerNorm blocks with causal self-attention and a GELU MLP, final LayerNorm and LM head
// (last stage). Every component is initialised from its own seed (model.seed, component index),
// so a stage's parameters are identical whatever the partition: a 4-stage run starts from exactly
// the weights of a 1-stage run.
#pragma once

#include <torch/torch.h>

#include <string>

#include "runtime/spec.h"

namespace slowpipe::runtime {

class WeightGradStore;  // runtime/weight_grad.h

struct BlockImpl : torch::nn::Module {
  BlockImpl(int width, int heads);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
  int heads;
  WeightGradStore* store = nullptr;  // set: the linears' weight gradients are deferred to it
};
TORCH_MODULE(Block);

struct StageModelImpl : torch::nn::Module {
  StageModelImpl(const ModelSpec& m, int layerBegin, int layerEnd, bool first, bool last);
  // first stage: int64 tokens [B, T] -> hidden [B, T, C]; middle: hidden -> hidden; last: -> logits [B, T, V].
  torch::Tensor forward(const torch::Tensor& x);
  // Split backward (zero-bubble schedules): every linear layer's weight gradient is deferred to
  // `store` (runtime/weight_grad.h); nullptr: ordinary backward.
  void deferWeightGradients(WeightGradStore* store);
  bool first, last;
  WeightGradStore* store = nullptr;
  torch::nn::Embedding tokEmb{nullptr}, posEmb{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm lnF{nullptr};
  torch::nn::Linear lmHead{nullptr};
};
TORCH_MODULE(StageModel);

// Mean token cross-entropy of logits [B, T, V] against targets [B, T].
torch::Tensor lmLoss(const torch::Tensor& logits, const torch::Tensor& targets);
// Checkpoints hold every parameter by its global name ("block3.qkv.weight"); a stage loads the
// ones it owns and fails naming any that is missing.
void saveCheckpoint(StageModel& model, const std::string& path);
void loadCheckpoint(StageModel& model, const std::string& path);

}  // namespace slowpipe::runtime
