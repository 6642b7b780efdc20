// Any codec against any other: paired comparisons of two compression labels of a sweep, and the
// sweep's claims judged on them (definitions in README "Metrics" and docs).
//
// A comparison of A with B at one setting (the values of every axis but compression, e.g.
// "100Mbps") pairs repeat k of A with repeat k of B (they ran in the same round, on the same seed
// under "repeat_seeds": "per_repeat"), over the repeats both finished:
//   speed_ratio    tokens/s of A / tokens/s of B        (> 1: A is faster)
//   val_loss_gap   final validation loss of A / of B - 1 (> 0: A ends worse; relative, as the
//   summary's gap) val_loss_diff  final validation loss of A - of B     (absolute)
// each the median with the summary's interval (the range below 5 pairs, a 95% percentile bootstrap
// of the median from 5), plus each codec's time to target and wire bytes per step from its row.
//
// A claim {"label": A, "vs": B (default: the baseline), "at": setting (default: every setting),
// "speedup_at_least": x, "speedup_at_most": x, "val_loss_gap_at_most": x, "val_loss_gap_at_least":
// x, "reaches_target": true} passes when every bound holds at the interval's far end at every
// setting it names: speedup_at_least x needs speed_ratio_lo >= x, val_loss_gap_at_most x needs
// val_loss_gap_hi <= x, reaches_target needs every repeat of A to reach the target. A claim with no
// data to judge (a setting that did not run, no losses in a simulated sweep) is neither: pass null.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/sweep.h"

namespace slowpipe::experiments {

// Comparisons of `a` with `b` at every setting where both ran (one object per setting; `rows` are
// the summary's rows, for time to target). Throws std::invalid_argument naming the sweep's labels
// when `a` or `b` is not one.
nlohmann::json compareCodecs(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                             const std::map<std::string, std::vector<nlohmann::json>>& results,
                             const nlohmann::json& rows, const std::string& a,
                             const std::string& b);

// The sweep's claims, each with its text, its verdict at every setting it names and overall
// ("pass": true, false or null). `comparisons`: what compareCodecs gave for each pair.
nlohmann::json judgeClaims(const SweepSpec& spec, const nlohmann::json& comparisons);

// Every pair the summary compares: the claims' (label, vs) then spec.compare, each once, in order.
std::vector<std::pair<std::string, std::string>> comparedPairs(const SweepSpec& spec);

// The comparisons as a plain-text table, one line per (pair, setting) (for `summarize --vs`).
std::string comparisonsText(const nlohmann::json& comparisons);

}  // namespace slowpipe::experiments
