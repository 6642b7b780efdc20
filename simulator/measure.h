// The profiler's measurements (`slowpipe profile`): each stage's compute timed with the
// worker's own code (StageRunner, GradientSync), codecs at the run's message shapes, the host's
// transport cost, and how fast stages compute while n of them share this host (side by side, or
// fitted to a real pipelined run). Needs torch (library slowpipe_simulator_measure); the replay
// itself (simulate.h) does not.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/spec/spec.h"
#include "simulator/profile.h"

namespace slowpipe::simulator {

struct HostSpeedOptions {
  double windowS = 1.0;
  int reps = 3;
  // Each worker has a processor of its own (a GPU per stage, as on the hardware being projected):
  // host_speed is 1 for any number of busy workers, not measured with them sharing this host.
  bool dedicated = false;
  // Fit host_speed to a real pipelined run of the spec here (simulator::fitHostSpeed) instead of
  // taking the speeds of n stage processes computing side by side.
  bool fromRun = false;
};

// A measured profile of `spec` (runJson: its resolved JSON) on this host: `reps` repeats per
// figure, extra codecs beyond the spec's, the data-parallel variants a sweep uses, and the
// schedules its points use (each gets its own host-speed fit with host.fromRun). progress(done,
// total), if given, after each part measured (a stage, the host speed, the calibration fit, the
// transport, a codec).
Profile measuredProfile(const nlohmann::json& runJson, const runtime::RunSpec& spec, int reps,
                        const std::vector<std::string>& extraCodecs, const HostSpeedOptions& host,
                        const std::vector<runtime::RunSpec>& dpVariants,
                        const std::set<std::string>& schedules,
                        const std::function<void(int64_t done, int64_t total)>& progress = {});

// The child side of the side-by-side host-speed measurement (`slowpipe profile-unit`): repeats
// stage `stage`'s forward and backward for windowS seconds each time its parent says go.
int runProfileUnit(const std::string& specPath, int stage, double windowS);

}  // namespace slowpipe::simulator
