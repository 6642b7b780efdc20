// The link table (see link_table.h).
#include "runtime/comm/link_table.h"

#include <set>
#include <stdexcept>

#include "emulator/link_model.h"
#include "runtime/dp/dp.h"
#include "runtime/exec/protocol.h"
#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

using nlohmann::json;

LinkTable::LinkTable(const RunSpec& spec, LinkCarriage carriage)
    : layout_(rankLayout(spec)),
      model_(spec.network.model),
      topo_(emulator::topologyFromJson(spec.network.links, "network.links")),
      dpTopo_(layout_.replicas > 1 ? dpTopology(spec) : emulator::Topology{}),
      tcp_(spec.network.tcp.is_null()
               ? emulator::TcpSettings{}
               : emulator::tcpSettingsFromJson(spec.network.tcp, "network.tcp")),
      carriage_(std::move(carriage)) {
  if (spec.network.nodes.is_null()) return;
  nodes_ = std::make_shared<const emulator::NodeNetwork>(
      emulator::NodeNetwork::fromJson(spec.network.nodes, "network.nodes"));
  rankNode_ = runtime::rankNodes(spec, *nodes_);
}

std::vector<int> rankNodes(const RunSpec& spec, const emulator::NodeNetwork& net) {
  const RankLayout layout = rankLayout(spec);
  std::vector<int> out(layout.size());
  const json& p = spec.pipeline.placement;
  if (p.is_null()) {
    for (int r = 0; r < layout.size(); ++r) out[r] = r % net.size();
    return out;
  }
  const std::string where = "pipeline.placement";
  if (!p.is_array() || static_cast<int>(p.size()) != layout.stages)
    throw std::invalid_argument(where + ": expected one node per stage (" +
                                std::to_string(layout.stages) + " entries), got " + p.dump());
  for (int s = 0; s < layout.stages; ++s) {
    const std::string w = where + "[" + std::to_string(s) + "]";
    const json& e = p[s];
    if (e.is_array() && static_cast<int>(e.size()) != layout.replicas)
      throw std::invalid_argument(w + ": " + std::to_string(e.size()) + " nodes for " +
                                  std::to_string(layout.replicas) +
                                  " replicas; expected one node for all or one per replica");
    for (int q = 0; q < layout.replicas; ++q)
      out[layout.rank({s, q})] =
          e.is_array() ? net.index(e[q], w + "[" + std::to_string(q) + "]") : net.index(e, w);
  }
  return out;
}

LinkEntry LinkTable::at(int src, int dst) const {
  auto name = [&] { return "link " + std::to_string(src) + " -> " + std::to_string(dst); };
  if (src < 0 || dst < 0 || src >= layout_.size() || dst >= layout_.size() || src == dst)
    throw std::out_of_range(name() + ": not a link between two of the run's " +
                            std::to_string(layout_.size()) + " ranks");
  const RankId a = layout_.id(src), b = layout_.id(dst);
  LinkEntry e;
  e.src = src;
  e.dst = dst;
  if (a.stage == b.stage) {
    // The replicas' links: user-space on every backend, always the pipelined model
    // (network.model is the pipeline's).
    e.dataParallel = true;
    e.spec =
        nodes_ ? nodes_->path(rankNode_[src], rankNode_[dst]) : dpTopo_.link(a.replica, b.replica);
    e.model = "pipelined";
    if (nodes_) e.access = nodes_->access(rankNode_[src], rankNode_[dst]);
    return e;
  }
  if (dst != protocol::pipelinePeer(layout_, src, Action::Peer::kPrev) &&
      dst != protocol::pipelinePeer(layout_, src, Action::Peer::kNext))
    throw std::out_of_range(
        name() + ": the ranks are neither pipeline neighbours nor replicas of one stage");
  e.spec = nodes_ ? nodes_->path(rankNode_[src], rankNode_[dst]) : topo_.link(a.stage, b.stage);
  if (nodes_ && !carriage_.kernelPacesRate)
    e.access = nodes_->access(rankNode_[src], rankNode_[dst]);  // tc: the node line
  e.spec.tcp = tcp_;  // the kernel's connections (streams) or the tcp model's
  if (!carriage_.kernelPacesRate) {
    e.model = model_;
  } else if (!(carriage_.pathDelays && carriage_.pathDelays(src))) {
    e.receiverLatencyS = e.spec.latencyS;
    e.receiverJitterS = e.spec.jitterS;
  }
  return e;
}

