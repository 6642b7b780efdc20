// The compute half of a real backend (see stage_compute.h).
#include "runtime/exec/stage_compute.h"

#include <cmath>

#include "emulator/shaped_socket.h"

namespace slowpipe::runtime {

namespace {
double now() { return emulator::monotonicNow(); }
}  // namespace

StageCompute::StageCompute(const RunSpec& spec, const Plan& plan, const RankLayout& layout,
                           RankId id)
    : spec_(spec),
      plan_(plan),
      id_(id),
      evalBatches_(evalBatches(plan.val.size(), spec.pipeline.microBatchSize)) {
  for (int c = 0; c < layout.chunks; ++c)  // chunk c of the stage: its virtual stage's layers
    runners_.push_back(
        std::make_unique<StageRunner>(spec, layout.virtualStage(c, id.stage), plan.totalSteps));
}

void StageCompute::beginList() {
  in_.clear();
  grad_.clear();
  out_.clear();
  ids_.clear();
  compute_ = sq_ = evalLossSum_ = 0;
  evalTokens_ = 0;
}

std::vector<int64_t> StageCompute::planIds(const ActionContext& c, int mb) const {
  std::vector<int64_t> out;
  for (int64_t i : plan_.epochs.microBatch(c.epoch, c.stepInEpoch, globalMb(mb)))
    out.push_back(plan_.train.id(i));
  return out;
}

void StageCompute::input(const Action& a, torch::Tensor t) {
  (a.message == Action::Message::kGradient ? grad_ : in_)[{a.chunk, a.microBatch}] = std::move(t);
}

torch::Tensor StageCompute::output(const Action& a) {
  const auto it = out_.find({a.chunk, a.microBatch});
  if (it == out_.end())
    throw std::logic_error("a send of micro-batch " + std::to_string(a.microBatch) +
                           " before its compute (the schedule)");
  torch::Tensor t = std::move(it->second);
  out_.erase(it);
  return t;
}

void StageCompute::compute(const Action& a, const ActionContext& c) {
  // A forward's time is its runner's, not the batch it builds from the data plan (as before).
  if (a.kind == Action::Kind::kForward) return forward(a, c);
  if (a.kind == Action::Kind::kEvalForward) return evalForward(a);
  const double t0 = now();
  if (a.kind == Action::Kind::kGradNorm) {
    sq_ = 0;
    for (const auto& r : runners_) sq_ += r->localGradSquaredNorm();
  } else {
    backward(a);
  }
  compute_ += now() - t0;
}

void StageCompute::forward(const Action& a, const ActionContext& c) {
  const std::pair<int, int> at{a.chunk, a.microBatch};
  StageRunner& r = *runners_.at(a.chunk);
  torch::Tensor inputs, tgt;
  std::vector<int64_t> mbIds;
  makeBatch(plan_.train, plan_.epochs.microBatch(c.epoch, c.stepInEpoch, globalMb(a.microBatch)),
            spec_.model.seqLen, &inputs, &tgt, &mbIds);
  ids_[a.microBatch] = mbIds;
  torch::Tensor in = inputs;
  if (!r.first()) {
    in = in_.at(at);
    in_.erase(at);
  }
  const double t0 = now();
  torch::Tensor y = r.forward(a.microBatch, in, tgt);
  compute_ += now() - t0;
  if (!r.last()) out_[at] = y;
}

void StageCompute::evalForward(const Action& a) {
  const std::pair<int, int> at{a.chunk, a.microBatch};
  StageRunner& r = *runners_.at(a.chunk);
  torch::Tensor x, tgt;
  std::vector<int64_t> batchIds;
  makeBatch(plan_.val, evalBatches_.at(a.microBatch), spec_.model.seqLen, &x, &tgt, &batchIds);
  ids_[a.microBatch] = batchIds;
  if (!r.first()) {
    x = in_.at(at);
    in_.erase(at);
  }
  torch::Tensor y = r.evalForward(x, tgt, &evalLossSum_);
  if (r.last())
    evalTokens_ += tgt.numel();
  else
    out_[at] = y;
}

// Backward, or its input-gradient or weight-gradient part (split backwards).
void StageCompute::backward(const Action& a) {
  const std::pair<int, int> at{a.chunk, a.microBatch};
  StageRunner& r = *runners_.at(a.chunk);
  if (a.kind == Action::Kind::kBackwardWeight) return r.backwardWeight(a.microBatch);
  torch::Tensor grad;
  if (!r.last()) {
    grad = grad_.at(at);
    grad_.erase(at);
  }
  torch::Tensor gin = a.kind == Action::Kind::kBackward ? r.backward(a.microBatch, grad)
                                                        : r.backwardInput(a.microBatch, grad);
  if (!r.first()) out_[at] = gin;
}

void StageCompute::step(const ActionContext& c, bool runOptimizer) {
  const double t0 = now();
  loss_ = 0;
  if (holdsLastStage())
    for (int m = 0; m < spec_.pipeline.microBatches; ++m)
      loss_ += runners_.back()->lossValue(m) / spec_.pipeline.microBatches;
  norm_ = std::sqrt(sq_);
  if (runOptimizer)
    for (auto& r : runners_) r->step(c.step, norm_);
  compute_ += now() - t0;
}

}  // namespace slowpipe::runtime
