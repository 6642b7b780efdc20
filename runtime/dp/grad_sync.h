// The torch side of a gradient compressor (runtime/dp/gradient_compressor.h): what a data-parallel
// round packs into its flat buffer, what is done with the replicas' mean, the outer step. One
// GradientSync per worker; one file per compressor in runtime/dp/grad_syncs/ (registered by the
// compressor's line in runtime/dp/compressor_list.h):
//   codec     round 0: the gradients; their mean replaces them before GradNorm.
//   powersgd  (Vogels et al. 2019, with error feedback and warm start) round 0: P = (G+E)Q of every
//             matrix parameter plus the other parameters' gradients (exact); P is orthonormalised
//             (QR); round 1: Q = (G+E)^T P; the gradient becomes P Q^T and E = (G+E) - P Q^T. Q
//             starts from a seeded Gaussian equal on all replicas and is kept from step to step.
//   qadam     (the AC-SGD reference's QuantizedAdam) before warmup_steps: exact gradients,
//             torch's AdamW. Then after each step's clipping every replica forms its momentum
//             m_r = b1 m + (1-b1) g_r, which round 0 averages through the message codec; the
//             update is AdamW with the mean m (bias-corrected as torch) and v updated with the mean
//             gradient the mean m implies, (m_t - b1 m_{t-1}) / (1 - b1): the same on every
//             replica, and torch's AdamW exactly when the codec is exact. Any warm-up works (0
//             too).
//   diloco    (dp.local_steps H > 1) every H-th step after Step: round 0 carries outer - local; the
//             replicas' mean d drives Nesterov momentum v = mu v + d, outer -= lr_outer (d + mu v);
//             every replica continues from outer.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "runtime/dp/gradient_compressor.h"
#include "runtime/exec/stage_runner.h"

namespace slowpipe::runtime {

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  // Flat buffer of round `round` of step `step` (DpBegin).
  virtual void pack(int round, int64_t step, std::vector<float>& buf) = 0;
  // The replicas' mean is in buf (DpEnd).
  virtual void unpack(int round, int64_t step, const std::vector<float>& buf) = 0;
  // OuterStep: DiLoCo's outer step, or qadam's update with the mean momentum.
  virtual void outerStep(int64_t /*step*/, const std::vector<float>& /*buf*/) {}
  // Whether the compressor replaces the optimizer step of `step` (qadam after its warm-up: Step
  // only clips and forms the momentum, clipAndMomentum, and OuterStep updates).
  virtual bool replacesStep(int64_t /*step*/) const { return false; }
  virtual void clipAndMomentum(double /*globalNorm*/) {}
};

// The runners of one rank (one per model chunk, in chunk order) whose parameters its replicas
// synchronise as one list (runtime/dp/dp.h rankParameterShapes).
using Runners = std::vector<StageRunner*>;
// Every parameter of `runners`, in order.
std::vector<torch::Tensor> parametersOf(const Runners& runners);

// The GradientSync of `spec`'s compressor for the runners of a rank of stage `stage`.
std::unique_ptr<GradientSync> makeGradientSync(const RunSpec& spec, const Runners& runners,
                                               int stage);

struct GradientSyncInfo {
  const char* name;  // the compressor's (GradientCompressor::name)
  std::unique_ptr<GradientSync> (*make)(const RunSpec& spec, const GradientCompressor& c,
                                        const Runners& runners, int stage);
};
const std::vector<GradientSyncInfo>& gradientSyncs();

}  // namespace slowpipe::runtime
