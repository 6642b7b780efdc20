// Stage placement search (`slowpipe place`): which node of network.nodes hosts each rank, judged
// by the simulator's mean step time. Exhaustive while the placements are few (every injective map
// of the ranks onto the nodes), else a seeded local search: from the rank-order placement and
// random restarts, hill climbing over swaps of two ranks' nodes and moves of a rank to a free
// node, first improvement, until no neighbour is better or the budget is spent. Candidates are
// judged on a short replay (searchSteps); the best few are replayed again with the run's own
// steps, and those are the figures reported. Torch-free.
#pragma once

#include <functional>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/nodes.h"
#include "runtime/exec/ranks.h"
#include "runtime/spec/spec.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"

namespace slowpipe::simulator {

struct PlaceOptions {
  int top = 5;  // placements reported
  int searchSteps =
      3;  // steps a candidate is replayed for (the reported ones: the SimOptions given)
  std::string method = "auto";  // auto | exhaustive | local
  int64_t maxExhaustive =
      5040;          // auto: exhaustive up to this many placements (8 ranks on 7+ nodes is beyond)
  int restarts = 8;  // local search: random starts besides rank order
  int64_t budget = 4000;  // local search: candidate replays at most
  uint64_t seed = 1;
  int perNode = 1;  // ranks a node may host
  // Called after each replay (search candidates, then the reported ones and rank order): done of
  // at most total (the local search may stop before its budget).
  std::function<void(int64_t done, int64_t total)> progress;
};

// The placement of each rank (node indices of `net`) as pipeline.placement JSON (node names).
nlohmann::json placementJson(const runtime::RankLayout& layout, const emulator::NodeNetwork& net,
                             const std::vector<int>& rankNode);

// Searches placements of `spec` (which has network.nodes) costed by `profile`. Returns
// {"method", "space", "evaluated", "naive": {"placement", "rank_nodes", "step_s"}, "best": [{...}],
//  "gain_over_naive"}: step_s the mean step time of the reported replay.
nlohmann::json searchPlacements(const runtime::RunSpec& spec, const Profile& profile,
                                const PlaceOptions& opt, const SimOptions& replay = {});

}  // namespace slowpipe::simulator
