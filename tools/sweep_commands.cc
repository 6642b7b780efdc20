// `slowpipe sweep SPEC --out DIR`, `slowpipe summarize DIR` and `slowpipe plot DIR`.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "emulator/command.h"
#include "experiments/compare.h"
#include "experiments/export.h"
#include "experiments/runner.h"
#include "runtime/records/result.h"
#include "tools/commands.h"

namespace slowpipe::tools {

namespace {

// A script the CLI runs, found relative to this binary: <bin>/share/slowpipe/NAME in the build
// tree, <prefix>/share/slowpipe/NAME once installed (<prefix>/bin/slowpipe).
std::string installedScript(const std::string& name) {
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  for (const auto& dir : {exe / "share" / "slowpipe", exe.parent_path() / "share" / "slowpipe"})
    if (std::filesystem::exists(dir / name)) return (dir / name).string();
  throw std::runtime_error(name + " is not installed beside " + exe.string() + " (looked in " +
                           (exe / "share/slowpipe").string() + " and " +
                           (exe.parent_path() / "share/slowpipe").string() +
                           "): reinstall slowpipe");
}

// --target-loss / --target-tolerance: what time_to_target reaches (over the sweep's "target").
struct TargetOptions {
  double loss = 0, tolerance = -1;
  void applyTo(experiments::SweepSpec& s) const {
    if (loss > 0 && tolerance >= 0)
      throw std::invalid_argument("give --target-loss or --target-tolerance, not both");
    if (loss > 0) s.target = {loss, 0.0};
    if (tolerance >= 0) s.target = {0.0, tolerance};
  }
};
std::shared_ptr<TargetOptions> addTargetOptions(CLI::App* cmd) {
  auto t = std::make_shared<TargetOptions>();
  cmd->add_option("--target-loss", t->loss,
                  "time_to_target: the first evaluation at or below this validation loss")
      ->check(positiveNumber());
  cmd->add_option("--target-tolerance", t->tolerance,
                  "time_to_target: the baseline's final validation loss x (1 + this), paired by "
                  "repeat (default 0.01)")
      ->check(CLI::Range(0.0, 10.0));
  return t;
}

// Runs an installed script with Debian's interpreter (which has python3-matplotlib; a python3
// earlier on PATH may not); its output is shown when `echo`, or when it fails.
void runScript(const std::string& name, const std::vector<std::string>& args, bool echo) {
  const std::string script = installedScript(name);
  const std::string python =
      std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  std::vector<std::string> argv = {python, script};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = emulator::runCommand(argv);
  if (echo || r.status != 0) std::fputs(r.output.c_str(), stdout);
  if (r.status != 0)
    throw std::runtime_error(name + " failed (python3 " + script + " exited " +
                             std::to_string(r.status) + ")");
}

// --vs A B: a paired comparison of two compression labels (repeatable).
std::shared_ptr<std::vector<std::string>> addVsOption(CLI::App* cmd) {
  auto vs = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--vs", *vs,
                  "A B: compare compression label A with B at every setting, paired by repeat "
                  "(speed ratio A/B, "
                  "validation-loss gap A/B - 1, time to target of each); repeatable")
      ->expected(2)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);
  return vs;
}

// The folder's summary rewritten with the --vs pairs compared; their lines printed.
nlohmann::json summarizeWithPairs(experiments::SweepSpec spec, const std::string& dir,
                                  const std::vector<std::string>& vs) {
  for (size_t i = 0; i + 1 < vs.size(); i += 2) spec.compare.push_back({vs[i], vs[i + 1]});
  const auto s = experiments::writeSummaries(spec, dir);
  if (!vs.empty()) {
    nlohmann::json asked = nlohmann::json::array();
    for (const auto& c : s["comparisons"])
      for (const auto& [a, b] : spec.compare)
        if (c["label"] == a && c["vs"] == b) asked.push_back(c);
    std::fputs(experiments::comparisonsText(asked).c_str(), stdout);
  }
  return s;
}

// --sim-steps: a number >= 2, or "all" (-1: every step of the run); 0 (unset): as simulate.
int parseSimSteps(const std::string& text) {
  if (text == "all") return -1;
  int steps = -2;
  try {
    steps = std::stoi(text);
  } catch (const std::exception&) {
  }
  if (steps != 0 && steps < 2)
    throw std::invalid_argument("--sim-steps: '" + text + "'; expected a number >= 2 or 'all'");
  return steps;
}

