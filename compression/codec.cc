// Shape helpers and codec names.
#include "compression/codec.h"

#include "compression/builtin.h"

#include "compression/error.h"

namespace slowpipe::compression {

const char* directionName(Direction d) {
  switch (d) {
    case Direction::kForward:
      return "forward";
    case Direction::kBackward:
      return "backward";
    case Direction::kGradient:
      return "gradient";
  }
  return "?";
}

uint64_t Codec::maxPayloadBytes(const Shape& shape) const {
  return 4 * static_cast<uint64_t>(numelOf(shape)) + 4096;
}

int64_t numelOf(const Shape& shape) {
  constexpr int64_t kMax = int64_t{1} << 40;  // 4 TiB of fp32: anything larger is a corrupt shape
  // Every dimension is bounded on its own, and so is the product of the non-zero ones: a zero
  // dimension must not hide an absurd one ([0, 2^62] is a corrupt shape, not an empty tensor).
  int64_t n = 1, nonzero = 1;
  for (int64_t d : shape) {
    SP_REQUIRE(d >= 0, "shape " + shapeString(shape) + " has a negative dimension");
    SP_REQUIRE(d <= kMax && (d == 0 || nonzero <= kMax / d),
               "shape " + shapeString(shape) + " has more than 2^40 elements");
    if (d > 0) nonzero *= d;
    n *= d;
  }
  return n;
}

std::string shapeString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {
const char* enumName(CodecId id) {
  switch (id) {
    case CodecId::kNone:
      return "none";
    case CodecId::kFp16:
      return "fp16";
    case CodecId::kBf16:
      return "bf16";
    case CodecId::kQuant:
      return "quant";
    case CodecId::kTopk:
      return "topk";
    case CodecId::kAcsgd:
      return "acsgd";
    case CodecId::kErrorFeedback:
      return "ef";
    case CodecId::kPlugin:
      return "plugin";
    case CodecId::kLowrank:
      return "lowrank";
    case CodecId::kTorchScript:
      return "torchscript";
    case CodecId::kHadamard:
      return "hadamard";
  }
  return "unknown";
}
}  // namespace

bool isEnumCodecId(uint16_t id) {
  return std::string(enumName(static_cast<CodecId>(id))) != "unknown";
}

const char* codecName(CodecId id) {
  if (const BuiltinCodec* b = builtinCodecById(static_cast<uint16_t>(id))) return b->name.c_str();
  return enumName(id);
}

bool knownCodecId(uint16_t id) { return isEnumCodecId(id) || builtinCodecById(id) != nullptr; }

}  // namespace slowpipe::compression
