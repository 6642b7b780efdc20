// Sweep summary math over repeated runs: per point the median and a 95% interval of throughput,
// step time, speed-up over the baseline at the same link settings, the ideal speed-up and the
// efficiency; time to the baseline's final validation loss; wire bytes; waiting share; link_ok.
// Definitions in README "Metrics".
//
// Intervals: percentile bootstrap of the median over the repeats (kBootstrapResamples resamples,
// fixed seed, so a summary is reproducible). With one repeat the interval is the value itself.
// Below kMinRepeatsForCi repeats that bootstrap's 2.5% and 97.5% points are the smallest and the
// largest value (n <= 4), so it is reported as what it is, the range, and no "95% CI" is claimed
// (summary "interval" and "interval_label", which figures and reports print).
// Speed-up, ideal and efficiency are paired by repeat index: repeat k of a codec is compared with
// repeat k of the baseline (and of itself at every link, for the ideal), which ran in the same
// round. The ideal is the codec's fastest step over the sweep's links, so efficiency <= 1 in every
// round.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/sweep.h"

namespace slowpipe::experiments {

constexpr int kBootstrapResamples = 2000;
constexpr int kMinRepeatsForCi = 5;

// What the summary's intervals are, said for `repeats` (summary "interval").
std::string intervalText(int repeats);

double median(std::vector<double> v);
// 95% percentile-bootstrap interval of the median of v (v non-empty).
std::pair<double, double> bootstrapMedianInterval(const std::vector<double>& v, uint64_t seed = 1);

// results: point name -> one result.json per repeat index (null where that repeat has not run).
// Rows list every point; status "ok" (every repeat ok), "incomplete" (some not run yet), "failed"
// (a repeat failed) or "missing" (none ran). Figures come from the repeats that are ok.
nlohmann::json summarizeSweep(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                              const std::map<std::string, std::vector<nlohmann::json>>& results);
std::string summaryCsv(const nlohmann::json& summary);
// A CSV table: a header of `columns`, then one line per object of `rows` (a missing or null value
// empty; strings with a comma, quote or line break quoted, quotes doubled).
std::string csvTable(const std::vector<std::string>& columns, const nlohmann::json& rows);

}  // namespace slowpipe::experiments
