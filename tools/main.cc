// slowpipe: command-line entry point.
#include <cstdio>
#include <exception>

#include "compression/torchscript.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
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
