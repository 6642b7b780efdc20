// GradientSync (see grad_sync.h).
#include "runtime/grad_sync.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace slowpipe::runtime {

namespace {

using Kind = GradientCompressor::Kind;

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

// Appends t's values to buf.
void put(std::vector<float>& buf, const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  const float* p = c.data_ptr<float>();
  buf.insert(buf.end(), p, p + c.numel());
}

// t = buf[at, at + numel), at advanced.
void take(const std::vector<float>& buf, size_t& at, torch::Tensor& t) {
  if (at + static_cast<size_t>(t.numel()) > buf.size()) throw std::logic_error("dp: flat buffer shorter than its parameters");
  t.copy_(torch::from_blob(const_cast<float*>(buf.data() + at), t.sizes(), torch::kFloat32));
  at += static_cast<size_t>(t.numel());
}

torch::Tensor gradOf(torch::Tensor& p) {
  if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  return p.grad();
}

}  // namespace

GradientSync::GradientSync(const RunSpec& spec, StageRunner& runner, int stage)
    : spec_(spec), runner_(runner), gc_(parseGradientCompressor(spec.dp.codec)), stage_(stage) {
  torch::NoGradGuard guard;
  const auto ps = params();
  if (spec.dp.localSteps > 1) {
    for (const auto& p : ps) put(outer_, p);
    momentum_.assign(outer_.size(), 0.0f);
  }
  if (gc_.kind == Kind::kPowerSgd) {
    // Q of each matrix parameter from a generator seeded by (training.seed, stage, index): the
    // same on every replica of the stage.
    for (size_t i = 0; i < ps.size(); ++i) {
      if (ps[i].dim() != 2 || std::min(ps[i].size(0), ps[i].size(1)) <= gc_.rank) {
        q_.emplace_back();
        err_.emplace_back();
        continue;
      }
      auto gen = at::detail::createCPUGenerator(spec.training.seed * 1000003 + static_cast<uint64_t>(stage) * 1009 + i);
      q_.push_back(torch::randn({ps[i].size(1), gc_.rank}, gen, torch::kFloat32));
      err_.push_back(torch::zeros_like(ps[i]));
    }
    m_.resize(ps.size());
    p_.resize(ps.size());
  }
}

std::vector<torch::Tensor> GradientSync::params() const { return runner_.model()->parameters(); }

void GradientSync::pack(int round, int64_t step, std::vector<float>& buf) {
  torch::NoGradGuard guard;
  buf.clear();
  auto ps = params();
  if (spec_.dp.localSteps > 1) {  // DiLoCo: the outer gradient
    for (auto& p : ps) put(buf, p);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = outer_[i] - buf[i];
    return;
  }
  if (gc_.kind == Kind::kQadam && replacesStep(step)) {  // the momentum formed in Step
    buf = momentumLocal_;
    return;
  }
  if (gc_.kind == Kind::kPowerSgd) {
    if (round == 0) {
      for (size_t i = 0; i < ps.size(); ++i) {
        if (!q_[i].defined()) continue;
        m_[i] = gradOf(ps[i]) + err_[i];
        put(buf, m_[i].mm(q_[i]));  // P = M Q
      }
      for (size_t i = 0; i < ps.size(); ++i)
        if (!q_[i].defined()) put(buf, gradOf(ps[i]));  // vectors and small matrices: exact
    } else {
      for (size_t i = 0; i < ps.size(); ++i)
        if (q_[i].defined()) put(buf, m_[i].t().mm(p_[i]));  // Q = M^T P
    }
    return;
  }
  for (auto& p : ps) put(buf, gradOf(p));
}

