// diloco (dp.local_steps H > 1): inner AdamW steps; every H-th step after Step one round carries
// the outer gradient (outer - local) through the plain codec dp.codec, OuterStep applies Nesterov
// momentum to the replicas' mean (runtime/dp/grad_syncs/diloco.cc).
#include "runtime/dp/gradient_compressor.h"

namespace slowpipe::runtime {

namespace {
struct Diloco : GradientCompressor {
  explicit Diloco(const std::string& codec) { useCodec(codec); }
  const char* name() const override { return "diloco"; }
  int64_t afterStepFrom() const override { return 0; }  // the rounds follow Step
};
}  // namespace

std::unique_ptr<GradientCompressor> parseDiloco(const DpSpec& dp) {
  return std::make_unique<Diloco>(dp.codec);
}

}  // namespace slowpipe::runtime
