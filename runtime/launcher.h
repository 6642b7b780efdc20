// The launcher: validates a RunSpec, prepares data, sets up the links (user-space shaping, or
// namespaces + veths + tc for the kernel backend), starts one worker process per stage, collects
// their records into DIR/result.json (rewritten atomically after every step), and stops every
// worker within seconds when one dies, hangs past runtime.step_timeout_s, or the launcher is
// interrupted. Ranks are (stage, replica) pairs; today replica is always 0.
#pragma once

#include <string>

#include "runtime/spec.h"

namespace slowpipe::runtime {

struct LaunchOptions {
  std::string outDir;
  std::string exe = "/proc/self/exe";  // binary that has the `worker` subcommand
  bool progress = true;                // progress line on stderr
  bool calibrate = true;               // short link calibration recorded in the result
};

// Returns 0 when the run completed, 1 when it failed (the result says why).
int launchRun(const RunSpec& spec, const LaunchOptions& opt);
// The signal (SIGINT/SIGTERM) that interrupted a launch in this process, or 0. A sweep stops on it.
int launchInterrupted();

}  // namespace slowpipe::runtime
