// Helpers of the GradientSync files (runtime/dp/grad_syncs/): a stage's tensors in and out of a
// round's flat buffer.
#pragma once

#include <torch/torch.h>

#include <stdexcept>
#include <vector>

namespace slowpipe::runtime::flat {

// Appends t's values to buf.
inline void put(std::vector<float>& buf, const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  const float* p = c.data_ptr<float>();
  buf.insert(buf.end(), p, p + c.numel());
}

// t = buf[at, at + numel), at advanced.
inline void take(const std::vector<float>& buf, size_t& at, torch::Tensor& t) {
  if (at + static_cast<size_t>(t.numel()) > buf.size())
    throw std::logic_error("dp: flat buffer shorter than its parameters");
  t.copy_(torch::from_blob(const_cast<float*>(buf.data() + at), t.sizes(), torch::kFloat32));
  at += static_cast<size_t>(t.numel());
}

// The parameter's gradient (zeros if it has none yet).
inline torch::Tensor gradOf(torch::Tensor& p) {
  if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  return p.grad();
}

// buf = every parameter's gradient, in order.
inline void putGradients(std::vector<float>& buf, std::vector<torch::Tensor> params) {
  buf.clear();
  for (auto& p : params) put(buf, gradOf(p));
}

// Every parameter's gradient = its part of buf.
inline void takeGradients(const std::vector<float>& buf, std::vector<torch::Tensor> params) {
  size_t at = 0;
  for (auto& p : params) {
    torch::Tensor g = gradOf(p);
    take(buf, at, g);
  }
}

}  // namespace slowpipe::runtime::flat
