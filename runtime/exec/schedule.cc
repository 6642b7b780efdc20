// Schedule building blocks, the registry lookup, DP rounds and describe() (see schedule.h); the
// schedules themselves are in runtime/exec/schedules/.
#include "runtime/exec/schedule.h"

#include <algorithm>
#include <stdexcept>

namespace slowpipe::runtime {
namespace {

using K = Action::Kind;
using P = Action::Peer;
using Msg = Action::Message;

Action of(K kind, int mb, P peer, Msg m, int chunk) {
  Action x{kind, mb, peer, m};
  x.chunk = chunk;
  return x;
}

void appendBackwardOf(std::vector<Action>& a, K kind, int mb, int stages, int stage, int chunk,
                      int chunks) {
  const bool first = stage == 0 && chunk == 0, last = stage == stages - 1 && chunk == chunks - 1;
  if (!last) a.push_back(of(K::kRecv, mb, P::kNext, Msg::kGradient, chunk));
  a.push_back(of(kind, mb, P::kNone, Msg::kNone, chunk));
  if (!first) a.push_back(of(K::kSend, mb, P::kPrev, Msg::kGradient, chunk));
}

}  // namespace

void appendForward(std::vector<Action>& a, int mb, int stages, int stage, int chunk, int chunks) {
  const bool first = stage == 0 && chunk == 0, last = stage == stages - 1 && chunk == chunks - 1;
  if (!first) a.push_back(of(K::kRecv, mb, P::kPrev, Msg::kActivation, chunk));
  a.push_back(of(K::kForward, mb, P::kNone, Msg::kNone, chunk));
  if (!last) a.push_back(of(K::kSend, mb, P::kNext, Msg::kActivation, chunk));
}

void appendBackward(std::vector<Action>& a, int mb, int stages, int stage, int chunk, int chunks) {
  appendBackwardOf(a, K::kBackward, mb, stages, stage, chunk, chunks);
}
void appendBackwardInput(std::vector<Action>& a, int mb, int stages, int stage) {
  appendBackwardOf(a, K::kBackwardInput, mb, stages, stage, 0, 1);
}
void appendBackwardWeight(std::vector<Action>& a, int mb) { a.push_back({K::kBackwardWeight, mb}); }

// Global gradient norm: partial sums flow back to stage 0, the total flows forward again.
void appendStepEnd(std::vector<Action>& a, int stages, int stage) {
  const bool first = stage == 0, last = stage == stages - 1;
  a.push_back({K::kGradNorm});
  if (!last) a.push_back({K::kRecv, -1, P::kNext, Msg::kNormPartial});
  if (!first) {
    a.push_back({K::kSend, -1, P::kPrev, Msg::kNormPartial});
    a.push_back({K::kRecv, -1, P::kPrev, Msg::kNormTotal});
  }
  if (!last) a.push_back({K::kSend, -1, P::kNext, Msg::kNormTotal});
  a.push_back({K::kStep});
}

std::vector<Action> evalSchedule(int stages, int batches, int stage, int chunks) {
  std::vector<Action> a;
  for (int k = 0; k < batches; ++k)
    for (int v = 0; v < chunks; ++v) {
      const bool first = stage == 0 && v == 0, last = stage == stages - 1 && v == chunks - 1;
      if (!first) a.push_back(of(K::kRecv, k, P::kPrev, Msg::kEval, v));
      a.push_back(of(K::kEvalForward, k, P::kNone, Msg::kNone, v));
      if (!last) a.push_back(of(K::kSend, k, P::kNext, Msg::kEval, v));
    }
  if (stage < stages - 1) a.push_back({K::kRecv, -1, P::kNext, Msg::kBarrier});
  if (stage > 0) a.push_back({K::kSend, -1, P::kPrev, Msg::kBarrier});
  return a;
}

namespace {

// "a, b, c": the names of a registry's entries.
template <typename Entry>
std::string namesOf(const std::vector<Entry>& entries) {
  std::string s;
  for (const auto& e : entries) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

// The entry called `name`, or nullptr.
template <typename Entry>
const Entry* entryNamed(const std::vector<Entry>& entries, const std::string& name) {
  for (const auto& e : entries)
    if (name == e.name) return &e;
  return nullptr;
}

}  // namespace

std::string scheduleNames() { return namesOf(schedules()); }

const ScheduleInfo& scheduleInfo(const std::string& name) {
  if (const ScheduleInfo* info = entryNamed(schedules(), name)) return *info;
  throw std::invalid_argument("pipeline.schedule: '" + name +
                              "' is not a schedule; expected one of " + scheduleNames());
}

bool isScheduleName(const std::string& name) { return entryNamed(schedules(), name) != nullptr; }

std::vector<Action> makeSchedule(const std::string& name, int stages, int microBatches, int stage,
                                 int chunks) {
  const ScheduleInfo& info = scheduleInfo(name);
  if (chunks != 1 && !info.interleaves)
    throw std::invalid_argument("pipeline.schedule '" + name +
                                "' runs one model chunk per stage, not " + std::to_string(chunks));
  return info.build(stages, microBatches, stage, chunks);
}

Action dpMessage(Action::Kind kind, Action::Message message, int shard, int peer) {
  Action x{kind, -1, P::kReplica, message};
  x.replica = peer;
  x.shard = shard;
  return x;
}

std::string dpAlgorithmNames() { return namesOf(dpAlgorithms()); }

const DpAlgorithmInfo& dpAlgorithm(const std::string& name) {
  if (const DpAlgorithmInfo* info = entryNamed(dpAlgorithms(), name)) return *info;
  throw std::invalid_argument("dp.algorithm: '" + name + "' is not an algorithm; expected one of " +
                              dpAlgorithmNames());
}

void appendDpRound(std::vector<Action>& a, const DpShape& dp, int r, int round) {
  const DpAlgorithmInfo& algorithm = dpAlgorithm(dp.algorithm);
  Action begin{K::kDpBegin}, end{K::kDpEnd};
  begin.round = end.round = round;
  a.push_back(begin);
  algorithm.round(a, dp.replicas, r);
  a.push_back(end);
}

std::vector<Action> makeSchedule(const std::string& name, int stages, int microBatches, int stage,
                                 const DpShape& dp, int replica, int64_t step, int chunks) {
  std::vector<Action> a = makeSchedule(name, stages, microBatches, stage, chunks);
  if (!dp.syncs(step)) return a;
  std::vector<Action> rounds;
  for (int k = 0; k < dp.rounds; ++k) appendDpRound(rounds, dp, replica, k);
  if (dp.afterStep(step)) {  // what the step formed: after it
    a.insert(a.end(), rounds.begin(), rounds.end());
    a.push_back({K::kOuterStep});
  } else {  // the gradients, before their norm is taken
    const auto n =
        std::find_if(a.begin(), a.end(), [](const Action& x) { return x.kind == K::kGradNorm; });
    a.insert(n, rounds.begin(), rounds.end());
  }
  return a;
}

std::vector<Action> computeOnly(const std::vector<Action>& actions) {
  std::vector<Action> out;
  for (const auto& a : actions)
    if (!a.isCommunication()) out.push_back(a);
  return out;
}

std::string describe(const std::vector<Action>& actions) {
  std::string s;
  for (const auto& x : actions) {
    if (!s.empty()) s += ' ';
    const std::string chunk = x.chunk > 0 ? "." + std::to_string(x.chunk) : "";
    switch (x.kind) {
      case K::kForward:
        s += "F" + std::to_string(x.microBatch) + chunk;
        break;
      case K::kBackward:
        s += "B" + std::to_string(x.microBatch) + chunk;
        break;
      case K::kBackwardInput:
        s += "I" + std::to_string(x.microBatch) + chunk;
        break;
      case K::kBackwardWeight:
        s += "W" + std::to_string(x.microBatch) + chunk;
        break;
      case K::kEvalForward:
        s += "E" + std::to_string(x.microBatch) + chunk;
        break;
      case K::kGradNorm:
        s += "N";
        break;
      case K::kStep:
        s += "S";
        break;
      case K::kDpBegin:
        s += "D<" + std::to_string(x.round);
        break;
      case K::kDpEnd:
        s += "D>" + std::to_string(x.round);
        break;
      case K::kOuterStep:
        s += "O";
        break;
      case K::kRecv:
      case K::kSend: {
        s += x.kind == K::kRecv ? "r" : "s";
        if (x.isDataParallel()) {
          s += x.message == Msg::kDpReduce   ? "RS"
               : x.message == Msg::kDpGather ? "AG"
               : x.message == Msg::kDpPush   ? "PU"
                                             : "PL";
          s += std::to_string(x.shard) + "@" + std::to_string(x.replica);
          break;
        }
        const char* m = x.message == Msg::kActivation    ? "A"
                        : x.message == Msg::kGradient    ? "G"
                        : x.message == Msg::kNormPartial ? "P"
                        : x.message == Msg::kNormTotal   ? "T"
                        : x.message == Msg::kEval        ? "E"
                                                         : "X";
        s += m;
        if (x.microBatch >= 0) s += std::to_string(x.microBatch) + chunk;
        break;
      }
    }
  }
  return s;
}

}  // namespace slowpipe::runtime
