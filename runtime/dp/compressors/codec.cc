// codec: dp.codec is a plain codec spec (any, ef(...) included): each step's gradients, one round,
// averaged before GradNorm.
#include "runtime/dp/gradient_compressor.h"

namespace slowpipe::runtime {

namespace {
struct CodecCompressor : GradientCompressor {
  explicit CodecCompressor(const std::string& codec) { useCodec(codec); }
  const char* name() const override { return "codec"; }
};
}  // namespace

std::unique_ptr<GradientCompressor> parseCodecCompressor(const DpSpec& dp) {
  return std::make_unique<CodecCompressor>(dp.codec);
}

}  // namespace slowpipe::runtime
