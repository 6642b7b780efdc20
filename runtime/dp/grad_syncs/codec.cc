// codec: the gradients in round 0; their mean replaces them (see grad_sync.h).
#include "runtime/dp/grad_sync.h"
#include "runtime/dp/grad_syncs/flat.h"

namespace slowpipe::runtime {

namespace {
class MeanGradients : public GradientSync {
 public:
  explicit MeanGradients(Runners runners) : runners_(std::move(runners)) {}
  void pack(int, int64_t, std::vector<float>& buf) override {
    torch::NoGradGuard guard;
    flat::putGradients(buf, parametersOf(runners_));
  }
  void unpack(int, int64_t, const std::vector<float>& buf) override {
    torch::NoGradGuard guard;
    flat::takeGradients(buf, parametersOf(runners_));
  }

 private:
  Runners runners_;
};
}  // namespace

std::unique_ptr<GradientSync> makeMeanGradients(const RunSpec&, const GradientCompressor&,
                                                const Runners& runners, int) {
  return std::make_unique<MeanGradients>(runners);
}

}  // namespace slowpipe::runtime
