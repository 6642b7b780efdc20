// runSweep: pretraining, resumable point runs, progress, summaries.
#include "experiments/runner.h"

#include <filesystem>
#include <fstream>

#include "emulator/shaped_socket.h"
#include "experiments/summary.h"
#include "runtime/data.h"
#include "runtime/launcher.h"
#include "runtime/result.h"
#include "runtime/worker.h"

namespace slowpipe::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json readJson(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

bool complete(const fs::path& p) {
  if (!fs::exists(p)) return false;
  try {
    return readJson(p).value("status", "") == "ok";
  } catch (const std::exception&) {
    return false;  // a damaged file counts as not done
  }
}

std::string pretrain(const SweepSpec& spec, const fs::path& out) {
  const json& p = spec.pretrain;
  fs::path ckpt = p.value("checkpoint", "base.pt");
  if (ckpt.is_relative()) ckpt = out / ckpt;
  if (fs::exists(ckpt)) return ckpt.string();
  json base = spec.base;
  base["training"]["init_checkpoint"] = "";
  for (const char* k : {"epochs", "max_steps", "lr", "warmup_steps"})
    if (p.contains(k)) base["training"][k] = p[k];
  base["training"]["eval_each_epoch"] = true;
  if (p.contains("micro_batches")) base["pipeline"]["micro_batches"] = p["micro_batches"];
  base["data"]["max_train_examples"] = p.value("max_train_examples", 0);  // 0: the whole pretrain split
  runtime::RunSpec s = runtime::runSpecFromJson(base, "sweep.pretrain");
  s.runtime.threadsPerWorker = p.value("threads", 2);
  runtime::prepareCorpus(s.data);
  json log = json::array();
  const double t0 = emulator::monotonicNow();
  runtime::runSingleProcess(s, "pretrain", [&](const json& r) {
    log.push_back(r);
    if (r["type"] == "step" && r["step"].get<int64_t>() % 10 == 0)
      std::fprintf(stderr, "\rpretrain step %lld loss %.4f (%.0fs)   ", static_cast<long long>(r["step"].get<int64_t>()),
                   r["loss"].get<double>(), emulator::monotonicNow() - t0);
  }, ckpt.string());
  std::fprintf(stderr, "\n");
  runtime::writeJsonAtomically((out / "pretrain_log.json").string(), log);
  return ckpt.string();
}

}  // namespace

void writeSummaries(const SweepSpec& spec, const std::string& outDir) {
  const auto points = expandSweep(spec);
  std::map<std::string, json> results;
  for (const auto& p : points) {
    const fs::path f = fs::path(outDir) / "runs" / (p.name + ".json");
    if (fs::exists(f)) results[p.name] = readJson(f);
  }
  const json summary = summarizeSweep(spec, points, results);
  runtime::writeJsonAtomically((fs::path(outDir) / "summary.json").string(), summary);
  const std::string tmp = (fs::path(outDir) / "summary.csv.tmp").string();
  std::ofstream(tmp) << summaryCsv(summary);
  fs::rename(tmp, fs::path(outDir) / "summary.csv");
}

int runSweep(const SweepSpec& specIn, const SweepOptions& opt) {
  SweepSpec spec = specIn;
  const fs::path out = opt.outDir;
  fs::create_directories(out / "runs");
  if (!spec.pretrain.is_null()) {
    const std::string ckpt = pretrain(spec, out);
    spec.base["training"]["init_checkpoint"] = fs::absolute(ckpt).string();
  }
  runtime::writeJsonAtomically((out / "sweep.json").string(),
                               {{"name", spec.name}, {"base", spec.base}, {"baseline", spec.baseline}, {"axes", [&] {
                                  json a = json::array();
                                  for (const auto& [path, values] : spec.axes) a.push_back({{"path", path}, {"values", values}});
                                  return a;
                                }()}});
  const auto points = expandSweep(spec);
  int failed = 0, ran = 0;
  const double t0 = emulator::monotonicNow();
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    const fs::path done = out / "runs" / (p.name + ".json");
    if (!opt.force && complete(done)) {
      if (opt.progress) std::fprintf(stderr, "[%zu/%zu] %s: complete, skipped\n", i + 1, points.size(), p.name.c_str());
      continue;
    }
    if (opt.progress) {
      const double per = ran ? (emulator::monotonicNow() - t0) / ran : 0;
      size_t left = 0;
      for (size_t k = i; k < points.size(); ++k) left += !complete(out / "runs" / (points[k].name + ".json"));
      std::fprintf(stderr, "[%zu/%zu] %s%s\n", i + 1, points.size(), p.name.c_str(),
                   ran ? (" (ETA " + std::to_string(static_cast<int>(per * left)) + " s)").c_str() : "");
    }
    runtime::LaunchOptions lo;
    lo.outDir = (out / "runs" / p.name).string();
    lo.exe = opt.exe;
    lo.progress = opt.progress;
    const int rc = runtime::launchRun(runtime::runSpecFromJson(p.spec, "sweep point " + p.name), lo);
    ++ran;
    failed += rc != 0;
    fs::copy_file(fs::path(lo.outDir) / "result.json", done.string() + ".tmp", fs::copy_options::overwrite_existing);
    fs::rename(done.string() + ".tmp", done);
    writeSummaries(spec, opt.outDir);
    if (const int sig = runtime::launchInterrupted()) {
      std::fprintf(stderr, "sweep interrupted by signal %d after %s; rerun to resume\n", sig, p.name.c_str());
      return failed;
    }
  }
  writeSummaries(spec, opt.outDir);
  return failed;
}

}  // namespace slowpipe::experiments
