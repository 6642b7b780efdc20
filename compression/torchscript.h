// torchscript:path=codec.pt[,key=value...]: a codec written in Python with PyTorch, scripted and
// saved (torch.jit.script(m).save(path)), loaded here with libtorch. Sender and receiver each load
// their own copy; state lives in the module's attributes.
//
// The module's contract (`slowpipe codec new NAME --lang torchscript` writes a complete skeleton;
// examples/codecs/torchscript/make_codec.py is an example of the older form):
//   encode(self, x: Tensor, example_ids: Tensor, epoch: int, step: int, direction: int,
//   micro_batch: int,
//          key: str) -> Tensor
//       x: float32 of the message's shape (a copy; the module may change it); example_ids: int64,
//       one per row of dim 0 (may be empty); direction 0 forward, 1 backward, 2 data-parallel; key:
//       the stable tensor name ("fwd/mb3", ...), as plug-ins get them. Returns the payload: a uint8
//       tensor (any shape, taken in row-major order). The older form without direction,
//       micro_batch and key (both methods alike) is accepted too.
//   decode(self, payload: Tensor, shape: List[int], example_ids: Tensor, epoch: int, step: int,
//          direction: int, micro_batch: int, key: str) -> Tensor
//       payload: 1-D uint8. Returns float32 with numel(shape) values. A malformed payload must
//       raise (it is reported as a codec error naming the module), never return garbage.
//   configure(self, params: Dict[str, str]) -> None           optional; receives the spec's
//       key=value parameters (raise on ones it does not know). Without it, parameters are an error.
//   state_digest(self) -> int                                  optional; a hash of the state both
//       ends hold (equal on sender and receiver after every message), like acsgd's buffers.
// The wrapper checks what comes back (dtype, size, finite values) and turns every exception of the
// module into a CodecError that names the file and the method. It runs single-threaded ops like the
// worker (torch::set_num_threads is the caller's).
#pragma once

#include <memory>
#include <string>

#include "compression/codec.h"

namespace slowpipe::compression {

std::unique_ptr<Codec> makeTorchScriptCodec(const std::string& path, const std::string& params);

// Makes makeCodec() accept torchscript:... in this program (idempotent).
void registerTorchScriptCodec();

}  // namespace slowpipe::compression
