// The Codec interface: how a stage message (an fp32 tensor) becomes a payload and back.
//
// A codec sees raw fp32 memory plus a shape, never a torch::Tensor, so this library builds without
// libtorch. Stateless codecs (none, fp16, bf16, quant, topk) are pure functions of their input.
// Stateful codecs (acsgd, ef) are used as a *pair* of objects built from the same spec: the sender
// calls only encode(), the receiver only decode(); their states are required to stay bit-identical
// (see compression/acsgd.h for the protocol).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compression/bytes.h"

namespace slowpipe::compression {

using Shape = std::vector<int64_t>;

// Number of elements of a shape (1 for a scalar). Throws CodecError on negative or huge dims.
int64_t numelOf(const Shape& shape);
std::string shapeString(const Shape& shape);

enum class Direction : uint8_t { kForward = 0, kBackward = 1, kGradient = 2 };

// Wire identifiers of the codecs; stored in every frame header.
enum class CodecId : uint16_t {
  kNone = 1,
  kFp16 = 2,
  kBf16 = 3,
  kQuant = 4,
  kTopk = 5,
  kAcsgd = 6,
  kErrorFeedback = 7,
  kPlugin = 8,
  kHadamard = 10,
  kLowrank = 11,
  kTorchScript = 12  // 9: randk's, registered (compression/builtin.h)
};
// The name of a codec id: the enum's, a registered built-in's, or "unknown".
const char* codecName(CodecId id);
// Whether a frame may carry this codec id: one of the enum's or a registered built-in's.
bool knownCodecId(uint16_t id);
// "forward", "backward", "gradient".
const char* directionName(Direction d);

// What a codec may know about a message besides its values.
struct CodecContext {
  Direction direction = Direction::kForward;
  int64_t step = 0;
  int32_t epoch = 0;
  int32_t microBatch = 0;
  std::vector<int64_t> exampleIds;  // one per index of dim 0 (acsgd keys its buffers on these)
  std::string key;                  // stable tensor name (ef keys its residuals on this)
};

class Codec {
 public:
  virtual ~Codec() = default;
  virtual CodecId id() const = 0;
  // Canonical spec string; makeCodec(spec()) builds an equivalent codec.
  virtual std::string spec() const = 0;
  // Appends the payload for x (numelOf(shape) contiguous fp32 values) to out.
  virtual void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) = 0;
  // Decodes a payload of exactly `size` bytes into out (numelOf(shape) floats). Validates the
  // whole payload before writing state; throws CodecError naming what is wrong.
  virtual void decode(const uint8_t* payload, size_t size, const Shape& shape,
                      const CodecContext& ctx, float* out) = 0;
  // Digest of the state that the sender and the receiver copies *both* hold (acsgd's buffers m(x));
  // 0 for codecs without mirrored state. It must be equal on both ends after any sequence of
  // messages. State only one end has (ef's residual, kept by the sender) is not part of it.
  virtual uint64_t stateDigest() const { return 0; }
  // What the codec costs on a device, as JSON text (the keys of runtime
  // CompressionSpec::deviceCosts plus "source"): a plug-in's declaration
  // (slowpipe_codec_device_cost), or a built-in's derivation (lowrank: its matrix products' FLOPs).
  // "": nothing declared.
  virtual std::string deviceCost() const { return ""; }
  // An upper bound on the payload encode() writes for a message of `shape`: a receiver's message
  // limit (ZMQ_MAXMSGSIZE) is taken from it, and the conformance check fails a codec that writes
  // more. The default, 4 bytes per value + 4 KiB, holds for codecs that never expand fp32; codecs
  // that may (topk's indices, lowrank's basis, plug-ins) override it.
  virtual uint64_t maxPayloadBytes(const Shape& shape) const;
};

// "" if the codec has a device path (compression/cuda/device_codec.h: the CUDA build makes one for
// it), else why not, naming the codec: plug-ins, TorchScript codecs and the built-ins without a
// kernel run on the host (analytic GPU profiles cost them at their measured host speed).
std::string devicePathMissing(const Codec& c);

// Builds a codec from a spec string such as "quant:bits=4,scale=channel", "acsgd:bits=2",
// "ef(quant:bits=4)". Unknown names or parameters throw CodecError listing what is valid.
std::unique_ptr<Codec> makeCodec(const std::string& spec);
// The same for one end of one link: `instance` (e.g. "r0-fwd-send") names it, and codecs that own
// files (acsgd backing=mmap,path=F) use F.<instance>, so no two codecs ever share a file.
std::unique_ptr<Codec> makeCodec(const std::string& spec, const std::string& instance);
// Codecs that live outside this torch-free library (torchscript:..., compression/torchscript.h)
// join makeCodec here: `name:params` specs go to the factory registered under `name`. Programs
// linked with libtorch register theirs at start (registerTorchScriptCodec()).
using CodecFactory =
    std::function<std::unique_ptr<Codec>(const std::string& params, const std::string& instance)>;
void registerCodecFactory(const std::string& name, CodecFactory factory);
// Names accepted by makeCodec, for help texts.
std::vector<std::string> codecNames();

}  // namespace slowpipe::compression
