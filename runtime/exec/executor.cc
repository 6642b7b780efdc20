// The one walker of an action list (see executor.h).
#include "runtime/exec/executor.h"

#include <stdexcept>
#include <utility>

#include "runtime/exec/protocol.h"

namespace slowpipe::runtime {

void StepExecutor::start(std::vector<Action> list, const ActionContext& where, double now,
                         bool recordEvents) {
  if (pending_) throw std::logic_error("executor: a list started while an action is pending");
  list_ = std::move(list);
  where_ = where;
  where_.rank = rank_;
  pc_ = 0;
  record_ = recordEvents;
  started_ = actionStart_ = now;
  dpSeconds_ = 0;
  events_.clear();
}

bool StepExecutor::run(Backend& b) {
  if (pending_) return false;
  while (pc_ < list_.size()) {
    const Action& a = list_[pc_];
    actionStart_ = b.now();
    if (dispatch(b, a) == Progress::kPending) {
      pending_ = true;
      return false;
    }
    complete(b.now());
  }
  return true;
}

void StepExecutor::finish(Backend& b) {
  if (!pending_) throw std::logic_error("executor: finish() without a pending action");
  pending_ = false;
  complete(b.now());
}

void StepExecutor::complete(double now) {
  const Action& a = list_[pc_];
  if (a.partOfDataParallelism()) dpSeconds_ += now - actionStart_;
  if (record_) events_.push_back({a, actionStart_, now, where_.step});
  ++pc_;
}

Progress StepExecutor::dispatch(Backend& b, const Action& a) {
  using K = Action::Kind;
  if (a.isCommunication()) {
    where_.peer = protocol::peerRank(layout_, rank_, a);
    where_.chunk = a.isDataParallel() ? 0 : protocol::boundaryChunk(layout_, stage_, a);
  } else {
    where_.peer = -1;
    where_.chunk = 0;
    where_.virtualStage = protocol::virtualStage(layout_, stage_, a);
  }
  switch (a.kind) {
    case K::kSend:
      return b.send(a, where_);
    case K::kRecv:
      return b.recv(a, where_);
    case K::kForward:
    case K::kBackward:
    case K::kBackwardInput:
    case K::kBackwardWeight:
    case K::kEvalForward:
    case K::kGradNorm:
      return b.compute(a, where_);
    case K::kStep:
      return b.step(a, where_);
    case K::kDpBegin:
      return b.dpBegin(a, where_);
    case K::kDpEnd:
      return b.dpEnd(a, where_);
    case K::kOuterStep:
      return b.outerStep(a, where_);
  }
  throw std::logic_error("executor: an action of unknown kind");
}

}  // namespace slowpipe::runtime
