// Stage placement search (see place.h).
#include "simulator/place.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>

#include "emulator/nodes.h"
#include "runtime/comm/link_table.h"

namespace slowpipe::simulator {

using nlohmann::json;

json placementJson(const runtime::RankLayout& layout, const emulator::NodeNetwork& net,
                   const std::vector<int>& rankNode) {
  json out = json::array();
  for (int s = 0; s < layout.stages; ++s) {
    if (layout.replicas == 1) {
      out.push_back(net.node(rankNode[s]).name);
      continue;
    }
    json reps = json::array();
    for (int q = 0; q < layout.replicas; ++q)
      reps.push_back(net.node(rankNode[layout.rank({s, q})]).name);
    out.push_back(reps);
  }
  return out;
}

namespace {

class Search {
 public:
  Search(const runtime::RunSpec& spec, const Profile& profile, const PlaceOptions& opt,
         const SimOptions& replay)
      : spec_(spec),
        profile_(profile),
        opt_(opt),
        replay_(replay),
        net_(emulator::NodeNetwork::fromJson(spec.network.nodes, "network.nodes")),
        K_(spec.pipeline.stages * spec.pipeline.replicas),
        N_(net_.size()) {
    if (opt_.perNode < 1) throw std::invalid_argument("place: --per-node must be >= 1");
    if (static_cast<int64_t>(N_) * opt_.perNode < K_)
      throw std::invalid_argument("place: " + std::to_string(K_) + " ranks do not fit on " +
                                  std::to_string(N_) + " nodes of " + std::to_string(opt_.perNode) +
                                  " rank(s) each (--per-node)");
  }

  // Mean step time of a placement on the short replay (memoised).
  double cost(const std::vector<int>& p) {
    const auto it = seen_.find(p);
    if (it != seen_.end()) return it->second;
    SimOptions o = replay_;
    o.steps = opt_.searchSteps;
    const double t = stepTime(p, o);
    seen_.emplace(p, t);
    report(evaluated());
    return t;
  }

  // Progress: `done` replays of the search's total (its space or budget) plus the final replays.
  void report(int64_t done) const {
    if (opt_.progress) opt_.progress(done, total_ + opt_.top + 1);
  }
  void setTotal(int64_t searchReplays) { total_ = searchReplays; }

  double stepTime(const std::vector<int>& p, const SimOptions& o) const {
    runtime::RunSpec s = spec_;
    s.pipeline.placement = placementJson(runtime::rankLayout(spec_), net_, p);
    return simulateRun(s, profile_, o)["summary"]["mean_step_time_s"].get<double>();
  }

  // Injective placements (one rank a node), or capacity-bounded ones: their number, saturating.
  int64_t space() const {
    if (opt_.perNode != 1) return -1;  // counted only for one rank a node
    int64_t n = 1;
    for (int i = 0; i < K_; ++i) {
      n *= N_ - i;
      if (n > (int64_t{1} << 40)) return -1;
    }
    return n;
  }

  void exhaustive() {
    std::vector<int> p(K_);
    std::vector<bool> used(N_, false);
    std::function<void(int)> rec = [&](int i) {
      if (i == K_) {
        cost(p);
        return;
      }
      for (int n = 0; n < N_; ++n) {
        if (used[n]) continue;
        used[n] = true;
        p[i] = n;
        rec(i + 1);
        used[n] = false;
      }
    };
    rec(0);
  }

  void local(const std::vector<int>& naive) {
    std::mt19937_64 rng(opt_.seed);
    for (int start = 0; start <= opt_.restarts && budgetLeft(); ++start) {
      std::vector<int> p = start == 0 ? naive : randomPlacement(rng);
      double best = cost(p);
      bool improved = true;
      while (improved && budgetLeft()) {
        improved = false;
        for (const auto& q : neighbours(p)) {
          if (!budgetLeft()) break;
          if (const double c = cost(q); c < best - 1e-12) {
            best = c;
            p = q;
            improved = true;
            break;  // first improvement
          }
        }
      }
    }
  }

  std::vector<std::pair<double, std::vector<int>>> ranked() const {
    std::vector<std::pair<double, std::vector<int>>> out;
    for (const auto& [p, t] : seen_) out.emplace_back(t, p);
    std::sort(out.begin(), out.end());
    return out;
  }

  int64_t evaluated() const { return static_cast<int64_t>(seen_.size()); }
  const emulator::NodeNetwork& net() const { return net_; }

