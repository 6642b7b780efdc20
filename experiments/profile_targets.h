// What `slowpipe profile` measures for a spec or a sweep: the sweep is read here, in experiments/,
// so that the profiler (simulator/measure.h) knows run specs only.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "runtime/spec/spec.h"

namespace slowpipe::experiments {

// What `slowpipe profile` measures for a spec or a sweep (`sets`: --set PATH=VALUE, applied to a
// sweep's base): the run (a sweep's base), every codec (`codecs` and every one a sweep's
// compression axis names), every data-parallel compressor variant, every schedule the points use.
struct ProfileTargets {
  nlohmann::json runJson;
  runtime::RunSpec spec;
  std::vector<std::string> codecs;
  std::vector<runtime::RunSpec> dpVariants;
  std::set<std::string> schedules;
};
ProfileTargets profileTargets(const nlohmann::json& specOrSweep,
                              const std::vector<std::string>& sets,
                              std::vector<std::string> codecs);

}  // namespace slowpipe::experiments
