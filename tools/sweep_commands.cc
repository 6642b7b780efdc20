// `slowpipe sweep SPEC --out DIR`, `slowpipe summarize DIR` and `slowpipe plot DIR`.
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "emulator/command.h"
#include "experiments/runner.h"
#include "tools/commands.h"


namespace slowpipe::tools {

namespace {

// A script the CLI runs, found relative to this binary: <bin>/share/slowpipe/NAME in the build
// tree, <prefix>/share/slowpipe/NAME once installed (<prefix>/bin/slowpipe).
std::string installedScript(const std::string& name) {
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  for (const auto& dir : {exe / "share" / "slowpipe", exe.parent_path() / "share" / "slowpipe"})
    if (std::filesystem::exists(dir / name)) return (dir / name).string();
  throw std::runtime_error(name + " is not installed beside " + exe.string() + " (looked in " + (exe / "share/slowpipe").string() +
                           " and " + (exe.parent_path() / "share/slowpipe").string() + "): reinstall slowpipe");
}

}  // namespace

void addSweepCommands(CLI::App& app) {
  {
    auto spec = std::make_shared<std::string>(), out = std::make_shared<std::string>();
    auto force = std::make_shared<bool>(false), quiet = std::make_shared<bool>(false);
    auto repeats = std::make_shared<int>(0);
    auto simulate = std::make_shared<bool>(false);
    auto profile = std::make_shared<std::string>();
    auto sets = std::make_shared<std::vector<std::string>>();
    auto* cmd = app.add_subcommand("sweep", "run every point of a sweep (resumable), write summary.json/.csv");
    cmd->add_option("spec", *spec, "sweep spec (JSON)")->required();
    cmd->add_option("--out", *out, "output folder")->required();
    cmd->add_flag("--force", *force, "re-run points that are already complete");
    cmd->add_flag("--quiet", *quiet, "no progress output");
    cmd->add_option("--repeats", *repeats, "real runs per point, interleaved (overrides the spec's \"repeats\")")
        ->check(CLI::Range(1, 1000));
    cmd->add_flag("--simulate", *simulate, "replay every point in the simulator (needs --profile) instead of running it");
    cmd->add_option("--profile", *profile, "with --simulate: profile JSON or analytic:DEVICE[,dtype=bf16,mfu=0.4]");
    cmd->add_option("--set", *sets, "PATH=VALUE: set a field of the base spec (repeatable), e.g. compression.backward=fp16");
    cmd->callback([=] {
      if (*simulate && profile->empty()) throw std::invalid_argument("sweep --simulate needs --profile FILE or analytic:DEVICE");
      const auto s = experiments::loadSweepSpec(*spec, *simulate, *sets);
      experiments::expandSweep(s);  // every point validated before anything runs
      experiments::SweepOptions o;
      o.outDir = *out;
      o.force = *force;
      o.progress = !*quiet;
      o.repeats = *repeats;
      o.simulate = *simulate;
      o.profile = *profile;
      const int failed = experiments::runSweep(s, o);
      std::printf("sweep %s: summary in %s/summary.json (%d failed run(s))\n", s.name.c_str(), out->c_str(), failed);
      if (failed) std::exit(1);
    });
  }
  {
    auto dir = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("summarize", "rewrite a sweep folder's summary.json/.csv from the runs in it; runs nothing");
    cmd->add_option("dir", *dir, "sweep output folder")->required();
    cmd->callback([dir] {
      const auto s = experiments::resummarize(*dir);
      std::map<std::string, int> byStatus;
      for (const auto& r : s["rows"]) ++byStatus[r.value("status", "?")];
      std::string counts;
      for (const auto& [status, n] : byStatus) counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + status;
      std::printf("summarize: %s/summary.json, %zu point(s): %s\n", dir->c_str(), s["rows"].size(), counts.c_str());
    });
  }
  {
    auto dir = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("plot", "figures (PNG + SVG) of a sweep folder, with matplotlib");
    cmd->add_option("dir", *dir, "sweep output folder")->required();
    cmd->callback([dir] {
      const std::string script = installedScript("plot.py");
      // Debian's interpreter, which has python3-matplotlib (a python3 earlier on PATH may not).
      const std::string python = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
      const auto r = emulator::runCommand({python, script, *dir});
      std::fputs(r.output.c_str(), stdout);
      if (r.status != 0) throw std::runtime_error("plot failed (python3 " + script + " exited " + std::to_string(r.status) + ")");
    });
  }
}

}  // namespace slowpipe::tools
