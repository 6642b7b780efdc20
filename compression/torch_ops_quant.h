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

// Transcription of the AC-SGD reference quantizer (DS3Lab AC-SGD, compress/fixpoint.py,
// _compress_nbits with scale_method='max' and _decompress_nbits) into libtorch ops, line by line:
//   fbits = bits - 1; scale = x.abs().amax(scale_dims, keepdims=True); scale = scale.half()
//   x = x / (scale + 1e-6); x = x.ldexp(tensor(fbits)); x = x.round(); x = x.clip(-2^f, 2^f - 1)
//   codes = (x - clip_min).to(uint8);  decode: (codes.float() + clip_min) / (clip_max + 1) * scale
// scale_dims = every dim but the last (the reference's (0, 1) for [batch, seq, hidden]).
struct FixpointReference {
  torch::Tensor codes;  // uint8, q + 2^(bits-1), x's shape
  torch::Tensor scale;  // fp16, shape [1, ..., 1, hidden]
};
FixpointReference referenceFixpointCompress(const torch::Tensor& x, int bits);
torch::Tensor referenceFixpointDecompress(const FixpointReference& c, int bits);

}  // namespace slowpipe::compression
