// Cost profiles for the simulator: how long each stage's forward and backward of one micro-batch
// take, the optimizer step, and each codec's encode/decode cost. Two sources:
//   measured  - `slowpipe profile SPEC`: the worker's own code timed on this machine;
//   analytic  - FLOPs of the model's blocks (its family's shapes: runtime/model/model_size.h) x
//               (peak FLOP/s x MFU) of a named device, codec costs from its memory bandwidth.
//               Every assumed number is written into the profile.
// File format (JSON, "schema": "slowpipe.profile/1"):
//   {"source": "measured"|"analytic", "device": {...}, "host_cores": C, "stages": [{"forward_s",
//   "backward_s",
//    "step_s", ["backward_input_s", "backward_weight_s"] (split backwards), "dp": {"<dpCostKey>":
//    {"begin_s": [per round], "end_s": [per round], "outer_step_s"}}, "warmup_s": {"<kind>": s},
//    "idle_extra_s": {"after_s": [s, ...], "<kind>": [s per after_s]}}, ...], "codecs": {"<spec>" |
//    "default": {"encode": {"a_s", "b_s_per_byte"}, "decode": {...}}}}
// A codec's cost for a message of B raw (fp32) bytes is a_s + b_s_per_byte * B.
// host_cores: the stages share one host of C cores for all their work (a profile measured here,
// where every worker is a process on this machine): n > C busy stages each run at C/n of full
// speed. 0 or absent: every stage has a device of its own (GPU profiles). host_speed (measured
// profiles): [v1, v2, ...], the speed of each busy stage, relative to running alone, while n stages
// are busy at once; it replaces min(1, C/n) for the n it covers. host_speed_by_schedule (measured
// profiles, optional): {"gpipe": [v1, ...], "1f1b": [...]}, the same speeds fitted to a real run of
// each schedule (`profile --host-from-run` on a sweep whose points use several): on 2 shared cores
// the order of the work changes what it costs (1F1B's backward right after its forward ran 5-10%
// cheaper per step than GPipe's). A run uses its schedule's speeds; a schedule not named uses
// host_speed. transport (measured profiles): {"a_s", "b_s_per_byte"}, host CPU time of moving one
// message of B wire bytes over the workers' transport; the simulator bills half to the sender after
// its encode and half to the receiver before its decode, as host work.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/exec/schedule.h"
#include "runtime/spec/spec.h"

