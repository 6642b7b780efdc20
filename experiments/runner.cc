// runSweep: pretraining, interleaved repeats, resume by experiment identity, summaries.
#include "experiments/runner.h"

#include <algorithm>
#include <map>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "compression/bytes.h"
#include "emulator/shaped_socket.h"
#include "experiments/base_model.h"
#include "experiments/summary.h"
#include "runtime/launch/launcher.h"
#include "runtime/launch/worker.h"
#include "runtime/model/data.h"
#include "runtime/records/progress.h"
#include "runtime/records/result.h"
#include "simulator/simulate.h"

namespace slowpipe::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json readJson(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

json readOrNull(const fs::path& p) {
  if (!fs::exists(p)) return json();
  try {
    return readJson(p);
  } catch (const std::exception&) {
    return json();  // a damaged file counts as not done
  }
}

// A result as it stands: one left "running" by a launcher that is gone (pid on this host) is
// failed.
json settled(json r) {
  std::string why;
  if (r.is_object() && r.value("status", "") == "running" &&
      runtime::resultStatus(r, &why) == "failed") {
    r["status"] = "failed";
    r["reason"] = why;
  }
  return r;
}

fs::path copyPath(const fs::path& out, const std::string& point, int k) {
  return out / "runs" / (point + ".r" + std::to_string(k) + ".json");
}

// Why the (point, repeat) must run, or "" if its finished copy stands.
std::string whyRun(const fs::path& copy, const fs::path& runDir, const json& identity) {
  const json prev = settled(readOrNull(copy));
  const json live = readOrNull(runDir / "result.json");
  if (runtime::resultStatus(live) == "running")
    throw std::runtime_error(runDir.string() + " is being written by a live launcher (pid " +
                             std::to_string(live["launcher"].value("pid", 0)) +
                             "); is another sweep running on this folder?");
  if (!prev.is_object()) {
    if (live.is_object() && live.value("status", "") == "running")
      return "the previous attempt's " + settled(live).value("reason", "") + "; counted as failed";
    return "";  // never ran: no reason to print
  }
  if (prev.value("status", "") != "ok") {
    const std::string reason = prev.value("reason", "");
    return "previous attempt " + prev.value("status", "unknown") +
           (reason.empty() ? "" : ": " + reason);
  }
  const std::string diff = identityDifference(prev, identity);
  return diff.empty() ? "skip" : diff;
}

}  // namespace

json runIdentity(const json& pointSpec, const json& build) {
  const std::string dump = pointSpec.dump();
  const std::string ckpt = pointSpec["training"].value("init_checkpoint", "");
  return {{"spec_digest", runtime::hex64(compression::fnv1a(dump.data(), dump.size()))},
          {"checkpoint_digest", ckpt.empty() ? "" : runtime::fileDigest(ckpt)},
          {"inputs", runtime::specInputs(pointSpec)},
          {"commit", build.value("git_commit", "unknown")},
          {"dirty", build.value("git_dirty", true)}};
}

std::string identityDifference(const json& previous, const json& current) {
  if (!previous.contains("sweep_identity"))
    return "rerun: the result records no experiment identity";
  const json& p = previous["sweep_identity"];
  static const std::vector<std::pair<const char*, const char*>> kFields = {
      {"spec_digest", "the point's resolved spec changed"},
      {"checkpoint_digest", "the base checkpoint changed"},
      {"inputs", "a file the spec loads (plug-in, TorchScript module, trace) changed"},
      {"commit", "the slowpipe build (git commit) changed"},
      {"dirty", "the slowpipe build's dirty flag changed"}};
  for (const auto& [key, what] : kFields)
    if (p.value(key, json()) != current.value(key, json()))
      return std::string("rerun: ") + what + " (" + p.value(key, json()).dump() + " -> " +
             current.value(key, json()).dump() + ")";
  return "";
}

// Whether a copy is of the experiment the sweep now asks for: its resolved spec, and the
// checkpoint and loaded files where they are here to be read (a folder moved to another machine
// is still summarized; "" is a file not found, unknown rather than different). A build's commit
// does not change which experiment it is (resuming reruns those).
bool sameExperiment(const json& copy, const json& identity) {
  if (!copy.is_object() || !copy.contains("sweep_identity") || !copy["sweep_identity"].is_object())
    return false;
  const json& was = copy["sweep_identity"];
  if (was.value("spec_digest", json()) != identity.value("spec_digest", json())) return false;
  const std::string ckpt = identity.value("checkpoint_digest", "");
  if (!ckpt.empty() && was.value("checkpoint_digest", "") != ckpt) return false;
  // inputs: [{"path", "role", "digest"}...] (runtime::specInputs)
  const json inputs = identity.value("inputs", json::array()),
             before = was.value("inputs", json::array());
  for (const json& now : inputs.is_array() ? inputs : json::array()) {
    const std::string digest = now.value("digest", "");
    if (digest.empty()) continue;
    bool same = false;
    for (const json& then : before.is_array() ? before : json::array())
      same = same || (then.value("path", "") == now.value("path", "") &&
                      then.value("role", "") == now.value("role", "") &&
                      then.value("digest", "") == digest);
    if (!same) return false;
  }
  return true;
}

