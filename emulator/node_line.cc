// The node line (see node_line.h).
#include "emulator/node_line.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <unordered_map>

#include "emulator/calibrate.h"
#include "emulator/command.h"
#include "emulator/delay_line.h"
#include "emulator/shaped_socket.h"

namespace slowpipe::emulator {

using nlohmann::json;

namespace {

std::atomic<int> gNodeLineSeq{0};

// A goodput rate (0: none) as the packet link's IP-packet rate.
PacketLinkSpec accessLink(double goodputBps, int mtu, uint64_t seed) {
  PacketLinkSpec p;
  p.rateBps = goodputBps > 0 ? goodputBps * mtu / (mtu - 52.0) : 0;
  p.queuePackets = 1000;
  p.mtu = mtu;
  p.seed = seed;
  return p;
}

}  // namespace

NodeLine::NodeLine(const NodeNetwork& net, std::vector<int> used, int mtu)
    : net_(net), mtu_(mtu > 0 ? mtu : 1500) {
  if (used.empty())
    for (int n = 0; n < net_.size(); ++n) used.push_back(n);
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  nodes_ = used;
  for (size_t i = 0; i < nodes_.size(); ++i) slotOf_[nodes_[i]] = static_cast<int>(i);
  const int N = static_cast<int>(nodes_.size()), k = gNodeLineSeq.fetch_add(1) % 250;
  if (N > 250)
    throw std::invalid_argument(
        "network.nodes: the node line joins at most 250 nodes, the run uses " + std::to_string(N));
  fabric_ = std::make_unique<NetnsFabric>(N, std::vector<FabricEdge>{}, mtu_);  // namespaces only
  try {
    const std::string base =
        "sp" + std::to_string(getpid() % 10000000) + "n" + std::to_string(k) + "-";
    for (int n = 0; n < N; ++n) {
      const std::string& ns = fabric_->nsName(n);
      addr_.push_back("10.215." + std::to_string(k) + "." + std::to_string(n + 1));
      const std::string dev = base + std::to_string(n);
      inNamespace(ns, [&] { tun_.push_back(openTunDevice(dev)); });
      runChecked({"ip", "-n", ns, "addr", "add", addr_[n] + "/24", "dev", dev},
                 "address the node's TUN device");
      runChecked({"ip", "-n", ns, "link", "set", "dev", dev, "mtu", std::to_string(mtu_),
                  "txqueuelen", "100000", "up"},
                 "bring up the node's TUN device");
    }
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_ < 0)
      throw std::runtime_error(std::string("node line: eventfd: ") + std::strerror(errno));
  } catch (...) {
    stop();
    throw;
  }
  for (const int n : nodes_) {  // seeded by node, whichever nodes the run uses
    up_.push_back(std::make_unique<PacketLink>(accessLink(net_.node(n).upBps, mtu_, 3000 + n)));
    down_.push_back(std::make_unique<PacketLink>(accessLink(net_.node(n).downBps, mtu_, 4000 + n)));
  }
  for (const int a : nodes_)
    for (const int b : nodes_) {
      const AccessPath path = net_.access(a, b);
      PacketLinkSpec p =
          accessLink(path.coreSlot >= 0 ? path.coreBps : 0, mtu_, 5000 + a * net_.size() + b);
      if (a != b) {
        const LinkSpec core = net_.path(a, b);
        p.delayS = core.latencyS;
        p.jitterS = core.jitterS;
        p.loss = core.loss;
        p.gilbertElliott = core.gilbertElliott;
        p.ge = core.ge;
        if (path.coreSlot < 0) p.queuePackets = 0;  // no rate: no queue
      }
      core_.push_back(std::make_unique<PacketLink>(p));
    }
  thread_ = std::thread([this] { forward(); });
}

NodeLine::~NodeLine() { stop(); }

void NodeLine::stop() {
  if (thread_.joinable()) {
    stop_ = true;
    wakeUp();
    thread_.join();
  }
  for (int& fd : tun_)
    if (fd >= 0) close(fd), fd = -1;
  if (wake_ >= 0) close(wake_), wake_ = -1;
  if (fabric_) fabric_->destroy();
}