void addSweepCommand(CLI::App& app) {
  auto spec = std::make_shared<std::string>();
  auto o = std::make_shared<experiments::SweepOptions>();
  auto quiet = std::make_shared<bool>(false);
  auto sets = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("sweep",
                                 "run every point of a sweep (resumable), write summary.json/.csv");
  cmd->add_option("spec", *spec, "sweep spec (JSON)")->required();
  cmd->add_option("--out", o->outDir, "output folder")->required();
  cmd->add_flag("--force", o->force, "re-run points that are already complete");
  cmd->add_flag("--quiet", *quiet, "no progress output");
  cmd->add_option("--repeats", o->repeats,
                  "real runs per point, interleaved (overrides the spec's \"repeats\")")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--simulate", o->simulate,
                "replay every point in the simulator (needs --profile) instead of running it");
  cmd->add_option("--profile", o->profile,
                  "with --simulate: profile JSON or analytic:DEVICE[,dtype=bf16,mfu=0.4]");
  auto simSteps = std::make_shared<std::string>("0");
  cmd->add_option(
      "--sim-steps", *simSteps,
      "with --simulate: steps replayed per point, a number >= 2 or 'all' (every step of "
      "the run, its first epoch's AC-SGD messages full size); default as simulate");
  cmd->add_option(
      "--set", *sets,
      "PATH=VALUE: set a field of the base spec (repeatable), e.g. compression.backward=fp16");
  cmd->add_option(
      "--quality-from", o->qualityFrom,
      "with --simulate: an emulated sweep's folder; each codec's run there (same label) "
      "is its quality curve, so the projection has losses and time to target");
  cmd->add_option("--steps-per-epoch", o->stepsPerEpoch,
                  "with --simulate: the runs' steps per epoch (default: the spec's corpus)")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  cmd->add_option(
      "--base", o->base,
      "fine-tune this checkpoint (e.g. a base.pt of an earlier sweep) instead of pretraining one");
  cmd->add_option("--cache-dir", o->cacheDir,
                  "where pretrained bases are cached and found (default $SLOWPIPE_CACHE_DIR, else "
                  "~/.cache/slowpipe; 'off': pretrain every time)");
  auto target = addTargetOptions(cmd);
  cmd->callback([=] {
    if (o->simulate && o->profile.empty())
      throw std::invalid_argument("sweep --simulate needs --profile FILE or analytic:DEVICE");
    auto s = experiments::loadSweepSpec(*spec, o->simulate, *sets);
    target->applyTo(s);
    experiments::expandSweep(s);  // every point validated before anything runs
    if (!o->simulate && (!o->qualityFrom.empty() || o->stepsPerEpoch > 0))
      throw std::invalid_argument(
          "--quality-from and --steps-per-epoch project a simulated sweep: give --simulate");
    experiments::SweepOptions opt = *o;
    opt.progress = !*quiet;
    opt.simSteps = parseSimSteps(*simSteps);
    const int failed = experiments::runSweep(s, opt);
    std::printf("sweep %s: summary in %s/summary.json (%d failed run(s))\n", s.name.c_str(),
                opt.outDir.c_str(), failed);
    if (failed) std::exit(1);
  });
}

void addSummarizeCommand(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "summarize", "rewrite a sweep folder's summary.json/.csv from the runs in it; runs nothing");
  cmd->add_option("dir", *dir, "sweep output folder")->required();
  auto target = addTargetOptions(cmd);
  auto vs = addVsOption(cmd);
  cmd->callback([dir, target, vs] {
    experiments::SweepSpec spec = experiments::sweepOfFolder(*dir);
    target->applyTo(spec);
    const auto s = summarizeWithPairs(spec, *dir, *vs);
    std::map<std::string, int> byStatus;
    for (const auto& r : s["rows"]) ++byStatus[r.value("status", "?")];
    std::string counts;
    for (const auto& [status, n] : byStatus)
      counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + status;
    std::printf("summarize: %s/summary.json, %zu point(s): %s\n", dir->c_str(), s["rows"].size(),
                counts.c_str());
  });
}

void addExportCommand(CLI::App& app) {
  auto dir = std::make_shared<std::string>(), format = std::make_shared<std::string>("csv");
  auto out = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "export",
      "a sweep folder's steps and evaluations, one row per (point, repeat, step | eval), "
      "as CSV or JSON lines (columns: docs/metrics.md, \"Exporting results\")");
  cmd->add_option("dir", *dir, "sweep output folder")->required();
  cmd->add_option("--format", *format, "csv or jsonl")->check(CLI::IsMember({"csv", "jsonl"}));
  cmd->add_option("--out", *out, "file to write (whole or not at all); default: standard output");
  cmd->callback([=] {
    const experiments::ExportTable t = experiments::exportSweep(*dir);
    const std::string text = experiments::formatExport(t, *format);
    if (out->empty()) {
      std::fputs(text.c_str(), stdout);
    } else {
      runtime::writeFileAtomically(*out,
                                   text);  // whole or not at all, never through a planted link
    }
    std::fprintf(
        stderr, "export: %zu row(s) from %d run(s)%s%s\n", t.rows.size(), t.runs,
        t.missing
            ? (", " + std::to_string(t.missing) + " (point, repeat)(s) without a run file").c_str()
            : "",
        out->empty() ? "" : (" -> " + *out).c_str());
  });
}

void addPlotCommand(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("plot", "figures (PNG + SVG) of a sweep folder, with matplotlib");
  cmd->add_option("dir", *dir, "sweep output folder")->required();
  cmd->callback([dir] { runScript("plot.py", {*dir}, true); });
}

void addReportCommand(CLI::App& app) {
  auto dir = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto baseline = std::make_shared<std::string>("fp32");
  auto* cmd = app.add_subcommand(
      "report",
      "one self-contained HTML page of a sweep folder: the summary with its intervals, "
      "the claims judged at their bounds, every figure inline, the sweep, provenance "
      "and link calibration (draws the figures first)");
  cmd->add_option("dir", *dir, "sweep output folder")->required();
  cmd->add_option("--out", *out, "the page (default DIR/report.html)");
  cmd->add_option("--baseline", *baseline,
                  "the compression label the table's speed-ups and gaps are against");
  auto vs = addVsOption(cmd);
  cmd->callback([=] {
    if (!vs->empty())
      summarizeWithPairs(experiments::sweepOfFolder(*dir), *dir,
                         *vs);  // the page shows these comparisons
    const std::string page =
        out->empty() ? (std::filesystem::path(*dir) / "report.html").string() : *out;
    runScript("plot.py", {*dir}, false);
    runScript("report.py", {*dir, "--baseline", *baseline, "--html", page}, false);
    std::printf("report: %s\n", page.c_str());
  });
}

}  // namespace

void addSweepCommands(CLI::App& app) {
  addSweepCommand(app);
  addSummarizeCommand(app);
  addExportCommand(app);
  addPlotCommand(app);
  addReportCommand(app);
}

}  // namespace slowpipe::tools
