// compareCodecs / judgeClaims (definitions in compare.h).
#include "experiments/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "emulator/link.h"
#include "experiments/summary.h"

namespace slowpipe::experiments {

using nlohmann::json;

namespace {

int compressionAxisOf(const SweepSpec& s) {
  for (size_t i = 0; i < s.axes.size(); ++i)
    if (s.axes[i].first == "compression") return static_cast<int>(i);
  return -1;
}

// The point's values on every axis but compression.
std::vector<std::string> settingOf(const SweepPoint& p, int comp) {
  std::vector<std::string> out;
  for (size_t i = 0; i < p.axisLabels.size(); ++i)
    if (static_cast<int>(i) != comp) out.push_back(p.axisLabels[i]);
  return out;
}

double statOf(const std::map<std::string, std::vector<json>>& results, const std::string& point,
              size_t k, const char* key) {
  const auto it = results.find(point);
  if (it == results.end() || k >= it->second.size()) return NAN;
  const json& d = it->second[k];
  if (!d.is_object() || d.value("status", "") != "ok" || !d.contains("summary")) return NAN;
  const json& v = d["summary"].value(key, json());
  return v.is_number() ? v.get<double>() : NAN;
}

// Median and interval of the finite values of v into out[key], out[key_lo], out[key_hi]; the count.
size_t putPaired(json& out, const std::vector<double>& v, const std::string& key) {
  std::vector<double> ok;
  for (double x : v)
    if (std::isfinite(x)) ok.push_back(x);
  if (ok.empty()) {
    out[key] = json();
    return 0;
  }
  const auto [lo, hi] = bootstrapMedianInterval(ok);
  out[key] = median(ok);
  out[key + "_lo"] = lo;
  out[key + "_hi"] = hi;
  return ok.size();
}

std::string labelsText(const SweepSpec& spec) {
  std::string out;
  const int comp = compressionAxisOf(spec);
  if (comp >= 0)
    for (const json& v : spec.axes[comp].second)
      out += (out.empty() ? "'" : ", '") + valueLabel(v) + "'";
  return out;
}

}  // namespace

json compareCodecs(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                   const std::map<std::string, std::vector<json>>& results, const json& rows,
                   const std::string& a, const std::string& b) {
  const int comp = compressionAxisOf(spec);
  if (comp < 0)
    throw std::invalid_argument("the sweep '" + spec.name +
                                "' has no compression axis: there are no codecs to compare");
  for (const std::string& l : {a, b}) {
    bool known = false;
    for (const json& v : spec.axes[comp].second) known = known || valueLabel(v) == l;
    if (!known)
      throw std::invalid_argument("'" + l + "' is not a compression label of the sweep '" +
                                  spec.name + "'; expected one of " + labelsText(spec));
  }
  std::map<std::string, const json*> rowOf;
  for (const json& r : rows) rowOf[r.value("point", "")] = &r;
  json out = json::array();
  for (const auto& pa : points) {
    if (pa.axisLabels[comp] != a) continue;
    const auto setting = settingOf(pa, comp);
    const auto pb = std::find_if(points.begin(), points.end(), [&](const SweepPoint& q) {
      return q.axisLabels[comp] == b && settingOf(q, comp) == setting;
    });
    if (pb == points.end()) continue;
    std::string settingText;
    for (const auto& s : setting) settingText += (settingText.empty() ? "" : ", ") + s;
    json c = {{"label", a},
              {"vs", b},
              {"setting", settingText.empty() ? "-" : settingText},
              {"setting_values", setting},
              {"point", pa.name},
              {"vs_point", pb->name}};
    const json* ra = rowOf.count(pa.name) ? rowOf[pa.name] : nullptr;
    const json* rb = rowOf.count(pb->name) ? rowOf[pb->name] : nullptr;
    if (ra) c["bandwidth_bps"] = ra->value("bandwidth_bps", json());
    std::vector<double> ratio, gap, diff;
    for (size_t k = 0; k < static_cast<size_t>(spec.repeats); ++k) {
      const double ta = statOf(results, pa.name, k, "throughput_tokens_per_s"),
                   tb = statOf(results, pb->name, k, "throughput_tokens_per_s");
      const double la = statOf(results, pa.name, k, "final_val_loss"),
                   lb = statOf(results, pb->name, k, "final_val_loss");
      ratio.push_back(ta / tb);
      gap.push_back(la / lb - 1.0);
      diff.push_back(la - lb);
    }
    c["pairs"] = putPaired(c, ratio, "speed_ratio");
    c["interval_label"] =
        c["pairs"].get<size_t>() >= static_cast<size_t>(kMinRepeatsForCi) ? "95% CI" : "range";
    putPaired(c, gap, "val_loss_gap");
    putPaired(c, diff, "val_loss_diff");
    for (const auto& [side, r] : {std::pair<std::string, const json*>{"", ra}, {"vs_", rb}}) {
      if (!r) continue;
      for (const char* k : {"time_to_target_s", "time_to_target_lo", "time_to_target_hi",
                            "target_reached", "repeats", "wire_bytes_per_step", "final_val_loss"})
        if (r->contains(k)) c[side + k] = (*r)[k];
    }
    out.push_back(c);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> comparedPairs(const SweepSpec& spec) {
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](const std::pair<std::string, std::string>& p) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  for (const json& c : spec.claims) add({c.value("label", ""), c.value("vs", spec.baseline)});
  for (const auto& p : spec.compare) add(p);
  return out;
}

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string withInterval(const json& c, const std::string& key, const char* f, double scale = 1.0) {
  if (!c.value(key, json()).is_number()) return "-";
  return fmt(f, scale * c[key].get<double>()) + " [" +
         fmt(f, scale * c[key + "_lo"].get<double>()) + ", " +
         fmt(f, scale * c[key + "_hi"].get<double>()) + "]";
}

// One bound of a claim at one setting: {text, pass} (pass null: no data).
json judgeBound(const std::string& bound, const json& limit, const json& c) {
  const bool speed = bound.rfind("speedup", 0) == 0;
  if (bound == "reaches_target") {
    if (!c.contains("target_reached") || !c.contains("repeats"))
      return {{"text", "time to target: no data"}, {"pass", json()}};
    const int reached = c["target_reached"], reps = c["repeats"];
    const bool ok = (reached == reps) == limit.get<bool>();
    return {{"text", std::string(limit.get<bool>() ? "reaches" : "does not reach") +
                         " the target (" + std::to_string(reached) + " of " + std::to_string(reps) +
                         " repeats reached it)"},
            {"pass", ok}};
  }
  const std::string key = speed ? "speed_ratio" : "val_loss_gap";
  const char* f = speed ? "%.3f" : "%+.3f";
  const double scale = speed ? 1.0 : 100.0;  // gaps read in percent
  const std::string unit = speed ? "" : " %";
  const std::string what = speed ? "speed ratio " : "validation-loss gap ";
  if (!c.value(key, json()).is_number()) return {{"text", what + "not measured"}, {"pass", json()}};
  const bool atLeast = bound.find("at_least") != std::string::npos;
  const double x = limit.get<double>(), end = c[key + (atLeast ? "_lo" : "_hi")].get<double>();
  return {{"text", what + withInterval(c, key, f, scale) + unit + (atLeast ? " >= " : " <= ") +
                       fmt(f, scale * x) + unit + " at its " + (atLeast ? "lower" : "upper") +
                       " bound"},
          {"pass", atLeast ? end >= x : end <= x}};
}

}  // namespace

json judgeClaims(const SweepSpec& spec, const json& comparisons) {
  json out = json::array();
  for (const json& claim : spec.claims) {
    const std::string a = claim.value("label", ""), b = claim.value("vs", spec.baseline);
    const std::string at = claim.value("at", "");
    json settings = json::array();
    json verdict = true;
    bool any = false;
    for (const json& c : comparisons) {
      if (c["label"] != a || c["vs"] != b) continue;
      const auto values = c["setting_values"].get<std::vector<std::string>>();
      if (!at.empty() && std::find(values.begin(), values.end(), at) == values.end()) continue;
      json s = {{"setting", c["setting"]}, {"checks", json::array()}};
      json pass = true;
      for (const auto& [k, v] : claim.items()) {
        if (k == "label" || k == "vs" || k == "at" || k == "note") continue;
        json j = judgeBound(k, v, c);
        if (j["pass"].is_null())
          pass = json();
        else if (pass.is_boolean() && !j["pass"].get<bool>())
          pass = false;
        s["checks"].push_back(j);
      }
      s["pass"] = pass;
      any = true;
      if (pass.is_null() && verdict == true) verdict = json();
      if (pass == false) verdict = false;
      settings.push_back(s);
    }
    if (!any) verdict = json();
    std::string text = a + " vs " + b + (at.empty() ? " at every setting" : " @ " + at);
    if (claim.contains("note")) text += " (" + claim["note"].get<std::string>() + ")";
    out.push_back({{"claim", claim}, {"text", text}, {"settings", settings}, {"pass", verdict}});
  }
  return out;
}

std::string comparisonsText(const json& comparisons) {
  std::string out;
  for (const json& c : comparisons) {
    // time_to_target's interval keys are time_to_target_lo/hi, not time_to_target_s_lo
    auto tttOf = [&](const std::string& side) {
      json t = {{"t", c.value(side + "time_to_target_s", json())},
                {"t_lo", c.value(side + "time_to_target_lo", json())},
                {"t_hi", c.value(side + "time_to_target_hi", json())},
                {"target_reached", c.value(side + "target_reached", json())},
                {"repeats", c.value(side + "repeats", json())}};
      if (t["t"].is_number()) return withInterval(t, "t", "%.1f") + " s";
      if (t["target_reached"].is_number())
        return "not reached (" + std::to_string(t["target_reached"].get<int>()) + " of " +
               std::to_string(t["repeats"].get<int>()) + ")";
      return std::string("-");
    };
    out += c["label"].get<std::string>() + " vs " + c["vs"].get<std::string>() + " @ " +
           c["setting"].get<std::string>() + " (" + c.value("interval_label", "range") +
           ", n=" + std::to_string(c.value("pairs", 0)) + " paired repeats): speed ratio " +
           withInterval(c, "speed_ratio", "%.3f") + ", validation-loss gap " +
           withInterval(c, "val_loss_gap", "%+.3f", 100.0) + " %, time to target " + tttOf("") +
           " vs " + tttOf("vs_") + "\n";
  }
  return out;
}

}  // namespace slowpipe::experiments
