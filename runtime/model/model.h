// Decoders built per pipeline stage: slowpipe's GPT-2-style model (token + position embeddings on
// the first stage, pre-LayerNorm blocks with causal self-attention and a GELU MLP, final LayerNorm
// and LM head on the last), GPT-2 itself and Llama-family models (model.family; see BlockImpl).
// Every component is initialised from its own seed (model.seed, component index), so a stage's
// parameters are identical whatever the partition: a 4-stage run starts from exactly the weights of
// a 1-stage run.
#pragma once

#include <torch/torch.h>

#include <string>

#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

class WeightGradStore;  // runtime/exec/weight_grad.h

// x * rsqrt(mean(x^2) + eps) * weight, in fp32 (Llama's RMSNorm).
struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(int width, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

// One decoder block of the spec's family:
//   builtin / gpt2: pre-LayerNorm, fused qkv, causal attention, MLP fc -> GELU (gpt2: gelu_new) ->
//   out; llama: pre-RMSNorm, q/k/v/o with rotary embeddings (rope_theta) and grouped-query
//   attention
//          (kv heads repeated), SwiGLU MLP down(silu(gate(x)) * up(x)).
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const ModelSpec& m);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
  RMSNorm rms1{nullptr}, rms2{nullptr};
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr}, gate{nullptr}, up{nullptr},
      down{nullptr};
  int heads, kvHeads;
  double ropeTheta;
  bool llama, geluTanh;
  WeightGradStore* store = nullptr;  // set: the linears' weight gradients are deferred to it

 private:
  torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          int64_t T);
};
TORCH_MODULE(Block);

struct StageModelImpl : torch::nn::Module {
  StageModelImpl(const ModelSpec& m, int layerBegin, int layerEnd, bool first, bool last);
  // first stage: int64 tokens [B, T] -> hidden [B, T, C]; middle: hidden -> hidden; last: -> logits
  // [B, T, V].
  torch::Tensor forward(const torch::Tensor& x);
  // Split backward (zero-bubble schedules): every linear layer's weight gradient is deferred to
  // `store` (runtime/exec/weight_grad.h); nullptr: ordinary backward.
  void deferWeightGradients(WeightGradStore* store);
  bool first, last;
  WeightGradStore* store = nullptr;
  torch::nn::Embedding tokEmb{nullptr}, posEmb{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm lnF{nullptr};
  RMSNorm rmsF{nullptr};
  torch::nn::Linear lmHead{nullptr};
};
TORCH_MODULE(StageModel);

// A stage of model.checkpoint's model with its weights: every parameter the stage owns read from
// the Hugging Face tensors (GPT-2's Conv1D weights transposed; a tied head from the embedding),
// shapes checked; errors name the folder, the tensor and the shape expected.
void loadHfWeights(StageModelImpl& model, const ModelSpec& m, int layerBegin, int layerEnd);
// The Hugging Face name of a parameter of ours ("block3.qkv.weight" -> "h.3.attn.c_attn.weight",
// with `prefix` "transformer." where the checkpoint has it) and whether it is stored transposed.
std::pair<std::string, bool> hfNameOf(const ModelSpec& m, const std::string& ours,
                                      const std::string& prefix);

// Mean token cross-entropy of logits [B, T, V] against targets [B, T].
torch::Tensor lmLoss(const torch::Tensor& logits, const torch::Tensor& targets);
// Checkpoints hold every parameter by its global name ("block3.qkv.weight"); a stage loads the
// ones it owns and fails naming any that is missing.
void saveCheckpoint(StageModel& model, const std::string& path);
void loadCheckpoint(StageModel& model, const std::string& path);

// Writes virtual stage `v` of `ranges` (its layers) of a Hugging Face model into `dir`: its shard
// model-<v+1>-of-<V>.safetensors (F32, the checkpoint's names, GPT-2's Conv1D weights transposed
// back; a tied head is the first stage's embedding, so the last stage's copy is not written), and
// for v = 0 also config.json (model.checkpoint's) and model.safetensors.index.json naming every
// stage's shard.
void saveHfStage(StageModelImpl& model, const ModelSpec& m, const std::string& dir, int v,
                 const std::vector<std::pair<int, int>>& ranges);

}  // namespace slowpipe::runtime
