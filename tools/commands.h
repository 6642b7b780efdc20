// Subcommand registration for the slowpipe CLI. Each module of tools/ adds its subcommands to the
// app; main.cc only wires them together and turns exceptions into exit codes.
#pragma once

#include <CLI/CLI.hpp>

namespace slowpipe::tools {

void addBenchCodecs(CLI::App& bench);
void addBenchKernels(CLI::App& bench);  // bench_kernels.cc
void addBenchLink(CLI::App& bench);
void addEmulatorCommands(CLI::App& app);
void addRunCommands(CLI::App& app);
void addSweepCommands(CLI::App& app);
void addSimCommands(CLI::App& app);
void addCodecCommands(CLI::App& app);
void addModelCommands(CLI::App& app);  // slowpipe model info|logits|generate|tokenize
void addDoctorCommand(CLI::App& app);  // slowpipe doctor
void addSpecCommands(CLI::App& app);   // slowpipe spec schema|reference

}  // namespace slowpipe::tools
