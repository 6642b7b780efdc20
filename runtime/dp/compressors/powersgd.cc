// powersgd:rank=r (Vogels et al. 2019): two rounds per step, P = (G+E)Q of every matrix with
// min(n, m) > r plus the other parameters' gradients (round 0), then Q = (G+E)^T P (round 1); the
// factors travel exactly (runtime/dp/grad_syncs/powersgd.cc).
#include <algorithm>

#include "runtime/dp/gradient_compressor.h"

namespace slowpipe::runtime {

namespace {
class PowerSgd : public GradientCompressor {
 public:
  explicit PowerSgd(int rank) : rank_(rank) { params_["rank"] = rank; }
  const char* name() const override { return "powersgd"; }
  int rounds() const override { return 2; }
  std::string messageCodec() const override { return "none"; }
  int64_t roundValues(const std::vector<std::vector<int64_t>>& shapes, int round) const override {
    int64_t n = 0;
    for (const auto& p : shapes) {
      if (p.size() == 2 && std::min(p[0], p[1]) > rank_) {
        n += (round == 0 ? p[0] : p[1]) * rank_;
      } else if (round == 0) {
        int64_t numel = 1;
        for (int64_t d : p) numel *= d;
        n += numel;
      }
    }
    return n;
  }

 private:
  int rank_;
};
}  // namespace

std::unique_ptr<GradientCompressor> parsePowerSgd(const DpSpec& dp) {
  const auto p = compressorParams(dp.codec, "powersgd", {"rank"});
  return std::make_unique<PowerSgd>(
      static_cast<int>(paramInt(p, "powersgd", "rank", 4, 1, 1 << 16)));
}

}  // namespace slowpipe::runtime