namespace slowpipe::simulator {

struct AffineCost {
  double aS = 0, bSPerByte = 0;
  double at(double bytes) const { return aS + bSPerByte * bytes; }
};

struct CodecCost {
  AffineCost encode, decode;
};

// Data parallelism (pipeline.replicas > 1), per DP round: DpBegin (pack what is synchronised) and
// DpEnd (write the mean back; PowerSGD: QR and P Q^T); OuterStep (DiLoCo's outer step, qadam's
// update). They depend on the gradient compressor, so a profile holds them per dpCostKey.
struct DpCost {
  std::vector<double> beginS, endS;
  double outerStepS = 0;
  DpCost& operator+=(const DpCost& o) {  // two model chunks' work, packed into one round
    for (auto [mine, theirs] : {std::pair{&beginS, &o.beginS}, std::pair{&endS, &o.endS}}) {
      mine->resize(std::max(mine->size(), theirs->size()), 0.0);
      for (size_t i = 0; i < theirs->size(); ++i) (*mine)[i] += (*theirs)[i];
    }
    outerStepS += o.outerStepS;
    return *this;
  }
};
// "dp.codec" and, with local steps, " local_steps=H": what DpCost depends on.
std::string dpCostKey(const runtime::RunSpec& spec);

struct StageCost {
  double forwardS = 0, backwardS = 0;  // one micro-batch
  double stepS = 0;                    // optimizer step (and gradient-norm work), once per step
  std::map<std::string, DpCost> dp;    // by dpCostKey (measured profiles)
  // A backward split in two (zero-bubble schedules): the input-gradient part and the deferred
  // weight-gradient part of one micro-batch, measured as the worker runs them (0: not measured;
  // profiles of a schedule that splits backwards have both).
  double backwardInputS = 0, backwardWeightS = 0;
  // The run's first step (warm-up): the extra seconds its compute events of each kind ("forward",
  // "backward", "backward_input", "backward_weight", "step") took on this stage over the same
  // events later, summed over the step's micro-batches (lazy allocations, thread pools, first
  // touch of the optimizer state). Fitted to a real run (profile --host-from-run,
  // fitWarmup); absent: none (analytic profiles). The simulator adds a kind's extra to the first
  // such event of step 0.
  std::map<std::string, double> warmupS{};
  // Compute after a wait (measured profiles; `stages[].idle_extra_s`): on a shared host a stage
  // that blocked for a while before a compute event computes it slower (its caches and TLBs
  // refilled after the other processes ran, its core woken): here a forward after 50 ms asleep took
  // 0.6-1.3 ms more than back to back. afterS: the idle lengths measured (increasing);
  // extraS[kind][k]: the extra seconds of an event of that kind ("forward", "backward", ...) after
  // afterS[k] idle (profile: the schedule's order with a sleep before each compute, minus without).
  // Empty: none (analytic profiles: a device of its own per stage).
  struct IdleExtra {
    std::vector<double> afterS;
    std::map<std::string, std::vector<double>> extraS;
    // The extra seconds of a `what` event after idleS of waiting: linear from (0, 0) through the
    // measured points, the last one's beyond it; 0 for a kind not measured.
    double at(const std::string& what, double idleS) const;
  };
  IdleExtra idle{};
  // This stage's compute in a real pipelined run relative to its cost timed alone (measured
  // profiles, `profile --host-from-run`: HostSpeedFit::stageFactor); the simulator multiplies its
  // forward, backward (parts) and step by it. 1: none.
  double runFactor = 1.0;
  // The cost of a compute action (Forward, Backward, BackwardInput, BackwardWeight, Step), by kind;
  // throws naming what to profile when a split backward's parts were not measured.
  double of(const runtime::Action& a) const;
  // The same by the timeline's event name ("forward", "backward_input", ...); < 0: not compute.
  double ofEvent(const std::string& what) const;
};

// The optimizer step of `stage` (of `stages`): its step_s summed over its model chunks (virtual
// stages stage, stage + stages, ...; `costs` has one entry per virtual stage).
double stepSeconds(const std::vector<StageCost>& costs, size_t stage, size_t stages);

struct Profile {
  std::string source = "measured";
  nlohmann::json device;          // analytic: name, dtype, peak_flops, mfu, memory_bytes_per_s, ...
  int hostCores = 0;              // > 0: the cores all stages share; 0: one device per stage
  std::vector<double> hostSpeed;  // measured speed of each busy stage with n = 1, 2, ... busy
  std::map<std::string, std::vector<double>> hostSpeedBySchedule;  // the same, fitted per schedule
  AffineCost transport;  // host CPU time per message of B wire bytes (0 on GPU profiles)
  // Speed of each of n busy stages (1 without a shared host).
  double speedWithBusy(int n) const;
  // This profile as a run of `schedule` uses it: host_speed replaced by the schedule's own, if any.
  Profile forSchedule(const std::string& schedule) const;
  std::vector<StageCost> stages;
  std::map<std::string, CodecCost> codecs;  // by canonical codec spec; "default" for the rest
  // Cost of `spec` (looked up by the canonical spec, then the codec name, then "default").
  const CodecCost& codec(const std::string& spec) const;
  // Stage `stage`'s DP costs for `spec`'s data parallelism: measured (by dpCostKey), or on analytic
  // profiles from memory traffic (DpBegin / DpEnd 8 bytes per value of the round's buffer,
  // OuterStep 16 bytes per parameter, at the device's memory bandwidth). Throws naming the key a
  // measured profile lacks.
  DpCost dpCost(const runtime::RunSpec& spec, int stage) const;
};

nlohmann::json toJson(const Profile& p);
Profile profileFromJson(const nlohmann::json& j, const std::string& where);
Profile loadProfile(const std::string& path);
// Per-field median of measured profiles of the same spec (same stages, host speeds of the same
// length, the same codecs): one profile from measurements taken at different times. Throws naming
// the field that does not match.
Profile medianProfile(const std::vector<Profile>& ps);

// Per event kind, what an event that waited idle seconds before it costs on stage v of `stages`:
// its profiled cost (a step: every model chunk's of stage v, stepSeconds) plus the stage's idle
// extra; < 0: not a compute event, or a part the profile did not measure.
double eventCost(const std::vector<StageCost>& stages, size_t v, size_t pipelineStages,
                 const std::string& what, double idleS);

// The first step's extra compute per (virtual) stage and event kind (StageCost::warmupS) in a real
// run's timeline of every step (runtime.timeline "all"): per kind, the summed wall time of its
// step-0 events minus as many times the median of the same events at steps >= 2 (clamped at 0),
// averaged over the rows (replicas) of a stage. `stages`: the number of virtual stages of the
// profile.
std::vector<std::map<std::string, double>> fitWarmup(const nlohmann::json& timeline, size_t stages);

// host_speed fitted to a real pipelined run on this host (`slowpipe profile --host-from-run`): its
// timeline of every step (runtime.timeline "all"). While a compute event (forward, backward or
// step of stage s, at steps >= firstStep) ran, n(t) ranks computed; at speeds v_n its work is
// sum_n v_n T_n, where T_n is the event's wall time with n ranks computing, and should equal the
// profiled cost of that event. v = the least-squares solution over all events, each v_n clamped to
// [0.05, 1.5] (host_speed's range); an n computing for less than 2% of the events' time keeps
// fallback[n - 1]. The fitted v_1 is kept as it is (it was once divided out as drift): in four full
// validations the emulated runs' own timelines, fitted the same way, ran a lone stage at 0.89-1.01
// of the profiled cost, so neither choice is right every time; the factor common to a grid is what
// tools/validate_sim_cv.py calibrates out, leave one point out (results/README.md section 7).
struct HostSpeedFit {
  std::vector<double> speed;        // v_1 .. v_workers (clamped)
  std::vector<double> rawSpeed;     // the least-squares solution before clamping
  double loneSpeed = 1.0;           // raw v_1 (1 where n = 1 kept its fallback)
  std::vector<double> coverageS;    // wall seconds the events spent with n = 1 .. workers computing
  std::vector<bool> fitted;         // per n: solved from the events (else its fallback)
  std::vector<double> stageFactor;  // per virtual stage (perStage; else 1): StageCost::runFactor
  int events = 0;
};
// Several runs' timelines are fitted together (each one's concurrency from its own events). Each
// event's work is f_s x cost + idle extra, f_s the stage's runFactor; with perStage the factors
// are fitted too, by alternating least squares, scaled so that the events' costs keep their
// total: a stage's compute in a pipeline of processes on shared cores need not stand to the
// others as it did timed alone.
HostSpeedFit fitHostSpeed(const std::vector<nlohmann::json>& timelines,
                          const std::vector<StageCost>& stages, int workers, int firstStep,
                          const std::vector<double>& fallback, bool perStage = false);
inline HostSpeedFit fitHostSpeed(const nlohmann::json& timeline,
                                 const std::vector<StageCost>& stages, int workers, int firstStep,
                                 const std::vector<double>& fallback) {
  return fitHostSpeed(std::vector<nlohmann::json>{timeline}, stages, workers, firstStep, fallback,
                      false);
}

// Named devices: peak dense FLOP/s per dtype and memory bandwidth (vendor datasheets, SXM parts).
struct DeviceSpec {
  std::string name;
  std::map<std::string, double> peakFlops;  // "fp32", "bf16", "fp16"
  double memoryBytesPerS = 0;
};
const DeviceSpec& deviceSpec(
    const std::string& name);  // V100, A100, H100, H200; throws listing them

// Analytic profile of `spec` on `device` in `dtype` at model-FLOPs utilisation `mfu`. Its codecs
// (addCodecPlaces) are costed where they run.
Profile analyticProfile(const runtime::RunSpec& spec, const std::string& device,
                        const std::string& dtype, double mfu);
// Where each codec of `spec` (forward, backward, the data-parallel message codec) runs under an
// analytic profile, in device["codecs"][canonical spec]: one with a device path on the device (the
// profile's memory-bandwidth cost); one without (compression::devicePathMissing: plug-ins,
// TorchScript codecs, built-ins without a kernel) on the host, costed at its speed measured here
// (measureCodecOnHost), with its encode/decode bytes per second and why.
void addCodecPlaces(Profile& p, const runtime::RunSpec& spec);
// A profile from a file path, or "analytic:DEVICE[,dtype=bf16][,mfu=0.4]" built for `spec`.
Profile profileFor(const std::string& source, const runtime::RunSpec& spec);

}  // namespace slowpipe::simulator
