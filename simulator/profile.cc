// Profiles: JSON, named devices, analytic costs from FLOPs.
#include "simulator/profile.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "compression/codec.h"
#include "runtime/dp/dp.h"
#include "runtime/exec/schedule.h"
#include "runtime/model/model_size.h"
#include "runtime/records/result.h"
#include "simulator/codec_cost.h"

namespace slowpipe::simulator {

using nlohmann::json;

const CodecCost& Profile::codec(const std::string& spec) const {
  if (auto it = codecs.find(spec); it != codecs.end()) return it->second;
  try {
    if (auto it = codecs.find(compression::makeCodec(spec)->spec()); it != codecs.end())
      return it->second;
  } catch (const std::exception&) {
  }
  const std::string name = spec.substr(0, spec.find_first_of(":("));
  if (auto it = codecs.find(name); it != codecs.end()) return it->second;
  if (auto it = codecs.find("default"); it != codecs.end()) return it->second;
  static const CodecCost kFree{};
  return kFree;
}

std::string dpCostKey(const runtime::RunSpec& spec) {
  return spec.dp.codec +
         (spec.dp.localSteps > 1 ? " local_steps=" + std::to_string(spec.dp.localSteps) : "");
}

DpCost Profile::dpCost(const runtime::RunSpec& spec, int stage) const {
  const std::string key = dpCostKey(spec);
  // Measured: per virtual stage; a rank packs every model chunk it holds (stage, stage + S, ...).
  DpCost sum;
  int found = 0;
  for (int v = 0; v < spec.pipeline.virtualStages && stage >= 0; ++v) {
    const size_t k = static_cast<size_t>(runtime::rankLayout(spec).virtualStage(v, stage));
    if (k >= stages.size()) break;
    const auto it = stages[k].dp.find(key);
    if (it == stages[k].dp.end()) break;
    sum += it->second;
    ++found;
  }
  if (found == spec.pipeline.virtualStages) return sum;
  if (source != "analytic" || !device.contains("memory_bytes_per_s"))
    throw std::invalid_argument("profile (" + source + ") has no data-parallel costs of stage " +
                                std::to_string(stage) + " for '" + key +
                                "' (measure it with slowpipe profile on this spec or sweep)");
  const double bw = device["memory_bytes_per_s"].get<double>();
  const runtime::DpShape dp = runtime::dpShape(spec);
  DpCost c;
  for (int round = 0; round < dp.rounds; ++round) {
    const double bytes = 8.0 * static_cast<double>(runtime::dpRoundValues(spec, stage, round));
    c.beginS.push_back(bytes / bw);
    c.endS.push_back(bytes / bw);
  }
  if (dp.afterStepFrom >= 0) {
    int64_t params = 0;
    for (const auto& shape : runtime::rankParameterShapes(spec, stage))
      params += compression::numelOf(shape);
    c.outerStepS = 16.0 * static_cast<double>(params) / bw;
  }
  return c;
}

double Profile::speedWithBusy(int n) const {
  if (n <= 0) return 1.0;
  if (n <= static_cast<int>(hostSpeed.size())) return hostSpeed[n - 1];
  if (hostCores > 0 && n > hostCores) return static_cast<double>(hostCores) / n;
  return 1.0;
}

Profile Profile::forSchedule(const std::string& schedule) const {
  Profile p = *this;
  const auto it = hostSpeedBySchedule.find(schedule);
  if (it != hostSpeedBySchedule.end()) {
    p.hostSpeed = it->second;
    p.device["host_speed_schedule"] = schedule;
  }
  return p;
}

namespace {

json affine(const AffineCost& c) { return {{"a_s", c.aS}, {"b_s_per_byte", c.bSPerByte}}; }

AffineCost affineFrom(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("a_s") || !j.contains("b_s_per_byte") ||
      !j["a_s"].is_number() || !j["b_s_per_byte"].is_number())
    throw std::invalid_argument(
        where + ": expected {\"a_s\": seconds, \"b_s_per_byte\": seconds per byte}");
  return {j["a_s"].get<double>(), j["b_s_per_byte"].get<double>()};
}

double positiveNumber(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number() || j[key].get<double>() < 0)
    throw std::invalid_argument(where + "." + key + ": expected a number of seconds >= 0");
  return j[key].get<double>();
}

std::vector<double> speedsFrom(const json& v, const std::string& where) {
  if (!v.is_array())
    throw std::invalid_argument(where + ": expected an array of speeds in (0, 1.5]");
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number() || v[i].get<double>() <= 0 || v[i].get<double>() > 1.5)
      throw std::invalid_argument(where + "[" + std::to_string(i) +
                                  "]: expected a speed in (0, 1.5], got " + v[i].dump());
    out.push_back(v[i].get<double>());
  }
  return out;
}

}  // namespace

double StageCost::of(const runtime::Action& a) const {
  using K = runtime::Action::Kind;
  switch (a.kind) {
    case K::kForward:
      return forwardS;
    case K::kBackward:
      return backwardS;
    case K::kStep:
      return stepS;
    case K::kBackwardInput:
    case K::kBackwardWeight:
      if (backwardInputS <= 0 || backwardWeightS <= 0)
        throw std::invalid_argument(
            "the profile has no backward_input_s / backward_weight_s (the parts of a split "
            "backward): "
            "profile a spec whose schedule splits backwards (zb_h1), or use an analytic profile");
      return a.kind == K::kBackwardInput ? backwardInputS : backwardWeightS;
    default:
      throw std::logic_error("StageCost::of: not a compute action");
  }
}

