// WeightGradStore and the split linear (see weight_grad.h).
#include "runtime/exec/weight_grad.h"

#include <stdexcept>

namespace slowpipe::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SplitLinearFunction : torch::autograd::Function<SplitLinearFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               int64_t store, int64_t mb) {
    ctx->save_for_backward({x, weight, bias});
    ctx->saved_data["store"] = store;
    ctx->saved_data["mb"] = mb;
    return torch::nn::functional::linear(x, weight, bias.numel() > 0 ? bias : torch::Tensor());
  }
  static variable_list backward(AutogradContext* ctx, variable_list gradOutputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& bias = saved[2];
    const torch::Tensor dy = gradOutputs[0];
    auto* store = reinterpret_cast<WeightGradStore*>(ctx->saved_data["store"].toInt());
    store->defer(static_cast<int>(ctx->saved_data["mb"].toInt()), x, dy, weight,
                 bias.numel() > 0 ? bias : torch::Tensor());
    // dX = dY W; the weight and bias get theirs in BackwardWeight (undefined here: nothing
    // accumulates).
    return {dy.matmul(weight), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

void accumulate(torch::Tensor& param, const torch::Tensor& grad) {
  torch::Tensor& g = param.mutable_grad();
  if (g.defined())
    g.add_(grad);
  else
    g = grad;
}

}  // namespace

void WeightGradStore::defer(int mb, torch::Tensor input, torch::Tensor gradOutput,
                            torch::Tensor weight, torch::Tensor bias) {
  std::lock_guard<std::mutex> lock(mutex_);
  items_[mb].push_back(
      {std::move(input), std::move(gradOutput), std::move(weight), std::move(bias)});
}

void WeightGradStore::runWeightGradients(int mb) {
  std::vector<Item> items;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = items_.find(mb);
    if (it == items_.end())
      throw std::logic_error("BackwardWeight of micro-batch " + std::to_string(mb) +
                             " before its BackwardInput");
    items = std::move(it->second);
    items_.erase(it);
  }
  torch::NoGradGuard guard;
  for (Item& i : items) {
    const int64_t out = i.gradOutput.size(-1), in = i.input.size(-1);
    const torch::Tensor dy = i.gradOutput.reshape({-1, out}), x = i.input.reshape({-1, in});
    torch::Tensor weight = i.weight;
    accumulate(weight, dy.t().mm(x));
    if (i.bias.defined()) {
      torch::Tensor bias = i.bias;
      accumulate(bias, dy.sum(0));
    }
  }
}

torch::Tensor splitLinear(torch::nn::Linear& layer, const torch::Tensor& x,
                          WeightGradStore* store) {
  if (!store) return layer->forward(x);
  // No bias (the LM head): an empty stand-in (autograd's bookkeeping needs a defined tensor).
  const torch::Tensor bias =
      layer->bias.defined() ? layer->bias : torch::empty({0}, layer->weight.options());
  return SplitLinearFunction::apply(x, layer->weight, bias, reinterpret_cast<int64_t>(store),
                                    store->microBatch());
}

}  // namespace slowpipe::runtime
