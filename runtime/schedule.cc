// GPipe and 1F1B action lists with explicit communication (see schedule.h).
#include "runtime/schedule.h"

#include <algorithm>
#include <stdexcept>

namespace slowpipe::runtime {
namespace {

using K = Action::Kind;
using P = Action::Peer;
using Msg = Action::Message;

// Appends the forward or backward of mb with the receive before it and the send after it.
void addCompute(std::vector<Action>& a, bool forward, int mb, int stages, int stage) {
  const bool first = stage == 0, last = stage == stages - 1;
  if (forward) {
    if (!first) a.push_back({K::kRecv, mb, P::kPrev, Msg::kActivation});
    a.push_back({K::kForward, mb});
    if (!last) a.push_back({K::kSend, mb, P::kNext, Msg::kActivation});
  } else {
    if (!last) a.push_back({K::kRecv, mb, P::kNext, Msg::kGradient});
    a.push_back({K::kBackward, mb});
    if (!first) a.push_back({K::kSend, mb, P::kPrev, Msg::kGradient});
  }
}

// Global gradient norm: partial sums flow back to stage 0, the total flows forward again.
void finish(std::vector<Action>& a, int stages, int stage) {
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

}  // namespace

std::vector<Action> gpipeSchedule(int stages, int microBatches, int stage) {
  std::vector<Action> a;
  for (int m = 0; m < microBatches; ++m) addCompute(a, true, m, stages, stage);
  for (int m = microBatches - 1; m >= 0; --m) addCompute(a, false, m, stages, stage);
  finish(a, stages, stage);
  return a;
}

std::vector<Action> oneFOneBSchedule(int stages, int microBatches, int stage) {
  std::vector<Action> a;
  const int warmup = std::min(stages - 1 - stage, microBatches);
  int f = 0, b = 0;
  for (; f < warmup; ++f) addCompute(a, true, f, stages, stage);
  while (f < microBatches) {
    addCompute(a, true, f++, stages, stage);
    addCompute(a, false, b++, stages, stage);
  }
  while (b < microBatches) addCompute(a, false, b++, stages, stage);
  finish(a, stages, stage);
  return a;
}

bool isScheduleName(const std::string& name) { return name == "gpipe" || name == "1f1b"; }

std::vector<Action> makeSchedule(const std::string& name, int stages, int microBatches, int stage) {
  if (name == "gpipe") return gpipeSchedule(stages, microBatches, stage);
  if (name == "1f1b") return oneFOneBSchedule(stages, microBatches, stage);
  throw std::invalid_argument("pipeline.schedule: '" + name + "' is not a schedule; expected gpipe or 1f1b");
}

void appendDpRound(std::vector<Action>& a, const DpShape& dp, int r, int round) {
  const int R = dp.replicas;
  auto mod = [R](int v) { return ((v % R) + R) % R; };
  auto msg = [&](K kind, Msg m, int chunk, int peer) {
    Action x{kind, chunk, P::kReplica, m};
    x.replica = peer;
    a.push_back(x);
  };
  a.push_back({K::kDpBegin, round});
  if (dp.algorithm == "allreduce") {
    for (int t = 0; t + 1 < R; ++t) {
      msg(K::kSend, Msg::kDpReduce, mod(r - t), mod(r + 1));
      msg(K::kRecv, Msg::kDpReduce, mod(r - t - 1), mod(r - 1));
    }
    for (int t = 0; t + 1 < R; ++t) {
      msg(K::kSend, Msg::kDpGather, mod(r + 1 - t), mod(r + 1));
      msg(K::kRecv, Msg::kDpGather, mod(r - t), mod(r - 1));
    }
  } else if (dp.algorithm == "sharded_ps") {
    for (int k = 1; k < R; ++k) msg(K::kSend, Msg::kDpPush, mod(r + k), mod(r + k));
    for (int q = 0; q < R; ++q)
      if (q != r) msg(K::kRecv, Msg::kDpPush, r, q);
    for (int k = 1; k < R; ++k) msg(K::kSend, Msg::kDpPull, r, mod(r + k));
    for (int q = 0; q < R; ++q)
      if (q != r) msg(K::kRecv, Msg::kDpPull, q, q);
  } else {
    throw std::invalid_argument("dp.algorithm: '" + dp.algorithm + "' is not an algorithm; expected allreduce or sharded_ps");
  }
  a.push_back({K::kDpEnd, round});
}

std::vector<Action> makeSchedule(const std::string& name, int stages, int microBatches, int stage, const DpShape& dp,
                                 int replica, int64_t step) {
  std::vector<Action> a = makeSchedule(name, stages, microBatches, stage);
  if (!dp.syncs(step)) return a;
  std::vector<Action> rounds;
  for (int k = 0; k < dp.rounds; ++k) appendDpRound(rounds, dp, replica, k);
  if (dp.afterStep(step)) {  // what the step formed: after it
    a.insert(a.end(), rounds.begin(), rounds.end());
    a.push_back({K::kOuterStep});
  } else {  // the gradients, before their norm is taken
    const auto n = std::find_if(a.begin(), a.end(), [](const Action& x) { return x.kind == K::kGradNorm; });
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
    switch (x.kind) {
      case K::kForward: s += "F" + std::to_string(x.microBatch); break;
      case K::kBackward: s += "B" + std::to_string(x.microBatch); break;
      case K::kGradNorm: s += "N"; break;
      case K::kStep: s += "S"; break;
      case K::kDpBegin: s += "D<" + std::to_string(x.microBatch); break;
      case K::kDpEnd: s += "D>" + std::to_string(x.microBatch); break;
      case K::kOuterStep: s += "O"; break;
      case K::kRecv:
      case K::kSend: {
        s += x.kind == K::kRecv ? "r" : "s";
        if (x.isDataParallel()) {
          s += x.message == Msg::kDpReduce ? "RS" : x.message == Msg::kDpGather ? "AG" : x.message == Msg::kDpPush ? "PU" : "PL";
          s += std::to_string(x.microBatch) + "@" + std::to_string(x.replica);
          break;
        }
        const char* m = x.message == Msg::kActivation ? "A" : x.message == Msg::kGradient ? "G"
                        : x.message == Msg::kNormPartial ? "P" : "T";
        s += m;
        if (x.microBatch >= 0) s += std::to_string(x.microBatch);
        break;
      }
    }
  }
  return s;
}

}  // namespace slowpipe::runtime