double stepSeconds(const std::vector<StageCost>& costs, size_t stage, size_t stages) {
  double s = 0;
  for (size_t v = stage; v < costs.size(); v += stages) s += costs[v].stepS;
  return s;
}

double StageCost::ofEvent(const std::string& what) const {
  if (what == "forward") return forwardS;
  if (what == "backward") return backwardS;
  if (what == "backward_input") return backwardInputS;
  if (what == "backward_weight") return backwardWeightS;
  if (what == "step") return stepS;
  return -1;
}

double StageCost::IdleExtra::at(const std::string& what, double idleS) const {
  const auto it = extraS.find(what);
  if (it == extraS.end() || afterS.empty() || idleS <= 0) return 0;
  const std::vector<double>& y = it->second;
  double x0 = 0, y0 = 0;
  for (size_t k = 0; k < afterS.size(); ++k) {
    if (idleS <= afterS[k]) return y0 + (y[k] - y0) * (idleS - x0) / (afterS[k] - x0);
    x0 = afterS[k];
    y0 = y[k];
  }
  return y0;
}

double eventCost(const std::vector<StageCost>& stages, size_t v, size_t pipelineStages,
                 const std::string& what, double idleS) {
  const double cost =
      what == "step" ? stepSeconds(stages, v, pipelineStages) : stages.at(v).ofEvent(what);
  return cost <= 0 ? -1 : cost + stages.at(v).idle.at(what, idleS);
}

json toJson(const Profile& p) {
  json stages = json::array(), codecs = json::object();
  for (const auto& s : p.stages) {
    json st = {{"forward_s", s.forwardS}, {"backward_s", s.backwardS}, {"step_s", s.stepS}};
    if (s.backwardInputS > 0) {
      st["backward_input_s"] = s.backwardInputS;
      st["backward_weight_s"] = s.backwardWeightS;
    }
    if (!s.warmupS.empty()) st["warmup_s"] = s.warmupS;
    if (s.runFactor != 1.0) st["run_factor"] = s.runFactor;
    if (!s.idle.afterS.empty()) {
      st["idle_extra_s"] = s.idle.extraS;
      st["idle_extra_s"]["after_s"] = s.idle.afterS;
    }
    for (const auto& [key, d] : s.dp)
      st["dp"][key] = {{"begin_s", d.beginS}, {"end_s", d.endS}, {"outer_step_s", d.outerStepS}};
    stages.push_back(st);
  }
  for (const auto& [k, c] : p.codecs)
    codecs[k] = {{"encode", affine(c.encode)}, {"decode", affine(c.decode)}};
  json out = {{"schema", "slowpipe.profile/1"},
              {"source", p.source},
              {"device", p.device},
              {"host_cores", p.hostCores},
              {"host_speed", p.hostSpeed},
              {"transport", affine(p.transport)},
              {"stages", stages},
              {"codecs", codecs}};
  if (!p.hostSpeedBySchedule.empty()) out["host_speed_by_schedule"] = p.hostSpeedBySchedule;
  return out;
}

// A stage's "idle_extra_s": {"after_s": [increasing seconds > 0], "<kind>": [seconds >= 0 per
// after_s]}.
static StageCost::IdleExtra idleExtraFromJson(const json& m, const std::string& w) {
  const char* form =
      ": expected {\"after_s\": [idle seconds, increasing], \"forward\": [extra seconds per "
      "after_s], ...}";
  if (!m.is_object() || !m.contains("after_s") || !m["after_s"].is_array() || m["after_s"].empty())
    throw std::invalid_argument(w + form);
  auto seconds = [&](const json& v, const std::string& where, bool positive) {
    if (!v.is_array()) throw std::invalid_argument(where + form);
    std::vector<double> out;
    for (size_t k = 0; k < v.size(); ++k) {
      if (!v[k].is_number() || v[k].get<double>() < 0 || (positive && v[k].get<double>() == 0))
        throw std::invalid_argument(where + "[" + std::to_string(k) + "]: expected seconds " +
                                    (positive ? "> 0" : ">= 0") + ", got " + v[k].dump());
      out.push_back(v[k].get<double>());
    }
    return out;
  };
  StageCost::IdleExtra e;
  e.afterS = seconds(m["after_s"], w + ".after_s", true);
  for (size_t k = 1; k < e.afterS.size(); ++k)
    if (e.afterS[k] <= e.afterS[k - 1])
      throw std::invalid_argument(
          w + ".after_s[" + std::to_string(k) + "]: " + std::to_string(e.afterS[k]) + " after " +
          std::to_string(e.afterS[k - 1]) + " (expected increasing idle lengths)");
  for (const auto& [what, v] : m.items()) {
    if (what == "after_s") continue;
    if (StageCost{}.ofEvent(what) < 0)
      throw std::invalid_argument(
          w + "." + what +
          ": not a compute event (expected forward, backward, backward_input, "
          "backward_weight or step)");
    e.extraS[what] = seconds(v, w + "." + what, false);
    if (e.extraS[what].size() != e.afterS.size())
      throw std::invalid_argument(w + "." + what + ": " + std::to_string(e.extraS[what].size()) +
                                  " values, after_s has " + std::to_string(e.afterS.size()));
  }
  return e;
}

