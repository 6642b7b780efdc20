// summarizeSweep / summaryCsv.
#include "experiments/summary.h"

#include <cmath>
#include <sstream>

#include "emulator/link.h"

namespace slowpipe::experiments {

using nlohmann::json;

namespace {

int compressionAxis(const SweepSpec& s) {
  for (size_t i = 0; i < s.axes.size(); ++i)
    if (s.axes[i].first == "compression") return static_cast<int>(i);
  return -1;
}

// Key of a point's link settings and every other axis: the compression axis label blanked out.
std::string peerKey(const SweepPoint& p, int compAxis, int blankAxis = -1) {
  std::string k;
  for (size_t i = 0; i < p.axisLabels.size(); ++i)
    k += (static_cast<int>(i) == compAxis || static_cast<int>(i) == blankAxis ? std::string("*") : p.axisLabels[i]) + "|";
  return k;
}

double num(const json& j, const char* k) { return j.contains(k) && j[k].is_number() ? j[k].get<double>() : NAN; }
json orNull(double v) { return std::isfinite(v) ? json(v) : json(); }

}  // namespace

json summarizeSweep(const SweepSpec& spec, const std::vector<SweepPoint>& points, const std::map<std::string, json>& results) {
  const int comp = compressionAxis(spec);
  int bwAxis = -1;
  for (size_t i = 0; i < spec.axes.size(); ++i)
    if (spec.axes[i].first.find("bandwidth") != std::string::npos) bwAxis = static_cast<int>(i);
  // Baseline result per link setting (and per value of every other axis).
  std::map<std::string, const json*> baseline;
  std::map<std::string, std::pair<double, const json*>> fastestBaseline;  // blanked bandwidth -> fastest baseline
  for (const auto& p : points) {
    if (comp >= 0 && p.axisLabels[comp] != spec.baseline) continue;
    const auto it = results.find(p.name);
    if (it == results.end() || it->second.value("status", "") != "ok") continue;
    baseline[peerKey(p, comp)] = &it->second;
    const double bw = emulator::topologyFromJson(p.spec["network"]["links"], "links").defaultLink.bandwidthBps;
    auto& f = fastestBaseline[peerKey(p, comp, bwAxis)];
    if (!f.second || bw > f.first) f = {bw, &it->second};
  }
  json rows = json::array();
  for (const auto& p : points) {
    const auto link = emulator::topologyFromJson(p.spec["network"]["links"], "links").defaultLink;
    json row = {{"point", p.name}, {"bandwidth_bps", link.bandwidthBps}, {"latency_s", link.latencyS},
                {"forward", p.spec["compression"].value("forward", "none")},
                {"backward", p.spec["compression"].value("backward", "none")},
                {"label", comp >= 0 ? p.axisLabels[comp] : p.spec["compression"].value("label", "")},
                {"axes", p.axisLabels}};
    const auto it = results.find(p.name);
    if (it == results.end()) {
      row["status"] = "missing";
      rows.push_back(row);
      continue;
    }
    const json& r = it->second;
    const json& s = r["summary"];
    row["status"] = r.value("status", "unknown");
    if (r.contains("reason")) row["reason"] = r["reason"];
    if (row["status"] != "ok") {  // a failed run's partial figures are not comparable
      rows.push_back(row);
      continue;
    }
    const double tp = num(s, "throughput_tokens_per_s");
    row["throughput_tokens_per_s"] = orNull(tp);
    row["mean_step_time_s"] = orNull(num(s, "mean_step_time_s"));
    row["final_val_loss"] = orNull(num(s, "final_val_loss"));
    row["wire_bytes_per_step"] = orNull(num(s, "wire_bytes_per_step"));
    row["wait_share"] = orNull(num(s, "wait_share"));
    if (s.contains("breakdown_share")) row["breakdown_share"] = s["breakdown_share"];
    const auto b = baseline.find(peerKey(p, comp));
    if (b == baseline.end()) {
      rows.push_back(row);
      continue;
    }
    const json& bs = (*b->second)["summary"];
    const double speedup = tp / num(bs, "throughput_tokens_per_s");
    row["speedup"] = orNull(speedup);
    const double target = num(bs, "final_val_loss");
    row["target_val_loss"] = orNull(target);
    row["time_to_target_s"] = json();
    for (const auto& e : r.value("evals", json::array()))
      if (e["val_loss"].is_number() && e["val_loss"].get<double>() <= target) {
        row["time_to_target_s"] = e["wall_s"];
        break;
      }
    row["val_loss_gap_vs_baseline"] = orNull(num(s, "final_val_loss") / target - 1.0);
    // Ideal speed-up: the baseline's network-attributable step time (its step time here minus at
    // the fastest link) shrinks by the wire-byte reduction; compute stays.
    const auto f = fastestBaseline.find(peerKey(p, comp, bwAxis));
    if (f != fastestBaseline.end()) {
      const double tHere = num(bs, "mean_step_time_s"), tFast = num((*f->second.second)["summary"], "mean_step_time_s");
      const double network = std::max(0.0, tHere - tFast);
      const double reduction = num(bs, "wire_bytes_per_step") / num(s, "wire_bytes_per_step");
      const double ideal = tHere / (tHere - network + network / reduction);
      row["network_share_baseline"] = orNull(network / tHere);
      row["wire_reduction"] = orNull(reduction);
      row["ideal_speedup"] = orNull(ideal);
      row["efficiency"] = orNull(speedup / ideal);
    }
    rows.push_back(row);
  }
  json base = {{"label", spec.baseline}};
  return {{"sweep", spec.name}, {"baseline", base}, {"rows", rows}};
}

std::string summaryCsv(const json& summary) {
  static const std::vector<std::string> kCols = {
      "point", "label", "forward", "backward", "bandwidth_bps", "latency_s", "status", "throughput_tokens_per_s",
      "speedup", "ideal_speedup", "efficiency", "time_to_target_s", "final_val_loss", "target_val_loss",
      "wire_bytes_per_step", "wait_share", "mean_step_time_s"};
  std::ostringstream out;
  for (size_t i = 0; i < kCols.size(); ++i) out << (i ? "," : "") << kCols[i];
  out << "\n";
  for (const auto& r : summary["rows"]) {
    for (size_t i = 0; i < kCols.size(); ++i) {
      if (i) out << ",";
      if (!r.contains(kCols[i]) || r[kCols[i]].is_null()) continue;
      const json& v = r[kCols[i]];
      if (v.is_string()) {
        std::string s = v.get<std::string>();
        if (s.find_first_of(",\"") != std::string::npos) {
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

}  // namespace slowpipe::experiments
