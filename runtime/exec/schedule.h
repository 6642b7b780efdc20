// Pipeline schedules as per-stage action lists, communication included. One executor walks them
// (runtime/exec/executor.h) over a backend: the worker's (real tensors and channels), the
// simulator's (virtual time), the single-process trainer's and the profiler's (compute only), so
// the simulator predicts what the runtime does. Nothing about communication is implicit in the
// executor.
//
// Actions of stage s (S stages, M micro-batches):
//   Recv(prev, activation, mb)  -> Forward(mb) -> Send(next, activation, mb)     (ends dropped at
//   s=0 / s=S-1) Recv(next, gradient, mb)    -> Backward(mb) -> Send(prev, gradient, mb) GradNorm:
//   local squared gradient norm; Recv(next, norm partial) adds the later stages' sum; Send(prev,
//   norm partial); Recv(prev, norm total) replaces it with the global sum; Send(next, norm total);
//   Step: clip with the global norm, optimizer step.
// A receiver takes each message by its key (kind, step, micro-batch, chunk;
// runtime/exec/protocol.h), so a schedule need not keep a link's messages in the receiver's order;
// it must not deadlock (tests/runtime/schedule_test.cc replays every registered schedule to prove
// it). A schedule may split a backward (zero-bubble schedules): BackwardInput(mb) computes the
// input gradient (and the cheap parameter gradients: LayerNorms, embeddings) and sends it on, the
// critical path; BackwardWeight(mb) computes the weight gradients of the stage's linear layers
// later, to fill a bubble. The pair computes exactly what one Backward(mb) computes.
// Schedules live in runtime/exec/schedules/, one file each, listed in
// runtime/exec/schedules/registry.cc.
//
// Data parallelism (pipeline.replicas R > 1): replica r of stage s exchanges with the other
// replicas of s (Peer kReplica, Action::replica names which) in rounds, each framed by
// DpBegin(round) (pack what is synchronised into one flat buffer) and DpEnd(round) (average,
// write back). The algorithms are one file each in runtime/dp/algorithms/:
//   allreduce (ring): R-1 reduce-scatter hops Send(r+1, DpReduce, chunk (r-t) mod R) /
//     Recv(r-1, DpReduce, chunk (r-t-1) mod R) (the received chunk is added), then R-1 all-gather
//     hops Send(r+1, DpGather, chunk (r+1-t) mod R) / Recv(r-1, DpGather, chunk (r-t) mod R): after
//     the reduce-scatter replica r holds chunk (r+1) mod R, encodes it once, and that frame is
//     relayed unchanged around the ring, so every replica decodes the same bytes.
//   sharded_ps: replica r serves shard r: Send(q, DpPush, shard q) for every q != r, Recv(q,
//     DpPush, shard r) for every q (summed in replica order), then Send(q, DpPull, shard r) of the
//     one encoded average, Recv(q, DpPull, shard q) from every server q.
// Where gradients are synchronised the rounds sit between the last Backward and GradNorm; where
// something the step forms is (DiLoCo's outer gradient every H-th step, qadam's momentum after its
// warm-up) they follow Step and OuterStep ends the step.
#pragma once

#include <string>
#include <vector>