void NodeLine::wakeUp() {
  const uint64_t one = 1;
  (void)!write(wake_, &one, sizeof one);
}

json NodeLine::stats() const {
  std::lock_guard<std::mutex> lock(statsMutex_);
  const int N = static_cast<int>(nodes_.size());
  json s = {{"nodes", json::array()},
            {"uplinks", json::array()},
            {"downlinks", json::array()},
            {"core", json::array()},
            {"foreign_packets", foreign_}};
  // What forwarding cost this machine (the workers share its cores), so far.
  if (json cpu = forwardingCost(forwardingCpu_, wakeups_.load()); !cpu.is_null())
    s["forwarding"] = std::move(cpu);
  if (statsRaw_.size() != static_cast<size_t>(2 * N + N * N)) return s;
  // links: the uplinks, the core pairs, the downlinks (forward()'s order)
  for (int n = 0; n < N; ++n) {
    s["nodes"].push_back(net_.node(nodes_[n]).name);
    s["uplinks"].push_back(toJson(statsRaw_[n]));
    s["downlinks"].push_back(toJson(statsRaw_[N + N * N + n]));
  }
  for (int i = 0; i < N * N; ++i)
    if (statsRaw_[N + i].offered > 0)
      s["core"].push_back({{"a", net_.node(nodes_[i / N]).name},
                           {"b", net_.node(nodes_[i % N]).name},
                           {"stats", toJson(statsRaw_[N + i])}});
  return s;
}

json NodeLine::describe() const {
  return {{"mechanism",
           "node line: a namespace and TUN device per node, one forwarding thread: uplink -> core "
           "-> downlink "
           "packet links (no netem)"},
          {"nodes", nodes_.size()},
          {"mtu", mtu_},
          {"addresses", addr_}};
}

namespace {

// A packet inside the line: its bytes, its nodes and the link it is in (0 up, 1 core, 2 down).
struct Held {
  std::vector<uint8_t> bytes;
  int a, b, hop;
};

// The destination node of an IPv4 packet addressed inside the line's /24; -1 otherwise.
int destinationOf(const uint8_t* p, ssize_t n, const std::string& anyAddress, int nodes) {
  if (n < 20 || (p[0] >> 4) != 4) return -1;
  const std::string prefix = anyAddress.substr(0, anyAddress.rfind('.') + 1);
  const std::string dst =
      std::to_string(p[16]) + "." + std::to_string(p[17]) + "." + std::to_string(p[18]) + ".";
  if (dst != prefix) return -1;
  const int host = p[19];
  return host >= 1 && host <= nodes ? host - 1 : -1;
}

}  // namespace

// What the forwarding thread holds: the links in a row (uplinks, core pairs, downlinks), the
// packets inside them, each link's last offer time, its clock.
struct NodeLine::Forwarder {
  NodeLine& line;
  int N;
  std::vector<PacketLink*> links;
  std::unordered_map<const PacketLink*, double> lastOffer;
  std::unordered_map<uint64_t, Held> held;
  uint64_t nextId = 0, foreign = 0;
  std::vector<uint8_t> buf = std::vector<uint8_t>(65536);
  std::vector<double> due;
  double start = hostClockNow();

