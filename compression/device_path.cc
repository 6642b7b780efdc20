// Which codecs have a device path (compression/cuda/device_codec.h): one answer for the CUDA
// build, which refuses the others, and for analytic GPU profiles, which cost the others on the
// host.
#include "compression/acsgd.h"
#include "compression/builtin.h"
#include "compression/codec.h"
#include "compression/quant.h"

namespace slowpipe::compression {

std::string devicePathMissing(const Codec& c) {
  switch (c.id()) {
    case CodecId::kNone:
    case CodecId::kFp16:
    case CodecId::kBf16:
    case CodecId::kQuant:
    case CodecId::kTopk:
      return "";
    case CodecId::kAcsgd: {
      const QuantOptions& q = static_cast<const AcsgdCodec&>(c).options().quant;
      if (q.scale == QuantOptions::Scale::kChannel && q.round == QuantOptions::Round::kNearest)
        return "";
      return "codec '" + c.spec() +
             "' has no device path: acsgd runs on a device with scale=channel and round=nearest "
             "only";
    }
    default: {
      const BuiltinCodec* b = builtinCodecById(static_cast<uint16_t>(c.id()));
      if (b && b->devicePath) return "";
      std::string onDevice = "none, fp16, bf16, quant, acsgd (scale=channel, round=nearest), topk";
      for (const BuiltinCodec& r : builtinCodecs())
        if (r.devicePath) onDevice += ", " + r.name;
      return "codec '" + c.spec() + "' has no device path (" + codecName(c.id()) +
             " runs on the host); on a device: " + onDevice;
    }
  }
}

}  // namespace slowpipe::compression