 private:
  bool budgetLeft() const { return evaluated() < opt_.budget; }

  std::vector<int> load(const std::vector<int>& p) const {
    std::vector<int> n(N_, 0);
    for (const int x : p) ++n[x];
    return n;
  }

  std::vector<int> randomPlacement(std::mt19937_64& rng) const {
    std::vector<int> slots;
    for (int n = 0; n < N_; ++n)
      for (int k = 0; k < opt_.perNode; ++k) slots.push_back(n);
    std::shuffle(slots.begin(), slots.end(), rng);
    return {slots.begin(), slots.begin() + K_};
  }

  // Swaps of two ranks on different nodes, then moves of one rank to a node with room.
  std::vector<std::vector<int>> neighbours(const std::vector<int>& p) const {
    std::vector<std::vector<int>> out;
    for (int i = 0; i < K_; ++i)
      for (int j = i + 1; j < K_; ++j)
        if (p[i] != p[j]) {
          auto q = p;
          std::swap(q[i], q[j]);
          out.push_back(std::move(q));
        }
    const std::vector<int> n = load(p);
    for (int i = 0; i < K_; ++i)
      for (int m = 0; m < N_; ++m)
        if (m != p[i] && n[m] < opt_.perNode) {
          auto q = p;
          q[i] = m;
          out.push_back(std::move(q));
        }
    return out;
  }

  const runtime::RunSpec& spec_;
  const Profile& profile_;
  PlaceOptions opt_;
  SimOptions replay_;
  emulator::NodeNetwork net_;
  int K_, N_;
  std::map<std::vector<int>, double> seen_;
  int64_t total_ = 0;  // replays the search may make
};

}  // namespace

json searchPlacements(const runtime::RunSpec& spec, const Profile& profile, const PlaceOptions& opt,
                      const SimOptions& replay) {
  if (spec.network.nodes.is_null())
    throw std::invalid_argument("place: the spec has no network.nodes (give --network FILE)");
  Search search(spec, profile, opt, replay);
  runtime::RunSpec naiveSpec = spec;
  naiveSpec.pipeline.placement = json();  // rank order
  const std::vector<int> naive = runtime::rankNodes(naiveSpec, search.net());
  const int64_t space = search.space();
  std::string method = opt.method;
  if (method == "auto") method = space >= 0 && space <= opt.maxExhaustive ? "exhaustive" : "local";
  if (method == "exhaustive") {
    if (space < 0 || space > 50'000'000)
      throw std::invalid_argument("place: exhaustive search over " +
                                  (space < 0 ? std::string("too many") : std::to_string(space)) +
                                  " placements; use --method local");
    search.setTotal(space);
    search.exhaustive();
  } else if (method == "local") {
    search.setTotal(opt.budget);
    search.local(naive);
  } else {
    throw std::invalid_argument("place: --method '" + method +
                                "'; expected auto, exhaustive or local");
  }
  json best = json::array();
  const auto ranked = search.ranked();
  std::vector<std::pair<double, std::vector<int>>> replayed;
  const int64_t searched = search.evaluated();
  search.setTotal(searched);  // the local search may have stopped short of its budget
  for (size_t i = 0; i < ranked.size() && static_cast<int>(i) < opt.top; ++i) {
    replayed.emplace_back(search.stepTime(ranked[i].second, replay), ranked[i].second);
    search.report(searched + static_cast<int64_t>(i) + 1);
  }
  std::stable_sort(replayed.begin(), replayed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [t, p] : replayed)
    best.push_back({{"placement", placementJson(runtime::rankLayout(spec), search.net(), p)},
                    {"rank_nodes", p},
                    {"step_s", t}});
  const double naiveT = search.stepTime(naive, replay);
  search.report(searched + opt.top + 1);
  return {
      {"method", method},
      {"space", space < 0 ? json() : json(space)},
      {"evaluated", search.evaluated()},
      {"search_steps", opt.searchSteps},
      {"network", search.net().name},
      {"naive",
       {{"placement", placementJson(runtime::rankLayout(spec), search.net(), naive)},
        {"rank_nodes", naive},
        {"step_s", naiveT}}},
      {"best", best},
      {"gain_over_naive", best.empty() ? json() : json(naiveT / best[0]["step_s"].get<double>())}};
}

}  // namespace slowpipe::simulator
