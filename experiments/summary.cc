// summarizeSweep / summaryCsv (definitions in summary.h and docs/metrics.md).
#include "experiments/summary.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "emulator/link.h"
#include "experiments/compare.h"
#include "runtime/dp/dp.h"

namespace slowpipe::experiments {

using nlohmann::json;

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::pair<double, double> bootstrapMedianInterval(const std::vector<double>& v, uint64_t seed) {
  if (v.size() <= 1) return {median(v), median(v)};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
  std::vector<double> meds(kBootstrapResamples), sample(v.size());
  for (auto& m : meds) {
    for (auto& x : sample) x = v[pick(rng)];
    m = median(sample);
  }
  std::sort(meds.begin(), meds.end());
  const auto at = [&](double q) { return meds[static_cast<size_t>(q * (meds.size() - 1) + 0.5)]; };
  return {at(0.025), at(0.975)};
}

std::string intervalText(int repeats) {
  if (repeats >= kMinRepeatsForCi)
    return "95% percentile bootstrap interval of the median over " + std::to_string(repeats) +
           " repeats (" + std::to_string(kBootstrapResamples) +
           " resamples, seed 1; the bootstrap because step times and losses are "
           "skewed and a median needs no normality)";
  return "range (min to max) over " + std::to_string(repeats) + " repeat(s): with fewer than " +
         std::to_string(kMinRepeatsForCi) +
         " the percentile bootstrap of the median is the range itself, so no confidence interval "
         "is claimed";
}

namespace {

int compressionAxis(const SweepSpec& s) {
  for (size_t i = 0; i < s.axes.size(); ++i)
    if (s.axes[i].first == "compression") return static_cast<int>(i);
  return -1;
}

// Key of a point's settings on every axis but the blanked ones.
std::string peerKey(const SweepPoint& p, int compAxis, int blankAxis = -1) {
  std::string k;
  for (size_t i = 0; i < p.axisLabels.size(); ++i)
    k += (static_cast<int>(i) == compAxis || static_cast<int>(i) == blankAxis ? std::string("*")
                                                                              : p.axisLabels[i]) +
         "|";
  return k;
}

double num(const json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : NAN;
}
json orNull(double v) { return std::isfinite(v) ? json(v) : json(); }

// The ok repeats of one point, by repeat index (null where not ok).
struct Reps {
  std::vector<const json*> byIndex;
  double stat(size_t k, const char* key) const {
    return k < byIndex.size() && byIndex[k] ? num((*byIndex[k])["summary"], key) : NAN;
  }
};

// The first ok repeat's result (nullptr: none).
const json* firstOk(const Reps& r) {
  for (const json* d : r.byIndex)
    if (d) return d;
  return nullptr;
}

Reps okReps(const std::map<std::string, std::vector<json>>& results, const std::string& name) {
  Reps r;
  const auto it = results.find(name);
  if (it == results.end()) return r;
  for (const json& doc : it->second)
    r.byIndex.push_back(doc.is_object() && doc.value("status", "") == "ok" ? &doc : nullptr);
  return r;
}

// Median and interval of a per-repeat quantity into row[key], row[loKey], row[hiKey].
void putStat(json& row, const std::vector<double>& v, const std::string& key, const std::string& lo,
             const std::string& hi) {
  std::vector<double> ok;
  for (double x : v)
    if (std::isfinite(x)) ok.push_back(x);
  if (ok.empty()) return;
  const auto [l, h] = bootstrapMedianInterval(ok);
  row[key] = median(ok);
  row[lo] = l;
  row[hi] = h;
}

std::string statusOf(const std::map<std::string, std::vector<json>>& results,
                     const std::string& name, int repeats, json* reason) {
  const auto it = results.find(name);
  int ok = 0, ran = 0;
  if (it != results.end())
    for (const json& doc : it->second) {
      if (!doc.is_object()) continue;
      ++ran;
      if (doc.value("status", "") == "ok") {
        ++ok;
      } else if (reason->is_null()) {
        *reason = doc.value("reason", doc.value("status", "unknown"));
      }
    }
  if (ran == 0) return "missing";
  if (ok < ran) return "failed";
  return ok == repeats ? "ok" : "incomplete";
}

}  // namespace

namespace {

// codec_bound: the codec, not the link, set the pace. A rank's encode + decode time per step (the
// run's mean over ranks) exceeds the time its share of the step's raw (fp32) bytes takes on the
// point's link: sending the messages uncompressed would have been faster than coding them. Null
// where the run records no byte counts or the point has no link bandwidth.
void putCodecBound(json& row, const json& run) {
  const json& s = run["summary"];
  const double bw = row.value("bandwidth_bps", 0.0), raw = num(s, "raw_bytes_per_step");
  const json& steps = run.value("steps", json::array());
  const size_t ranks =
      steps.empty() ? 0 : steps[0].value("breakdown_s_per_stage", json::array()).size();
  if (!(bw > 0) || !(raw > 0) || ranks == 0 || !s.contains("breakdown_share")) {
    row["codec_bound"] = nullptr;
    return;
  }
  const double codecS = num(s, "mean_step_time_s") * (s["breakdown_share"].value("encode", 0.0) +
                                                      s["breakdown_share"].value("decode", 0.0));
  const double rawWireS = raw / static_cast<double>(ranks) / (bw / 8);
  row["codec_s_per_step"] = codecS;
  row["raw_wire_s_per_step"] = rawWireS;
  row["codec_bound"] = codecS > rawWireS;
}

// A point's own figures over its ok repeats: throughput, step time, loss (medians and
// intervals), link check, wire bytes, breakdown. Returns the repeats that were ok (0: none, and
// the row says only its status).
int putOwnStats(json& row, const Reps& me, size_t R, std::vector<double>& tp) {
  std::vector<double> st(R, NAN), loss(R, NAN);
  tp.assign(R, NAN);
  int okCount = 0;
  bool linkOk = true, linkKnown = false;
  for (size_t k = 0; k < R; ++k) {
    tp[k] = me.stat(k, "throughput_tokens_per_s");
    st[k] = me.stat(k, "mean_step_time_s");
    loss[k] = me.stat(k, "final_val_loss");
    if (k < me.byIndex.size() && me.byIndex[k]) {
      ++okCount;
      if (me.byIndex[k]->contains("link_ok")) {
        linkKnown = true;
        linkOk = linkOk && (*me.byIndex[k])["link_ok"].get<bool>();
      }
    }
  }
  row["repeats"] = okCount;
  if (okCount == 0)
    return 0;  // nothing comparable: a failed run's partial figures are not reported
  row["link_ok"] = linkKnown ? json(linkOk) : json();
  putStat(row, tp, "throughput_tokens_per_s", "throughput_lo", "throughput_hi");
  putStat(row, st, "mean_step_time_s", "step_time_lo", "step_time_hi");
  putStat(row, loss, "final_val_loss", "final_val_loss_lo", "final_val_loss_hi");
  row["wire_bytes_per_step"] = orNull(num((*firstOk(me))["summary"], "wire_bytes_per_step"));
  std::vector<double> wait;
  json share = {{"compute", 0.0}, {"encode", 0.0}, {"decode", 0.0}, {"wait", 0.0}};
  for (const json* d : me.byIndex)
    if (d) {
      wait.push_back(num((*d)["summary"], "wait_share"));
      for (auto& [k, v] : share.items())
        v = v.get<double>() + (*d)["summary"]["breakdown_share"].value(k, 0.0) / okCount;
    }
  row["wait_share"] = orNull(median(wait));
  row["breakdown_share"] = share;
  putCodecBound(row, *firstOk(me));
  return okCount;
}

// Speed-up over the baseline codec at the same link, the ideal that bounds it (the codec's
// fastest step over the sweep's links), efficiency, loss gap, time to the baseline's loss.
void putBaselineStats(json& row, const Reps& me, const Reps& base,
                      const std::vector<std::pair<double, Reps>>& peers,
                      const std::vector<double>& tp, size_t R, bool hasLinkAxis, int okCount,
                      const SweepSpec::Target& target) {
  std::vector<double> speedup(R, NAN), ideal(R, NAN), eff(R, NAN), baseLoss(R, NAN);
  std::map<double, int> idealFrom;  // link bandwidth -> repeats whose fastest step it gave
  for (size_t k = 0; k < R; ++k) {
    speedup[k] = tp[k] / base.stat(k, "throughput_tokens_per_s");
    baseLoss[k] = base.stat(k, "final_val_loss");
    // Ideal: the baseline's step time here over this codec's step time with the least network
    // cost measured, i.e. its fastest step over the sweep's links in this round. Where the faster
    // links all cost the codec nothing, that is whichever of them noise favoured. It bounds the
    // speed-up by construction: the codec ran here no faster than its fastest. Taking the fastest
    // link instead was a bound only up to noise.
    double best = NAN, bestBw = NAN;
    for (const auto& [bw, r] : peers) {
      const double t = r.stat(k, "mean_step_time_s");
      if (std::isfinite(t) && (!std::isfinite(best) || t < best || (t == best && bw > bestBw))) {
        best = t;
        bestBw = bw;
      }
    }
    ideal[k] = base.stat(k, "mean_step_time_s") / best;
    eff[k] = speedup[k] / ideal[k];
    if (std::isfinite(ideal[k])) ++idealFrom[bestBw];
  }
  putStat(row, speedup, "speedup", "speedup_lo", "speedup_hi");
  if (hasLinkAxis) {  // without a bandwidth axis there is no "fastest link" to bound the speed-up
                      // with
    putStat(row, ideal, "ideal_speedup", "ideal_lo", "ideal_hi");
    putStat(row, eff, "efficiency", "efficiency_lo", "efficiency_hi");
    // The link that gave the codec's fastest step in most rounds (the faster one on a tie).
    double from = NAN;
    int most = 0;
    for (const auto& [bw, n] : idealFrom)
      if (n >= most) {
        most = n;
        from = bw;
      }
    row["ideal_link_bps"] = orNull(from);
  }
  // Quality, paired by repeat: the final validation loss over the baseline's of the same round,
  // and the time to the target (a fixed loss, or the baseline's final loss x (1 + tolerance)).
  std::vector<double> gap(R, NAN), targets(R, NAN), ttt(R, NAN);
  int reached = 0;
  for (size_t k = 0; k < R; ++k) {
    gap[k] = me.stat(k, "final_val_loss") / baseLoss[k] - 1.0;
    targets[k] = target.valLoss > 0 ? target.valLoss : baseLoss[k] * (1.0 + target.tolerance);
    const json* d = k < me.byIndex.size() ? me.byIndex[k] : nullptr;
    if (!d || !std::isfinite(targets[k])) continue;
    for (const auto& e : d->value("evals", json::array()))
      if (e["val_loss"].is_number() && e["val_loss"].get<double>() <= targets[k] &&
          e["wall_s"].is_number()) {
        ttt[k] = e["wall_s"].get<double>();
        ++reached;
        break;
      }
  }
  putStat(row, gap, "val_loss_gap_vs_baseline", "val_loss_gap_lo", "val_loss_gap_hi");
  std::vector<double> finite;
  for (double x : targets)
    if (std::isfinite(x)) finite.push_back(x);
  row["target_val_loss"] = orNull(median(finite));
  row["target_reached"] = reached;
  // Every ok repeat must reach it, else "not reached" (null), not the median of the lucky ones.
  if (reached == okCount)
    putStat(row, ttt, "time_to_target_s", "time_to_target_lo", "time_to_target_hi");
  else
    row["time_to_target_s"] = json();
  if (const json* b = firstOk(base))
    row["wire_reduction"] = orNull(num((*b)["summary"], "wire_bytes_per_step") /
                                   num((*firstOk(me))["summary"], "wire_bytes_per_step"));
}

// The point's default link (a spec without network.links has the default one; with network.nodes
// it is what links between no nodes would be: the row's bandwidth then says little).
emulator::LinkSpec defaultLinkOf(const SweepPoint& p) {
  const json& n = p.spec.contains("network") ? p.spec["network"] : json();
  return emulator::topologyFromJson(
             n.is_object() && n.contains("links") ? n["links"] : runtime::NetworkSpec{}.links,
             "links")
      .defaultLink;
}

// The point's settings as the row reports them.
json describePoint(const SweepSpec& spec, const SweepPoint& p, int comp) {
  const auto link = defaultLinkOf(p);
  json row = {{"point", p.name},
              {"bandwidth_bps", link.bandwidthBps},
              {"latency_s", link.latencyS},
              {"forward", p.spec["compression"].value("forward", "none")},
              {"backward", p.spec["compression"].value("backward", "none")},
              {"label", comp >= 0 ? p.axisLabels[comp] : p.spec["compression"].value("label", "")},
              {"dp_codec", p.spec.contains("dp") ? p.spec["dp"].value("codec", "none") : "none"},
              {"axes", p.axisLabels}};
  const runtime::RunSpec rs =
      runtime::runSpecFromJson(p.spec, "sweep point " + p.name, spec.simulation);
  if (rs.pipeline.replicas > 1)
    row["dp_bandwidth_bps"] = runtime::dpTopology(rs).defaultLink.bandwidthBps;
  return row;
}

}  // namespace

json summarizeSweep(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                    const std::map<std::string, std::vector<json>>& results) {
  const int comp = compressionAxis(spec);
  int bwAxis = -1;
  for (size_t i = 0; i < spec.axes.size(); ++i)
    if (spec.axes[i].first.find("bandwidth") != std::string::npos ||
        spec.axes[i].first == "network.links")
      bwAxis = static_cast<int>(i);                   // the link axis: "fastest" is taken along it
  std::map<std::string, const SweepPoint*> baseline;  // link settings -> baseline point
  // codec + other axes -> the same codec at every link of the sweep (bandwidth, point)
  std::map<std::string, std::vector<std::pair<double, const SweepPoint*>>> alongLinks;
  for (const auto& p : points) {
    const double bw = defaultLinkOf(p).bandwidthBps;
    alongLinks[peerKey(p, -1, bwAxis)].push_back({bw, &p});
    if (comp < 0 || p.axisLabels[comp] == spec.baseline) baseline[peerKey(p, comp)] = &p;
  }
  const size_t R = static_cast<size_t>(spec.repeats);
  json rows = json::array();
  for (const auto& p : points) {
    json row = describePoint(spec, p, comp);
    json reason;
    row["status"] = statusOf(results, p.name, spec.repeats, &reason);
    if (!reason.is_null()) row["reason"] = reason;
    const Reps me = okReps(results, p.name);
    std::vector<double> tp;
    const int okCount = putOwnStats(row, me, R, tp);
    const auto b = baseline.find(peerKey(p, comp));
    if (okCount > 0 && b != baseline.end()) {
      std::vector<std::pair<double, Reps>> peers;  // this codec at every link
      for (const auto& [bw, q] : alongLinks[peerKey(p, -1, bwAxis)])
        peers.push_back({bw, okReps(results, q->name)});
      putBaselineStats(row, me, okReps(results, b->second->name), peers, tp, R, bwAxis >= 0,
                       okCount, spec.target);
    }
    rows.push_back(row);
  }
  json base = {{"label", spec.baseline}};
  json comparisons = json::array();
  for (const auto& [a, b] : comparedPairs(spec))
    for (json& c : compareCodecs(spec, points, results, rows, a, b))
      comparisons.push_back(std::move(c));
  return {{"sweep", spec.name},
          {"baseline", base},
          {"repeats", spec.repeats},
          {"repeat_seeds", spec.seedPerRepeat ? "per_repeat" : "same"},
          {"interval", intervalText(spec.repeats)},
          {"interval_label", spec.repeats >= kMinRepeatsForCi ? "95% CI" : "range"},
          {"target", toJson(spec.target)},
          {"rows", rows},
          {"comparisons", comparisons},
          {"claims", judgeClaims(spec, comparisons)}};
}

std::string csvTable(const std::vector<std::string>& columns, const json& rows) {
  std::ostringstream out;
  for (size_t i = 0; i < columns.size(); ++i) out << (i ? "," : "") << columns[i];
  out << "\n";
  for (const auto& r : rows) {
    for (size_t i = 0; i < columns.size(); ++i) {
      if (i) out << ",";
      if (!r.contains(columns[i]) || r[columns[i]].is_null()) continue;
      const json& v = r[columns[i]];
      if (v.is_string()) {
        std::string s = v.get<std::string>();
        if (s.find_first_of(",\"\n\r") != std::string::npos) {
          std::string q = "\"";
          for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
          s = q + "\"";
        }
        out << s;
      } else {
        out << v.dump();
      }
    }
    out << "\n";
  }
  return out.str();
}

std::string summaryCsv(const json& summary) {
  static const std::vector<std::string> kCols = {"point",
                                                 "label",
                                                 "forward",
                                                 "backward",
                                                 "bandwidth_bps",
                                                 "latency_s",
                                                 "status",
                                                 "repeats",
                                                 "link_ok",
                                                 "throughput_tokens_per_s",
                                                 "throughput_lo",
                                                 "throughput_hi",
                                                 "speedup",
                                                 "speedup_lo",
                                                 "speedup_hi",
                                                 "ideal_speedup",
                                                 "ideal_lo",
                                                 "ideal_hi",
                                                 "efficiency",
                                                 "efficiency_lo",
                                                 "efficiency_hi",
                                                 "ideal_link_bps",
                                                 "time_to_target_s",
                                                 "time_to_target_lo",
                                                 "time_to_target_hi",
                                                 "target_reached",
                                                 "final_val_loss",
                                                 "target_val_loss",
                                                 "val_loss_gap_vs_baseline",
                                                 "val_loss_gap_lo",
                                                 "val_loss_gap_hi",
                                                 "wire_bytes_per_step",
                                                 "wait_share",
                                                 "mean_step_time_s",
                                                 "step_time_lo",
                                                 "step_time_hi",
                                                 "codec_bound",
                                                 "codec_s_per_step",
                                                 "raw_wire_s_per_step"};
  return csvTable(kCols, summary["rows"]);
}

}  // namespace slowpipe::experiments
