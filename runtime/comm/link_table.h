// The link table (DESIGN.md: "the link table travels in the peer table, not as scalars"): every
// directed rank -> rank link of a run, each with what carries its properties. The launcher (or
// the cross-host coordinator) builds it from the spec and what the backend offers, sends each rank
// its own links in its peer table ("links"), and the rank's channels are connected from them; the
// simulator builds the same table for its virtual links. So the pipeline's model (network.model),
// the replicas' links (dp_links, always user-space `pipelined`), who paces a rate (the kernel on
// tc / tc-dev) and who adds a delay (the receiver, where the sender's kernel has no netem) are
// decided here once. Torch-free.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/link.h"
#include "emulator/nodes.h"
#include "runtime/exec/ranks.h"

namespace slowpipe::runtime {

struct RunSpec;

struct LinkEntry {
  int src = -1, dst = -1;     // ranks
  bool dataParallel = false;  // a replicas' link (else a pipeline neighbours' link)
  emulator::LinkSpec spec;
  // The link model (emulator/link_model.h) that paces and bills the link in user space; empty:
  // the kernel paces its rate (tc, tc-dev) and the sender only stamps the send time.
  std::string model;
  // The delay and jitter the receiver adds itself (a kernel-paced link whose sender's kernel has
  // no netem); 0 where the model or the kernel carries them.
  double receiverLatencyS = 0, receiverJitterS = 0;
  // network.nodes: the access links the message crosses (booked by the sender beside the model).
  emulator::AccessPath access;
};

// How a backend carries the pipeline's links.
struct LinkCarriage {
  bool kernelPacesRate = false;  // tc, tc-dev: the kernel shapes the rate
  // Kernel-paced links: whether the path from a sender carries the delay and jitter itself, by
  // sender rank (tc: netem or the delay line between the namespaces; tc-dev: netem on the sender's
  // host, from its hello); else the receiver adds them. Unset: the receiver does.
  std::function<bool(int srcRank)> pathDelays;
};

// Every directed link of `spec`'s ranks: each rank to its pipeline neighbours (network.links by
// stage pair; with model chunks the ring's wrap-around link too) and to the other replicas of its
// stage (network.dp_links by replica pair). Answered per link on demand (a 2048-rank run has half
// a million replica links; a simulator or a rank asks for the few it uses).
class LinkTable {
 public:
  LinkTable(const RunSpec& spec, LinkCarriage carriage);
  // The link src -> dst; throws naming both ranks when the run has no such link.
  LinkEntry at(int src, int dst) const;
  // The links rank `rank` sends or receives on (its peer table's "links").
  std::vector<LinkEntry> ofRank(int rank) const;
  nlohmann::json ofRankJson(int rank) const;
  // Calendars the run's access links need (0 without network.nodes).
  int accessCalendars() const { return nodes_ ? nodes_->calendars() : 0; }
  // network.nodes (null without it) and each rank's node.
  const emulator::NodeNetwork* nodeNetwork() const { return nodes_.get(); }
  const std::vector<int>& rankNodes() const { return rankNode_; }
  // For result.json's network.nodes: {"network", "rank_nodes" (names), "calendars"}; null without
  // nodes.
  nlohmann::json nodesRecord() const;

 private:
  RankLayout layout_;
  std::string model_;  // network.model
  emulator::Topology topo_, dpTopo_;
  emulator::TcpSettings tcp_;  // network.tcp, copied into each link the tcp model runs
  LinkCarriage carriage_;
  std::shared_ptr<const emulator::NodeNetwork> nodes_;  // network.nodes, or null
  std::vector<int> rankNode_;                           // with nodes: each rank's node
};

// The node of every rank (pipeline.placement over network.nodes; without a placement rank r sits
// on node r mod N). Errors name pipeline.placement[i].
std::vector<int> rankNodes(const RunSpec& spec, const emulator::NodeNetwork& net);

nlohmann::json toJson(const LinkEntry& e);
// Errors name "<where>.<field>".
LinkEntry linkEntryFromJson(const nlohmann::json& j, const std::string& where);

// A rank's links as its peer table carries them, looked up by (src, dst); a link the table lacks
// is an error naming it.
class RankLinks {
 public:
  RankLinks() = default;
  RankLinks(const nlohmann::json& links, int rank);
  const LinkEntry& at(int src, int dst) const;

 private:
  int rank_ = -1;
  std::vector<LinkEntry> entries_;
};

}  // namespace slowpipe::runtime
