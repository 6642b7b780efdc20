// `slowpipe run`, `worker` (started by the launcher), `pretrain`, `data prepare`.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/launch/launcher.h"
#include "runtime/launch/worker.h"
#include "runtime/model/data.h"
#include "runtime/records/progress.h"
#include "runtime/records/result.h"
#include "tools/commands.h"

namespace slowpipe::tools {

using nlohmann::json;

namespace {

// `slowpipe run SPEC --out DIR`.
void addRunCommand(CLI::App& app) {
  auto spec = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  auto sets = std::make_shared<std::vector<std::string>>();
  auto* cmd =
      app.add_subcommand("run", "run one experiment: start the workers, write DIR/result.json");
  cmd->add_option("spec", *spec, "experiment spec (JSON)")->required();
  cmd->add_option(
      "--set", *sets,
      "PATH=VALUE: set a spec field (repeatable), e.g. compression.forward=quant:bits=4");
  cmd->add_option("--out", *out, "output folder")->required();
  cmd->add_flag("--quiet", *quiet, "no progress line");
  cmd->callback([=] {
    const runtime::RunSpec s =
        runtime::loadRunSpec(*spec, *sets);  // fails before any process starts
    runtime::LaunchOptions o;
    o.outDir = *out;
    o.progress = !*quiet;
    const int rc = runtime::launchRun(s, o);
    const json r = runtime::readJsonFile(*out + "/result.json", "the run's result");
    if (rc != 0) {
      std::fprintf(stderr, "slowpipe run: failed: %s\n", r.value("reason", "unknown").c_str());
      std::exit(1);
    }
    const auto& sum = r["summary"];
    std::printf("%s: %lld steps, %.0f tokens/s, final val loss %s -> %s/result.json\n",
                s.name.c_str(), static_cast<long long>(sum["steps"].get<int64_t>()),
                sum.value("throughput_tokens_per_s", 0.0),
                sum.contains("final_val_loss") ? sum["final_val_loss"].dump().c_str() : "-",
                out->c_str());
  });
}

// `slowpipe worker`: one worker process (mpirun / srun / torchrun, or a child of `slowpipe run`).
void addWorkerCommand(CLI::App& app) {
  auto a = std::make_shared<runtime::WorkerArgs>();
  auto x = std::make_shared<runtime::ExternalWorkerArgs>();
  auto* cmd =
      app.add_subcommand("worker",
                         "one worker process: started by mpirun / srun / torchrun-style scripts "
                         "(docs/clusters.md), or internally by `slowpipe run`");
  cmd->add_option("--spec", a->specPath,
                  "experiment spec (rank 0 reads it; the others take it from the rendezvous)");
  cmd->add_option("--out", x->outDir, "output folder on rank 0's host (result.json)");
  cmd->add_option("--rendezvous", x->rendezvous,
                  "HOST:PORT where rank 0 listens (default: MASTER_ADDR:MASTER_PORT)");
  cmd->add_option(
      "--bind", x->bindHost,
      "address this worker's sockets bind (default: its address toward the rendezvous)");
  cmd->add_option("--size", x->size, "world size (default: from the launcher's environment)");
  cmd->add_option("--join-timeout", x->joinTimeoutS,
                  "seconds to wait for every rank at the rendezvous")
      ->check(CLI::Range(1.0, 3600.0));
  cmd->add_option("--rank", a->rank,
                  "this worker's rank (default: from the launcher's environment)");
  cmd->add_option("--control", a->control)->group("");  // internal: started by `slowpipe run`
  cmd->add_option("--peers", a->peers)->group("");
  cmd->add_option("--netns", a->netns);
  cmd->add_option("--bind-prev", a->bindPrev);
  cmd->add_option("--bind-next", a->bindNext);
  cmd->add_option("--launcher-pid", a->launcherPid);
  auto keep = std::make_shared<std::string>(), crashFile = std::make_shared<std::string>();
  auto keepPid = std::make_shared<int>(0);
  cmd->add_option("--keep-result", *keep)->group("");  // internal: rank 0's result keeper
  cmd->add_option("--keep-pid", *keepPid)->group("");
  cmd->add_option("--crash-file", *crashFile)->group("");
  cmd->callback([a, x, cmd, keep, keepPid, crashFile] {
    if (!keep->empty()) std::exit(runtime::keepResult(*keepPid, *keep, *crashFile));
    if (!a->control.empty()) std::exit(runtime::runWorker(*a));  // a child of `slowpipe run`
    x->specPath = a->specPath;
    x->rank = cmd->count("--rank") ? a->rank : -1;
    std::exit(runtime::runExternalWorker(*x));
  });
}

// `slowpipe pretrain SPEC --out CKPT`.
void addPretrainCommand(CLI::App& app) {
  auto spec = std::make_shared<std::string>(), out = std::make_shared<std::string>(),
       log = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "pretrain", "train a base model in one process on the pretrain split, save a checkpoint");
  cmd->add_option("spec", *spec, "spec whose model, data and training sections are used")
      ->required();
  cmd->add_option("--out", *out, "checkpoint path")->required();
  cmd->add_option("--log", *log, "write the per-step records as JSON here");
  cmd->callback([=] {
    runtime::RunSpec s = runtime::loadRunSpec(*spec);
    s.training.initCheckpoint.clear();
    runtime::prepareCorpus(s.data);
    s.runtime.threadsPerWorker = static_cast<int>(std::thread::hardware_concurrency());
    json records = json::array();
    runtime::ProgressLine line;
    const double t0 = emulator::monotonicNow();
    runtime::runSingleProcess(
        s, "pretrain",
        [&](const json& r) {
          records.push_back(r);
          char text[128];
          if (r["type"] == "eval") {
            line.finish();
            std::fprintf(stderr, "epoch %d val loss %s\n", r["epoch"].get<int>(),
                         r["val_loss"].dump().c_str());
          } else {
            const int64_t done = r["step"].get<int64_t>() + 1,
                          total = r.value("total_steps", int64_t{0});
            std::snprintf(text, sizeof text, " loss %.4f", r["loss"].get<double>());
            line.milestone(
                "pretrain: " + runtime::progressText(done, total, emulator::monotonicNow() - t0) +
                    text,
                done, total);
          }
        },
        *out);
    line.finish();
    if (!log->empty()) runtime::writeJsonAtomically(*log, records);
    std::printf("\nsaved %s\n", out->c_str());
  });
}

// `slowpipe data prepare SPEC`.
void addDataCommand(CLI::App& app) {
  auto data = app.add_subcommand("data", "corpus preparation");
  data->require_subcommand(1);
  auto spec = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  auto* prep = data->add_subcommand("prepare", "build the token files of a spec's data section");
  prep->add_option("spec", *spec, "experiment spec")->required();
  prep->add_flag("--force", *force, "rebuild even if up to date");
  prep->callback([=] {
    const auto s = runtime::loadRunSpec(*spec);
    const auto info = runtime::prepareCorpus(s.data, *force);
    const runtime::ExampleSet train(s.data, "finetune", "train", s.model.seqLen),
        val(s.data, "finetune", "val", s.model.seqLen);
    std::printf(
        "%s: %zu files, pretrain %lld tokens, finetune %lld tokens (%lld train / %lld val examples "
        "of %d)\n",
        info.dir.c_str(), info.files.size(), static_cast<long long>(info.pretrainTokens),
        static_cast<long long>(info.finetuneTokens), static_cast<long long>(train.size()),
        static_cast<long long>(val.size()), s.model.seqLen);
  });
}

}  // namespace

void addRunCommands(CLI::App& app) {
  addRunCommand(app);
  addWorkerCommand(app);
  addPretrainCommand(app);
  addDataCommand(app);
}

}  // namespace slowpipe::tools
