// The one walker of an action list (runtime/exec/schedule.h). A StepExecutor runs one rank's list
// (a step's, or an evaluation's) action by action and hands each to a Backend; what an action
// means beyond its kind (the peer rank, the message key's chunk, the virtual stage) it asks
// runtime/exec/protocol.h and passes on, so no backend works it out. Backends:
//   - real: the pipeline worker (runtime/exec/pipeline_worker.cc: StageRunners + channels),
//   - compute only: the single-process trainer (runtime/exec/single_process.cc) and the profiler
//     (simulator/measure.cc: times each compute action in the schedule's order),
//   - virtual: the simulator's replay (simulator/simulate.cc: profile costs + link clocks).
// A real backend finishes every action before it returns. A virtual one may leave an action
// pending (its host work or its message takes virtual time): run() then returns, and the owner
// calls finish() when the action's time is up and run() again.
// Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/exec/ranks.h"
#include "runtime/exec/schedule.h"

namespace slowpipe::runtime {

// Where an action runs: its list (the rank, the step, an evaluation or not) and the protocol's
// answers for the action in hand.
struct ActionContext {
  int rank = 0;
  int64_t step = 0;  // global step (an evaluation: the number of steps before it)
  int epoch = 0;
  int64_t stepInEpoch = 0;  // a training step's index within its epoch
  // Of the action in hand:
  int peer = -1;  // Send / Recv: the rank at the other end (protocol::peerRank)
  int chunk = 0;  // Send / Recv of the pipeline: the message key's chunk (protocol::boundaryChunk)
  int virtualStage = 0;  // compute: the index of its layers (protocol::virtualStage)
};

// What a backend did with an action: done, or still in progress (virtual backends only).
enum class Progress { kDone, kPending };

class Backend {
 public:
  virtual ~Backend() = default;
  // The backend's clock (host monotonic seconds, or virtual time).
  virtual double now() = 0;
  // Forward, Backward, BackwardInput, BackwardWeight, EvalForward, GradNorm.
  virtual Progress compute(const Action& a, const ActionContext& c) = 0;
  // Pipeline, evaluation and data-parallel messages alike.
  virtual Progress send(const Action& a, const ActionContext& c) = 0;
  virtual Progress recv(const Action& a, const ActionContext& c) = 0;
  // DpBegin(round) / DpEnd(round): pack / unpack what the round synchronises.
  virtual Progress dpBegin(const Action& a, const ActionContext& c) = 0;
  virtual Progress dpEnd(const Action& a, const ActionContext& c) = 0;
  // The optimizer step, and the outer step of algorithms that synchronise what the step formed.
  virtual Progress step(const Action& a, const ActionContext& c) = 0;
  virtual Progress outerStep(const Action& a, const ActionContext& c) = 0;
};

// One event of a timeline: an action, from its start to its end on the backend's clock.
struct TimelineEvent {
  Action action;
  double start = 0, end = 0;
  int64_t step = 0;
};

class StepExecutor {
 public:
  StepExecutor(const RankLayout& layout, int rank)
      : layout_(layout), rank_(rank), stage_(layout.id(rank).stage) {}

  // Starts a list at `now`: `where` gives its step and epoch.
  // recordEvents: keep a TimelineEvent per action (events()).
  void start(std::vector<Action> list, const ActionContext& where, double now, bool recordEvents);
  // Runs actions until the list ends (true) or the backend leaves one pending (false: call
  // finish() once its time is up, then run() again).
  bool run(Backend& b);
  // The pending action ended at b.now().
  void finish(Backend& b);

  bool ended() const { return pc_ >= list_.size(); }
  bool pending() const { return pending_; }
  // The action in hand (the pending one, or the next to run) and its context.
  const Action& current() const { return list_.at(pc_); }
  const ActionContext& context() const { return where_; }
  size_t position() const { return pc_; }
  const std::vector<Action>& list() const { return list_; }
  double started() const { return started_; }
  // Wall time of the list's data-parallel actions (messages, DpBegin / DpEnd, OuterStep).
  double dpSeconds() const { return dpSeconds_; }
  std::vector<TimelineEvent>& events() { return events_; }

 private:
  Progress dispatch(Backend& b, const Action& a);
  void complete(double now);

  RankLayout layout_;
  int rank_, stage_;
  std::vector<Action> list_;
  ActionContext where_;
  size_t pc_ = 0;
  bool pending_ = false, record_ = false;
  double started_ = 0, actionStart_ = 0, dpSeconds_ = 0;
  std::vector<TimelineEvent> events_;
};

}  // namespace slowpipe::runtime
