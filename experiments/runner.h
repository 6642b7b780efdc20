// Resumable sweep runner: pretrains the base model once if the sweep asks for it (or takes it from
// the base cache, experiments/base_model.h, or from --base), then runs every
// point `repeats` times as real `slowpipe run`s, interleaved (repeat k of every point before repeat
// k+1), into DIR/runs/<point>/r<k>/; each finished result is copied to DIR/runs/<point>.r<k>.json
// with the identity of the experiment that produced it, and DIR/summary.json/.csv are rewritten
// after every run.
//
// Resume: a rerun skips a (point, repeat) only when its copy says status ok *and* it is the same
// experiment: same resolved point spec, same base checkpoint (content digest), same slowpipe build
// (git commit + dirty flag). Otherwise it runs it again and says why in one line. A result left
// with status "running" by a launcher that no longer exists counts as failed.
#pragma once

#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "experiments/sweep.h"

namespace slowpipe::experiments {

struct SweepOptions {
  std::string outDir;
  std::string exe = "/proc/self/exe";
  bool force = false;     // re-run complete points too
  bool progress = true;   // progress bar with ETA on stderr
  int repeats = 0;        // > 0: overrides the spec's repeats
  bool simulate = false;  // replay every point in the simulator instead of running it (one repeat)
  std::string profile;    // simulate: profile file or "analytic:DEVICE[,dtype=..,mfu=..]"
  int simSteps = 0;  // simulate: steps replayed (0: the simulator's default; -1: every step of the
                     // run, when its data plan is known)
  std::string qualityFrom;  // simulate: an emulated sweep's folder whose runs give each codec
                            // (label) its quality curve
  int64_t stepsPerEpoch =
      0;  // simulate: the runs' declared steps per epoch (0: the data plan of the spec's corpus)
  std::string
      base;  // a checkpoint to fine-tune instead of the sweep's pretrained base (no pretraining)
  std::string cacheDir;  // where pretrained bases are cached (base_model.h; "" = the default, "off"
                         // = none)
};

// Returns the number of runs that failed.
int runSweep(const SweepSpec& spec, const SweepOptions& opt);
// Recomputes DIR/summary.json and summary.csv from DIR/runs/<point>.r<k>.json; returns the summary.
// The identity of each (point name, repeat) the sweep asks for (runIdentity).
using Identities = std::map<std::pair<std::string, int>, nlohmann::json>;
// summary.json/.csv from the copies whose experiment is the one the sweep asks for now (its
// identities; computed when null); copies of another are listed as stale_copies, not summarized.
nlohmann::json writeSummaries(const SweepSpec& spec, const std::string& outDir,
                              const Identities* identities = nullptr);
// The sweep a folder holds, as `sweep` recorded it in DIR/sweep.json (throws naming that file, or
// the missing runs/ folder).
SweepSpec sweepOfFolder(const std::string& dir);
// DIR/runs/<point>.r<k>.json as it stands (null when absent or damaged; "running" by a launcher
// that is gone: failed).
nlohmann::json readRunCopy(const std::string& dir, const std::string& point, int repeat);

// What makes two runs the same experiment (see above).
nlohmann::json runIdentity(const nlohmann::json& pointSpec, const nlohmann::json& build);
// Why `previous` (a finished copy) does not stand for the experiment `current`; "" if it does.
std::string identityDifference(const nlohmann::json& previous, const nlohmann::json& current);

}  // namespace slowpipe::experiments
