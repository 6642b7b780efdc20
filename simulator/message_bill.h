// What each message of a replay costs, as the run's codecs send it: its wire bytes (the codecs'
// own frames, AC-SGD's first sightings in full and the rows a pipeline has met before as deltas)
// and the host seconds of its encode, decode and transport share (the profile's costs). Part of
// the replay (simulate.cc); torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/dp/dp.h"
#include "runtime/exec/ranks.h"
#include "runtime/exec/schedule.h"
#include "runtime/spec/spec.h"
#include "simulator/profile.h"
#include "simulator/replay_plan.h"
#include "simulator/replay_state.h"
#include "simulator/simulate.h"

namespace slowpipe::simulator {

class MessageBill {
 public:
  MessageBill(const runtime::RunSpec& spec, const Profile& profile, const SimOptions& opt,
              const runtime::RankLayout& layout, const ReplayPlan& plan, int steps);

  // Wire bytes of rank i's send action `a` in its state `st`, and its host seconds (encode +
  // transport share); the step record in `st` counts its raw and wire bytes. DP: a ring all-gather
  // relays the frame it received (no encode), and the owner of a chunk (a PS server of a shard)
  // encodes it once per round and decodes its own frame too.
  int64_t send(int i, const runtime::Action& a, RankState& st, double* seconds);
  // Host seconds of receiving `bytes` for rank i's receive action `a` (transport share + decode).
  double receive(int i, const runtime::Action& a, const RankState& st, int64_t bytes);
  // Values of chunk c of rank i's round in hand (as runtime/dp/dp.h splits the round's buffer).
  int64_t chunkValues(int i, int round, int chunk) const;
  // What the DP rounds cost on the host per stage.
  const DpCost& dpCost(int stage) const { return dpCosts_.at(static_cast<size_t>(stage)); }
  // The result's "message_bytes".
  nlohmann::json record() const;

 private:
  void freshRows();
  int fresh(int k, int r, int mb) const;
  double evalRawBytes(int batch) const;
  int64_t evalFrameBytes(int batch);
  int64_t tensorFrameBytes(runtime::Action::Message m, int newRows);
  const CodecCost& codecCost(const std::string& spec);
  int64_t frameBytes(const std::string& codec, int64_t values);
  const std::string& dpCodec(int step);

  const runtime::RunSpec& spec_;
  const Profile& profile_;
  const SimOptions& opt_;
  const runtime::RankLayout& layout_;
  const ReplayPlan& plan_;  // the run's epoch of a step
  int R_, steps_;
  int64_t rawActBytes_ = 0, fwdBytes_ = 0, bwdBytes_ = 0, ctlBytes_ = 0;
  int64_t fwdFirstBytes_ = 0, bwdFirstBytes_ = 0;  // the first epoch's (first sightings)
  std::vector<std::vector<int64_t>> dpValues_;     // [stage][round]: values of the round's buffer
  std::vector<DpCost> dpCosts_;                    // [stage]
  std::vector<std::vector<int>> fresh_;            // [step][replica x M + mb]: freshRows
  std::map<std::pair<bool, int>, int64_t> mixedBytes_;  // (forward, fresh rows): frame bytes
  std::map<std::string, const CodecCost*> codecCosts_;
  std::map<int, std::string> dpCodecs_;
  std::map<std::pair<std::string, int64_t>, int64_t> frameBytes_;
  std::map<int, int64_t> evalFrames_;  // frame bytes of an evaluation message, by rows
};

}  // namespace slowpipe::simulator
