// Split backward for zero-bubble schedules (Qi et al. 2023): a Linear layer's backward is two
// parts, the input gradient dX = dY W (needed at once by the previous layer and stage) and the
// weight gradient dW = dY^T X, db = sum dY (needed only by the optimizer step). With a
// WeightGradStore attached, a model's linear layers run through splitLinear: their autograd
// backward (BackwardInput) returns dX and files (X, dY) under the micro-batch of the forward that
// built them; runWeightGradients(mb) (BackwardWeight) computes and accumulates their dW and db
// later. Other parameters (LayerNorms, embeddings: a few percent of the work) get their gradients
// in the BackwardInput pass, as autograd computes them. BackwardInput(mb) + BackwardWeight(mb)
// compute the gradients one Backward(mb) computes (equal to rounding: dW is one matmul over the
// flattened rows).
#pragma once

#include <torch/torch.h>

#include <map>
#include <mutex>
#include <vector>

namespace slowpipe::runtime {

class WeightGradStore {
 public:
  // The micro-batch whose forward runs next (its linears' deferred work is filed under it).
  void setMicroBatch(int mb) { mb_ = mb; }
  int microBatch() const { return mb_; }
  // Called from the autograd backward (any thread on a device).
  void defer(int mb, torch::Tensor input, torch::Tensor gradOutput, torch::Tensor weight,
             torch::Tensor bias);
  // Computes and accumulates the weight (and bias) gradients filed under mb, in the order they
  // were filed, and forgets them. Throws if mb has none (a BackwardWeight before its
  // BackwardInput).
  void runWeightGradients(int mb);

 private:
  struct Item {
    torch::Tensor input, gradOutput, weight, bias;
  };
  int mb_ = -1;
  mutable std::mutex mutex_;
  std::map<int, std::vector<Item>> items_;
};

// y = x W^T + b, whose backward defers dW and db to `store` (nullptr: an ordinary linear).
torch::Tensor splitLinear(torch::nn::Linear& layer, const torch::Tensor& x, WeightGradStore* store);

}  // namespace slowpipe::runtime
