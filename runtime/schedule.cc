// GPipe and 1F1B action lists.
#include "runtime/schedule.h"

#include <algorithm>
#include <stdexcept>

namespace slowpipe::runtime {
namespace {

void finish(std::vector<Action>& a) {
  a.push_back({Action::Kind::kSyncGradNorm});
  a.push_back({Action::Kind::kStep});
}

}  // namespace

std::vector<Action> gpipeSchedule(int stages, int microBatches, int stage) {
  std::vector<Action> a;
  for (int m = 0; m < microBatches; ++m) a.push_back({Action::Kind::kForward, m});
  for (int m = microBatches - 1; m >= 0; --m) a.push_back({Action::Kind::kBackward, m});
  finish(a);
  (void)stages;
  (void)stage;
  return a;
}

std::vector<Action> oneFOneBSchedule(int stages, int microBatches, int stage) {
  std::vector<Action> a;
  const int warmup = std::min(stages - 1 - stage, microBatches);
  int f = 0, b = 0;
  for (; f < warmup; ++f) a.push_back({Action::Kind::kForward, f});
  while (f < microBatches) {
    a.push_back({Action::Kind::kForward, f++});
    a.push_back({Action::Kind::kBackward, b++});
  }
  while (b < microBatches) a.push_back({Action::Kind::kBackward, b++});
  finish(a);
  return a;
}

std::vector<Action> makeSchedule(const std::string& name, int stages, int microBatches, int stage) {
  if (name == "gpipe") return gpipeSchedule(stages, microBatches, stage);
  if (name == "1f1b") return oneFOneBSchedule(stages, microBatches, stage);
  throw std::invalid_argument("pipeline.schedule: '" + name + "' is not a schedule; expected gpipe or 1f1b");
}

std::string describe(const std::vector<Action>& actions) {
  std::string s;
  for (const auto& x : actions) {
    if (!s.empty()) s += ' ';
    switch (x.kind) {
      case Action::Kind::kForward: s += "F" + std::to_string(x.microBatch); break;
      case Action::Kind::kBackward: s += "B" + std::to_string(x.microBatch); break;
      case Action::Kind::kSyncGradNorm: s += "N"; break;
      case Action::Kind::kStep: s += "S"; break;
    }
  }
  return s;
}

}  // namespace slowpipe::runtime
