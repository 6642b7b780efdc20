// The quant codec written with libtorch tensor ops, as a PyTorch user would write it. It is the
// golden reference for tests (same payload bytes as QuantCodec, nearest rounding) and the baseline
// of `slowpipe bench codecs`. Only benches and tests include this header: it pulls in libtorch.
#pragma once

#include <torch/types.h>

#include "compression/quant.h"

namespace slowpipe::compression {

// Returns the payload (uint8 tensor) in exactly QuantCodec's format: fp32 scales then packed codes.
torch::Tensor torchOpsQuantEncode(const QuantOptions& opt, const torch::Tensor& x);
// Inverse of torchOpsQuantEncode; `shape` is the original tensor's shape.
torch::Tensor torchOpsQuantDecode(const QuantOptions& opt, const torch::Tensor& payload,
                                  const Shape& shape);

}  // namespace slowpipe::compression
