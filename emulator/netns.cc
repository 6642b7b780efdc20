// NetnsFabric: namespaces, veths, tc; cleanup on every exit path (see netns.h).
#include "emulator/netns.h"

#include "emulator/delay_line.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "emulator/command.h"
#include "emulator/live_names.h"

namespace slowpipe::emulator {
namespace {

LiveNames<64> gLive;  // what the signal handler removes
std::atomic<int> gFabricSeq{0};

void deleteNamespaceFromSignal(const char* name) {
  const char* argv[] = {"ip", "netns", "delete", name, nullptr};
  runFromSignal(argv, false);
}

void removeLiveNamespaces() { gLive.forEach(deleteNamespaceFromSignal); }

void installHandlers() { addSignalCleanup(removeLiveNamespaces); }

void registerLive(const std::string& name) { gLive.add(name, "namespaces"); }
void unregisterLive(const std::string& name) { gLive.remove(name); }

bool qdiscWorks(const std::string& ns, const std::vector<std::string>& args) {
  std::vector<std::string> cmd = {"tc", "-n", ns, "qdisc", "add", "dev", "lo", "root"};
  cmd.insert(cmd.end(), args.begin(), args.end());
  const bool ok = runCommand(cmd).status == 0;
  if (ok) runCommand({"tc", "-n", ns, "qdisc", "del", "dev", "lo", "root"});
  return ok;
}

std::string bitRate(double bps) { return std::to_string(static_cast<uint64_t>(bps)) + "bit"; }

}  // namespace

double wireRateFor(double goodputBps, int mtu) {
  // Per packet: 14 bytes Ethernet + 20 IP + 32 TCP (with timestamps) around mtu - 52 payload bytes.
  return goodputBps * (mtu + 14.0) / (mtu - 52.0);
}

const KernelFeatures& kernelFeatures() {
  static const KernelFeatures kFeatures = [] {
    KernelFeatures f;
    f.root = geteuid() == 0;
    if (!f.root) {
      f.note = "not root: the kernel backend needs CAP_NET_ADMIN";
      return f;
    }
    const std::string ns = "slowpipe-" + std::to_string(getpid()) + "-probe";
    installHandlers();
    registerLive(ns);
    if (runCommand({"ip", "netns", "add", ns}).status != 0) {
      unregisterLive(ns);
      f.note = "cannot create network namespaces ('ip netns add' failed)";
      return f;
    }
    runCommand({"ip", "-n", ns, "link", "set", "lo", "up"});
    f.htb = qdiscWorks(ns, {"handle", "1:", "htb"});
    f.tbf = qdiscWorks(ns, {"tbf", "rate", "1mbit", "burst", "32kbit", "latency", "400ms"});
    f.netem = qdiscWorks(ns, {"netem", "delay", "1ms"});
    runCommand({"ip", "netns", "delete", ns});
    unregisterLive(ns);
    if (!f.netem)
      f.note = "kernel has no netem qdisc: delay, jitter and loss are applied in user space";
    return f;
  }();
  return kFeatures;
}

NetnsFabric::NetnsFabric(int endpoints, std::vector<FabricEdge> edges, int mtu)
    : edges_(std::move(edges)), mtu_(mtu) {
  if (geteuid() != 0)
    throw std::runtime_error(
        "kernel backend: not root; creating namespaces and tc qdiscs needs CAP_NET_ADMIN "
        "(run as root, or use backend 'user')");
  const KernelFeatures& f = kernelFeatures();
  if (!f.htb)
    throw std::runtime_error(
        "kernel backend: this kernel has no HTB qdisc (sch_htb); use backend 'user'");
  // Loss needs a mechanism that really drops packets: netem or the delay line. Without either we
  // refuse rather than record a loss that nothing applied.
  const bool line = !f.netem && access("/dev/net/tun", R_OK | W_OK) == 0;
  for (const auto& e : edges_)
    for (const LinkSpec* l : {&e.aToB, &e.bToA})
      if (l->loss > 0 && !f.netem && !line)
        throw std::invalid_argument(
            "network.links.loss: " + std::to_string(l->loss) + " on link " + std::to_string(e.a) +
            "<->" + std::to_string(e.b) +
            " needs netem or the delay line (/dev/net/tun) to drop "
            "packets on the tc backend, and this kernel has neither; use backend 'user' (loss "
            "as a retransmission delay)");
  installHandlers();
  const int seq = gFabricSeq.fetch_add(1);
  try {
    for (int i = 0; i < endpoints; ++i) {
      const std::string name = "slowpipe-" + std::to_string(getpid()) + "-" + std::to_string(seq) +
                               "-" + std::to_string(i);
      registerLive(name);
      runChecked({"ip", "netns", "add", name}, "create namespace");
      ns_.push_back(name);
      runChecked({"ip", "-n", name, "link", "set", "lo", "up"}, "bring up loopback");
    }
    for (size_t e = 0; e < edges_.size(); ++e) {
      if (line)
        joinByLine(static_cast<int>(e));
      else
        joinByVeth(static_cast<int>(e));
    }
  } catch (...) {
    destroy();
    throw;
  }
  if (line) {
    mechanism_["path"] =
        "delay line: a TUN device per namespace, a forwarding thread in the launcher (no netem in "
        "this kernel)";
    mechanism_["rate"] = "delay line (goodput-compensated, mtu " + std::to_string(mtu_) +
                         " unless a link sets its own, drop-tail 1000 packets)";
    mechanism_["delay"] = "delay line";
    mechanism_["jitter"] = "delay line (no reordering)";
    mechanism_["loss"] =
        "delay line (Bernoulli, or Gilbert-Elliott where a link gives one, at ingress)";
  } else {
    mechanism_["path"] = "veth pair";
    mechanism_["rate"] =
        "htb (goodput-compensated, mtu " + std::to_string(mtu_) + " unless a link sets its own)";
    mechanism_["delay"] = f.netem ? "netem" : "user-space (no netem in this kernel)";
    mechanism_["jitter"] = mechanism_["delay"];
    mechanism_["loss"] = f.netem ? "netem (gemodel for Gilbert-Elliott)"
                                 : "none (no netem: a spec with loss > 0 is refused)";
  }
  mechanism_["netem_available"] = f.netem;
}

// A veth pair between the edge's namespaces, each egress shaped (HTB, netem where there is one).
void NetnsFabric::joinByVeth(int e) {
  const auto& edge = edges_[e];
  const std::string va = vethName(e, edge.a), vb = vethName(e, edge.b);
  runChecked({"ip", "link", "add", va, "netns", ns_.at(edge.a), "type", "veth", "peer", "name", vb,
              "netns", ns_.at(edge.b)},
             "create veth pair");
  for (int side : {edge.a, edge.b}) {
    const std::string dev = side == edge.a ? va : vb;
    runChecked({"ip", "-n", ns_[side], "link", "set", dev, "mtu", std::to_string(edgeMtu(e))},
               "set mtu");
    runChecked({"ip", "-n", ns_[side], "addr", "add", address(e, side) + "/24", "dev", dev},
               "add address");
    runChecked({"ip", "-n", ns_[side], "link", "set", dev, "up"}, "bring up veth");
    const CommandResult off = runCommand({"ip", "netns", "exec", ns_[side], "ethtool", "-K", dev,
                                          "tso", "off", "gso", "off", "gro", "off"});
    mechanism_["offloads"] =
        off.status == 0 ? "tso/gso/gro off" : "could not disable: " + off.output;
  }
  shape(e, edge.a, edge.aToB);
  shape(e, edge.b, edge.bToA);
  if (edge.moderationS !=
      0)  // nothing here forwards packets in user space: there is nothing to moderate
    mechanism_["moderation"] =
        "not applied: the edges are veth pairs (no delay line), so network.moderation_us has no "
        "effect";
}

// The delay line between the edge's namespaces: each direction's link as a PacketLink.
void NetnsFabric::joinByLine(int e) {
  const auto& edge = edges_[e];
  auto packetLink = [&](const LinkSpec& l, uint64_t seed) {
    PacketLinkSpec p;
    const int mtu = edgeMtu(e);
    p.rateBps = (l.trace.empty() ? l.bandwidthBps : l.trace.rateAt(0)) * mtu / (mtu - 52.0);
    p.delayS = l.latencyS;
    p.jitterS = l.jitterS;
    p.loss = l.loss;
    p.gilbertElliott = l.gilbertElliott;
    p.ge = l.ge;
    p.queuePackets = 1000;
    p.mtu = mtu;
    p.seed = seed;
    return p;
  };
  DelayLineOptions o;
  o.aToB = packetLink(edge.aToB, 1000 + 2 * e);
  o.bToA = packetLink(edge.bToA, 1001 + 2 * e);
  o.spinS = 0;  // the workers need the cores
  o.batchS = edge.moderationS;
  lines_.push_back(std::make_unique<DelayLine>(o, ns_.at(edge.a), ns_.at(edge.b),
                                               address(e, edge.a), address(e, edge.b),
                                               vethName(e, edge.a), vethName(e, edge.b)));
  mechanism_["offloads"] =
      "none on TUN devices (no virtio header): every packet is at most one MTU";
  mechanism_["moderation"] =
      "interrupt moderation (network.moderation_us): while packets stream, a line writes them in "
      "batches at most that far apart, none later; 0: every packet at its time (per line: "
      "delay_lines[].moderation_us)";
}

int NetnsFabric::edgeMtu(int edge) const {
  const auto& e = edges_.at(edge);
  const int m =
      std::max(e.aToB.mtu, e.bToA.mtu);  // a link's MTU is the pair's (both ends' devices)
  return m > 0 ? m : mtu_;
}

bool NetnsFabric::pathCarriesDelay() const { return kernelFeatures().netem || !lines_.empty(); }

nlohmann::json NetnsFabric::lineStats() const {
  if (lines_.empty()) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (size_t e = 0; e < lines_.size(); ++e)
    out.push_back({{"edge", e},
                   {"moderation_us", lines_[e]->describe()["moderation_us"]},
                   {"stats", lines_[e]->stats()}});
  return out;
}

NetnsFabric::~NetnsFabric() { destroy(); }

void NetnsFabric::withForwardersParked(const std::function<void()>& fn) {
  size_t parked = 0;
  try {
    for (; parked < lines_.size(); ++parked) lines_[parked]->park();
    fn();
  } catch (...) {
    for (size_t i = 0; i < parked; ++i) lines_[i]->unpark();
    throw;
  }
  for (auto& line : lines_) line->unpark();
}

void NetnsFabric::destroy() {
  lines_.clear();  // their forwarding threads stop, their devices go
  for (const auto& name : ns_) {
    runCommand({"ip", "netns", "delete", name});
    unregisterLive(name);
  }
  ns_.clear();
}

std::string NetnsFabric::vethName(int edge, int endpoint) const {
  return "sp" + std::to_string(getpid() % 10000000) + "e" + std::to_string(edge) +
         (endpoint == edges_.at(edge).a ? "a" : "b");
}

std::string NetnsFabric::address(int edge, int endpoint) const {
  return "10.213." + std::to_string(edge) + "." + (endpoint == edges_.at(edge).a ? "1" : "2");
}

void NetnsFabric::shape(int edge, int from, const LinkSpec& spec) {
  const std::string& ns = ns_.at(from);
  const std::string dev = vethName(edge, from);
  const int mtu = edgeMtu(edge);
  const double rate =
      wireRateFor(spec.trace.empty() ? spec.bandwidthBps : spec.trace.rateAt(0), mtu);
  // Burst: 1 ms worth of bytes, at least two MTU-sized packets.
  const uint64_t burst =
      std::max<uint64_t>(static_cast<uint64_t>(rate / 8 * 1e-3), 2ull * (mtu + 14));
  runChecked(
      {"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"},
      "add htb");
  runChecked({"tc",     "-n",
              ns,       "class",
              "add",    "dev",
              dev,      "parent",
              "1:",     "classid",
              "1:1",    "htb",
              "rate",   bitRate(rate),
              "ceil",   bitRate(rate),
              "burst",  std::to_string(burst),
              "cburst", std::to_string(burst)},
             "add htb class");
  if (kernelFeatures().netem && (spec.latencyS > 0 || spec.jitterS > 0 || spec.loss > 0)) {
    std::vector<std::string> cmd = {
        "tc",    "-n",
        ns,      "qdisc",
        "add",   "dev",
        dev,     "parent",
        "1:1",   "handle",
        "10:",   "netem",
        "limit", "100000",
        "delay", std::to_string(static_cast<int64_t>(spec.latencyS * 1e6)) + "us"};
    if (spec.jitterS > 0)
      cmd.push_back(std::to_string(static_cast<int64_t>(spec.jitterS * 1e6)) + "us");
    if (spec.loss > 0) {
      const auto args = netemLossArgs(spec);
      cmd.insert(cmd.end(), args.begin(), args.end());
    }
    runChecked(cmd, "add netem");
  }
}

void NetnsFabric::setRate(int edge, int from, double bps) {
  if (!lines_.empty()) {
    lines_.at(edge)->setRate(from == edges_.at(edge).a,
                             bps * edgeMtu(edge) / (edgeMtu(edge) - 52.0));
    return;
  }
  const double rate = wireRateFor(bps, edgeMtu(edge));
  const uint64_t burst =
      std::max<uint64_t>(static_cast<uint64_t>(rate / 8 * 1e-3), 2ull * (edgeMtu(edge) + 14));
  runChecked({"tc",
              "-n",
              ns_.at(from),
              "class",
              "change",
              "dev",
              vethName(edge, from),
              "parent",
              "1:",
              "classid",
              "1:1",
              "htb",
              "rate",
              bitRate(rate),
              "ceil",
              bitRate(rate),
              "burst",
              std::to_string(burst),
              "cburst",
              std::to_string(burst)},
             "change htb rate");
}

double NetnsFabric::userLatency(int edge, int from) const {
  if (pathCarriesDelay()) return 0.0;
  const auto& e = edges_.at(edge);
  return (from == e.a ? e.aToB : e.bToA).latencyS;
}

double NetnsFabric::userJitter(int edge, int from) const {
  if (pathCarriesDelay()) return 0.0;
  const auto& e = edges_.at(edge);
  return (from == e.a ? e.aToB : e.bToA).jitterS;
}

void enterNamespace(const std::string& name) {
  const std::string path = "/var/run/netns/" + name;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error("cannot open namespace " + path + ": " + std::strerror(errno));
  const int rc = setns(fd, CLONE_NEWNET);
  const int err = errno;
  close(fd);
  if (rc != 0) throw std::runtime_error("setns " + name + ": " + std::strerror(err));
}

std::vector<std::string> cleanupNamespaces(bool all) {
  std::vector<std::string> removed;
  const CommandResult list = runCommand({"ip", "netns", "list"});
  size_t pos = 0;
  while (pos < list.output.size()) {
    const size_t eol = std::min(list.output.find('\n', pos), list.output.size());
    const std::string line = list.output.substr(pos, eol - pos);
    pos = eol + 1;
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind("slowpipe-", 0) != 0) continue;
    const long owner = std::strtol(name.c_str() + 9, nullptr, 10);
    const bool alive = owner > 0 && owner != getpid() &&
                       (kill(static_cast<pid_t>(owner), 0) == 0 || errno == EPERM);
    if (!all && alive) continue;
    if (runCommand({"ip", "netns", "delete", name}).status == 0) removed.push_back(name);
  }
  return removed;
}

}  // namespace slowpipe::emulator