// One entry of a profile's "stages" (w: where it is, for errors).
static StageCost stageCostFromJson(const json& s, const std::string& w) {
  StageCost c;
  c.forwardS = positiveNumber(s, "forward_s", w);
  c.backwardS = positiveNumber(s, "backward_s", w);
  c.stepS = positiveNumber(s, "step_s", w);
  if (s.contains("backward_input_s") || s.contains("backward_weight_s")) {
    c.backwardInputS = positiveNumber(s, "backward_input_s", w);
    c.backwardWeightS = positiveNumber(s, "backward_weight_s", w);
  }
  if (s.contains("warmup_s")) {
    const json& m = s["warmup_s"];
    if (!m.is_object())
      throw std::invalid_argument(w +
                                  ".warmup_s: expected {\"forward\": seconds, ...} by event kind");
    for (const auto& [what, v] : m.items()) {
      if (StageCost{}.ofEvent(what) < 0)
        throw std::invalid_argument(w + ".warmup_s." + what +
                                    ": not a compute event (expected forward, backward, "
                                    "backward_input, backward_weight or step)");
      c.warmupS[what] = positiveNumber(m, what.c_str(), w + ".warmup_s");
    }
  }
  if (s.contains("idle_extra_s"))
    c.idle = idleExtraFromJson(s["idle_extra_s"], w + ".idle_extra_s");
  if (s.contains("run_factor")) {
    if (!s["run_factor"].is_number() || s["run_factor"].get<double>() <= 0)
      throw std::invalid_argument(
          w + ".run_factor: expected a factor > 0 on the stage's compute, got " +
          s["run_factor"].dump());
    c.runFactor = s["run_factor"].get<double>();
  }
  if (s.contains("dp")) {
    if (!s["dp"].is_object())
      throw std::invalid_argument(w +
                                  ".dp: expected {\"<dp.codec>\": {\"begin_s\": [...], \"end_s\": "
                                  "[...], \"outer_step_s\"}}");
    for (const auto& [key, d] : s["dp"].items()) {
      const std::string wd = w + ".dp." + key;
      DpCost dc;
      if (!d.is_object())
        throw std::invalid_argument(
            wd + ": expected {\"begin_s\": [...], \"end_s\": [...], \"outer_step_s\"}");
      for (auto [field, out] : {std::pair{"begin_s", &dc.beginS}, std::pair{"end_s", &dc.endS}}) {
        const json v = d.value(field, json::array());
        if (!v.is_array())
          throw std::invalid_argument(wd + "." + field +
                                      ": expected an array of seconds per round");
        for (size_t k = 0; k < v.size(); ++k) {
          if (!v[k].is_number() || v[k].get<double>() < 0)
            throw std::invalid_argument(wd + "." + field + "[" + std::to_string(k) +
                                        "]: expected seconds >= 0, got " + v[k].dump());
          out->push_back(v[k].get<double>());
        }
      }
      if (dc.beginS.size() != dc.endS.size())
        throw std::invalid_argument(wd + ": begin_s has " + std::to_string(dc.beginS.size()) +
                                    " rounds, end_s " + std::to_string(dc.endS.size()));
      if (d.contains("outer_step_s")) dc.outerStepS = positiveNumber(d, "outer_step_s", wd);
      c.dp[key] = dc;
    }
  }
  return c;
}

Profile profileFromJson(const json& j, const std::string& where) {
  if (!j.is_object() || j.value("schema", "") != "slowpipe.profile/1")
    throw std::invalid_argument(
        where + ": not a slowpipe profile (expected \"schema\": \"slowpipe.profile/1\")");
  Profile p;
  p.source = j.value("source", "measured");
  p.device = j.value("device", json::object());
  if (j.contains("host_cores")) {
    const json& c = j["host_cores"];
    if (!c.is_number_integer() || c.get<int64_t>() < 0 || c.get<int64_t>() > 4096)
      throw std::invalid_argument(
          where + ".host_cores: expected an integer 0..4096 (0: one device per stage), got " +
          c.dump());
    p.hostCores = c.get<int>();
  }
  if (j.contains("host_speed")) p.hostSpeed = speedsFrom(j["host_speed"], where + ".host_speed");
  if (j.contains("host_speed_by_schedule")) {
    const json& m = j["host_speed_by_schedule"];
    const std::string w = where + ".host_speed_by_schedule";
    if (!m.is_object())
      throw std::invalid_argument(w + ": expected {\"<schedule>\": [speeds], ...}");
    for (const auto& [name, v] : m.items()) {
      if (!runtime::isScheduleName(name))
        throw std::invalid_argument(w + ": unknown schedule '" + name + "' (expected one of " +
                                    runtime::scheduleNames() + ")");
      p.hostSpeedBySchedule[name] = speedsFrom(v, w + "." + name);
      if (p.hostSpeedBySchedule[name].size() != p.hostSpeed.size())
        throw std::invalid_argument(
            w + "." + name + ": " + std::to_string(p.hostSpeedBySchedule[name].size()) +
            " speeds, host_speed has " + std::to_string(p.hostSpeed.size()));
    }
  }
  if (!j.contains("stages") || !j["stages"].is_array() || j["stages"].empty())
    throw std::invalid_argument(where +
                                ".stages: expected one {forward_s, backward_s, step_s} per stage");
  for (size_t i = 0; i < j["stages"].size(); ++i)
    p.stages.push_back(
        stageCostFromJson(j["stages"][i], where + ".stages[" + std::to_string(i) + "]"));
  if (j.contains("transport")) p.transport = affineFrom(j["transport"], where + ".transport");
  const json codecs =
      j.value("codecs", json::object());  // a named copy: items() must not outlive it
  for (const auto& [k, c] : codecs.items())
    p.codecs[k] = {affineFrom(c.value("encode", json()), where + ".codecs." + k + ".encode"),
                   affineFrom(c.value("decode", json()), where + ".codecs." + k + ".decode")};
  return p;
}