json LinkTable::nodesRecord() const {
  if (!nodes_) return nullptr;
  json ranks = json::array();
  for (const int n : rankNode_) ranks.push_back(nodes_->node(n).name);
  return {{"network", nodes_->name}, {"rank_nodes", ranks}, {"calendars", nodes_->calendars()}};
}

std::vector<LinkEntry> LinkTable::ofRank(int rank) const {
  const RankId me = layout_.id(rank);
  std::set<int> peers;  // with two stages in a ring both sides lead to one peer
  for (const auto side : {Action::Peer::kPrev, Action::Peer::kNext})
    if (const int p = protocol::pipelinePeer(layout_, rank, side); p >= 0) peers.insert(p);
  for (int q = 0; q < layout_.replicas; ++q)
    if (q != me.replica) peers.insert(layout_.rank({me.stage, q}));
  std::vector<LinkEntry> out;
  for (const int p : peers) {
    out.push_back(at(rank, p));
    out.push_back(at(p, rank));
  }
  return out;
}

json LinkTable::ofRankJson(int rank) const {
  json out = json::array();
  for (const auto& e : ofRank(rank)) out.push_back(toJson(e));
  return out;
}

json toJson(const LinkEntry& e) {
  json j = {{"src", e.src},
            {"dst", e.dst},
            {"dp", e.dataParallel},
            {"link", e.spec},
            {"model", e.model.empty() ? json() : json(e.model)}};
  if (e.receiverLatencyS > 0 || e.receiverJitterS > 0)
    j["receiver_adds"] = {{"latency_s", e.receiverLatencyS}, {"jitter_s", e.receiverJitterS}};
  if (e.access.active()) j["access"] = emulator::toJson(e.access);
  return j;
}

LinkEntry linkEntryFromJson(const json& j, const std::string& where) {
  if (!j.is_object())
    throw std::invalid_argument(where + ": expected a link {src, dst, dp, link, model}");
  LinkEntry e;
  for (const char* k : {"src", "dst"}) {
    if (!j.contains(k) || !j[k].is_number_integer() || j[k].get<int64_t>() < 0)
      throw std::invalid_argument(where + "." + k + ": expected a rank (an integer >= 0)");
  }
  e.src = j["src"].get<int>();
  e.dst = j["dst"].get<int>();
  e.dataParallel = j.value("dp", false);
  e.spec = emulator::linkSpecFromJson(j.value("link", json()), where + ".link");
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string())
      throw std::invalid_argument(
          where + ".model: expected a link model's name or null (the kernel paces)");
    e.model = emulator::linkModel(j["model"].get<std::string>())
                  .name;  // throws naming the registered ones
  }
  if (j.contains("access")) e.access = emulator::accessPathFromJson(j["access"], where + ".access");
  if (j.contains("receiver_adds")) {
    const json& d = j["receiver_adds"];
    for (const auto& [k, out] :
         {std::pair{"latency_s", &e.receiverLatencyS}, std::pair{"jitter_s", &e.receiverJitterS}}) {
      if (!d.is_object() || !d.contains(k) || !d[k].is_number() || d[k].get<double>() < 0)
        throw std::invalid_argument(where + ".receiver_adds." + k + ": expected seconds >= 0");
      *out = d[k].get<double>();
    }
  }
  return e;
}

RankLinks::RankLinks(const json& links, int rank) : rank_(rank) {
  if (!links.is_array())
    throw std::invalid_argument("rank " + std::to_string(rank) +
                                ": the peer table's links are not a list");
  for (size_t i = 0; i < links.size(); ++i)
    entries_.push_back(linkEntryFromJson(links[i], "peer table links[" + std::to_string(i) + "]"));
}

const LinkEntry& RankLinks::at(int src, int dst) const {
  for (const auto& e : entries_)
    if (e.src == src && e.dst == dst) return e;
  throw std::runtime_error("rank " + std::to_string(rank_) + ": the peer table has no link " +
                           std::to_string(src) + " -> " + std::to_string(dst));
}

}  // namespace slowpipe::runtime
