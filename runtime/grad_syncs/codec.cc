// codec: the gradients in round 0; their mean replaces them (see grad_sync.h).
#include "runtime/grad_sync.h"
#include "runtime/grad_syncs/flat.h"

namespace slowpipe::runtime {

namespace {
class MeanGradients : public GradientSync {
 public:
  explicit MeanGradients(StageRunner& runner) : runner_(runner) {}
  void pack(int, int64_t, std::vector<float>& buf) override {
    torch::NoGradGuard guard;
    flat::putGradients(buf, runner_.model()->parameters());
  }
  void unpack(int, int64_t, const std::vector<float>& buf) override {
    torch::NoGradGuard guard;
    flat::takeGradients(buf, runner_.model()->parameters());
  }

 private:
  StageRunner& runner_;
};
}  // namespace

std::unique_ptr<GradientSync> makeMeanGradients(const RunSpec&, const GradientCompressor&, StageRunner& runner, int) {
  return std::make_unique<MeanGradients>(runner);
}

}  // namespace slowpipe::runtime
