// Sweep spec parsing and expansion.
#include "experiments/sweep.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include "runtime/records/result.h"
#include "runtime/spec/spec.h"
#include "runtime/spec/spec_schema.h"

namespace slowpipe::experiments {

using nlohmann::json;

std::string slug(const std::string& text) {
  std::string out;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '.')
      out += c;
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

std::string valueLabel(const json& v) {
  if (v.is_object() && v.contains("label") && v["label"].is_string()) return v["label"];
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

namespace {

// A field of `j` that runtime/spec/spec_schema.cc does not list under `object` is refused, naming
// it and the fields that are (the schema `slowpipe spec schema` prints is the same list).
void refuseUnknown(const json& j, const std::string& where, const std::string& object) {
  const std::vector<std::string> known = runtime::specFieldNames(object);
  for (const auto& [k, v] : j.items())
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      std::string list;
      for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
      throw std::invalid_argument(where + "." + k + ": unknown field; expected " + list);
    }
}

}  // namespace

SweepSpec sweepSpecFromJson(const json& j, const std::string& where, bool simulation) {
  if (!j.is_object()) throw std::invalid_argument(where + ": expected an object");
  refuseUnknown(j, where, "sweep");
  SweepSpec s;
  s.simulation = simulation;
  s.name = j.value("name", "sweep");
  if (!j.contains("base"))
    throw std::invalid_argument(where + ".base: missing (a RunSpec object or a path to one)");
  if (j["base"].is_string()) {
    s.base = runtime::readJsonFile(j["base"].get<std::string>(), where + ".base: the file");
  } else {
    s.base = j["base"];
  }
  if (!j.contains("axes") || !j["axes"].is_array() || j["axes"].empty())
    throw std::invalid_argument(
        where + ".axes: expected a non-empty array of {\"path\": ..., \"values\": [...]}");
  for (size_t i = 0; i < j["axes"].size(); ++i) {
    const json& a = j["axes"][i];
    const std::string w = where + ".axes[" + std::to_string(i) + "]";
    if (!a.is_object() || !a.contains("path") || !a["path"].is_string() || !a.contains("values") ||
        !a["values"].is_array() || a["values"].empty())
      throw std::invalid_argument(
          w + ": expected {\"path\": \"network.links.bandwidth\", \"values\": [...]} with values");
    refuseUnknown(a, w, "sweep.axes[]");
    s.axes.emplace_back(a["path"].get<std::string>(), a["values"].get<std::vector<json>>());
  }
  s.baseline = j.value("baseline", "fp32");
  if (j.contains("pretrain")) {
    if (!j["pretrain"].is_object())
      throw std::invalid_argument(where +
                                  ".pretrain: expected an object like {\"max_steps\": 400}");
    refuseUnknown(j["pretrain"], where + ".pretrain", "sweep.pretrain");
    s.pretrain = j["pretrain"];
  }
  if (j.contains("repeats")) {
    if (!j["repeats"].is_number_integer() || j["repeats"].get<int64_t>() < 1 ||
        j["repeats"].get<int64_t>() > 1000)
      throw std::invalid_argument(where + ".repeats: " + j["repeats"].dump() +
                                  " must be an integer in 1..1000");
    s.repeats = j["repeats"].get<int>();
  }
  if (j.contains("repeat_seeds")) {
    const json& v = j["repeat_seeds"];
    if (!v.is_string() || (v != "same" && v != "per_repeat"))
      throw std::invalid_argument(
          where + ".repeat_seeds: " + v.dump() +
          ": expected \"same\" (every repeat trains alike) or \"per_repeat\" (repeat k trains with "
          "training.seed + k)");
    s.seedPerRepeat = v == "per_repeat";
  }
  if (j.contains("target")) s.target = targetFromJson(j["target"], where + ".target");
  if (j.contains("claims")) s.claims = claimsFromJson(j["claims"], s, where + ".claims");
  runtime::runSpecFromJson(s.base, where + ".base",
                           simulation);  // the base must be valid on its own
  return s;
}

SweepSpec::Target targetFromJson(const json& j, const std::string& where) {
  const char* form =
      ": expected {\"val_loss\": L > 0} or {\"tolerance\": r >= 0} (relative to the baseline's "
      "final "
      "validation loss)";
  if (!j.is_object() || j.size() != 1 || !(j.contains("val_loss") || j.contains("tolerance")))
    throw std::invalid_argument(where + form);
  SweepSpec::Target t;
  const std::string key = j.contains("val_loss") ? "val_loss" : "tolerance";
  const json& v = j[key];
  if (!v.is_number() || v.get<double>() < 0 || (key == "val_loss" && v.get<double>() == 0) ||
      !std::isfinite(v.get<double>()))
    throw std::invalid_argument(where + "." + key + ": " + v.dump() + form);
  if (key == "val_loss")
    t.valLoss = v.get<double>();
  else
    t.tolerance = v.get<double>();
  return t;
}

namespace {

// The labels of the compression axis (or the base's own label when no axis varies it).
std::vector<std::string> compressionLabels(const SweepSpec& s) {
  std::vector<std::string> out;
  for (const auto& [path, values] : s.axes)
    if (path == "compression")
      for (const json& v : values) out.push_back(valueLabel(v));
  if (out.empty() && s.base.contains("compression") && s.base["compression"].is_object())
    out.push_back(s.base["compression"].value("label", ""));
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "'" : ", '") + x + "'";
  return out;
}

}  // namespace

