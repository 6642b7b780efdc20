// runtime.slowdown: parsing, validation and lookup (runtime/exec/slowdown.h).
#include "runtime/exec/slowdown.h"

#include <cmath>
#include <set>
#include <stdexcept>

namespace slowpipe::runtime {

using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& field, const std::string& what) {
  throw std::invalid_argument(field + ": " + what);
}

double speedFrom(const json& v, const std::string& field) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0 ||
      v.get<double>() > 1)
    fail(field,
         v.dump() + " is not a speed; expected a number in (0, 1] (0.5: half its full speed)");
  return v.get<double>();
}

RankSlowdown entryFromJson(const json& e, const std::string& w, int ranks) {
  if (!e.is_object())
    fail(w, "expected {\"rank\": R, \"speed\": s} or {\"rank\": R, \"trace\": [[step, s], ...]}");
  for (const auto& [k, v] : e.items())
    if (k != "rank" && k != "speed" && k != "trace")
      fail(w + "." + k, "unknown field; known: rank, speed, trace");
  RankSlowdown r;
  if (!e.contains("rank") || !e["rank"].is_number_integer() || e["rank"].get<int64_t>() < 0 ||
      e["rank"].get<int64_t>() >= ranks)
    fail(w + ".rank", (e.contains("rank") ? e["rank"].dump() : std::string("missing")) +
                          "; expected a rank in 0.." + std::to_string(ranks - 1) +
                          " (stages x replicas)");
  r.rank = e["rank"].get<int>();
  if (e.contains("speed") == e.contains("trace")) fail(w, "give either \"speed\" or \"trace\"");
  if (e.contains("speed")) {
    r.trace.push_back({0, speedFrom(e["speed"], w + ".speed")});
    return r;
  }
  const json& t = e["trace"];
  if (!t.is_array() || t.empty())
    fail(w + ".trace", "expected a non-empty array of [first step, speed] pairs");
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string f = w + ".trace[" + std::to_string(i) + "]";
    if (!t[i].is_array() || t[i].size() != 2 || !t[i][0].is_number_integer() ||
        t[i][0].get<int64_t>() < 0)
      fail(f, t[i].dump() + "; expected [first step (an integer >= 0), speed]");
    const int64_t step = t[i][0].get<int64_t>();
    if (!r.trace.empty() && step <= r.trace.back().first)
      fail(f, "step " + std::to_string(step) + " after step " +
                  std::to_string(r.trace.back().first) + "; expected increasing steps");
    r.trace.push_back({step, speedFrom(t[i][1], f + "[1]")});
  }
  return r;
}

}  // namespace

double SlowdownSpec::speedAt(int rank, int64_t step) const {
  for (const auto& r : ranks) {
    if (r.rank != rank) continue;
    double speed = 1;
    for (const auto& [from, s] : r.trace)
      if (step >= from) speed = s;
    return speed;
  }
  return 1;
}

SlowdownSpec slowdownFromJson(const json& j, const std::string& where, int ranks) {
  if (!j.is_array())
    fail(where,
         "expected an array of {\"rank\": R, \"speed\": s} / {\"rank\": R, \"trace\": [...]}");
  SlowdownSpec s;
  std::set<int> seen;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    RankSlowdown r = entryFromJson(j[i], w, ranks);
    if (!seen.insert(r.rank).second) fail(w + ".rank", std::to_string(r.rank) + " is listed twice");
    s.ranks.push_back(std::move(r));
  }
  return s;
}

json toJson(const SlowdownSpec& s) {
  json out = json::array();
  for (const auto& r : s.ranks) {
    json trace = json::array();
    for (const auto& [step, speed] : r.trace) trace.push_back({step, speed});
    out.push_back({{"rank", r.rank}, {"trace", trace}});
  }
  return out;
}

}  // namespace slowpipe::runtime
