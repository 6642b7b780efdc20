// qadam: exact gradients (the codec sync's rounds, uncompressed) during the warm-up; then Step
// only clips and forms the momentum, round 0 averages it, OuterStep updates (see grad_sync.h).
#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>

#include "runtime/dp/grad_sync.h"
#include "runtime/dp/grad_syncs/flat.h"

namespace slowpipe::runtime {

namespace {

// torch's optimizer state of a parameter: keyed by its TensorImpl printed as a string in libtorch
// 1.x (c10::guts::to_string, an ostream of the pointer), by the pointer itself in 2.x.
template <typename Map>
auto findState(Map& state, const torch::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;
    os << p.unsafeGetTensorImpl();
    return state.find(os.str());
  } else {
    return state.find(static_cast<Key>(p.unsafeGetTensorImpl()));
  }
}

class Qadam : public GradientSync {
 public:
  Qadam(const RunSpec& spec, StageRunner& runner, int64_t warmup)
      : spec_(spec), runner_(runner), warmup_(warmup) {}

  // The warm-up's rounds carry the gradients (exactly: GradientCompressor::exactRound), then the
  // momentum.
  void pack(int, int64_t step, std::vector<float>& buf) override {
    torch::NoGradGuard guard;
    if (replacesStep(step)) {
      buf = momentumLocal_;
      return;
    }
    flat::putGradients(buf, runner_.model()->parameters());
  }
  void unpack(int, int64_t step, const std::vector<float>& buf) override {
    if (replacesStep(step)) return;  // OuterStep uses the mean momentum
    torch::NoGradGuard guard;
    flat::takeGradients(buf, runner_.model()->parameters());
  }
  bool replacesStep(int64_t step) const override { return step >= warmup_; }

  // Clips like StageRunner::step, then forms the local momentum with this replica's gradient.
  void clipAndMomentum(double globalNorm) override {
    torch::NoGradGuard guard;
    auto ps = runner_.model()->parameters();
    if (expAvg_.empty()) {  // the end of the warm-up (or step 0): take over torch's AdamW state
      auto& state = runner_.optimizer().state();
      size_t found = 0;
      for (auto& p : ps) {
        const auto it = findState(state, p);
        found += it != state.end();
        if (it == state.end()) {
          expAvg_.push_back(torch::zeros_like(p));
          expAvgSq_.push_back(torch::zeros_like(p));
        } else {
          auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
          adamStep_ = s.step();
          expAvg_.push_back(s.exp_avg().clone());
          expAvgSq_.push_back(s.exp_avg_sq().clone());
        }
      }
      // AdamW has stepped these parameters: a lookup that finds none of them is a key mismatch.
      if (!state.empty() && found == 0)
        throw std::logic_error("qadam: none of the stage's " + std::to_string(ps.size()) +
                               " parameters found in AdamW's state (its key format?)");
    }
    const double clip = spec_.training.clipNorm;
    const double coef =
        clip > 0 && clip / (globalNorm + 1e-6) < 1.0 ? clip / (globalNorm + 1e-6) : 1.0;
    const double b1 = 0.9;  // torch's AdamW defaults, as StageRunner's optimizer
    momentumLocal_.clear();
    for (size_t i = 0; i < ps.size(); ++i)
      flat::put(momentumLocal_, expAvg_[i] * b1 + flat::gradOf(ps[i]) * ((1 - b1) * coef));
  }

  void outerStep(int64_t step, const std::vector<float>& buf) override {
    torch::NoGradGuard guard;
    auto ps = runner_.model()->parameters();
    // AdamW (torch 1.13's arithmetic) with the replicas' mean momentum m_t; v follows the mean
    // gradient that m_t implies, g_t = (m_t - b1 m_{t-1}) / (1 - b1), which every replica
    // computes from the same decoded bytes. (A v frozen at the end of the warm-up diverged: with a
    // warm-up of 0 or 1 step v is 0 or one gradient's square, and the quantization error of a
    // small momentum entry divided by its tiny sqrt(v) + 1e-8 overflowed to inf at step 4.) With
    // an exact codec this is torch's AdamW on the mean clipped gradient.
    ++adamStep_;
    const double lr = runner_.learningRate(step), wd = spec_.training.weightDecay, b1 = 0.9,
                 b2 = 0.999, eps = 1e-8;
    const double bc1 = 1 - std::pow(b1, static_cast<double>(adamStep_));
    const double bc2Sqrt = std::sqrt(1 - std::pow(b2, static_cast<double>(adamStep_)));
    size_t at = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      const torch::Tensor previous = expAvg_[i].clone();
      flat::take(buf, at, expAvg_[i]);
      const torch::Tensor g = (expAvg_[i] - previous * b1) / (1 - b1);
      expAvgSq_[i].mul_(b2).addcmul_(g, g, 1 - b2);
      ps[i].mul_(1 - lr * wd);
      const torch::Tensor denom = (expAvgSq_[i].sqrt() / bc2Sqrt).add_(eps);
      ps[i].addcdiv_(expAvg_[i], denom, -lr / bc1);
      if (ps[i].grad().defined()) ps[i].mutable_grad().zero_();
    }
  }

 private:
  const RunSpec& spec_;
  StageRunner& runner_;
  int64_t warmup_;
  // Adam state taken over from torch's AdamW at the end of the warm-up
  std::vector<torch::Tensor> expAvg_, expAvgSq_;
  int64_t adamStep_ = 0;
  std::vector<float> momentumLocal_;
};

}  // namespace

std::unique_ptr<GradientSync> makeQadamSync(const RunSpec& spec, const GradientCompressor& c,
                                            const Runners& runners, int) {
  // Its Adam state is one runner's optimizer's (the spec check refuses it with model chunks).
  if (runners.size() != 1)
    throw std::invalid_argument("qadam synchronises one model chunk per rank, not " +
                                std::to_string(runners.size()));
  return std::make_unique<Qadam>(spec, *runners[0], c.param("warmup_steps"));
}

}  // namespace slowpipe::runtime
