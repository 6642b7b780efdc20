// Pipeline schedules as per-stage action lists, communication included. The executor in
// runtime/worker.cc runs these lists, and the simulator (simulator/) replays the very same lists,
// so it predicts what the runtime does. Nothing about communication is implicit in the executor.
//
// Actions of stage s (S stages, M micro-batches):
//   Recv(prev, activation, mb)  -> Forward(mb) -> Send(next, activation, mb)     (ends dropped at s=0 / s=S-1)
//   Recv(next, gradient, mb)    -> Backward(mb) -> Send(prev, gradient, mb)
//   GradNorm: local squared gradient norm; Recv(next, norm partial) adds the later stages' sum;
//   Send(prev, norm partial); Recv(prev, norm total) replaces it with the global sum;
//   Send(next, norm total); Step: clip with the global norm, optimizer step.
// Every stage runs the forwards in micro-batch order and the backwards in one common order, so
// each link's FIFO order matches what the receiver expects.
#pragma once

#include <string>
#include <vector>

namespace slowpipe::runtime {

struct Action {
  enum class Kind { kRecv, kSend, kForward, kBackward, kGradNorm, kStep };
  enum class Peer { kNone, kPrev, kNext };
  // What a Recv/Send moves: activations go forward, their gradients backward, the two norm
  // messages are the partial sums flowing back and the total flowing forward again.
  enum class Message { kNone, kActivation, kGradient, kNormPartial, kNormTotal };
  Kind kind;
  int microBatch = -1;
  Peer peer = Peer::kNone;
  Message message = Message::kNone;
  bool operator==(const Action& o) const {
    return kind == o.kind && microBatch == o.microBatch && peer == o.peer && message == o.message;
  }
  bool isCommunication() const { return kind == Kind::kRecv || kind == Kind::kSend; }
};

// GPipe as in the AC-SGD paper: all M forwards, then all M backwards (reverse order).
std::vector<Action> gpipeSchedule(int stages, int microBatches, int stage);
// 1F1B (PipeDream-flush): S-1-s warm-up forwards, then alternate one forward / one backward.
std::vector<Action> oneFOneBSchedule(int stages, int microBatches, int stage);
// By name: "gpipe" or "1f1b". Throws std::invalid_argument naming the valid ones.
std::vector<Action> makeSchedule(const std::string& name, int stages, int microBatches, int stage);
// The compute actions only (Forward, Backward, GradNorm, Step): the order of the work.
std::vector<Action> computeOnly(const std::vector<Action>& actions);
// "F0 B0 N S" for compute; communication as r/s + A(ctivation)|G(radient)|P(artial)|T(otal) +
// micro-batch, e.g. "rA0 F0 sA0".
std::string describe(const std::vector<Action>& actions);

}  // namespace slowpipe::runtime
