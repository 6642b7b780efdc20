// qadam:bits=4|8,bucket=B,warmup_steps=N (the AC-SGD reference's QuantizedAdam): exact gradients
// and torch's AdamW for N steps; then every step after Step one round carries each replica's
// momentum through the reference's quantizer (fp16 max-scale per bucket, zero-preserving fixed
// point, error feedback at each sender: workers and servers under sharded_ps), and OuterStep
// updates with the mean momentum (runtime/dp/grad_syncs/qadam.cc).
#include "runtime/dp/gradient_compressor.h"

namespace slowpipe::runtime {

namespace {
class Qadam : public GradientCompressor {
 public:
  Qadam(int bits, int bucket, int64_t warmup) : bits_(bits), bucket_(bucket), warmup_(warmup) {
    params_ = {{"bits", bits}, {"bucket", bucket}, {"warmup_steps", warmup}};
  }
  const char* name() const override { return "qadam"; }
  std::string messageCodec() const override {
    return "ef(quant:bits=" + std::to_string(bits_) +
           ",scale=group,group=" + std::to_string(bucket_) + ",levels=fixpoint)";
  }
  bool exactRound(int64_t step) const override { return step < warmup_; }
  int64_t afterStepFrom() const override { return warmup_; }
  int64_t warmupSteps() const override { return warmup_; }

 private:
  int bits_, bucket_;
  int64_t warmup_;
};
}  // namespace

std::unique_ptr<GradientCompressor> parseQadam(const DpSpec& dp) {
  const auto p = compressorParams(dp.codec, "qadam", {"bits", "bucket", "warmup_steps"});
  const int bits = static_cast<int>(paramInt(p, "qadam", "bits", 8, 1, 8));
  if (bits != 4 && bits != 8)
    throw std::invalid_argument("qadam: bits=" + std::to_string(bits) + "; expected 4 or 8");
  return std::make_unique<Qadam>(bits,
                                 static_cast<int>(paramInt(p, "qadam", "bucket", 512, 1, 1 << 24)),
                                 paramInt(p, "qadam", "warmup_steps", 0, 0, int64_t{1} << 40));
}

}  // namespace slowpipe::runtime
