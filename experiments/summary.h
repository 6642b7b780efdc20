// Sweep summary math: per point throughput, speed-up over the baseline at the same link settings,
// time to the baseline's final validation loss, wire bytes, waiting share, and the ideal speed-up
// the wire-byte reduction allows. Definitions in README "Metrics".
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/sweep.h"

namespace slowpipe::experiments {

// results: point name -> result.json document (missing points are listed with status "missing").
nlohmann::json summarizeSweep(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                              const std::map<std::string, nlohmann::json>& results);
std::string summaryCsv(const nlohmann::json& summary);

}  // namespace slowpipe::experiments