namespace slowpipe::runtime {

struct Action {
  enum class Kind {
    kRecv,
    kSend,
    kForward,
    kBackward,
    kGradNorm,
    kStep,
    kDpBegin,
    kDpEnd,
    kOuterStep,
    kBackwardInput,
    kBackwardWeight,  // a Backward split in two (see above)
    kEvalForward      // evaluation: a forward without autograd (evalSchedule)
  };
  enum class Peer { kNone, kPrev, kNext, kReplica };
  // What a Recv/Send moves: activations go forward, their gradients backward, the two norm
  // messages are the partial sums flowing back and the total flowing forward again.
  // The data-parallel messages: ring reduce-scatter partial sums and all-gather relays, parameter
  // server pushes (a replica's shard to its server) and pulls (the server's average).
  // Evaluation: its activations, and the barrier that ends it (from the last stage back).
  enum class Message {
    kNone,
    kActivation,
    kGradient,
    kNormPartial,
    kNormTotal,
    kDpReduce,
    kDpGather,
    kDpPush,
    kDpPull,
    kEval,
    kBarrier
  };
  Kind kind;
  int microBatch = -1;  // the pipeline's actions: the micro-batch (evaluation: the batch)
  Peer peer = Peer::kNone;
  Message message = Message::kNone;
  int replica = -1;  // Peer kReplica: the replica of this stage at the other end
  int chunk = 0;     // the model chunk (virtual stage) of this rank the action belongs to
  int shard = -1;    // a message between replicas: its part of the flat gradient buffer
  int round = -1;    // DpBegin / DpEnd: the exchange's round (powersgd: 0 for P, 1 for Q)
  bool operator==(const Action& o) const {
    return kind == o.kind && microBatch == o.microBatch && peer == o.peer && message == o.message &&
           replica == o.replica && chunk == o.chunk && shard == o.shard && round == o.round;
  }
  bool isCommunication() const { return kind == Kind::kRecv || kind == Kind::kSend; }
  bool isDataParallel() const { return peer == Peer::kReplica; }  // a message between replicas
  // Any action of the replicas' exchange: its messages, DpBegin / DpEnd, OuterStep.
  bool partOfDataParallelism() const {
    return isDataParallel() || kind == Kind::kDpBegin || kind == Kind::kDpEnd ||
           kind == Kind::kOuterStep;
  }
};

// What the data-parallel part of a step looks like (from RunSpec's pipeline.replicas and dp).
struct DpShape {
  int replicas = 1;
  std::string algorithm = "allreduce";  // allreduce | sharded_ps
  int rounds = 1;                       // exchanges per synchronisation (powersgd: 2)
  int localSteps = 1;                   // H: synchronise every H-th step
  // From this step on the rounds follow Step and OuterStep ends the step (DiLoCo: 0; qadam: its
  // warm-up length); -1: always before GradNorm.
  int64_t afterStepFrom = -1;
  bool syncs(int64_t step) const { return replicas > 1 && (step + 1) % localSteps == 0; }
  bool afterStep(int64_t step) const { return afterStepFrom >= 0 && step >= afterStepFrom; }
};

// The exchange of one round for `replica` (DpBegin(round) ... DpEnd(round)). Throws
// std::invalid_argument for an unknown algorithm (naming the valid ones).
void appendDpRound(std::vector<Action>& a, const DpShape& dp, int replica, int round);

// A data-parallel algorithm, as registered in runtime/dp/algorithms/registry.cc (one file each).
struct DpAlgorithmInfo {
  const char* name;
  // Appends one round's messages of `replica` (between DpBegin and DpEnd).
  void (*round)(std::vector<Action>& a, int replicas, int replica);
  // Each replica serves a shard and sends its one encoded average to every replica (the round
  // must end with that frame sent).
  bool servesShards = false;
};
const std::vector<DpAlgorithmInfo>& dpAlgorithms();
std::string dpAlgorithmNames();  // "allreduce, sharded_ps, ..."
// Throws std::invalid_argument naming the registered ones.
const DpAlgorithmInfo& dpAlgorithm(const std::string& name);
// A DP message of a round: Send/Recv of `message` for `chunk` with replica `peer`.
Action dpMessage(Action::Kind kind, Action::Message message, int shard, int peer);

// Building blocks of a schedule file (runtime/exec/schedules/): each appends one unit of work of
// stage `stage` (of `stages`) with the receive before it and the send after it. With model chunks
// (interleaved schedules) the ends are those of the whole virtual pipeline (chunk 0 of stage 0,
// chunk chunks-1 of stage S-1) and every action carries its chunk. Recv(prev, activation) Forward
// Send(next, activation)
void appendForward(std::vector<Action>& a, int mb, int stages, int stage, int chunk = 0,
                   int chunks = 1);
// Recv(next, gradient) Backward Send(prev, gradient)
void appendBackward(std::vector<Action>& a, int mb, int stages, int stage, int chunk = 0,
                    int chunks = 1);
// Recv(next, gradient) BackwardInput Send(prev, gradient); the BackwardWeight of mb follows later.
void appendBackwardInput(std::vector<Action>& a, int mb, int stages, int stage);
void appendBackwardWeight(std::vector<Action>& a, int mb);
// The end of every step: GradNorm with its two norm messages, then Step.
void appendStepEnd(std::vector<Action>& a, int stages, int stage);

// A schedule, as registered in runtime/exec/schedules/registry.cc.
struct ScheduleInfo {
  const char* name;
  // The list of `stage` with `chunks` model chunks per stage (pipeline.virtual_stages; 1 unless
  // the schedule interleaves).
  std::vector<Action> (*build)(int stages, int microBatches, int stage, int chunks);
  bool splitsBackward = false;  // uses BackwardInput / BackwardWeight
  bool interleaves = false;     // runs pipeline.virtual_stages model chunks per stage
};
// Every registered schedule, in registration order.
const std::vector<ScheduleInfo>& schedules();
// "gpipe, 1f1b, ...": the registered names.
std::string scheduleNames();
// Throws std::invalid_argument naming the registered ones.
const ScheduleInfo& scheduleInfo(const std::string& name);

// GPipe as in the AC-SGD paper: all M forwards, then all M backwards (reverse order).
std::vector<Action> gpipeSchedule(int stages, int microBatches, int stage);
// 1F1B (PipeDream-flush): S-1-s warm-up forwards, then alternate one forward / one backward.
std::vector<Action> oneFOneBSchedule(int stages, int microBatches, int stage);
// The schedules makeSchedule knows, by name.
bool isScheduleName(const std::string& name);
// By name (a registered schedule). Throws std::invalid_argument naming the valid ones.
std::vector<Action> makeSchedule(const std::string& name, int stages, int microBatches, int stage,
                                 int chunks = 1);
// The step's list for (stage, replica) with the data-parallel rounds where dp says (step: global
// step number; with local steps only every H-th step synchronises).
std::vector<Action> makeSchedule(const std::string& name, int stages, int microBatches, int stage,
                                 const DpShape& dp, int replica, int64_t step, int chunks = 1);
// Evaluation of `batches` validation batches as an action list (the worker runs it after an
// epoch's last step, the simulator replays it): batch k crosses every virtual stage in order,
// Recv(prev, eval, k) EvalForward(k) Send(next, eval, k) per model chunk; then a barrier from the
// last stage back to the first (Recv(next, barrier) / Send(prev, barrier)), so that every stage
// starts the next step together.
std::vector<Action> evalSchedule(int stages, int batches, int stage, int chunks = 1);
// The compute actions only (Forward, Backward(Input|Weight), GradNorm, Step): the order of the
// work.
std::vector<Action> computeOnly(const std::vector<Action>& actions);
// "F0 B0 N S" for compute (I0 / W0: BackwardInput / BackwardWeight; ".c" after the micro-batch:
// model chunk c > 0); communication as r/s + A(ctivation)|G(radient)|P(artial)|T(otal) +
// micro-batch, e.g. "rA0 F0 sA0"; DP: r/s + RS|AG|PU|PL + chunk + "@" + replica, e.g. "sRS1@2",
// and "D<round" / "D>round" for DpBegin / DpEnd, "O" for OuterStep; evaluation: "E" + batch for
// EvalForward, r/s + E + batch for its messages, rX / sX for the barrier.
std::string describe(const std::vector<Action>& actions);

}  // namespace slowpipe::runtime