json writeSummaries(const SweepSpec& spec, const std::string& outDir, const Identities* known) {
  const auto points = expandSweep(spec);
  Identities computed;
  if (!known) {
    const json build = runtime::environmentInfo("");
    for (const auto& p : points)
      for (int k = 0; k < spec.repeats; ++k)
        computed[{p.name, k}] = runIdentity(repeatSpec(spec, p.spec, k), build);
    known = &computed;
  }
  std::map<std::string, std::vector<json>> results;
  json stale = json::array();
  for (const auto& p : points)
    for (int k = 0; k < spec.repeats; ++k) {
      json copy = settled(readOrNull(copyPath(outDir, p.name, k)));
      const auto it = known->find({p.name, k});
      if (!copy.is_null() && (it == known->end() || !sameExperiment(copy, it->second))) {
        // A copy of another experiment (the spec changed since it ran): not summarized as this one.
        stale.push_back(copyPath(outDir, p.name, k).filename().string());
        copy = json();
      }
      results[p.name].push_back(std::move(copy));
    }
  json summary = summarizeSweep(spec, points, results);
  summary["stale_copies"] = stale;  // runs of an earlier version of the sweep, left out
  runtime::writeJsonAtomically((fs::path(outDir) / "summary.json").string(), summary);
  runtime::writeFileAtomically((fs::path(outDir) / "summary.csv").string(), summaryCsv(summary));
  return summary;
}

namespace {

// DIR/sweep.json: the sweep as run (the base with its checkpoint resolved), which `summarize` reads
// back.
json sweepRecord(const SweepSpec& spec) {
  json axes = json::array();
  for (const auto& [path, values] : spec.axes) axes.push_back({{"path", path}, {"values", values}});
  return {{"name", spec.name},
          {"base", spec.base},
          {"baseline", spec.baseline},
          {"repeats", spec.repeats},
          {"axes", axes},
          {"target", toJson(spec.target)},
          {"repeat_seeds", spec.seedPerRepeat ? "per_repeat" : "same"},
          {"claims", spec.claims}};
}

}  // namespace

json readRunCopy(const std::string& dir, const std::string& point, int repeat) {
  return settled(readOrNull(copyPath(dir, point, repeat)));
}

SweepSpec sweepOfFolder(const std::string& dir) {
  const fs::path file = fs::path(dir) / "sweep.json";
  json j = runtime::readJsonFile(file.string(), "sweep folder's record");
  if (!j.is_object()) throw std::invalid_argument("'" + file.string() + "': expected an object");
  const bool simulated = j.value("simulated", false);
  j.erase("simulated");  // what simulateSweep adds to the record of a sweep
  j.erase("profile");
  j.erase("sim_steps");
  j.erase("quality_from");
  j.erase("steps_per_epoch");
  if (!j.contains("axes"))
    throw std::invalid_argument(
        "'" + file.string() +
        "' records no axes: written by a slowpipe before simulated sweeps recorded "
        "them; rerun the sweep to summarize it");
  SweepSpec spec;
  try {
    spec = sweepSpecFromJson(j, "sweep", simulated);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("'" + file.string() + "': " + e.what());
  }
  if (!fs::is_directory(fs::path(dir) / "runs"))
    throw std::invalid_argument("'" + dir + "': no runs/ folder; not a sweep's output");
  return spec;
}

// The first (by name) finished repeat-0 run in an emulated sweep folder whose codec is `label`; "".
static std::string emulatedRunOf(const std::string& dir, const std::string& label) {
  std::vector<fs::path> runs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "runs", ec))
    if (e.path().string().size() > 8 &&
        e.path().string().rfind(".r0.json") == e.path().string().size() - 8)
      runs.push_back(e.path());
  if (ec)
    throw std::invalid_argument("--quality-from '" + dir + "': no runs/ folder (" + ec.message() +
                                "); expected an emulated sweep's folder");
  std::sort(runs.begin(), runs.end());
  for (const auto& f : runs) {
    const json doc = readOrNull(f);
    if (doc.is_object() && doc.value("status", "") == "ok" && !doc.value("simulated", false) &&
        doc.contains("spec") &&
        doc["spec"].value("compression", json::object()).value("label", "") == label)
      return f.string();
  }
  return "";
}

