// `slowpipe profile SPEC --out P.json` (measured here with the worker's own code, or analytic for a
// named GPU) and `slowpipe simulate SPEC --profile P --out DIR`.
#include <torch/torch.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <thread>

#include "compression/codec.h"
#include "compression/frame.h"
#include "emulator/shaped_socket.h"
#include "experiments/profile_targets.h"
#include "experiments/sweep.h"
#include "runtime/dp/grad_sync.h"
#include "runtime/exec/stage_runner.h"
#include "runtime/launch/launcher.h"
#include "runtime/records/progress.h"
#include "runtime/records/result.h"
#include "simulator/measure.h"
#include "simulator/place.h"
#include "simulator/simulate.h"
#include "tools/commands.h"

namespace slowpipe::tools {
namespace {

using nlohmann::json;
using simulator::HostSpeedOptions;
using simulator::measuredProfile;
using simulator::runProfileUnit;

}  // namespace

namespace {

// `slowpipe profile`: measured here, analytic for a GPU, or the median of measured profiles.
void addProfileCommand(CLI::App& app) {
  auto spec = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto device = std::make_shared<std::string>(), dtype = std::make_shared<std::string>("bf16");
  auto mfu = std::make_shared<double>(0.4);
  auto reps = std::make_shared<int>(5);
  auto codecs = std::make_shared<std::vector<std::string>>();
  auto host = std::make_shared<HostSpeedOptions>();
  auto merge = std::make_shared<std::vector<std::string>>();
  auto sets = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand(
      "profile", "cost profile for the simulator: measured here, or analytic for a GPU");
  cmd->add_option(
      "spec", *spec,
      "experiment spec, or a sweep (its base, with every codec of its compression axis)");
  cmd->add_option("--out", *out, "profile JSON")->required();
  cmd->add_option("--analytic", *device, "analytic profile of a GPU: V100, A100, H100, H200, H800");
  cmd->add_option("--dtype", *dtype, "analytic: fp32, fp16 or bf16")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  cmd->add_option("--mfu", *mfu, "analytic: model-FLOPs utilisation in (0, 1]");
  cmd->add_option("--reps", *reps, "measured: steps timed per stage")->check(CLI::Range(1, 1000));
  cmd->add_option("--codec", *codecs,
                  "measured: also time this codec (repeatable; e.g. every codec of a sweep)");
  cmd->add_option("--host-window", host->windowS, "measured: seconds each host-speed window lasts")
      ->check(CLI::Range(0.05, 60.0));
  cmd->add_option("--host-reps", host->reps, "measured: host-speed windows per setting (median)")
      ->check(CLI::Range(1, 100));
  cmd->add_flag("--host-from-run", host->fromRun,
                "measured: fit host_speed to a real pipelined run of the spec here (every step's "
                "timeline) instead of "
                "n stage processes computing side by side");
  cmd->add_flag("--dedicated", host->dedicated,
                "measured: each worker gets a processor of its own (a GPU per stage): host_speed "
                "1, not measured");
  cmd->add_option(
      "--set", *sets,
      "PATH=VALUE: set a field of the spec (a sweep's base; repeatable), e.g. runtime.device=cuda");
  cmd->add_option("--merge", *merge,
                  "instead of measuring: the per-field median of these measured profiles of "
                  "the same spec (taken at different times: this machine's speed drifts)");
  cmd->callback([=] {
    if (!merge->empty()) {
      std::vector<simulator::Profile> ps;
      for (const auto& m : *merge) ps.push_back(simulator::loadProfile(m));
      const simulator::Profile p = simulator::medianProfile(ps);
      runtime::writeJsonAtomically(*out, simulator::toJson(p));
      std::printf("median of %zu profiles -> %s\n", ps.size(), out->c_str());
      return;
    }
    if (spec->empty())
      throw std::invalid_argument("profile: give a spec to measure, or --merge P1 P2 ...");
    const experiments::ProfileTargets t =
        experiments::profileTargets(runtime::readSpecFile(*spec), *sets, *codecs);
    const runtime::RunSpec& s = t.spec;
    runtime::ProgressLine line;
    const double t0 = emulator::monotonicNow();
    const simulator::Profile p =
        device->empty()
            ? measuredProfile(
                  t.runJson, s, *reps, t.codecs, *host, t.dpVariants, t.schedules,
                  [&](int64_t done, int64_t total) {
                    line.milestone(
                        "profile: " + runtime::progressText(done, total,
                                                            emulator::monotonicNow() - t0, "parts"),
                        done, total);
                  })
            : simulator::analyticProfile(s, *device, *dtype, *mfu);
    line.finish();
    runtime::writeJsonAtomically(*out, simulator::toJson(p));
    for (size_t i = 0; i < p.stages.size(); ++i)
      std::printf("stage %zu: forward %.6f s, backward %.6f s per micro-batch, step %.6f s\n", i,
                  p.stages[i].forwardS, p.stages[i].backwardS, p.stages[i].stepS);
    std::printf("profile -> %s\n", out->c_str());
  });
}

// `slowpipe profile-unit` (internal): the child side of the side-by-side host-speed measurement.
void addProfileUnitCommand(CLI::App& app) {
  auto spec = std::make_shared<std::string>();
  auto stage = std::make_shared<int>(0);
  auto window = std::make_shared<double>(1.0);
  auto* cmd = app.add_subcommand("profile-unit",
                                 "one stage's work in a loop (started by `slowpipe profile`)");
  cmd->group("");  // internal
  cmd->add_option("--spec", *spec)->required();
  cmd->add_option("--stage", *stage)->required();
  cmd->add_option("--window", *window)->required();
  cmd->callback([=] { std::exit(runProfileUnit(*spec, *stage, *window)); });
}

// `slowpipe simulate SPEC --profile P --out DIR`.
// The spec as the simulator reads it (--set applied; errors name the file).
runtime::RunSpec simulationSpec(const std::string& file, const std::vector<std::string>& sets) {
  json j = runtime::readSpecFile(file);
  for (const auto& a : sets) runtime::applySet(j, a);
  try {
    return runtime::runSpecFromJson(j, "spec", /*simulation=*/true);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("'" + file + "'" + (sets.empty() ? "" : " with --set") + ": " +
                                e.what());
  }
}

// Where the profile costs each codec: on this host's CPU (no device path) or on the device.
void sayWhereCodecsRun(const simulator::Profile& p) {
  const json places =
      p.device.value("codecs", json::object());  // a named copy: items() must not outlive it
  for (const auto& [codec, place] : places.items())
    if (place.value("runs_on", "") == "host")
      std::fprintf(stderr,
                   "simulate: codec %s has no device path: costed on this host's CPU at %.3g "
                   "GB/s encode, %.3g GB/s decode\n",
                   codec.c_str(), place["encode_bytes_per_s"].get<double>() / 1e9,
                   place["decode_bytes_per_s"].get<double>() / 1e9);
    else if (place.contains(
                 "encode_bytes_per_s"))  // declared (spec, plug-in) or derived (FLOPs): say which
      std::fprintf(
          stderr,
          "simulate: codec %s costed on the device, %s: %.3g GB/s encode, %.3g GB/s decode\n",
          codec.c_str(), place.value("source", "").c_str(),
          place["encode_bytes_per_s"].get<double>() / 1e9,
          place["decode_bytes_per_s"].get<double>() / 1e9);
}

// `simulate`'s options: the run's epochs and evaluations from its corpus when it is at hand (else
// declared by --steps-per-epoch), a quality curve for the evaluations' losses.
simulator::SimOptions simulateOptions(const runtime::RunSpec& s, int steps, bool messages,
                                      int64_t stepsPerEpoch, const std::string& quality,
                                      double targetLoss) {
  simulator::SimOptions o;
  o.steps = steps;
  o.recordMessages = messages;
  std::string why;
  if (!simulator::dataPlanOf(s, &o, &why) && stepsPerEpoch == 0)
    std::fprintf(stderr,
                 "simulate: no data plan (%s): the run's first steps (epoch 0: AC-SGD sends them "
                 "in full), no evaluation; --steps-per-epoch N declares the plan\n",
                 why.c_str());
  if (stepsPerEpoch > 0) simulator::declareStepsPerEpoch(s, stepsPerEpoch, &o);
  if (!quality.empty()) simulator::qualityCurveOf(quality, &o);
  if (targetLoss > 0 && quality.empty())
    throw std::invalid_argument("--target-loss needs --quality (the losses come from a curve)");
  return o;
}

// No silent wait on a long replay: past 2 s (SLOWPIPE_PROGRESS_AFTER_S) a progress line (a line
// per 10% in a log); nothing on a short one.
class QuietProgress {
 public:
  QuietProgress() {
    const char* after = std::getenv("SLOWPIPE_PROGRESS_AFTER_S");
    quietS_ = after ? std::atof(after) : 2.0;
  }
  void operator()(int64_t done, int64_t total) {
    const double t = emulator::monotonicNow() - started_;
    if (t < quietS_ && !shown_) return;
    shown_ = true;
    line_.milestone("simulate: " + runtime::progressText(done, total, t), done, total);
  }
  void finish() {
    if (shown_) line_.finish();
  }