namespace {

struct ComputeEvent {
  double start, end;
  size_t stage;        // virtual stage (a step: its pipeline stage)
  double base, extra;  // profiled cost, and the extra after the wait before it (StageCost::idle)
};

// The compute events of a timeline at steps >= firstStep, each with its profiled cost after the
// wait before it (the receives since the row's previous compute event: StageCost::idle).
std::vector<ComputeEvent> computeEvents(const json& timeline, const std::vector<StageCost>& stages,
                                        int firstStep) {
  std::vector<ComputeEvent> evs;
  for (const auto& row : timeline) {
    const size_t s = row.at("stage").get<size_t>();
    if (s >= stages.size())
      throw std::invalid_argument("host-speed fit: the run has stage " + std::to_string(s) +
                                  ", the profile " + std::to_string(stages.size()) + " stages");
    double waited = 0;
    for (const auto& e : row.at("events")) {
      const std::string what = e.at("what");
      const double start = e.at("start_s").get<double>(), end = e.at("end_s").get<double>();
      if (what == "recv" || what == "dp_recv") waited += end - start;
      // With model chunks the event's virtual stage (chunk x S + stage) has the cost.
      const size_t v = what == "step" ? s : s + e.value("chunk", 0) * timeline.size();
      if (v >= stages.size())
        throw std::invalid_argument(
            "host-speed fit: an event of chunk " + std::to_string(e.value("chunk", 0)) +
            " outside the profile's " + std::to_string(stages.size()) + " stages");
      const double cost = eventCost(stages, v, timeline.size(), what, waited);
      if (cost <= 0) continue;  // not compute, or a part the profile did not measure
      const double extra = stages[v].idle.at(what, waited);
      waited = 0;
      if (e.value("step", 0) < firstStep) continue;
      evs.push_back({start, end, v, cost - extra, extra});
    }
  }
  return evs;
}

// Per event, its wall time with n = 1..N ranks computing (sweeping the sorted interval ends).
std::vector<std::vector<double>> wallTimeByBusy(const std::vector<ComputeEvent>& evs, int N) {
  std::vector<double> cuts;
  for (const auto& e : evs) cuts.insert(cuts.end(), {e.start, e.end});
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<int> busy(cuts.size(), 0);  // ranks computing in [cuts[i], cuts[i + 1])
  auto span = [&](const ComputeEvent& e) {
    return std::pair{std::lower_bound(cuts.begin(), cuts.end(), e.start) - cuts.begin(),
                     std::lower_bound(cuts.begin(), cuts.end(), e.end) - cuts.begin()};
  };
  for (const auto& e : evs) {
    const auto [a, b] = span(e);
    for (auto i = a; i < b; ++i) ++busy[i];
  }
  std::vector<std::vector<double>> A;
  for (const auto& e : evs) {
    std::vector<double> row(N, 0.0);
    const auto [a, b] = span(e);
    for (auto i = a; i < b; ++i)
      row[std::min(N, std::max(1, busy[i])) - 1] += cuts[i + 1] - cuts[i];
    A.push_back(row);
  }
  return A;
}

// Least squares for the free unknowns (the others fixed at `fixed`): normal equations solved by
// Gaussian elimination with partial pivoting.
std::vector<double> leastSquares(const std::vector<std::vector<double>>& A,
                                 const std::vector<double>& y, const std::vector<int>& free,
                                 const std::vector<double>& fixed) {
  const size_t F = free.size(), N = fixed.size();
  std::vector<std::vector<double>> M(F, std::vector<double>(F + 1, 0.0));  // normal equations | rhs
  for (size_t k = 0; k < A.size(); ++k) {
    double r = y[k];
    for (size_t n = 0; n < N; ++n)
      if (std::find(free.begin(), free.end(), static_cast<int>(n)) == free.end())
        r -= fixed[n] * A[k][n];
    for (size_t i = 0; i < F; ++i) {
      for (size_t j = 0; j < F; ++j) M[i][j] += A[k][free[i]] * A[k][free[j]];
      M[i][F] += A[k][free[i]] * r;
    }
  }
  for (size_t c = 0; c < F; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < F; ++r)
      if (std::abs(M[r][c]) > std::abs(M[p][c])) p = r;
    std::swap(M[c], M[p]);
    if (M[c][c] == 0)
      throw std::runtime_error(
          "host-speed fit: singular system (the run's events do not separate the speeds)");
    for (size_t r = 0; r < F; ++r) {
      if (r == c) continue;
      const double f = M[r][c] / M[c][c];
      for (size_t j = c; j <= F; ++j) M[r][j] -= f * M[c][j];
    }
  }
  std::vector<double> x(F);
  for (size_t i = 0; i < F; ++i) x[i] = M[i][F] / M[i][i];
  return x;
}

}  // namespace

