// Launcher: link setup per backend, calibration, traces (see launcher_internal.h).
#include "runtime/launch/launcher_internal.h"

#include <cstdio>
#include <set>

#include "emulator/link_model.h"
#include "emulator/tcp_settings.h"

namespace slowpipe::runtime::detail {

// The stage pairs the pipeline's messages travel between, each once: s <-> s + 1, and with model
// chunks (a ring) S-1 <-> 0 where that is another pair.
std::vector<std::pair<int, int>> Launcher::pipelineEdges() const {
  std::vector<std::pair<int, int>> edges;
  for (int s = 0; s + 1 < S_; ++s) edges.push_back({s, s + 1});
  if (layout_.chunks > 1 && S_ > 2) edges.push_back({S_ - 1, 0});
  return edges;
}

// The fabric edge joining stages a and b (tc), and its index.
int Launcher::edgeBetween(int a, int b) const {
  const auto edges = pipelineEdges();
  for (size_t e = 0; e < edges.size(); ++e)
    if ((edges[e].first == a && edges[e].second == b) ||
        (edges[e].first == b && edges[e].second == a))
      return static_cast<int>(e);
  throw std::logic_error("no pipeline edge joins stages " + std::to_string(a) + " and " +
                         std::to_string(b));
}

namespace {

// What carries each link property on the user backend: the sender stamps every message in user
// space with the run's link model, which also says what becomes of jitter and loss.
json userMechanism(const std::string& modelName) {
  const emulator::LinkModelInfo& m = emulator::linkModel(modelName);
  const std::string by = "user-space, billed by the " + std::string(m.name) + " link model";
  json mech = {{"rate", by}, {"delay", by}, {"model", std::string(m.name) + ": " + m.summary}};
  if (m.modelsVariation) {
    mech["jitter"] = "user-space";
    mech["loss"] = "user-space retransmission delay (a lost message arrives retransmit_s later)";
  } else {
    mech["jitter"] = "not modelled (refused with this model)";
    mech["loss"] = m.modelsLoss ? "per packet in the " + std::string(m.name) +
                                      " link model (a retransmission and the model's loss response)"
                                : "not modelled (refused with this model)";
  }
  return mech;
}

}  // namespace

// network.nodes on the kernel path: a namespace per node joined by the node line (uplink, core,
// downlink as packet links; emulator/node_line.h); each rank runs in its node's namespace.
void Launcher::setupNodeLine() {
  nodeLine_ = std::make_unique<emulator::NodeLine>(
      *links().nodeNetwork(), links().rankNodes());  // the nodes the ranks sit on
  json mech = nodeLine_->describe();
  mech["rate"] =
      "node line: uplinks, downlinks and rated core pairs (goodput-compensated, mtu 1500, "
      "drop-tail 1000 packets)";
  mech["delay"] = mech["jitter"] = mech["loss"] = "node line (the core pair's)";
  result_["network"] = {{"backend", "tc"}, {"mechanism", mech}};
  const emulator::TcpSettings tcp = emulator::tcpSettingsFromJson(spec_.network.tcp, "network.tcp");
  result_["network"]["tcp"] = {{"requested", spec_.network.tcp}, {"applied", json::array()}};
  for (const int n : nodeLine_->nodes())
    result_["network"]["tcp"]["applied"].push_back(
        emulator::applyTcpSettings(nodeLine_->nsName(n), tcp));
}

// One veth pair (or delay line) per pipeline edge: the chain, and with model chunks the ring's
// S-1 -> 0 (with two stages the ring's two routes are the one edge 0 <-> 1); network.tcp in every
// stage's namespace, read back into the result; the traced links' rate changes planned.
void Launcher::setupFabric(const emulator::Topology& topo) {
  std::vector<emulator::FabricEdge> edges;
  const double moderationS =
      spec_.network.moderationUs < 0 ? -1 : spec_.network.moderationUs * 1e-6;
  for (const auto& [a, b] : pipelineEdges())
    edges.push_back({a, b, topo.link(a, b), topo.link(b, a), moderationS});
  fabric_ = std::make_unique<emulator::NetnsFabric>(S_, edges);
  result_["network"] = {{"backend", "tc"}, {"mechanism", fabric_->mechanism()}};
  if (spec_.network.moderationUs != 0 &&
      fabric_->lineStats().is_null())  // veth pairs: no line to moderate
    std::fprintf(
        stderr, "slowpipe: warning: network.moderation_us: %s\n",
        result_["network"]["mechanism"].value("moderation", std::string("not applied")).c_str());
  // network.tcp: every stage namespace's TCP as the spec says, read back into the result.
  const emulator::TcpSettings tcp = emulator::tcpSettingsFromJson(spec_.network.tcp, "network.tcp");
  result_["network"]["tcp"] = {{"requested", spec_.network.tcp}, {"applied", json::array()}};
  for (int s = 0; s < S_; ++s)
    result_["network"]["tcp"]["applied"].push_back(
        emulator::applyTcpSettings(fabric_->nsName(s), tcp));
  for (int e = 0; e < static_cast<int>(edges.size()); ++e)
    for (int from : {edges[e].a, edges[e].b}) {
      const emulator::LinkSpec& l = from == edges[e].a ? edges[e].aToB : edges[e].bToA;
      if (!l.trace.empty()) traces_.push_back({e, from, l.trace, 1});  // point 0 is set at creation
    }
}

// Links on which the kernel's TCP has two outcomes the tcp model bills as one: flagged and said
// once, so one figure is not read as the answer (emulator::tcpBimodality).
void Launcher::flagBimodalLinks(const emulator::Topology& topo) {
  const json flagged = emulator::tcpBimodalLinks(
      topo, emulator::tcpSettingsFromJson(spec_.network.tcp, "network.tcp").congestionControl);
  if (!flagged.empty()) {
    result_["network"]["tcp_bimodal"] = flagged;
    std::fprintf(
        stderr,
        "slowpipe: %zu link(s) bimodal under TCP (cubic, RTT >= 100 ms): the kernel's HyStart "
        "leaves slow start at one "
        "of several windows, the tcp model bills one outcome (result.json network.tcp_bimodal)\n",
        flagged.size());
  }
}

void Launcher::setupNetwork() {
  const emulator::Topology topo = emulator::topologyFromJson(spec_.network.links, "network.links");
  if (geteuid() == 0 && spec_.network.backend == "tc") {
    // Namespaces of runs whose launcher was killed (kill -9 skips every cleanup path).
    const auto removed = emulator::cleanupNamespaces(false);
    if (!removed.empty()) {
      std::string names;
      for (const auto& n : removed) names += (names.empty() ? "" : ", ") + n;
      std::fprintf(stderr,
                   "slowpipe: removed %zu namespace(s) left by runs whose owner is gone: %s\n",
                   removed.size(), names.c_str());
      result_["network_cleanup"] = removed;
    }
  }
  if (opt_.external.enabled && spec_.network.backend == "tc")
    throw std::invalid_argument(
        "network.backend 'tc': its namespaces live on one host; a run started by an external "
        "launcher shapes in user space (backend user) or on the hosts' interfaces (tc-dev)");
  if (!opt_.external.enabled && spec_.network.backend == "tc-dev")
    throw std::invalid_argument(
        "network.backend 'tc-dev' shapes real interfaces between hosts: start the workers with "
        "mpirun or srun (docs/clusters.md); on one host use backend tc");
  if (spec_.network.backend == "tc" && !spec_.network.nodes.is_null()) {
    setupNodeLine();
  } else if (spec_.network.backend == "tc") {
    setupFabric(topo);
  } else if (spec_.network.backend == "tc-dev") {
    result_["network"] = {
        {"backend", "tc-dev"},
        {"dev", spec_.network.dev},
        {"mechanism",
         "per worker: htb per destination on its interface (result.json workers[].shaping)"}};
  } else {
    result_["network"] = {{"backend", "user"}, {"mechanism", userMechanism(spec_.network.model)}};
  }
  result_["network"]["links"] = topo;
  if (spec_.network.backend == "user" && spec_.network.model == "tcp") flagBimodalLinks(topo);
  if (layout_.replicas > 1) {
    result_["network"]["dp_links"] = dpTopology(spec_);
    result_["network"]["dp_mechanism"] =
        "user-space (rate, delay, jitter) on one PUSH/PULL pair per directed replica link";
  }
  if (opt_.calibrate && S_ > 1 && !opt_.external.enabled && spec_.network.nodes.is_null())
    calibrate(topo);
  if (opt_.external.enabled)
    result_["calibration_note"] =
        "not calibrated: the links run between the workers' hosts, not on this one";
}

// How link l is calibrated: the run's message size, at least 64 KiB, for ~0.3 s of traffic
// (shorter bursts measure scheduling noise on the first and last delivery, not the link), and a
// time limit up front: at a mistyped rate (50 bit/s) the bulk alone would take days.
emulator::CalibrationOptions Launcher::calibrationOf(const emulator::LinkSpec& l,
                                                     const std::string& name) const {
  emulator::CalibrationOptions c;
  c.backend = spec_.network.backend;
  c.link = l;
  c.messageBytes = static_cast<uint64_t>(spec_.pipeline.microBatchSize) * spec_.model.seqLen *
                   spec_.model.width * 4;
  c.messageBytes = std::max<uint64_t>(c.messageBytes, 64 << 10);
  c.messages =
      std::clamp(static_cast<int>(0.3 * c.link.bandwidthBps / (8.0 * c.messageBytes)), 16, 2000);
  c.probes = 30;
  const double expectS =
      8.0 * static_cast<double>(c.messageBytes) * c.messages / l.bandwidthBps + 2 * l.latencyS;
  if (expectS > kCalibrationLimitS)
    throw std::invalid_argument(
        "calibrating " + name + ": " + std::to_string(c.messages) + " messages of " +
        std::to_string(c.messageBytes) + " bytes would take " + std::to_string(expectS) +
        " s, more than the " + std::to_string(static_cast<int>(kCalibrationLimitS)) +
        " s limit; is the bandwidth's unit right?");
  return c;
}

// Calibrates every distinct directed link of the pipeline (traffic only on loopback or inside
// the project's namespaces) and flags the run when a link misses its rate by more than 3%.
void Launcher::calibrate(const emulator::Topology& topo) {
  constexpr double kTolerance = 0.03;
  std::map<std::string, json> seen;
  bool ok = true;
  json all = json::array();
  // No silent wait: each distinct link takes seconds (namespaces, then ~0.3 s of traffic and the
  // probes); a line per link with the count, elapsed time and ETA.
  std::set<std::string> distinct;
  for (const auto& [a, b] : pipelineEdges())
    for (const auto& [src, dst] : {std::pair{a, b}, std::pair{b, a}})
      if (topo.link(src, dst).trace.empty()) distinct.insert(json(topo.link(src, dst)).dump());
  const double started = emulator::monotonicNow();
  ProgressLine line;
  for (const auto& [a, b] : pipelineEdges())
    for (const auto& [src, dst] : {std::pair{a, b}, std::pair{b, a}}) {
      const emulator::LinkSpec& l = topo.link(src, dst);
      json entry = {{"src", src}, {"dst", dst}, {"link", l.describe()}};
      if (!l.trace.empty()) {
        entry["note"] = "bandwidth trace: rate follows the trace, not calibrated against one rate";
        all.push_back(entry);
        continue;
      }
      const std::string key = json(l).dump();
      if (!seen.count(key)) {
        const std::string name =
            "link " + std::to_string(src) + "->" + std::to_string(dst) + " (" + l.describe() + ")";
        const emulator::CalibrationOptions c = calibrationOf(l, name);
        if (opt_.progress)
          line.update("calibrating " + std::to_string(seen.size() + 1) + "/" +
                          std::to_string(distinct.size()) + ": " + name + ", " +
                          std::to_string(static_cast<int>(emulator::monotonicNow() - started)) +
                          " s",
                      true);
        try {
          seen[key] = emulator::calibrateLink(c);
        } catch (const std::exception& e) {
          throw std::runtime_error("calibrating " + name + ": " + e.what());
        }
      }
      entry["calibration"] = seen[key];
      const double err = seen[key].value("rate_error", 0.0);
      entry["link_ok"] = std::isfinite(err) && std::fabs(err) <= kTolerance;
      if (!entry["link_ok"].get<bool>()) {
        ok = false;
        std::fprintf(stderr,
                     "slowpipe: warning: link %d->%d (%s) achieved %.4g bps, %+.1f%% off its "
                     "configured rate (tolerance 3%%; the hypervisor took %.1f%% of this machine's "
                     "CPU meanwhile); results at this setting are flagged link_ok=false\n",
                     src, dst, l.describe().c_str(), seen[key].value("achieved_bps", 0.0),
                     100 * err, 100 * seen[key].value("host_cpu_steal", 0.0));
      }
      all.push_back(entry);
    }
  if (opt_.progress && !distinct.empty()) {
    line.update("calibrated " + progressText(static_cast<int64_t>(seen.size()),
                                             static_cast<int64_t>(distinct.size()),
                                             emulator::monotonicNow() - started, "links"),
                true);
    line.finish();
  }
  result_["calibration"] =
      all.empty() ? json() : all[0].value("calibration", json());  // first link, as before
  result_["calibration_links"] = all;
  result_["link_ok"] = ok;
}

// Kernel backend with bandwidth traces: the launcher changes the HTB rate of each traced
// direction when the trace says (time 0 = when the workers were started).
// Time 0 of a trace is the run's first step (traceOrigin_, set when the peer tables go out), as
// in the user backend's links and the simulator; before it only the trace's first rate applies.
void Launcher::applyTraces() {
  for (auto& t : traces_) {
    const auto& pts = t.trace.points();
    const double origin = traceOrigin_ >= 0 ? traceOrigin_ : start_;
    while (t.next < pts.size() && (traceOrigin_ >= 0 || pts[t.next].first <= 0) &&
           now() - origin >= pts[t.next].first) {
      fabric_->setRate(t.edge, t.from, pts[t.next].second);
      result_["trace_changes"].push_back({{"at_s", now() - origin},
                                          {"due_s", pts[t.next].first},
                                          {"edge", t.edge},
                                          {"from", t.from},
                                          {"bandwidth_bps", pts[t.next].second}});
      ++t.next;
    }
  }
}

}  // namespace slowpipe::runtime::detail
