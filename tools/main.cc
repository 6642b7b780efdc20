// slowpipe: command-line entry point.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>

#include "compression/torchscript.h"
#include "runtime/launch/worker.h"
#include "tools/commands.h"

namespace {

// The commands that allocate large buffers themselves (workers, codec checks, benchmarks,
// pretraining, cost profiles) start once more with glibc's malloc asking for huge pages
// (runtime::hugePageTunables says why; a tunable is read only at start-up). `run` and `sweep` hand
// it to the workers they start instead (their environment), so no worker starts twice; the other
// commands, quick ones, start once.
void startWithHugePageMalloc(int argc, char** argv) {
  static const std::set<std::string> kLarge = {"worker", "codec", "bench", "pretrain", "profile"};
  if (argc < 2 || !kLarge.count(argv[1])) return;
  const std::string tunables = slowpipe::runtime::hugePageTunables();
  if (tunables.empty()) return;
  const char* old = std::getenv("GLIBC_TUNABLES");
  const std::string before = old ? old : "";
  setenv("GLIBC_TUNABLES", tunables.c_str(), 1);
  setenv(slowpipe::runtime::kHugePageRestartEnv, "1", 1);
  execv("/proc/self/exe", argv);
  // No exec (no /proc): run as started; only the speed of large allocations differs.
  unsetenv(slowpipe::runtime::kHugePageRestartEnv);
  if (old) {
    setenv("GLIBC_TUNABLES", before.c_str(), 1);
  } else {
    unsetenv("GLIBC_TUNABLES");
  }
}

}  // namespace

int main(int argc, char** argv) {
  slowpipe::runtime::takeHugePageRestartMark();
  startWithHugePageMalloc(argc, argv);
  slowpipe::compression::registerTorchScriptCodec();  // torchscript:path=... in every command and
                                                      // worker
  CLI::App app{"slowpipe: network emulation testbed for compressed pipeline-parallel fine-tuning"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "slowpipe 0.1");
  auto* bench = app.add_subcommand("bench", "benchmarks (JSON with --json)");
  bench->require_subcommand(1);
  slowpipe::tools::addBenchCodecs(*bench);
  slowpipe::tools::addBenchKernels(*bench);
  slowpipe::tools::addBenchLink(*bench);
  slowpipe::tools::addEmulatorCommands(app);
  slowpipe::tools::addRunCommands(app);
  slowpipe::tools::addSweepCommands(app);
  slowpipe::tools::addSimCommands(app);
  slowpipe::tools::addCodecCommands(app);
  slowpipe::tools::addModelCommands(app);
  slowpipe::tools::addDoctorCommand(app);
  slowpipe::tools::addSpecCommands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "slowpipe: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