HostSpeedFit fitHostSpeed(const std::vector<json>& timelines, const std::vector<StageCost>& stages,
                          int workers, int firstStep, const std::vector<double>& fallback,
                          bool perStage) {
  const int N = workers;
  std::vector<ComputeEvent> evs;
  std::vector<std::vector<double>> A;
  for (const json& timeline : timelines) {  // each run's concurrency from its own events
    const std::vector<ComputeEvent> e = computeEvents(timeline, stages, firstStep);
    const std::vector<std::vector<double>> a = wallTimeByBusy(e, N);
    evs.insert(evs.end(), e.begin(), e.end());
    A.insert(A.end(), a.begin(), a.end());
  }
  HostSpeedFit fit;
  fit.coverageS.assign(N, 0.0);
  for (size_t k = 0; k < evs.size(); ++k)
    for (int n = 0; n < N; ++n) fit.coverageS[n] += A[k][n];
  fit.events = static_cast<int>(evs.size());
  double total = 0;
  for (double c : fit.coverageS) total += c;
  // Unknowns: the n with enough coverage; the others fixed at their fallback (moved to the right).
  std::vector<int> free;
  fit.speed.assign(N, 1.0);
  for (int n = 0; n < N; ++n) {
    fit.speed[n] = n < static_cast<int>(fallback.size()) ? fallback[n] : 1.0;
    if (total > 0 && fit.coverageS[n] >= 0.02 * total) free.push_back(n);
  }
  fit.fitted.assign(N, false);
  for (int n : free) fit.fitted[n] = true;
  // Alternating least squares: the speeds for the stage factors in hand, then each stage's factor
  // for those speeds (its events' work sum_n v_n T_n minus their idle extras, against their
  // profiled costs), scaled so that the events' costs keep their total.
  for (const StageCost& c : stages)
    fit.stageFactor.push_back(c.runFactor);  // kept without perStage
  std::vector<double> x;
  for (int round = 0; round < (perStage ? 50 : 1); ++round) {
    std::vector<double> y;
    for (const auto& e : evs) y.push_back(fit.stageFactor[e.stage] * e.base + e.extra);
    x = leastSquares(A, y, free, fit.speed);
    for (size_t i = 0; i < free.size(); ++i) fit.speed[free[i]] = x[i];
    if (!perStage || round == 49) break;
    std::vector<double> num(stages.size(), 0.0), den(stages.size(), 0.0);
    for (size_t k = 0; k < evs.size(); ++k) {
      double work = 0;
      for (int n = 0; n < N; ++n) work += fit.speed[n] * A[k][n];
      num[evs[k].stage] += (work - evs[k].extra) * evs[k].base;
      den[evs[k].stage] += evs[k].base * evs[k].base;
    }
    for (size_t v = 0; v < stages.size(); ++v)
      if (den[v] > 0) fit.stageFactor[v] = std::max(0.05, num[v] / den[v]);
    double scaled = 0, plain = 0;
    for (const auto& e : evs) {
      scaled += fit.stageFactor[e.stage] * e.base;
      plain += e.base;
    }
    if (scaled > 0)
      for (double& f : fit.stageFactor) f *= plain / scaled;
  }
  fit.rawSpeed = fit.speed;
  for (int n : free) fit.speed[n] = std::min(1.5, std::max(0.05, fit.rawSpeed[n]));
  if (!free.empty() && free[0] == 0) fit.loneSpeed = fit.rawSpeed[0];
  return fit;
}

std::vector<std::map<std::string, double>> fitWarmup(const json& timeline, size_t stages) {
  const size_t S = timeline.size() ? timeline.size() : 1;
  // Per (virtual stage, kind): per row, step 0's durations and the later steps'.
  struct Durations {
    std::vector<double> first, later;
  };
  std::vector<std::map<std::string, double>> sum(stages);
  std::vector<std::map<std::string, int>> rows(stages);
  for (const auto& row : timeline) {
    std::map<std::pair<size_t, std::string>, Durations> d;
    for (const auto& e : row.at("events")) {
      const std::string what = e.at("what");
      if (StageCost{}.ofEvent(what) < 0) continue;
      const size_t s = row.at("stage").get<size_t>();
      const size_t v = what == "step" ? s : s + static_cast<size_t>(e.value("chunk", 0)) * S;
      if (v >= stages)
        throw std::invalid_argument("warm-up fit: the run has virtual stage " + std::to_string(v) +
                                    ", the profile " + std::to_string(stages) + " stages");
      const int step = e.value("step", -1);
      const double dt = e.at("end_s").get<double>() - e.at("start_s").get<double>();
      if (step == 0) d[{v, what}].first.push_back(dt);
      if (step >= 2) d[{v, what}].later.push_back(dt);
    }
    for (auto& [key, x] : d) {
      if (x.first.empty() || x.later.empty()) continue;
      std::sort(x.later.begin(), x.later.end());
      const size_t n = x.later.size();
      const double median = n % 2 ? x.later[n / 2] : 0.5 * (x.later[n / 2 - 1] + x.later[n / 2]);
      double extra = 0;
      for (double t : x.first) extra += t - median;
      sum[key.first][key.second] += std::max(0.0, extra);
      ++rows[key.first][key.second];
    }
  }
  for (size_t v = 0; v < stages; ++v)
    for (auto& [what, total] : sum[v]) total /= rows[v][what];
  return sum;
}