json claimsFromJson(const json& j, const SweepSpec& s, const std::string& where) {
  if (!j.is_array()) throw std::invalid_argument(where + ": expected an array of claims");
  const std::vector<std::string> labels = compressionLabels(s);
  std::vector<std::string> settings;  // the values of every other axis, as labelled
  for (const auto& [path, values] : s.axes)
    if (path != "compression")
      for (const json& v : values) settings.push_back(valueLabel(v));
  static const std::set<std::string> kBounds = {"speedup_at_least", "speedup_at_most",
                                                "val_loss_gap_at_most", "val_loss_gap_at_least"};
  for (size_t i = 0; i < j.size(); ++i) {
    const json& c = j[i];
    const std::string w = where + "[" + std::to_string(i) + "]";
    if (!c.is_object())
      throw std::invalid_argument(w + ": expected an object {\"label\": ..., \"vs\": ..., ...}");
    int bounds = 0;
    for (const auto& [k, v] : c.items()) {
      if (kBounds.count(k)) {
        if (!v.is_number() || !std::isfinite(v.get<double>()))
          throw std::invalid_argument(w + "." + k + ": " + v.dump() + " must be a number");
        ++bounds;
      } else if (k == "reaches_target") {
        if (!v.is_boolean())
          throw std::invalid_argument(w + "." + k + ": " + v.dump() + " must be true or false");
        ++bounds;
      } else if (k == "label" || k == "vs" || k == "at" || k == "note") {
        if (!v.is_string())
          throw std::invalid_argument(w + "." + k + ": " + v.dump() + " must be a string");
      } else {
        refuseUnknown(json{{k, v}}, w, "sweep.claims[]");
      }
    }
    if (!c.contains("label"))
      throw std::invalid_argument(w + ".label: missing (the compression label the claim is about)");
    if (bounds == 0)
      throw std::invalid_argument(
          w +
          ": states nothing; give speedup_at_least/at_most, val_loss_gap_at_most/at_least or "
          "reaches_target");
    for (const char* k : {"label", "vs"}) {
      const std::string l = c.value(k, k == std::string("vs") ? s.baseline : "");
      if (std::find(labels.begin(), labels.end(), l) == labels.end())
        throw std::invalid_argument(w + "." + k + ": '" + l +
                                    "' is not a compression label of the sweep; expected one of " +
                                    joined(labels));
    }
    if (c.contains("at")) {
      const std::string at = c["at"];
      bool known = std::find(settings.begin(), settings.end(), at) != settings.end();
      if (!known)
        throw std::invalid_argument(w + ".at: '" + at +
                                    "' is not a value of the sweep's other axes; expected one of " +
                                    joined(settings));
    }
  }
  return j;
}

json repeatSpec(const SweepSpec& s, const json& pointSpec, int repeat) {
  if (!s.seedPerRepeat || repeat == 0) return pointSpec;
  json spec = pointSpec;
  json& training = spec["training"];
  if (training.contains("seed") &&
      !(training["seed"].is_number_integer() && training["seed"].get<int64_t>() >= 0))
    return spec;  // the spec's own check says what is wrong with it
  const uint64_t seed =
      training.contains("seed") ? training["seed"].get<uint64_t>() : 1;  // RunSpec's default
  training["seed"] = seed + static_cast<uint64_t>(repeat);
  return spec;
}

json toJson(const SweepSpec::Target& t) {
  return t.valLoss > 0 ? json{{"val_loss", t.valLoss}} : json{{"tolerance", t.tolerance}};
}

