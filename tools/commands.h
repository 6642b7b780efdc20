// Subcommand registration for the slowpipe CLI. Each module of tools/ adds its subcommands to the
// app; main.cc only wires them together and turns exceptions into exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace slowpipe::tools {

void addBenchCodecs(CLI::App& bench);
void addBenchLink(CLI::App& bench);
void addEmulatorCommands(CLI::App& app);
void addRunCommands(CLI::App& app);
void addSweepCommands(CLI::App& app);
void addSimCommands(CLI::App& app);
void addCodecCommands(CLI::App& app);

// A stage-cost snapshot of a run spec (simulator/profile.h withStageCosts): forward, backward and
// step of every stage, timed as `slowpipe profile` times them (the worker's StageRunner, one stage
// at a time, median of `reps` steps after a warm-up). What `sweep --stage-snapshots` takes before
// each real run.
nlohmann::json measureStageSnapshot(const nlohmann::json& runSpec, int reps);

}  // namespace slowpipe::tools
