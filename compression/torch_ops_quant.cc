// libtorch-ops reference of the quantizer (see quant.h for the definition it follows).
#include "compression/torch_ops_quant.h"

#include <torch/torch.h>

namespace slowpipe::compression {
namespace {

// x viewed as [groups, cols] with one scale per row (group mode) or [rows, channels] with one
// scale per column (channel mode). Returns m with a shape that broadcasts against that view.
torch::Tensor scaleView(const QuantOptions& opt, const torch::Tensor& x, torch::Tensor* view) {
  const int64_t n = x.numel();
  if (opt.scale == QuantOptions::Scale::kChannel) {
    const int64_t c = x.dim() == 0 ? 1 : x.size(-1);
    *view = x.reshape({-1, c});
    return view->abs().amax(0, /*keepdim=*/true);
  }
  const int64_t groups = (n + opt.group - 1) / opt.group;
  *view = torch::constant_pad_nd(x.reshape({-1}), {0, groups * opt.group - n})
              .reshape({groups, opt.group});
  return view->abs().amax(1, /*keepdim=*/true);
}

torch::Tensor packCodes(const torch::Tensor& codes, int bits) {
  const int64_t n = codes.numel();
  const int64_t padded = (n + 7) / 8 * 8;
  auto c = torch::constant_pad_nd(codes.reshape({-1}), {0, padded - n}).to(torch::kInt32);
  if (8 % bits == 0) {  // whole codes per byte: shift and add
    const int per = 8 / bits;
    auto shifts = torch::arange(per, torch::kInt32).mul(bits);
    auto bytes = c.reshape({-1, per}).bitwise_left_shift(shifts).sum(1);
    return bytes.to(torch::kUInt8).narrow(0, 0, (n * bits + 7) / 8);
  }
  // General widths: expand to bits, regroup by 8, weight by powers of two.
  auto bitIdx = torch::arange(bits, torch::kInt32);
  auto stream = c.unsqueeze(1).bitwise_right_shift(bitIdx).bitwise_and(1).reshape({-1, 8});
  auto weights = torch::arange(8, torch::kInt32)
                     .mul(0)
                     .add(1)
                     .bitwise_left_shift(torch::arange(8, torch::kInt32));
  return stream.mul(weights).sum(1).to(torch::kUInt8).narrow(0, 0, (n * bits + 7) / 8);
}

torch::Tensor unpackCodes(const torch::Tensor& packed, int64_t n, int bits) {
  const int64_t padded = (n + 7) / 8 * 8;
  auto b =
      torch::constant_pad_nd(packed.to(torch::kInt32), {0, padded * bits / 8 - packed.numel()});
  if (8 % bits == 0) {
    const int per = 8 / bits;
    auto shifts = torch::arange(per, torch::kInt32).mul(bits);
    auto codes = b.unsqueeze(1).bitwise_right_shift(shifts).bitwise_and((1 << bits) - 1);
    return codes.reshape({-1}).narrow(0, 0, n);
  }
  auto stream = b.unsqueeze(1).bitwise_right_shift(torch::arange(8, torch::kInt32)).bitwise_and(1);
  auto weights =
      torch::ones({bits}, torch::kInt32).bitwise_left_shift(torch::arange(bits, torch::kInt32));
  return stream.reshape({-1, bits}).mul(weights).sum(1).narrow(0, 0, n);
}

}  // namespace

torch::Tensor torchOpsQuantEncode(const QuantOptions& opt, const torch::Tensor& x) {
  const int levels = 1 << opt.bits;
  torch::Tensor view;
  const auto m = scaleView(opt, x.to(torch::kFloat32), &view);
  const auto step = m.mul(2.0).div(static_cast<double>(levels - 1));
  const auto inv = torch::where(step > 0, step.reciprocal(), torch::zeros_like(step));
  const auto codes =
      view.add(m).mul(inv).add(0.5).clamp(0.0, levels - 0.5).floor().to(torch::kUInt8);
  const auto scales = m.reshape({-1}).contiguous();
  const auto scaleBytes = torch::from_blob(scales.data_ptr(), {scales.numel() * 4}, torch::kUInt8);
  return torch::cat({scaleBytes, packCodes(codes.reshape({-1}).narrow(0, 0, x.numel()), opt.bits)});
}

torch::Tensor torchOpsQuantDecode(const QuantOptions& opt, const torch::Tensor& payload,
                                  const Shape& shape) {
  const int levels = 1 << opt.bits;
  const int64_t n = numelOf(shape), groups = quantScaleCount(opt, shape);
  const auto m = payload.narrow(0, 0, 4 * groups).clone().view(torch::kFloat32);
  const auto step = m.mul(2.0).div(static_cast<double>(levels - 1));
  const auto codes =
      unpackCodes(payload.narrow(0, 4 * groups, payload.numel() - 4 * groups), n, opt.bits)
          .to(torch::kFloat32);
  if (opt.scale == QuantOptions::Scale::kChannel) {
    const int64_t c = shape.empty() ? 1 : shape.back();
    return codes.reshape({-1, c}).mul(step).sub(m).reshape(shape);
  }
  auto padded =
      torch::constant_pad_nd(codes, {0, groups * opt.group - n}).reshape({groups, opt.group});
  return padded.mul(step.unsqueeze(1))
      .sub(m.unsqueeze(1))
      .reshape({-1})
      .narrow(0, 0, n)
      .reshape(shape);
}

FixpointReference referenceFixpointCompress(const torch::Tensor& xIn, int bits) {
  const int64_t fbits = bits - 1;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d + 1 < xIn.dim(); ++d) dims.push_back(d);
  torch::Tensor scale = dims.empty() ? xIn.abs() : xIn.abs().amax(dims, /*keepdim=*/true);
  scale = scale.to(torch::kHalf);
  torch::Tensor x = xIn / (scale + 1e-6);
  x = x.ldexp(torch::tensor(fbits));
  const int64_t clipMin = -(int64_t{1} << fbits), clipMax = (int64_t{1} << fbits) - 1;
  x = x.round();
  x = x.clip(clipMin, clipMax);
  x = x - clipMin;
  return {x.to(torch::kUInt8), scale};
}

torch::Tensor referenceFixpointDecompress(const FixpointReference& c, int bits) {
  const int64_t fbits = bits - 1;
  const int64_t clipMin = -(int64_t{1} << fbits), clipMax = (int64_t{1} << fbits) - 1;
  torch::Tensor x = c.codes.to(torch::kFloat32) + clipMin;
  x = x / (clipMax + 1) * c.scale;
  return x;
}

}  // namespace slowpipe::compression