namespace {

// The sweep's relative input paths are its file's (runtime::resolveSpecPaths): the base's (a base
// given by path, against its own file's folder), and every axis value's at its path.
void resolveSweepPaths(json& j, const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (!j.is_object()) return;
  if (j.contains("base") && j["base"].is_string()) {
    std::string file = j["base"];
    if (!dir.empty() && std::filesystem::path(file).is_relative() &&
        std::filesystem::exists(std::filesystem::path(dir) / file))
      file = (std::filesystem::path(dir) / file).lexically_normal().string();
    j["base"] = runtime::readSpecFile(file, "sweep.base: the file");
  } else if (j.contains("base")) {
    runtime::resolveSpecPaths(j["base"], dir);
  }
  if (!j.contains("axes") || !j["axes"].is_array()) return;
  for (json& axis : j["axes"]) {
    if (!axis.is_object() || !axis.contains("path") || !axis["path"].is_string() ||
        !axis.contains("values") || !axis["values"].is_array())
      continue;
    std::string pointer = "/" + axis["path"].get<std::string>();
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    const json::json_pointer at(pointer);
    for (json& v : axis["values"]) {
      json doc = json::object();
      try {
        runtime::setJsonPath(doc, axis["path"].get<std::string>(), v);
      } catch (const std::invalid_argument&) {
        continue;  // sweepSpecFromJson names a bad axis path
      }
      runtime::resolveSpecPaths(doc, dir);
      v = doc.at(at);
    }
  }
}

}  // namespace

SweepSpec loadSweepSpec(const std::string& path, bool simulation,
                        const std::vector<std::string>& sets) {
  json j = runtime::readJsonFile(path, "sweep file");
  resolveSweepPaths(j, path);
  if (!sets.empty() && j.is_object()) {
    // Resolve a base given by path first, so the assignments apply to the experiment itself; the
    // base is validated after them (an assignment may be what makes it valid here, e.g. a
    // checkpoint that fits this machine).
    for (const auto& a : sets) {
      const std::string target = a.substr(0, a.find('='));
      for (const json& axis : j.value("axes", json::array()))
        if (const std::string path = axis.is_object() ? axis.value("path", "") : "";
            !path.empty() && (target == path || target.rfind(path + ".", 0) == 0 ||
                              path.rfind(target + ".", 0) == 0))
          throw std::invalid_argument("--set " + target + ": the sweep's axis '" + path +
                                      "' sets this field at every point; change the axis instead");
      if (!j.contains("base") || !j["base"].is_object())
        break;  // sweepSpecFromJson names the problem
      runtime::applySet(j["base"], a);
    }
  }
  try {
    return sweepSpecFromJson(j, "sweep", simulation);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("'" + path + "'" + (sets.empty() ? "" : " with --set") + ": " +
                                e.what());
  }
}

namespace {}  // namespace

std::vector<SweepPoint> expandSweep(const SweepSpec& s) {
  std::vector<SweepPoint> points(1, SweepPoint{"", s.base, {}});
  for (const auto& [path, values] : s.axes) {
    std::vector<SweepPoint> next;
    const std::string axisName = path.substr(path.rfind('.') + 1);
    for (const SweepPoint& p : points)
      for (const json& v : values) {
        SweepPoint q = p;
        // An object's "label" names the axis value; only the compression section has such a field.
        json merged = v;
        if (path != "compression" && merged.is_object()) merged.erase("label");
        // A compression variant may carry its data-parallel settings ("dp": {...}): end-to-end
        // variants (activations and gradients) are one axis value.
        if (path == "compression" && merged.is_object() && merged.contains("dp")) {
          runtime::setJsonPath(q.spec, "dp", merged["dp"]);
          merged.erase("dp");
        }
        runtime::setJsonPath(q.spec, path, merged);
        q.axisLabels.push_back(valueLabel(v));
        q.name += (q.name.empty() ? "" : "_") + slug(axisName) + "-" + slug(valueLabel(v));
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  std::set<std::string> names;
  for (auto& p : points) {
    if (!names.insert(p.name).second)
      throw std::invalid_argument("sweep: two points are both named '" + p.name +
                                  "'; give the axis values distinct labels");
    p.spec["name"] = s.name + "/" + p.name;
    runtime::runSpecFromJson(p.spec, "sweep point " + p.name,
                             s.simulation);  // every point valid before anything runs
  }
  return points;
}

}  // namespace slowpipe::experiments
