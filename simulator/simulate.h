// Discrete-event replay of a run in virtual time: the runtime's own per-stage action lists
// (runtime/exec/schedule.h), the emulator's own link arrival models, costs from a profile
// (simulator/profile.h), and message sizes from the codecs themselves (each message is encoded
// once, so its frame size is exact, AC-SGD deltas included).
//
// Replay: every stage walks its action list with its own clock. Forward/Backward/Step advance it by
// the profile's cost; Send advances it by the codec's encode cost and posts the message (sent at
// that time); Recv blocks until the message is there, then advances by the decode cost. Link models
// (network.model):
//   pipelined   - per directed link, arrival = max(sent, link_free) + 8B/R + latency (emulator
//                 LinkClock: latency overlaps back-to-back messages, as on a real wire);
//   serial_fifo - one inbound FIFO per receiving rank shared by forward and backward traffic,
//   billed
//                 in the receiver's retrieval order: start = max(previous arrival, sent);
//                 arrival = start + 8B/R + latency (the Protocol NanoGPT meter, SimPipelineStage).
// Stages run their steps back to back; a step's time is the longest stage's, as in emulated runs.
// Data parallelism (pipeline.replicas R > 1): S x R workers, each replaying its own step's list
// (makeSchedule with the DP rounds where the step has them), the replicas' messages over
// network.dp_links (pipelined model) sized by the round's buffer (runtime/dp/dp.h dpRoundValues)
// and the round's codec; a ring all-gather relays frames without encoding, a chunk's owner (a
// shard's server) encodes once and decodes its own frame; DpBegin/DpEnd/OuterStep cost what the
// profile says (StageCost::dpBeginS...). Records carry bytes.gradient and breakdown_s.allreduce as
// runs do.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "runtime/model/data.h"
#include "runtime/spec/spec.h"
#include "simulator/profile.h"

namespace slowpipe::simulator {

struct SimOptions {
  SimOptions() = default;
  SimOptions(int replayed) : steps(replayed) {}  // NOLINT: {n} reads as "n steps"
  // Steps replayed back to back, the run's first ones, each billed as the run has it (AC-SGD's
  // first epoch in full); 0: defaultSteps.
  int steps = 0;
  // The run's data plan (dataPlanOf; 0 / empty: unknown, e.g. a paper-scale spec without its
  // corpus): steps per epoch and the rows of each validation batch. Known, the steps carry their
  // epochs and every epoch's end replays the evaluation (training.eval_each_epoch) as the workers
  // run it (runtime/exec/schedule.h evalSchedule); unknown, every step is epoch 0 and none
  // evaluates.
  int64_t stepsPerEpoch = 0, runSteps = 0;
  std::vector<int> evalRows;
  // The epochs' example order (known with the plan): a pipeline message carries the rows its
  // replica's pipeline has seen before as deltas and the rest in full (acsgd), as the workers'
  // codecs do. With replicas, the epoch permutation moves examples between replicas, and an
  // epoch's step can meet examples the last epoch left out: neither is simply "a delta".
  std::optional<runtime::EpochPlan> epochs;
  // The result's "messages": every message's [from rank, to rank, step, micro-batch, chunk, round,
  // kind, bytes, sent_s, arrival_s] (a model's completion times, message by message).
  bool recordMessages = false;
  // A quality curve: (step, validation loss) of an emulated run of the same codec, or a curve file
  // (qualityCurveOf). Mapped onto this run by progress: the curve's point at its step s of
  // qualitySteps stands for step s x runSteps / qualitySteps; the replayed evaluations get its loss
  // there (linear between points, none before the first), so time to target is the simulated wall
  // time of the first evaluation at or below a target.
  // Called as rank 0 finishes each replayed step (done, of total): a caller's progress line.
  std::function<void(int64_t done, int64_t total)> progress;
  std::vector<std::pair<double, double>> quality;
  double qualitySteps = 0;
  std::string qualitySource;
};
// A quality curve from `path`: a result.json (its "evals": step, val_loss; qualitySteps its steps'
// count) or a JSON array of [step, val_loss] pairs (qualitySteps the last step). Throws naming the
// file and field.
void qualityCurveOf(const std::string& path, SimOptions* opt);
// The data plan of `spec` from its corpus (prepared if it is not yet): false, leaving opt as it
// is, if the corpus cannot be read (`why` says why).
bool dataPlanOf(const runtime::RunSpec& spec, SimOptions* opt, std::string* why = nullptr);
// A data plan declared rather than read (a paper-scale spec whose corpus is not at hand): N steps
// an epoch, the run's epochs and max_steps over them, and the epochs' order over N global batches
// of examples with the spec's seed (so the run's permutation moves examples between replicas as a
// corpus of that size would).
void declareStepsPerEpoch(const runtime::RunSpec& spec, int64_t n, SimOptions* opt);
// The steps `opt` with steps = 0 replays for `spec`: the whole run when its data plan is known
// (at most 100,000 steps), else 4 (with data parallelism training.max_steps, else qadam's warm-up +
// 4 x dp.local_steps).
int defaultSteps(const runtime::RunSpec& spec, const SimOptions& opt = {});

// Exact frame bytes of one message of `shape` through codec `spec` in steady state (for acsgd: a
// delta, i.e. the example was seen before).
// exampleIds: the header carries one example id per row (pipeline messages); data-parallel frames
// (a 1-D chunk) carry none.
int64_t steadyFrameBytes(const std::string& codecSpec, const std::vector<int64_t>& shape,
                         bool exampleIds = true);
// The frame of the first message of examples never seen before (acsgd: full precision; the
// simulator sizes the first epoch's pipeline messages so when the data plan is known).
int64_t firstFrameBytes(const std::string& codecSpec, const std::vector<int64_t>& shape);
// The frame of a message of `shape` whose last `seenRows` rows the codec has sent before and the
// others not (0: firstFrameBytes, shape[0]: steadyFrameBytes).
int64_t mixedFrameBytes(const std::string& codecSpec, const std::vector<int64_t>& shape,
                        int64_t seenRows);

// A result document in the result.json schema, with "simulated": true, per-step records, the
// summary, and "timeline": per stage, the last step's events {what, mb, start_s, end_s}.
nlohmann::json simulateRun(const runtime::RunSpec& spec, const Profile& profile,
                           const SimOptions& opt = {});

// What a replay projects for the whole run, in lines: its steps and epochs, total time (the last
// step's or evaluation's end), the first epoch's and later epochs' step times, and with a quality
// curve and targetLoss > 0 the time to that validation loss (or "not reached").
std::string projectionText(const nlohmann::json& doc, double targetLoss);

}  // namespace slowpipe::simulator