 private:
  runtime::ProgressLine line_;
  double started_ = emulator::monotonicNow(), quietS_ = 2.0;
  bool shown_ = false;
};

void addSimulateCommand(CLI::App& app) {
  auto spec = std::make_shared<std::string>(), out = std::make_shared<std::string>(),
       profile = std::make_shared<std::string>();
  auto steps = std::make_shared<int>(0);
  auto sets = std::make_shared<std::vector<std::string>>();
  auto messages = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("simulate",
                                 "replay a run's schedules over its link model in virtual time");
  cmd->add_flag(
      "--messages", *messages,
      "record every message (from, to, step, micro-batch, chunk, round, kind, bytes, sent_s, "
      "arrival_s) in result.json's \"messages\"");
  cmd->add_option("spec", *spec, "experiment spec (JSON)")->required();
  cmd->add_option("--set", *sets,
                  "PATH=VALUE: set a spec field (repeatable), e.g. runtime.slowdown='[{\"rank\": "
                  "1, \"speed\": 0.5}]'");
  cmd->add_option("--profile", *profile,
                  "profile JSON (slowpipe profile), or analytic:DEVICE[,dtype=bf16,mfu=0.4]")
      ->required();
  cmd->add_option("--out", *out, "output folder (result.json)")->required();
  cmd->add_option(
         "--steps", *steps,
         "steps replayed back to back (default: every step of the run when a link follows a trace "
         "or a straggler's speed changes, else 4; "
         "with data parallelism training.max_steps, else qadam's warm-up + 4 x dp.local_steps)")
      ->check(CLI::Range(2, 100000));
  auto stepsPerEpoch = std::make_shared<int64_t>(0);
  auto quality = std::make_shared<std::string>();
  auto targetLoss = std::make_shared<double>(0);
  cmd->add_option("--steps-per-epoch", *stepsPerEpoch,
                  "the run's steps per epoch (its dataset / global batch) where the spec's corpus "
                  "is not the one it would train on, e.g. a projection at paper scale")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  cmd->add_option("--quality", *quality,
                  "a quality curve: an emulated run's result.json of the same codec, or [[step, "
                  "val_loss], ...]; "
                  "mapped onto the replay by progress, it gives the evaluations their loss");
  cmd->add_option("--target-loss", *targetLoss,
                  "with --quality: print the simulated time to this validation loss")
      ->check(positiveNumber());
  cmd->callback([=] {
    const runtime::RunSpec s = simulationSpec(*spec, *sets);
    const simulator::Profile p = simulator::profileFor(*profile, s);
    sayWhereCodecsRun(p);
    simulator::SimOptions o =
        simulateOptions(s, *steps, *messages, *stepsPerEpoch, *quality, *targetLoss);
    QuietProgress progress;
    o.progress = [&progress](int64_t done, int64_t total) { progress(done, total); };
    const json doc = simulator::simulateRun(s, p, o);
    progress.finish();
    std::filesystem::create_directories(*out);
    runtime::writeJsonAtomically(*out + "/result.json", doc);
    const auto& sum = doc["summary"];
    std::printf(
        "%s (simulated, %s): step %.6f s, %.0f tokens/s, wait share %.3f -> %s/result.json\n",
        s.name.c_str(), s.network.model.c_str(), sum["mean_step_time_s"].get<double>(),
        sum["throughput_tokens_per_s"].get<double>(), sum["wait_share"].get<double>(),
        out->c_str());
    std::printf("%s", simulator::projectionText(doc, *targetLoss).c_str());
  });
}

// `place`'s answer: how many placements were replayed, the naive one, the best, the gain.
void printPlacements(const runtime::RunSpec& s, const json& r) {
  std::printf(
      "%s on %s: %s search, %lld placements replayed%s\n", s.name.c_str(),
      r["network"].get<std::string>().c_str(), r["method"].get<std::string>().c_str(),
      static_cast<long long>(r["evaluated"].get<int64_t>()),
      r["space"].is_null() ? "" : (" of " + std::to_string(r["space"].get<int64_t>())).c_str());
  std::printf("  naive (rank order)  %10.4f s  %s\n", r["naive"]["step_s"].get<double>(),
              r["naive"]["placement"].dump().c_str());
  for (size_t i = 0; i < r["best"].size(); ++i)
    std::printf("  #%-2zu                %10.4f s  %s\n", i + 1,
                r["best"][i]["step_s"].get<double>(), r["best"][i]["placement"].dump().c_str());
  if (!r["gain_over_naive"].is_null())
    std::printf("  gain of #1 over naive: %.3fx\n", r["gain_over_naive"].get<double>());
}

// `slowpipe place SPEC --network FILE --profile P`: the best placements of the stages on the nodes.
void addPlaceCommand(CLI::App& app) {
  auto spec = std::make_shared<std::string>(), network = std::make_shared<std::string>(),
       profile = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto sets = std::make_shared<std::vector<std::string>>();
  auto opt = std::make_shared<simulator::PlaceOptions>();
  auto steps = std::make_shared<int>(0);
  auto* cmd = app.add_subcommand(
      "place",
      "search placements of the stages on network.nodes with the simulator and print the best");
  cmd->add_option("spec", *spec, "experiment spec (JSON)")->required();
  cmd->add_option("--network", *network,
                  "network file (experiments/networks/*.json); default: the spec's network.nodes");
  cmd->add_option("--profile", *profile,
                  "profile JSON (slowpipe profile), or analytic:DEVICE[,dtype=bf16,mfu=0.4]")
      ->required();
  cmd->add_option("--set", *sets, "PATH=VALUE: set a spec field (repeatable)");
  cmd->add_option("--top", opt->top, "placements reported (default 5)")->check(CLI::Range(1, 1000));
  cmd->add_option(
      "--method", opt->method,
      "auto (exhaustive up to --max-exhaustive placements, else local), exhaustive, local");
  cmd->add_option("--max-exhaustive", opt->maxExhaustive,
                  "auto: exhaustive up to this many placements (default 5040)");
  cmd->add_option("--search-steps", opt->searchSteps,
                  "steps each candidate is replayed for (default 3)")
      ->check(CLI::Range(2, 1000));
  cmd->add_option("--steps", *steps,
                  "steps the reported placements are replayed for (default: as simulate)")
      ->check(CLI::Range(2, 10000));
  cmd->add_option("--per-node", opt->perNode, "ranks a node may host (default 1)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--restarts", opt->restarts,
                  "local search: random starts besides rank order (default 8)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--budget", opt->budget,
                  "local search: candidates replayed at most (default 4000)")
      ->check(CLI::Range(1, 100000000));
  cmd->add_option("--seed", opt->seed, "local search: seed of the random starts (default 1)");
  cmd->add_option("--out", *out, "write the search's JSON here");
  cmd->callback([=] {
    json j = runtime::readSpecFile(*spec);
    for (const auto& a : *sets) runtime::applySet(j, a);
    if (!network->empty()) j["network"]["nodes"] = *network;
    runtime::RunSpec s;
    try {
      s = runtime::runSpecFromJson(j, "spec", /*simulation=*/true);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(
          "'" + *spec + "'" + (sets->empty() && network->empty() ? "" : " with --set / --network") +
          ": " + e.what());
    }
    const simulator::Profile p = simulator::profileFor(*profile, s);
    simulator::SimOptions o;
    o.steps = *steps;
    std::string why;
    if (!simulator::dataPlanOf(s, &o, &why))
      std::fprintf(stderr, "place: no data plan (%s): no epochs, no evaluation\n", why.c_str());
    runtime::ProgressLine line;
    const double t0 = emulator::monotonicNow();
    simulator::PlaceOptions withProgress = *opt;
    withProgress.progress = [&](int64_t done, int64_t total) {
      line.milestone(
          "place: " + runtime::progressText(done, total, emulator::monotonicNow() - t0, "replays"),
          done, total);
    };
    const json r = simulator::searchPlacements(s, p, withProgress, o);
    line.finish();
    if (!out->empty()) runtime::writeJsonAtomically(*out, r);
    printPlacements(s, r);
  });
}

// `slowpipe fit-host-speed --profile P RUN.json...`.
void addFitHostSpeedCommand(CLI::App& app) {
  auto profile = std::make_shared<std::string>();
  auto runs = std::make_shared<std::vector<std::string>>();
  auto firstStep = std::make_shared<int>(0);
  auto* cmd = app.add_subcommand(
      "fit-host-speed",
      "the host speeds a finished run's timeline shows against a profile's stage costs "
      "(simulator::fitHostSpeed, as profile --host-from-run fits its calibration run)");
  cmd->add_option("--profile", *profile,
                  "measured profile (its stage costs; its host_speed's length = workers)")
      ->required();
  cmd->add_option("--first-step", *firstStep,
                  "leave out events of earlier steps (events without a step count as step 0)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("runs", *runs, "result.json files of runs of that profile's spec")->required();
  cmd->callback([=] {
    const simulator::Profile p = simulator::loadProfile(*profile);
    const int workers =
        static_cast<int>(p.hostSpeed.empty() ? p.stages.size() : p.hostSpeed.size());
    // One JSON line per run: raw_speed[n - 1] is null where n stages computed too briefly to fit.
    for (const auto& path : *runs) {
      const json r = runtime::readJsonFile(path, "run result");
      json line = {{"run", path}, {"status", r.value("status", "")}};
      if (r.contains("spec") && r["spec"].contains("pipeline"))
        line["schedule"] = r["spec"]["pipeline"].value("schedule", "");
      if (line["status"] == "ok" && r.contains("timeline") && !r["timeline"].empty()) {
        try {
          const simulator::HostSpeedFit fit =
              simulator::fitHostSpeed(r["timeline"], p.stages, workers, *firstStep, {});
          json raw = json::array();
          for (int n = 0; n < workers; ++n)
            raw.push_back(fit.fitted[n] ? json(fit.rawSpeed[n]) : json());
          line["raw_speed"] = raw;
          line["events"] = fit.events;
        } catch (const std::exception&
                     e) {  // e.g. a singular system: said for this run, the others go on
          line["error"] = e.what();
        }
      }
      std::printf("%s\n", line.dump().c_str());
    }
  });
}

}  // namespace

void addSimCommands(CLI::App& app) {
  addProfileCommand(app);
  addProfileUnitCommand(app);
  addSimulateCommand(app);
  addPlaceCommand(app);
  addFitHostSpeedCommand(app);
}

}  // namespace slowpipe::tools
