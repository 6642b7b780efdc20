// diloco: the outer gradient (outer - local) in round 0 every H-th step, Nesterov momentum on the
// replicas' mean in OuterStep (see grad_sync.h).
#include "runtime/dp/grad_sync.h"
#include "runtime/dp/grad_syncs/flat.h"

namespace slowpipe::runtime {

namespace {
class Diloco : public GradientSync {
 public:
  Diloco(const RunSpec& spec, Runners runners) : spec_(spec), runners_(std::move(runners)) {
    torch::NoGradGuard guard;
    for (const auto& p : parametersOf(runners_)) flat::put(outer_, p);
    momentum_.assign(outer_.size(), 0.0f);
  }
  void pack(int, int64_t, std::vector<float>& buf) override {
    torch::NoGradGuard guard;
    buf.clear();
    for (auto& p : parametersOf(runners_)) flat::put(buf, p);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = outer_[i] - buf[i];
  }
  void unpack(int, int64_t, const std::vector<float>&) override {}  // OuterStep uses the mean
  // Nesterov momentum (torch.optim.SGD, nesterov=True) on the mean outer gradient.
  void outerStep(int64_t, const std::vector<float>& buf) override {
    torch::NoGradGuard guard;
    const float mu = static_cast<float>(spec_.dp.outerMomentum),
                lr = static_cast<float>(spec_.dp.outerLr);
    for (size_t i = 0; i < outer_.size(); ++i) {
      momentum_[i] = mu * momentum_[i] + buf[i];
      outer_[i] -= lr * (buf[i] + mu * momentum_[i]);
    }
    size_t at = 0;
    for (auto& p : parametersOf(runners_)) {
      torch::Tensor t = p.detach();
      flat::take(outer_, at, t);
    }
  }

 private:
  const RunSpec& spec_;
  Runners runners_;
  std::vector<float> outer_, momentum_;
};
}  // namespace

std::unique_ptr<GradientSync> makeDilocoSync(const RunSpec& spec, const GradientCompressor&,
                                             const Runners& runners, int) {
  return std::make_unique<Diloco>(spec, runners);
}

}  // namespace slowpipe::runtime