// Every point replayed in virtual time: deterministic, so one repeat; no pretraining (losses only
// from a quality curve, --quality-from).
int simulateSweep(const SweepSpec& specIn, const SweepOptions& opt) {
  SweepSpec spec = specIn;
  spec.repeats = 1;
  spec.simulation = true;
  const fs::path out = opt.outDir;
  const runtime::FolderLock lock(out.string(), "sweep --simulate");
  fs::create_directories(out / "runs");
  json record = sweepRecord(spec);
  record["simulated"] = true;
  record["profile"] = opt.profile;
  record["sim_steps"] = opt.simSteps < 0 ? json("all") : json(opt.simSteps);
  if (!opt.qualityFrom.empty()) record["quality_from"] = opt.qualityFrom;
  if (opt.stepsPerEpoch > 0) record["steps_per_epoch"] = opt.stepsPerEpoch;
  runtime::writeJsonAtomically((out / "sweep.json").string(), record);
  const json build = runtime::environmentInfo("");
  // The run's epochs and evaluations, when its corpus is at hand: read once per data plan (the
  // data section and the batch shape), not once per point.
  std::map<std::string, simulator::SimOptions> plans;
  for (const auto& p : expandSweep(spec)) {
    const runtime::RunSpec rs = runtime::runSpecFromJson(p.spec, "sweep point " + p.name, true);
    const std::string planKey =
        p.spec.value("data", json()).dump() + " " + std::to_string(rs.pipeline.microBatches) + " " +
        std::to_string(rs.pipeline.microBatchSize) + " " + std::to_string(rs.pipeline.replicas) +
        " " + std::to_string(rs.model.seqLen) + " " + std::to_string(rs.training.epochs) + " " +
        std::to_string(rs.training.maxSteps) + " " + std::to_string(rs.training.seed);
    auto it = plans.find(planKey);
    if (it == plans.end()) {
      it = plans.emplace(planKey, simulator::SimOptions{}).first;
      simulator::dataPlanOf(rs, &it->second);
    }
    simulator::SimOptions so = it->second;
    if (opt.stepsPerEpoch > 0) simulator::declareStepsPerEpoch(rs, opt.stepsPerEpoch, &so);
    if (!opt.qualityFrom.empty()) {
      const std::string label = p.spec["compression"].value("label", "");
      const std::string curve = emulatedRunOf(opt.qualityFrom, label);
      if (curve.empty())
        throw std::invalid_argument(
            "--quality-from '" + opt.qualityFrom + "': no finished run of the codec '" + label +
            "' there (its runs/<point>.r0.json with compression.label '" + label + "')");
      simulator::qualityCurveOf(curve, &so);
    }
    if (opt.simSteps > 0)
      so.steps = opt.simSteps;
    else if (opt.simSteps < 0 && so.runSteps >= 2)
      so.steps = static_cast<int>(so.runSteps);
    json doc = simulator::simulateRun(rs, simulator::profileFor(opt.profile, rs), so);
    doc["environment"] = build;
    doc["sweep_identity"] = runIdentity(p.spec, build);
    doc["sweep_repeat"] = 0;
    runtime::writeJsonAtomically(copyPath(out, p.name, 0).string(), doc);
  }
  writeSummaries(spec, opt.outDir);
  return 0;
}

// One point's run; a failure to start it is this point's failed result (the sweep goes on), but a
// folder another process holds is nobody's to write: that stops the sweep.
static int launchPoint(const json& pointSpec, const std::string& name,
                       const runtime::LaunchOptions& lo) {
  try {
    return runtime::launchRun(runtime::runSpecFromJson(pointSpec, "sweep point " + name), lo);
  } catch (const runtime::FolderInUse&) {
    throw;
  } catch (const std::exception& e) {
    fs::create_directories(lo.outDir);
    runtime::writeFinalResult((fs::path(lo.outDir) / "result.json").string(),
                              {{"schema", runtime::kResultSchema},
                               {"status", "failed"},
                               {"reason", e.what()},
                               {"launcher", {{"pid", getpid()}, {"host", runtime::hostName()}}}});
    return 1;
  }
}

