// Resumable sweep runner: pretrains the base model once if the sweep asks for it, then runs every
// point as a real `slowpipe run` (DIR/runs/<point>/), copies each finished result to
// DIR/runs/<point>.json, and rewrites DIR/summary.json and DIR/summary.csv after every point.
// A rerun skips points whose DIR/runs/<point>.json says status ok and re-runs failed or missing ones.
#pragma once

#include <string>

#include "experiments/sweep.h"

namespace slowpipe::experiments {

struct SweepOptions {
  std::string outDir;
  std::string exe = "/proc/self/exe";
  bool force = false;     // re-run complete points too
  bool progress = true;   // progress bar with ETA on stderr
};

// Returns the number of points that failed.
int runSweep(const SweepSpec& spec, const SweepOptions& opt);
// Recomputes DIR/summary.json and summary.csv from DIR/sweep.json and DIR/runs/*.json.
void writeSummaries(const SweepSpec& spec, const std::string& outDir);

}  // namespace slowpipe::experiments
