// powersgd: P = (G+E)Q with the exact small parameters in round 0, Q = (G+E)^T P in round 1,
// error feedback and warm start (see grad_sync.h).
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include "runtime/dp/grad_sync.h"
#include "runtime/dp/grad_syncs/flat.h"

namespace slowpipe::runtime {

namespace {
class PowerSgd : public GradientSync {
 public:
  PowerSgd(const RunSpec& spec, Runners runners, int stage, int rank)
      : runners_(std::move(runners)), rank_(rank) {
    torch::NoGradGuard guard;
    const auto ps = parametersOf(runners_);
    // Q of each matrix parameter from a generator seeded by (training.seed, stage, index): the
    // same on every replica of the stage.
    for (size_t i = 0; i < ps.size(); ++i) {
      if (ps[i].dim() != 2 || std::min(ps[i].size(0), ps[i].size(1)) <= rank_) {
        q_.emplace_back();
        err_.emplace_back();
        continue;
      }
      auto gen = at::detail::createCPUGenerator(spec.training.seed * 1000003 +
                                                static_cast<uint64_t>(stage) * 1009 + i);
      q_.push_back(torch::randn({ps[i].size(1), rank_}, gen, torch::kFloat32));
      err_.push_back(torch::zeros_like(ps[i]));
    }
    m_.resize(ps.size());
    p_.resize(ps.size());
  }

  void pack(int round, int64_t, std::vector<float>& buf) override {
    torch::NoGradGuard guard;
    buf.clear();
    auto ps = parametersOf(runners_);
    if (round == 0) {
      for (size_t i = 0; i < ps.size(); ++i) {
        if (!q_[i].defined()) continue;
        m_[i] = flat::gradOf(ps[i]) + err_[i];
        flat::put(buf, m_[i].mm(q_[i]));  // P = M Q
      }
      for (size_t i = 0; i < ps.size(); ++i)
        if (!q_[i].defined())
          flat::put(buf, flat::gradOf(ps[i]));  // vectors and small matrices: exact
    } else {
      for (size_t i = 0; i < ps.size(); ++i)
        if (q_[i].defined()) flat::put(buf, m_[i].t().mm(p_[i]));  // Q = M^T P
    }
  }

  void unpack(int round, int64_t, const std::vector<float>& buf) override {
    torch::NoGradGuard guard;
    auto ps = parametersOf(runners_);
    size_t at = 0;
    if (round == 0) {
      for (size_t i = 0; i < ps.size(); ++i) {
        if (!q_[i].defined()) continue;
        torch::Tensor p = torch::empty({ps[i].size(0), rank_});
        flat::take(buf, at, p);
        p_[i] =
            std::get<0>(torch::linalg_qr(p));  // orthonormal columns, identical on every replica
      }
      for (size_t i = 0; i < ps.size(); ++i)
        if (!q_[i].defined()) {
          torch::Tensor g = flat::gradOf(ps[i]);
          flat::take(buf, at, g);
        }
      return;
    }
    for (size_t i = 0; i < ps.size(); ++i) {
      if (!q_[i].defined()) continue;
      flat::take(buf, at, q_[i]);  // kept: next step's warm start
      const torch::Tensor approx = p_[i].mm(q_[i].t());
      err_[i] = m_[i] - approx;
      flat::gradOf(ps[i]).copy_(approx);
    }
  }

 private:
  Runners runners_;
  int rank_;
  // Per parameter: Q and the error (undefined for parameters sent exactly), M = G + E and P.
  std::vector<torch::Tensor> q_, err_, m_, p_;
};
}  // namespace

std::unique_ptr<GradientSync> makePowerSgdSync(const RunSpec& spec, const GradientCompressor& c,
                                               const Runners& runners, int stage) {
  return std::make_unique<PowerSgd>(spec, runners, stage, static_cast<int>(c.param("rank")));
}

}  // namespace slowpipe::runtime