namespace {

// The base every point fine-tunes: --base as given, else the sweep's pretraining (cached).
void setBase(SweepSpec& spec, const SweepOptions& opt, const fs::path& out) {
  if (!opt.base.empty()) {
    if (!fs::is_regular_file(opt.base))
      throw std::invalid_argument("--base '" + opt.base + "': no such checkpoint file");
    spec.base["training"]["init_checkpoint"] = fs::absolute(opt.base).string();
    std::printf("base: %s (given; no pretraining)\n", opt.base.c_str());
  } else if (!spec.pretrain.is_null()) {
    const std::string ckpt = prepareBase(spec, out.string(), baseCacheDir(opt.cacheDir));
    spec.base["training"]["init_checkpoint"] = fs::absolute(ckpt).string();
  }
}

// One run of the sweep: a point's repeat, its spec and the identity a resumed sweep compares.
struct Job {
  const SweepPoint* point;
  int repeat;
  json spec, identity;
};

// Interleaved: repeat k of every point before repeat k+1, so slow drift of the machine spreads
// over every configuration instead of biasing whichever ran last.
std::vector<Job> sweepJobs(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                           const json& build) {
  std::vector<Job> jobs;
  for (int k = 0; k < spec.repeats; ++k)
    for (const auto& p : points) {
      json one = repeatSpec(spec, p.spec, k);
      json identity = runIdentity(one, build);
      jobs.push_back({&p, k, std::move(one), std::move(identity)});
    }
  return jobs;
}

// The points whose coding time exceeds their raw bytes' time on the link, said on stderr.
void sayCodecBound(const json& summary) {
  for (const auto& r : summary["rows"])
    if (r.value("codec_bound", json(false)) == json(true))
      std::fprintf(stderr,
                   "codec-bound: %s (%s): encode + decode %.3g s a step per rank, more than its "
                   "raw bytes take on the link (%.3g s)\n",
                   r["point"].get<std::string>().c_str(), r.value("label", "").c_str(),
                   r["codec_s_per_step"].get<double>(), r["raw_wire_s_per_step"].get<double>());
}

}  // namespace

int runSweep(const SweepSpec& specIn, const SweepOptions& opt) {
  if (opt.simulate) return simulateSweep(specIn, opt);
  SweepSpec spec = specIn;
  if (opt.repeats > 0) spec.repeats = opt.repeats;
  const fs::path out = opt.outDir;
  const runtime::FolderLock lock(out.string(), "sweep");  // also its pretraining's base.pt
  fs::create_directories(out / "runs");
  setBase(spec, opt, out);
  runtime::writeJsonAtomically((out / "sweep.json").string(), sweepRecord(spec));
  const auto points = expandSweep(spec);
  const json build = runtime::environmentInfo("");  // git runs once per sweep, before any timing
  const std::vector<Job> jobs = sweepJobs(spec, points, build);
  Identities identities;
  for (const auto& j : jobs) identities[{j.point->name, j.repeat}] = j.identity;
  std::vector<std::string> why(jobs.size());
  size_t toRun = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto& j = jobs[i];
    why[i] = opt.force ? ""
                       : whyRun(copyPath(out, j.point->name, j.repeat),
                                out / "runs" / j.point->name / ("r" + std::to_string(j.repeat)),
                                j.identity);
    toRun += why[i] != "skip";
  }
  int failed = 0, ran = 0;
  const double t0 = emulator::monotonicNow();
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto& j = jobs[i];
    const std::string tag = j.point->name + " r" + std::to_string(j.repeat);
    if (why[i] == "skip") {
      if (opt.progress)
        std::fprintf(stderr, "[%zu/%zu] %s: same experiment complete, skipped\n", i + 1,
                     jobs.size(), tag.c_str());
      continue;
    }
    if (opt.progress) {
      const double per = ran ? (emulator::monotonicNow() - t0) / ran : 0;
      std::fprintf(
          stderr, "[%zu/%zu] %s%s%s\n", i + 1, jobs.size(), tag.c_str(),
          why[i].empty() ? "" : (": " + why[i]).c_str(),
          ran ? (" (ETA " + std::to_string(static_cast<int>(per * (toRun - ran))) + " s)").c_str()
              : "");
    }
    runtime::LaunchOptions lo;
    lo.outDir = (out / "runs" / j.point->name / ("r" + std::to_string(j.repeat))).string();
    lo.exe = opt.exe;
    lo.progress = opt.progress;
    const int rc = launchPoint(j.spec, j.point->name, lo);
    ++ran;
    failed += rc != 0;
    json doc = readJson(fs::path(lo.outDir) / "result.json");
    doc["sweep_identity"] = j.identity;
    doc["sweep_repeat"] = j.repeat;
    runtime::writeJsonAtomically(copyPath(out, j.point->name, j.repeat).string(), doc);
    writeSummaries(spec, opt.outDir, &identities);
    if (const int sig = runtime::launchInterrupted()) {
      std::fprintf(stderr, "sweep interrupted by signal %d after %s; rerun to resume\n", sig,
                   tag.c_str());
      return failed;
    }
  }
  sayCodecBound(writeSummaries(spec, opt.outDir, &identities));
  return failed;
}

}  // namespace slowpipe::experiments
