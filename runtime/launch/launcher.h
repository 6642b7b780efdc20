// The launcher: validates a RunSpec, prepares data, sets up the links (user-space shaping, or
// namespaces + veths + tc for the kernel backend), starts one worker process per stage, collects
// their records into DIR/result.json (rewritten atomically after every step), and stops every
// worker within seconds when one dies, hangs past runtime.step_timeout_s, or the launcher is
// interrupted. Ranks are (stage, replica) pairs (runtime/exec/ranks.h).
#pragma once

#include <functional>
#include <string>

#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

struct LaunchOptions {
  std::string outDir;
  std::string exe = "/proc/self/exe";  // binary that has the `worker` subcommand
  bool progress = true;                // progress line on stderr
  bool calibrate = true;               // short link calibration recorded in the result
  // External bootstrap (mpirun, srun, torchrun-style): the coordinator starts no process; the
  // workers, started by that launcher wherever it runs them, join at the rendezvous
  // (runtime/launch/rendezvous.h) on listenHost:listenPort over CURVE keys from `secret`. Liveness
  // comes from heartbeats: a rank silent for 3 s fails the run (naming it) and every worker is told
  // to stop; result.json is written here as by the local launcher.
  struct External {
    bool enabled = false;
    std::string listenHost;
    int listenPort = 0;
    std::string secret;
    double joinTimeoutS = 120;
    // Called once the rendezvous listens ("" ) or could not be set up (the reason).
    std::function<void(const std::string&)> ready;
  } external;
};

// Returns 0 when the run completed, 1 when it failed (the result says why). Throws, writing
// nothing, only when the output folder cannot take this run's result: another slowpipe process
// holds it (FolderInUse, runtime/records/result.h) or its result.json is a folder.
int launchRun(const RunSpec& spec, const LaunchOptions& opt);
// The signal (SIGINT/SIGTERM) that interrupted a launch in this process, or 0. A sweep stops on it.
int launchInterrupted();

}  // namespace slowpipe::runtime