void GradientSync::unpack(int round, int64_t step, const std::vector<float>& buf) {
  torch::NoGradGuard guard;
  auto ps = params();
  size_t at = 0;
  if (spec_.dp.localSteps > 1 || (gc_.kind == Kind::kQadam && replacesStep(step))) return;  // OuterStep uses buf
  if (gc_.kind == Kind::kPowerSgd) {
    if (round == 0) {
      for (size_t i = 0; i < ps.size(); ++i) {
        if (!q_[i].defined()) continue;
        torch::Tensor p = torch::empty({ps[i].size(0), gc_.rank});
        take(buf, at, p);
        p_[i] = std::get<0>(torch::linalg_qr(p));  // orthonormal columns, identical on every replica
      }
      for (size_t i = 0; i < ps.size(); ++i)
        if (!q_[i].defined()) {
          torch::Tensor g = gradOf(ps[i]);
          take(buf, at, g);
        }
    } else {
      for (size_t i = 0; i < ps.size(); ++i) {
        if (!q_[i].defined()) continue;
        take(buf, at, q_[i]);  // kept: next step's warm start
        const torch::Tensor approx = p_[i].mm(q_[i].t());
        err_[i] = m_[i] - approx;
        gradOf(ps[i]).copy_(approx);
      }
    }
    return;
  }
  for (auto& p : ps) {
    torch::Tensor g = gradOf(p);
    take(buf, at, g);
  }
}

bool GradientSync::replacesStep(int64_t step) const {
  return gc_.kind == Kind::kQadam && step >= gc_.warmupSteps;
}

// qadam: clip like StageRunner::step, then the local momentum with this replica's gradient.
void GradientSync::clipAndMomentum(double globalNorm) {
  torch::NoGradGuard guard;
  auto ps = params();
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
  const double coef = clip > 0 && clip / (globalNorm + 1e-6) < 1.0 ? clip / (globalNorm + 1e-6) : 1.0;
  const double b1 = 0.9;  // torch's AdamW defaults, as StageRunner's optimizer
  momentumLocal_.clear();
  for (size_t i = 0; i < ps.size(); ++i) put(momentumLocal_, expAvg_[i] * b1 + gradOf(ps[i]) * ((1 - b1) * coef));
}

void GradientSync::outerStep(int64_t step, const std::vector<float>& buf) {
  torch::NoGradGuard guard;
  auto ps = params();
  if (gc_.kind == Kind::kQadam && replacesStep(step)) {
    // AdamW (torch 1.13's arithmetic) with the replicas' mean momentum m_t; v follows the mean
    // gradient that m_t implies, g_t = (m_t - b1 m_{t-1}) / (1 - b1), which every replica
    // computes from the same decoded bytes. (A v frozen at the end of the warm-up diverged: with a
    // warm-up of 0 or 1 step v is 0 or one gradient's square, and the quantization error of a
    // small momentum entry divided by its tiny sqrt(v) + 1e-8 overflowed to inf at step 4.) With
    // an exact codec this is torch's AdamW on the mean clipped gradient.
    ++adamStep_;
    const double lr = runner_.learningRate(step), wd = spec_.training.weightDecay, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const double bc1 = 1 - std::pow(b1, static_cast<double>(adamStep_));
    const double bc2Sqrt = std::sqrt(1 - std::pow(b2, static_cast<double>(adamStep_)));
    size_t at = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      const torch::Tensor previous = expAvg_[i].clone();
      take(buf, at, expAvg_[i]);
      const torch::Tensor g = (expAvg_[i] - previous * b1) / (1 - b1);
      expAvgSq_[i].mul_(b2).addcmul_(g, g, 1 - b2);
      ps[i].mul_(1 - lr * wd);
      const torch::Tensor denom = (expAvgSq_[i].sqrt() / bc2Sqrt).add_(eps);
      ps[i].addcdiv_(expAvg_[i], denom, -lr / bc1);
      if (ps[i].grad().defined()) ps[i].mutable_grad().zero_();
    }
    return;
  }
  // DiLoCo: Nesterov momentum (torch.optim.SGD, nesterov=True) on the mean outer gradient.
  const float mu = static_cast<float>(spec_.dp.outerMomentum), lr = static_cast<float>(spec_.dp.outerLr);
  for (size_t i = 0; i < outer_.size(); ++i) {
    momentum_[i] = mu * momentum_[i] + buf[i];
    outer_[i] -= lr * (buf[i] + mu * momentum_[i]);
  }
  size_t at = 0;
  for (auto& p : ps) {
    torch::Tensor t = p.detach();
    take(outer_, at, t);
  }
}

}  // namespace slowpipe::runtime
