// Records are structs: what a rank reports of one step (RankStepRecord) and of an evaluation
// (EvalRecord), serialised here and nowhere else; the one function that builds a result's step
// entry from every rank's record of that step (stepEntry) and the one ResultBuilder that
// assembles result.json, used alike by the launcher (and through it the cross-host coordinator)
// and the simulator. Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/exec/executor.h"
#include "runtime/exec/ranks.h"
#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

struct RankStepRecord {
  int rank = 0;
  int64_t step = 0;
  int epoch = 0;
  double timeS = 0;  // the rank's step, from its first action's start to its last action's end
  // Where the time went: compute, codec work, waiting (receives, and sends the link's queue
  // limit held up), the data-parallel exchange's wall time (a share of the step: its encode,
  // decode and wait are in the other fields too).
  double computeS = 0, encodeS = 0, decodeS = 0, waitS = 0, dpS = 0;
  // runtime.slowdown: the part of computeS a straggler spent off the CPU (its stalls this step).
  double stallS = 0;
  // Bytes this rank sent: activations, their gradients, data-parallel messages (raw: 4 per value).
  int64_t fwdRaw = 0, fwdWire = 0, bwdRaw = 0, bwdWire = 0, gradRaw = 0, gradWire = 0;
  std::optional<double> loss;          // the last stage's mean loss of its micro-batches
  std::optional<double> gradNorm, lr;  // what the step clipped with and its learning rate
  nlohmann::json recvDelay;            // emulated: one-way times observed per inbound side
  // The rank's process over the step, every thread (compute, codecs, ZeroMQ's I/O): the CPU time
  // it got, and how often the scheduler took a CPU from one of its threads (involuntary context
  // switches: another process or a delay line woke and ran). Absent where nothing ran (simulator).
  std::optional<double> cpuS;
  std::optional<int64_t> preempted;
};
// The worker's "step" message (type, rank and the fields above).
nlohmann::json toJson(const RankStepRecord& r);
// Throws std::invalid_argument naming a missing or mistyped field.
RankStepRecord rankStepFromJson(const nlohmann::json& j);

struct EvalRecord {
  int epoch = 0;
  int64_t step = 0;               // steps before it
  double timeS = 0;               // how long it took (the slowest stage's)
  std::optional<double> valLoss;  // mean loss per token (none: not computed, or simulated)
  std::optional<double> wallS;    // when it ended, from the run's start
};
nlohmann::json toJson(const EvalRecord& e);
// Throws std::invalid_argument naming a missing or mistyped field.
EvalRecord evalRecordFromJson(const nlohmann::json& j);

// A timeline event (runtime/exec/executor.h) as results hold it: "what" (protocol::eventName),
// "mb", "start_s", "end_s", with model chunks "chunk", with every step's timeline "step".
nlohmann::json toJson(const TimelineEvent& e, bool withChunk, bool withStep);

// The result's entry of one step (README "Result JSON": time_s, tokens, loss, bytes,
// breakdown_s, breakdown_s_per_stage, ...) from the records of every rank of `layout`, indexed by
// rank: the step's time is the slowest rank's, breakdowns are means over ranks, bytes sums, the
// loss the mean over the last stage's replicas.
nlohmann::json stepEntry(const RunSpec& spec, const RankLayout& layout,
                         const std::vector<RankStepRecord>& ranks);

// One result document (result.json, schema runtime/records/result.h kResultSchema) as every
// producer builds it: the spec, one entry per step from its ranks' records (stepEntry, with when it
// ended), the evaluations, the timeline (one row per rank: stage, replica, rank and its events on
// one axis whose 0 is the earliest event), a status whose first failure stays, and at every
// snapshot the summary of the steps (summarizeSteps). What only one producer knows (the network's
// mechanism, calibration, the profile) goes in a section of its own (operator[]).
class ResultBuilder {
 public:
  ResultBuilder() = default;
  // status: "running" (a launcher, rewriting the file as it goes) or "ok" (the simulator).
  ResultBuilder(const RunSpec& spec, const RankLayout& layout, const std::string& status);
  // The entry of one step from every rank's record of it; wallS: when it ended, seconds from the
  // run's start (the simulator: virtual time).
  const nlohmann::json& addStep(const std::vector<RankStepRecord>& ranks, double wallS);
  void addEval(const EvalRecord& e);
  // The timeline: each rank's events as the worker writes them (toJson(TimelineEvent)), by rank.
  void setTimeline(const std::map<int, nlohmann::json>& eventsByRank);
  // Status "failed" with its reason (the first failure's stays); ok() marks a run that ended well.
  void fail(const std::string& reason);
  void ok();
  bool failed() const { return doc_.value("status", "") == "failed"; }
  std::string reason() const { return doc_.value("reason", ""); }
  nlohmann::json& operator[](const std::string& section) { return doc_[section]; }
  const nlohmann::json& doc() const { return doc_; }
  // The document as result.json holds it: with its summary.
  nlohmann::json snapshot() const;

 private:
  const RunSpec* spec_ = nullptr;
  RankLayout layout_;
  nlohmann::json doc_;
};

}  // namespace slowpipe::runtime
