// What `slowpipe profile` measures for a spec or a sweep (see profile_targets.h).
#include "experiments/profile_targets.h"

#include <optional>

#include "experiments/sweep.h"
#include "simulator/profile.h"

namespace slowpipe::experiments {

using nlohmann::json;

ProfileTargets profileTargets(const json& j, const std::vector<std::string>& sets,
                              std::vector<std::string> all) {
  ProfileTargets t;
  std::vector<json> dpSettings;
  json runJson = j;
  std::optional<SweepSpec> sweep;
  if (j.contains("axes")) {
    // Parsed as for simulation: a profile runs no links and feeds its stages random bytes, so it
    // measures what the simulator projects (any vocab: the LM head has its real size).
    sweep = sweepSpecFromJson(j, "sweep", /*simulation=*/true);
    runJson = sweep->base;
    for (const auto& [path, values] : sweep->axes)
      if (path == "compression")
        for (const auto& v : values) {
          for (const char* k : {"forward", "backward"})
            if (v.contains(k)) all.push_back(v[k]);
          if (v.contains("dp")) dpSettings.push_back(v["dp"]);
        }
  }
  for (const auto& a : sets) runtime::applySet(runJson, a);
  t.spec = runtime::runSpecFromJson(runJson, "spec", /*simulation=*/true);
  // Data parallelism: the base's compressor and every other one the sweep's compression axis names.
  std::set<std::string> keys;
  auto addVariant = [&](const json& doc) {
    const runtime::RunSpec v = runtime::runSpecFromJson(doc, "spec", /*simulation=*/true);
    if (v.pipeline.replicas > 1 && keys.insert(simulator::dpCostKey(v)).second)
      t.dpVariants.push_back(v);
  };
  addVariant(runJson);
  for (const auto& d : dpSettings) {
    json doc = runJson;
    runtime::setJsonPath(doc, "dp", d);
    addVariant(doc);
  }
  // Every schedule the points use: each gets its own host-speed fit (--host-from-run).
  t.schedules = {t.spec.pipeline.schedule};
  if (sweep) {
    sweep->base = runJson;  // the points as the sweep runs them with the same --set
    for (const auto& pt : expandSweep(*sweep))
      if (pt.spec.contains("pipeline") && pt.spec["pipeline"].contains("schedule"))
        t.schedules.insert(pt.spec["pipeline"]["schedule"].get<std::string>());
  }
  t.runJson = runJson;
  t.codecs = all;
  return t;
}

}  // namespace slowpipe::experiments