  explicit Forwarder(NodeLine& l) : line(l), N(static_cast<int>(l.nodes_.size())) {
    for (auto* v : {&l.up_, &l.core_, &l.down_})
      for (auto& link : *v) links.push_back(link.get());
  }
  double now() const { return hostClockNow() - start; }
  double next() const {
    double t = std::numeric_limits<double>::infinity();
    for (const PacketLink* l : links) t = std::min(t, l->nextEvent());
    return t;
  }
  // A link's offer at t, never before what it was last offered.
  bool offer(PacketLink* l, double t, uint64_t id, uint32_t bytes) {
    double& last = lastOffer[l];
    last = std::max(last, t);
    return l->offer(last, bytes, id);
  }
  // What each node's kernel sent, into its uplink.
  void readAll() {
    for (int a = 0; a < N; ++a)
      for (ssize_t n; (n = read(line.tun_[a], buf.data(), buf.size())) > 0;) {
        const int b = destinationOf(buf.data(), n, line.addr_[0], N);
        if (b < 0 || b == a) {
          ++foreign;
          continue;
        }
        const uint64_t id = nextId++;
        if (offer(line.up_[a].get(), now(), id, static_cast<uint32_t>(n)))
          held.emplace(id, Held{std::vector<uint8_t>(buf.begin(), buf.begin() + n), a, b, 0});
      }
  }
  // Hop by hop, in the order packets became due, until nothing more is due by now: uplink ->
  // core -> downlink -> the destination's TUN device.
  void moveDue() {
    for (bool moved = true; moved;) {
      moved = false;
      std::vector<std::tuple<double, uint64_t>> ready;
      const double t = now();
      for (PacketLink* l : links) {
        due.clear();
        const std::vector<uint64_t> ids = l->pop(t, &due);
        for (size_t i = 0; i < ids.size(); ++i) ready.emplace_back(due[i], ids[i]);
      }
      std::sort(ready.begin(), ready.end());
      for (const auto& [at, id] : ready) {
        moved = true;
        auto it = held.find(id);
        Held& h = it->second;
        const auto bytes = static_cast<uint32_t>(h.bytes.size());
        bool kept = true;
        if (h.hop == 0)
          kept = offer(line.core_[h.a * N + h.b].get(), at, id, bytes);
        else if (h.hop == 1)
          kept = offer(line.down_[h.b].get(), at, id, bytes);
        else
          (void)!write(line.tun_[h.b], h.bytes.data(), h.bytes.size());
        if (h.hop == 2 || !kept)
          held.erase(it);
        else
          ++h.hop;
      }
    }
  }
  void copyStats() {
    std::lock_guard<std::mutex> lock(line.statsMutex_);
    line.statsRaw_.resize(links.size());
    for (size_t i = 0; i < links.size(); ++i) line.statsRaw_[i] = links[i]->stats();
    line.foreign_ = foreign;
  }
};

// Reads, moves what is due, sleeps on a timer until the next event (or a packet, or a wake-up).
// No spinning: the workers need the cores.
void NodeLine::forward() {
  {
    std::lock_guard<std::mutex> lock(statsMutex_);
    forwardingCpu_.start();
  }
  prctl(PR_SET_TIMERSLACK, 1UL);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  const int timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  std::vector<int> watch = tun_;
  watch.push_back(wake_);
  watch.push_back(timer);
  for (int fd : watch) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  }
  Forwarder f(*this);
  double statsAt = -1;
  while (!stop_) {
    f.readAll();
    f.moveDue();
    if (f.now() - statsAt >= 0.05) {  // a copy for stats(), 20 times a second
      statsAt = f.now();
      f.copyStats();
    }
    const double next = f.next();
    if (next - f.now() <= 0) continue;
    itimerspec its{};
    if (std::isfinite(next)) {
      const double at = f.start + next + 1e-9;
      its.it_value.tv_sec = static_cast<time_t>(at);
      its.it_value.tv_nsec = static_cast<long>((at - std::floor(at)) * 1e9);
    }
    timerfd_settime(timer, TFD_TIMER_ABSTIME, &its, nullptr);
    epoll_event evs[16];
    const int n = epoll_wait(ep, evs, 16, -1);
    if (n > 0) wakeups_.fetch_add(1, std::memory_order_relaxed);
    for (int i = 0; i < n; ++i)
      if (evs[i].data.fd == timer || evs[i].data.fd == wake_) {
        uint64_t count;
        (void)!read(evs[i].data.fd, &count, sizeof count);
      }
  }
  close(timer);
  close(ep);
  f.copyStats();
  std::lock_guard<std::mutex> lock(statsMutex_);
  forwardingCpu_.end();
}

}  // namespace slowpipe::emulator
