// What a data-parallel round synchronises, and what is done with the replicas' mean: the torch side
// of data parallelism (runtime/dp.h moves the flat buffers). One GradientSync per worker.
//
//   plain codec, H = 1   round 0: the gradients; their mean replaces them before GradNorm.
//   powersgd:rank=r      (Vogels et al. 2019, with error feedback and warm start) round 0: P = (G+E)Q
//                        of every matrix parameter plus the other parameters' gradients (exact);
//                        P is orthonormalised (QR); round 1: Q = (G+E)^T P; the gradient becomes P Q^T
//                        and E = (G+E) - P Q^T. Q starts from a seeded Gaussian equal on all
//                        replicas and is kept from step to step.
//   qadam:bits,bucket,warmup_steps   (the AC-SGD reference's QuantizedAdam) before warmup_steps:
//                        exact gradients, torch's AdamW. Then after each step's clipping every
//                        replica forms its momentum m_r = b1 m + (1-b1) g_r, which round 0 averages
//                        through the message codec (ef(quant ... levels=fixpoint): error feedback
//                        at workers and servers); the update is AdamW with the mean m (bias-
//                        corrected as torch) and v updated with the mean gradient the mean m
//                        implies, (m_t - b1 m_{t-1}) / (1 - b1): the same on every replica, and
//                        torch's AdamW exactly when the codec is exact. Any warm-up works (0 too).
//   dp.local_steps H > 1 (DiLoCo) every H-th step after Step: round 0 carries outer - local; the
//                        replicas' mean d drives Nesterov momentum v = mu v + d,
//                        outer -= lr_outer (d + mu v); every replica continues from outer.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "runtime/dp.h"
#include "runtime/stage_runner.h"

namespace slowpipe::runtime {

class GradientSync {
 public:
  GradientSync(const RunSpec& spec, StageRunner& runner, int stage);
  // Flat buffer of round `round` of step `step` (DpBegin).
  void pack(int round, int64_t step, std::vector<float>& buf);
  // The replicas' mean is in buf (DpEnd).
  void unpack(int round, int64_t step, const std::vector<float>& buf);
  // OuterStep: DiLoCo's outer step, or qadam's update with the mean momentum.
  void outerStep(int64_t step, const std::vector<float>& buf);
  // qadam after its warm-up replaces the optimizer step (Step only clips and forms momentum).
  bool replacesStep(int64_t step) const;
  void clipAndMomentum(double globalNorm);
  // The round's messages travel uncompressed: qadam's warm-up (its codec is for the momentum).
  bool exactRound(int64_t step) const { return gc_.kind == GradientCompressor::Kind::kQadam && !replacesStep(step); }

 private:
  std::vector<torch::Tensor> params() const;
  const RunSpec& spec_;
  StageRunner& runner_;
  GradientCompressor gc_;
  int stage_;
  // DiLoCo
  std::vector<float> outer_, momentum_;
  // PowerSGD: per parameter, Q and the error (undefined for parameters sent exactly)
  std::vector<torch::Tensor> q_, err_, m_, p_;
  // qadam: Adam state taken over from torch's AdamW at the end of the warm-up
  std::vector<torch::Tensor> expAvg_, expAvgSq_;
  int64_t adamStep_ = 0;
  std::vector<float> momentumLocal_;
};

}  // namespace slowpipe::runtime
