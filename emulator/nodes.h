// Nodes and access links (network.nodes): every rank sits on a node; a node has an uplink and a
// downlink rate (asymmetric, shared by every connection of the node: all its ranks, both pipeline
// directions, the replicas' exchange) and nodes are joined by a core path per node pair (a latency,
// optionally a rate, jitter, loss as any LinkSpec). A message from a rank on node a to a rank on
// node b crosses a's uplink, the core a -> b and b's downlink; ranks on one node talk over the
// node's `local` link.
//
// The fluid rule, per message of B bytes sent at t (each resource a calendar of busy intervals,
// a message taking the earliest gap that fits it, so a message that reaches a downlink first is
// served first whatever order the senders booked in):
//   uplink    s1 = earliest gap >= t of 8B/up on up[a];        f1 = s1 + 8B/up
//   core      s2 = earliest gap >= s1 of 8B/core on core[a,b]; f2 = max(f1, s2 + 8B/core)  (if
//   rated) downlink  s3 = earliest gap >= s2 + L of 8B/down on down[b]; f3 = max(f2 + L, s3 +
//   8B/down)
// arrival = f3: cut-through, a message alone arrives at t + L + 8B / min(up, core, down), as the
// path's own link says; messages sharing an access link queue behind each other there. Every link
// model bills the path link as before (its own window, FIFO, loss) and the arrival is the later
// of the two. The calendars live in memory shared by a run's worker processes (a memfd the local
// launcher creates and every worker inherits) or in the simulator's process. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/link.h"

namespace slowpipe::emulator {

struct NodeSpec {
  std::string name;
  std::string
      region;  // groups nodes for core pairs ("a": "Oregon" matches its nodes); default: the name
  double upBps = 0, downBps = 0;  // 0: not limited
};

// What one message from node a to node b crosses: a's uplink, the core (slot: its calendar, -1
// where the core has no rate), b's downlink. a == b or a < 0: nothing shared.
struct AccessPath {
  int a = -1, b = -1;
  double upBps = 0, downBps = 0, coreBps = 0, latencyS = 0;
  int upSlot = -1, downSlot = -1, coreSlot = -1;  // calendars; -1: that hop has no rate
  bool active() const { return a >= 0 && b >= 0 && a != b; }
};
nlohmann::json toJson(const AccessPath& p);
AccessPath accessPathFromJson(const nlohmann::json& j, const std::string& where);

class NodeNetwork {
 public:
  // `j`: the network object, or a path to a JSON file holding one (experiments/networks/*.json).
  // Errors name "<where>.<field>" (and the file).
  static NodeNetwork fromJson(const nlohmann::json& j, const std::string& where);
  // The object as given (a file read inline, with "file": its path), for records and specs.
  const nlohmann::json& document() const { return json_; }
  int size() const { return static_cast<int>(nodes_.size()); }
  const NodeSpec& node(int i) const { return nodes_.at(i); }
  // A node by name, or by index (a number or its decimal string); throws naming the known ones.
  int index(const nlohmann::json& nameOrIndex, const std::string& where) const;
  // The link a message from a rank on a to a rank on b sees alone: the core's latency, jitter and
  // loss, at the bottleneck rate of up[a], core[a, b], down[b]; a == b: the node's local link.
  LinkSpec path(int a, int b) const;
  AccessPath access(int a, int b) const;
  // Calendars the access links need: 2 per node and one per rated core pair.
  int calendars() const { return 2 * size() + ratedCores_; }
  std::string name;

 private:
  struct Core {
    LinkSpec link;
    bool rated = false;
    int slot = -1;
  };
  nlohmann::json json_;
  std::vector<NodeSpec> nodes_;
  std::vector<Core> core_;  // [a * N + b]
  LinkSpec local_;
  int ratedCores_ = 0;
};

// The access links' calendars: in this process (the simulator) or in shared memory (a run's
// workers). Thread- and process-safe (one robust process-shared mutex).
class AccessLinks {
 public:
  explicit AccessLinks(int calendars);  // private memory
  // Shared memory: a memfd sized for `calendars`, initialised, left open without FD_CLOEXEC so
  // workers the caller forks and execs inherit it; returns the descriptor (the caller closes it).
  static int createShared(int calendars);
  // Maps a descriptor createShared made (in a worker: the number it was told).
  static AccessLinks attach(int fd);
  AccessLinks(AccessLinks&& o) noexcept;
  AccessLinks& operator=(AccessLinks&&) = delete;
  AccessLinks(const AccessLinks&) = delete;
  ~AccessLinks();
  // Books a message of `bytes` sent at `t` over `p`; returns its arrival (see the rule above).
  double send(const AccessPath& p, double t, uint64_t bytes);

 private:
  AccessLinks() = default;
  struct Region;
  Region* region_ = nullptr;
  size_t bytes_ = 0;
  bool mapped_ = false;
};

// The worker process's shared access links (SLOWPIPE_ACCESS_FD, set by the local launcher);
// throws saying so when the process has none.
AccessLinks& processAccessLinks();
constexpr const char* kAccessFdEnv = "SLOWPIPE_ACCESS_FD";

}  // namespace slowpipe::emulator
