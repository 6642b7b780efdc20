// Subcommand registration for the slowpipe CLI. Each module of tools/ adds its subcommands to the
// app; main.cc only wires them together and turns exceptions into exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>

namespace slowpipe::tools {

// For numeric options in place of CLI::PositiveNumber / CLI::NonNegativeNumber, whose refusal of 0
// read "--rounds: Value 0 not in range 0.000000 to 179769313486231570814527423731704356...":
// these say what was expected ("--rounds: expected a number > 0, got 0").
inline CLI::Validator numberAbove(double floor, bool orEqual) {
  const std::string want = std::string(orEqual ? ">= " : "> ") + CLI::detail::to_string(floor);
  return CLI::Validator(
      [floor, orEqual, want](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end == nullptr || *end != '\0')
          return "expected a number " + want + ", got '" + s + "'";
        return (orEqual ? v >= floor : v > floor) ? std::string()
                                                  : "expected a number " + want + ", got " + s;
      },
      orEqual ? "NONNEGATIVE" : "POSITIVE");
}
inline CLI::Validator positiveNumber() { return numberAbove(0.0, false); }
inline CLI::Validator nonNegativeNumber() { return numberAbove(0.0, true); }

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