namespace {

// The median over the profiles of get(profile).
template <typename Get>
double medianOf(const std::vector<Profile>& ps, Get get) {
  std::vector<double> v;
  for (const auto& p : ps) v.push_back(get(p));
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Throws naming what profile k (1-based in the message) has that the first one does not.
void checkMergeable(const Profile& first, const Profile& other, size_t k) {
  const std::string w = "profile --merge: profile " + std::to_string(k + 1);
  if (other.stages.size() != first.stages.size())
    throw std::invalid_argument(w + " has another number of stages");
  if (other.hostSpeed.size() != first.hostSpeed.size())
    throw std::invalid_argument(w + ": host_speed of another length");
  auto schedules = [](const Profile& p) {
    std::string names;
    for (const auto& [name, v] : p.hostSpeedBySchedule) names += (names.empty() ? "" : ", ") + name;
    return "[" + names + "]";
  };
  if (schedules(other) != schedules(first))
    throw std::invalid_argument(w + ": host_speed_by_schedule names " + schedules(other) +
                                ", profile 1's " + schedules(first));
  for (size_t s = 0; s < first.stages.size(); ++s) {
    const StageCost::IdleExtra &mine = first.stages[s].idle, &theirs = other.stages[s].idle;
    bool same = mine.afterS == theirs.afterS && mine.extraS.size() == theirs.extraS.size();
    for (const auto& [what, v] : mine.extraS) same = same && theirs.extraS.count(what);
    if (!same)
      throw std::invalid_argument(w + ": stage " + std::to_string(s) +
                                  "'s idle_extra_s differs from profile 1's in its "
                                  "idle lengths or kinds (measure the snapshots alike)");
    for (const auto& [key, d] : first.stages[s].dp) {
      const auto it = other.stages[s].dp.find(key);
      if (it == other.stages[s].dp.end() || it->second.beginS.size() != d.beginS.size())
        throw std::invalid_argument(w + ": stage " + std::to_string(s) +
                                    " has no data-parallel costs for '" + key +
                                    "' of the same rounds");
    }
  }
  if (other.hostCores != first.hostCores)
    throw std::invalid_argument(w + ": host_cores differ (another machine?)");
  for (const auto& [name, c] : first.codecs)
    if (!other.codecs.count(name)) throw std::invalid_argument(w + " has no codec '" + name + "'");
}

// Stage s of the merged profile: every field the per-profile median (a warm-up kind one snapshot
// lacks counts as 0 there; idle extras and DP rounds element-wise).
StageCost medianStage(const std::vector<Profile>& ps, size_t s) {
  auto of = [&](auto get) { return medianOf(ps, get); };
  StageCost out = ps[0].stages[s];
  out.forwardS = of([&](const Profile& p) { return p.stages[s].forwardS; });
  out.backwardS = of([&](const Profile& p) { return p.stages[s].backwardS; });
  out.stepS = of([&](const Profile& p) { return p.stages[s].stepS; });
  out.backwardInputS = of([&](const Profile& p) { return p.stages[s].backwardInputS; });
  out.backwardWeightS = of([&](const Profile& p) { return p.stages[s].backwardWeightS; });
  out.runFactor = of([&](const Profile& p) { return p.stages[s].runFactor; });
  for (const Profile& p : ps)
    for (const auto& [what, v] : p.stages[s].warmupS) out.warmupS[what] = 0;
  for (auto& [what, v] : out.warmupS) {
    const std::string k = what;
    v = of([&](const Profile& p) {
      const auto it = p.stages[s].warmupS.find(k);
      return it == p.stages[s].warmupS.end() ? 0.0 : it->second;
    });
  }
  for (auto& [what, v] : out.idle.extraS) {
    const std::string k = what;
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = of([&](const Profile& p) { return p.stages[s].idle.extraS.at(k).at(i); });
  }
  for (auto& [key, d] : out.dp) {
    const std::string k = key;
    auto at = [&](const Profile& p) -> const DpCost& { return p.stages[s].dp.at(k); };
    d.outerStepS = of([&](const Profile& p) { return at(p).outerStepS; });
    for (size_t r = 0; r < d.beginS.size(); ++r) {
      d.beginS[r] = of([&](const Profile& p) { return at(p).beginS.at(r); });
      d.endS[r] = of([&](const Profile& p) { return at(p).endS.at(r); });
    }
  }
  return out;
}

}  // namespace

Profile medianProfile(const std::vector<Profile>& ps) {
  if (ps.empty()) throw std::invalid_argument("profile --merge: no profiles");
  auto of = [&](auto get) { return medianOf(ps, get); };
  Profile out = ps[0];
  for (size_t k = 1; k < ps.size(); ++k) checkMergeable(out, ps[k], k);
  for (size_t s = 0; s < out.stages.size(); ++s) out.stages[s] = medianStage(ps, s);
  for (size_t n = 0; n < out.hostSpeed.size(); ++n)
    out.hostSpeed[n] = of([&](const Profile& p) { return p.hostSpeed[n]; });
  for (auto& [name, v] : out.hostSpeedBySchedule) {
    const std::string key = name;
    for (size_t n = 0; n < v.size(); ++n)
      v[n] = of([&](const Profile& p) { return p.hostSpeedBySchedule.at(key)[n]; });
  }
  out.transport.aS = of([](const Profile& p) { return p.transport.aS; });
  out.transport.bSPerByte = of([](const Profile& p) { return p.transport.bSPerByte; });
  for (auto& [name, c] : out.codecs) {
    const std::string key = name;
    c.encode.aS = of([&](const Profile& p) { return p.codecs.at(key).encode.aS; });
    c.encode.bSPerByte = of([&](const Profile& p) { return p.codecs.at(key).encode.bSPerByte; });
    c.decode.aS = of([&](const Profile& p) { return p.codecs.at(key).decode.aS; });
    c.decode.bSPerByte = of([&](const Profile& p) { return p.codecs.at(key).decode.bSPerByte; });
  }
  out.device["merged_from"] = static_cast<int>(ps.size());
  return out;
}

Profile loadProfile(const std::string& path) {
  return profileFromJson(runtime::readJsonFile(path, "profile"), "profile '" + path + "'");
}

const DeviceSpec& deviceSpec(const std::string& name) {
  // Dense (no sparsity) tensor-core peaks; fp32 = plain FP32 (no TF32). Memory: HBM bandwidth.
  static const std::vector<DeviceSpec> kDevices = {
      {"V100", {{"fp32", 15.7e12}, {"fp16", 125e12}, {"bf16", 125e12}}, 900e9},
      {"A100", {{"fp32", 19.5e12}, {"fp16", 312e12}, {"bf16", 312e12}}, 2039e9},
      {"H100", {{"fp32", 67e12}, {"fp16", 989e12}, {"bf16", 989e12}}, 3350e9},
      {"H200", {{"fp32", 67e12}, {"fp16", 989e12}, {"bf16", 989e12}}, 4800e9},
      // The export H100 (SXM5): H100's compute and memory; only its NVLink is narrower (400 GB/s).
      {"H800", {{"fp32", 67e12}, {"fp16", 989e12}, {"bf16", 989e12}}, 3350e9}};
  for (const auto& d : kDevices)
    if (d.name == name) return d;
  throw std::invalid_argument("device '" + name +
                              "' is not known; expected V100, A100, H100, H200 or H800");
}

Profile analyticProfile(const runtime::RunSpec& spec, const std::string& deviceName,
                        const std::string& dtype, double mfu) {
  const DeviceSpec& dev = deviceSpec(deviceName);
  if (!dev.peakFlops.count(dtype))
    throw std::invalid_argument("dtype '" + dtype + "': expected fp32, fp16 or bf16");
  if (!(mfu > 0 && mfu <= 1))
    throw std::invalid_argument("mfu " + std::to_string(mfu) + ": expected a fraction in (0, 1]");
  const double flops = dev.peakFlops.at(dtype) * mfu;
  const runtime::ModelSpec& m = spec.model;
  const double b = spec.pipeline.microBatchSize, s = m.seqLen, d = m.width, V = m.vocab;
  Profile p;
  p.source = "analytic";
  p.device = {
      {"name", dev.name},
      {"dtype", dtype},
      {"peak_flops", dev.peakFlops.at(dtype)},
      {"mfu", mfu},
      {"memory_bytes_per_s", dev.memoryBytesPerS},
      {"assumptions",
       "forward = layers x (2 b s W + 4 b s^2 d) + last stage head 2 b s d V, W = a block's "
       "weight-matrix entries for its family (builtin and GPT-2: 3 d^2 + d^2 + 2 d f; Llama: 2 d^2 "
       "+ 2 d k + 3 d f, k = kv heads x head width, f = MLP width); backward = 2 x "
       "forward, split (zero-bubble) into weight gradients = the linear layers' forward FLOPs "
       "and input gradients = the rest; "
       "time = FLOPs / (peak x mfu); optimizer step = 16 bytes of memory traffic per parameter "
       "(AdamW: weight, gradient, two moments) / memory bandwidth; codecs: 20 us + 3 passes over "
       "the fp32 message at memory bandwidth"}};
  for (const auto& [begin, end] : runtime::stageLayers(spec)) {
    const bool last = end == m.layers;
    double fwd = (end - begin) * runtime::blockForwardFlops(m, b, s),
           linear = (end - begin) * 2 * b * s * runtime::blockMatrixEntries(m);
    if (last) {
      fwd += 2 * b * s * d * V;  // LM head
      linear += 2 * b * s * d * V;
    }
    const double params = runtime::stageParameters(m, end - begin, begin == 0, last);
    StageCost c{fwd / flops, 2 * fwd / flops, 16.0 * params / dev.memoryBytesPerS, {}};
    c.backwardWeightS = linear / flops;  // dW of every linear layer: its forward's FLOPs again
    c.backwardInputS = c.backwardS - c.backwardWeightS;
    p.stages.push_back(c);
  }
  p.codecs["default"] = {{20e-6, 3.0 / dev.memoryBytesPerS}, {20e-6, 3.0 / dev.memoryBytesPerS}};
  p.codecs["none"] = {{0, 0}, {0, 0}};
  addCodecPlaces(p, spec);
  return p;
}

namespace {

// A declared or derived cost on the analytic device (CompressionSpec::deviceCosts's keys): rates
// of the fp32 message, or FLOPs and bytes per element against peak x MFU and memory bandwidth
// (plus the 20 us a kernel launch costs, as the device model's own codecs).
CodecCost costOnDevice(const json& c, const json& device) {
  if (c.contains("encode_bytes_per_s"))
    return {{0, 1.0 / c["encode_bytes_per_s"].get<double>()},
            {0, 1.0 / c["decode_bytes_per_s"].get<double>()}};
  const double flops = device["peak_flops"].get<double>() * device["mfu"].get<double>();
  const double mem = device["memory_bytes_per_s"].get<double>();
  auto side = [&](const char* what) {
    const double perElement =
        std::max(c.value(std::string(what) + "_flops_per_element", 0.0) / flops,
                 c.value(std::string(what) + "_bytes_per_element", 0.0) / mem);
    return AffineCost{20e-6, perElement / 4.0};  // per fp32 byte of the message
  };
  return {side("encode"), side("decode")};
}

json placeOf(const CodecCost& c, const std::string& source, const json& declared) {
  json out = {{"runs_on", "device"},
              {"source", source},
              {"encode_bytes_per_s", 1.0 / std::max(c.encode.bSPerByte, 1e-300)},
              {"decode_bytes_per_s", 1.0 / std::max(c.decode.bSPerByte, 1e-300)},
              {"declared", declared}};
  out["declared"].erase("source");
  return out;
}

}  // namespace

void addCodecPlaces(Profile& p, const runtime::RunSpec& spec) {
  std::vector<std::pair<std::string, std::string>> specs = {
      {"forward", spec.compression.forward}, {"backward", spec.compression.backward}};
  if (spec.pipeline.replicas > 1)
    specs.push_back({"dp", runtime::gradientCompressor(spec.dp)->messageCodec()});
  const std::vector<int64_t> shape = {spec.pipeline.microBatchSize, spec.model.seqLen,
                                      spec.model.width};
  json& places = p.device["codecs"];
  for (const auto& [direction, name] : specs) {
    const auto codec = compression::makeCodec(name);
    const std::string canonical = codec->spec();
    const json& costs = spec.compression.deviceCosts;
    const bool declared = costs.is_object() && costs.contains(direction);
    if (places.contains(canonical)) {
      if (declared &&
          places[canonical].value("source", "") !=
              "declared in the spec (compression.device_costs." + direction + ")" &&
          places[canonical].value("declared", json()) != costs[direction])
        throw std::invalid_argument(
            "spec.compression.device_costs." + direction + ": the codec '" + canonical +
            "' is costed already (the other direction uses it); declare it once, alike for both");
      continue;
    }
    if (declared) {  // the user's word for where it runs
      p.codecs[canonical] = costOnDevice(costs[direction], p.device);
      places[canonical] = placeOf(
          p.codecs[canonical], "declared in the spec (compression.device_costs." + direction + ")",
          costs[direction]);
      continue;
    }
    if (const std::string own = codec->deviceCost();
        !own.empty()) {  // a plug-in's declaration, a built-in's derivation
      json c;
      try {
        c = json::parse(own);
        runtime::checkDeviceCost(c, "cost");
      } catch (const std::exception& e) {
        throw std::invalid_argument("codec '" + canonical + "': its device cost " + own +
                                    " is not valid: " + e.what());
      }
      const std::string source =
          c.value("source", codec->id() == compression::CodecId::kPlugin ? "declared by the plug-in"
                                                                         : "derived");
      p.codecs[canonical] = costOnDevice(c, p.device);
      places[canonical] = placeOf(p.codecs[canonical], source, c);
      continue;
    }
    const std::string why = compression::devicePathMissing(*codec);
    if (why.empty()) {
      places[canonical] = {
          {"runs_on", "device"},
          {"source", "device model"},
          {"cost", canonical == "none" ? "none"
                                       : "20 us + 3 passes over the fp32 message at "
                                         "the device's memory bandwidth"}};
      continue;
    }
    const CodecCost host = measureCodecOnHost(canonical, shape);
    p.codecs[canonical] = host;
    places[canonical] = {
        {"runs_on", "host"},
        {"source", "measured on this host"},
        {"why", why},
        {"encode_bytes_per_s", 1.0 / std::max(host.encode.bSPerByte, 1e-300)},
        {"decode_bytes_per_s", 1.0 / std::max(host.decode.bSPerByte, 1e-300)},
        {"cost",
         "measured on this machine's CPU (one thread, a message of the run's activation shape, "
         "median in steady state), per fp32 byte; a GPU server's host may be faster or slower; "
         "declare its cost on the device with compression.device_costs"}};
  }
}

Profile profileFor(const std::string& source, const runtime::RunSpec& spec) {
  if (source.rfind("analytic:", 0) != 0) return loadProfile(source);
  std::string rest = source.substr(9), device = rest.substr(0, rest.find(',')), dtype = "bf16";
  double mfu = 0.4;
  size_t at = rest.find(',');
  while (at != std::string::npos) {
    const size_t next = rest.find(',', at + 1);
    const std::string item =
        rest.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq),
                      value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "dtype") {
      dtype = value;
    } else if (key == "mfu") {
      try {
        mfu = std::stod(value);
      } catch (const std::exception&) {
        throw std::invalid_argument("profile '" + source + "': mfu='" + value +
                                    "' is not a number");
      }
    } else {
      throw std::invalid_argument("profile '" + source + "': unknown parameter '" + key +
                                  "'; expected dtype=, mfu=");
    }
    at = next;
  }
  return analyticProfile(spec, device, dtype, mfu);
}

}  // namespace slowpipe::simulator
