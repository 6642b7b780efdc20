// The ns-3 tier (see packet_network.h). Built with -DSLOWPIPE_NS3=ON (Debian's libns3-dev).
#include "simulator/packet_network.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"
#include "ns3/version-defines.h"

#include "emulator/nodes.h"
#include "emulator/tcp_settings.h"
#include "runtime/comm/link_table.h"
#include "runtime/spec/spec.h"

namespace slowpipe::simulator {

bool haveNs3() { return true; }

namespace {

using nlohmann::json;

constexpr double kUnlimitedBps =
    10e9;  // "no limit": 1.2 us a packet (at 100 Gbps a packet rounds to 0 of ns-3 nanoseconds)
constexpr uint32_t kSegment = 1448;  // MTU 1500 less 52 bytes of IP, TCP and timestamp headers

// Delays d with L(a, b) = d[a] + d[b] for every pair of `items` (a star), from triples.
std::map<int, double> starSplit(const std::vector<int>& items,
                                const std::function<double(int, int)>& L) {
  std::map<int, double> d;
  if (items.size() == 1) return {{items[0], 0.0}};
  if (items.size() == 2)
    return {{items[0], L(items[0], items[1]) / 2}, {items[1], L(items[0], items[1]) / 2}};
  for (size_t i = 0; i < items.size(); ++i) {
    const int n = items[i], p = items[(i + 1) % items.size()], q = items[(i + 2) % items.size()];
    d[n] = std::max(0.0, (L(n, p) + L(n, q) - L(p, q)) / 2);
  }
  return d;
}

// The two-level star the latencies fit: each node's delay to its region's router and each
// region router's delay to the core router, such that L(a, b) = d[a] + d[b] within a region and
// d[a] + r[A] + r[B] + d[b] across; throws naming a pair that does not fit.
struct Hierarchy {
  std::map<int, double> node;            // d[a]
  std::map<std::string, double> region;  // r[A]
  std::map<int, std::string> regionOf;
};
Hierarchy hierarchy(const emulator::NodeNetwork& net, const std::vector<int>& used) {
  auto L = [&](int a, int b) { return net.path(a, b).latencyS; };
  Hierarchy h;
  std::map<std::string, std::vector<int>> members;
  for (const int n : used) members[h.regionOf[n] = net.node(n).region].push_back(n);
  for (const auto& [name, nodes] : members)
    for (const auto& [n, d] : starSplit(nodes, L)) h.node[n] = d;
  std::vector<std::string> names;
  for (const auto& [name, nodes] : members) names.push_back(name);
  std::vector<int> idx(names.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int>(i);
  const auto r = starSplit(idx, [&](int x, int y) {
    const int a = members[names[x]][0], b = members[names[y]][0];
    return L(a, b) - h.node[a] - h.node[b];
  });
  for (const auto& [i, d] : r) h.region[names[i]] = d;  // one region: 0
  for (const int a : used)
    for (const int b : used) {
      if (a == b) continue;
      const bool same = h.regionOf[a] == h.regionOf[b];
      const double fit =
          h.node[a] + h.node[b] + (same ? 0.0 : h.region[h.regionOf[a]] + h.region[h.regionOf[b]]);
      if (std::fabs(fit - L(a, b)) > 1e-6 || fit < 0)
        throw std::invalid_argument(
            "network.model ns3: the ns-3 tier joins nodes to region routers and regions to a core "
            "router (two stars), and the latency from '" +
            net.node(a).name + "' to '" + net.node(b).name + "' (" + std::to_string(L(a, b) * 1e3) +
            " ms) does not fit them (" + std::to_string(fit * 1e3) + " ms)");
    }
  return h;
}

class Ns3Network : public PacketNetwork {
 public:
  Ns3Network(const runtime::RunSpec& spec, const runtime::LinkTable& links)
      : net_(links.nodeNetwork() ? *links.nodeNetwork()
                                 : throw std::invalid_argument(
                                       "network.model ns3: the ns-3 tier needs network.nodes")),
        rankNode_(links.rankNodes()) {
    std::set<int> usedSet(rankNode_.begin(), rankNode_.end());
    const std::vector<int> used(usedSet.begin(), usedSet.end());
    for (const int a : used)
      for (const int b : used) {
        if (a == b) continue;
        const auto p = net_.access(a, b);
        const auto l = net_.path(a, b);
        if (p.coreSlot >= 0 || l.jitterS > 0 || l.loss > 0 || !l.trace.empty())
          throw std::invalid_argument("network.model ns3: the core from '" + net_.node(a).name +
                                      "' to '" + net_.node(b).name +
                                      "' has a rate, jitter, loss or trace; the ns-3 tier models "
                                      "access rates, latencies and TCP");
      }
    const Hierarchy h = hierarchy(net_, used);
    configureTcp(spec.network.tcp.is_null()
                     ? emulator::TcpSettings{}
                     : emulator::tcpSettingsFromJson(spec.network.tcp, "network.tcp"));
    build(used, h);
    local_ = net_.path(rankNode_[0], rankNode_[0]);
    // Pipeline neighbours connect before time 0 (as ZeroMQ connects before a run's first step).
    double maxRtt = 0;
    for (int r = 0; r < static_cast<int>(rankNode_.size()); ++r)
      for (const auto& e : links.ofRank(r))
        if (e.src == r && !e.dataParallel && rankNode_[e.src] != rankNode_[e.dst]) {
          connection(e.src, e.dst);
          maxRtt = std::max(maxRtt, 2 * net_.path(rankNode_[e.src], rankNode_[e.dst]).latencyS);
        }
    origin_ = 0.5 + 4 * maxRtt;
  }

  ~Ns3Network() override { ns3::Simulator::Destroy(); }

  void send(int src, int dst, uint64_t bytes, std::function<void(double)> delivered) override {
    if (rankNode_.at(src) ==
        rankNode_.at(dst)) {  // one node: its local link, as the pipelined model bills it
      double& free = localFree_[{src, dst}];
      free = std::max(free, now()) + 8.0 * static_cast<double>(bytes) / local_.bandwidthBps;
      const double t = free + local_.latencyS;
      at(t, [delivered, t] { delivered(t); });
      return;
    }
    Conn& c = connection(src, dst);
    c.toWrite.push_back(bytes);
    c.expect.push_back({bytes, std::move(delivered)});
    ++messages_;
    write(c);
  }

  void at(double t, std::function<void()> fn) override {
    const double delay = std::max(0.0, t - now());
    ns3::Simulator::Schedule(ns3::Seconds(delay), [fn = std::move(fn)] { fn(); });
  }

  double now() const override { return ns3::Simulator::Now().GetSeconds() - origin_; }

  void run() override { ns3::Simulator::Run(); }

  json describe() const override {
    return {{"tier",
             "ns-3 " + std::to_string(NS3_VERSION_MAJOR) + "." + std::to_string(NS3_VERSION_MINOR)},
            {"nodes", devices_},
            {"regions", regions_},
            {"connections", conns_.size()},
            {"messages", messages_},
            {"packets_dropped", drops_},
            {"topology",
             "two stars: each node's point-to-point link to its region's router (uplink rate node "
             "-> router, downlink "
             "rate router -> node, the node's delay), each region router's to one core router "
             "(unlimited, the "
             "region's delay), drop-tail 1000 packets, no queue discs"},
            {"tcp", tcp_},
            {"time_0_at_s", origin_}};
  }

 private:
  struct Conn {
    ns3::Ptr<ns3::Socket> tx, rx;
    bool connected = false;
    std::deque<uint64_t> toWrite;  // bytes of each message not yet handed to the socket
    std::deque<std::pair<uint64_t, std::function<void(double)>>> expect;
    uint64_t received = 0;  // bytes received beyond the messages already delivered
  };

  void configureTcp(const emulator::TcpSettings& t) {
    const std::string cc = t.congestionControl.empty() ? "cubic" : t.congestionControl;
    const std::string type = cc == "cubic"  ? "ns3::TcpCubic"
                             : cc == "reno" ? "ns3::TcpLinuxReno"
                             : cc == "bbr"  ? "ns3::TcpBbr"
                                            : "";
    if (type.empty())
      throw std::invalid_argument("network.tcp.congestion_control: '" + cc +
                                  "' is not in the ns-3 tier (cubic, reno, bbr)");
    const uint32_t sndBuf = t.wmemMax > 0 ? static_cast<uint32_t>(t.wmemMax) : 4194304;
    // ns-3's receive buffer is its advertised window: Linux's ceiling for the same tcp_rmem maximum
    // (emulator::receiveWindowCeiling, as the tcp link model has it).
    const uint32_t rcvBuf =
        static_cast<uint32_t>(emulator::receiveWindowCeiling(t.rmemMax, kSegment + 52));
    ns3::Config::SetDefault("ns3::TcpL4Protocol::SocketType",
                            ns3::TypeIdValue(ns3::TypeId::LookupByName(type)));
    ns3::Config::SetDefault("ns3::TcpSocket::SegmentSize", ns3::UintegerValue(kSegment));
    ns3::Config::SetDefault("ns3::TcpSocket::InitialCwnd", ns3::UintegerValue(10));
    ns3::Config::SetDefault("ns3::TcpSocket::DelAckCount", ns3::UintegerValue(2));
    // Linux's delayed-ACK timer starts at 40 ms (TCP_DELACK_MIN); ns-3's default 200 ms equals the
    // minimum RTO, and a lone segment's ACK then came after the sender's RTO: one segment per RTO.
    ns3::Config::SetDefault("ns3::TcpSocket::DelAckTimeout", ns3::TimeValue(ns3::MilliSeconds(40)));
    ns3::Config::SetDefault("ns3::TcpSocket::SndBufSize", ns3::UintegerValue(sndBuf));
    ns3::Config::SetDefault("ns3::TcpSocket::RcvBufSize", ns3::UintegerValue(rcvBuf));
    ns3::Config::SetDefault("ns3::TcpSocketBase::MinRto", ns3::TimeValue(ns3::MilliSeconds(200)));
    ns3::Config::SetDefault("ns3::TcpSocketBase::Sack", ns3::BooleanValue(true));
    tcp_ = {{"congestion_control", type},
            {"segment_bytes", kSegment},
            {"initial_cwnd", 10},
            {"delayed_ack_count", 2},
            {"delayed_ack_timeout_s", 0.040},
            {"snd_buf", sndBuf},
            {"rcv_buf", rcvBuf},
            {"min_rto_s", 0.2}};
  }

  // Routers: one core, one per region (joined to the core by an unlimited link of the region's
  // delay); each node joined to its region's router by its access link.
  void build(const std::vector<int>& used, const Hierarchy& h) {
    ns3::InternetStackHelper stack;
    ns3::NodeContainer core;
    core.Create(1);
    stack.Install(core);
    int subnet = 0;
    auto addressPair = [&](ns3::NetDeviceContainer& d) {
      ns3::Ipv4AddressHelper addr;
      const std::string base =
          "10." + std::to_string(subnet / 256) + "." + std::to_string(subnet % 256) + ".0";
      addr.SetBase(base.c_str(), "255.255.255.0");
      ++subnet;
      const ns3::Ipv4InterfaceContainer ifc = addr.Assign(d);
      ns3::TrafficControlHelper::Default().Uninstall(d);  // the devices' own drop-tail queues only
      return ifc;
    };
    std::map<std::string, ns3::Ptr<ns3::Node>> regionRouter;
    for (const auto& [name, delay] : h.region) {
      ns3::NodeContainer r;
      r.Create(1);
      stack.Install(r);
      regionRouter[name] = r.Get(0);
      ns3::PointToPointHelper p2p;
      p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", ns3::StringValue("1000p"));
      p2p.SetDeviceAttribute(
          "DataRate", ns3::DataRateValue(ns3::DataRate(static_cast<uint64_t>(kUnlimitedBps))));
      p2p.SetChannelAttribute("Delay", ns3::TimeValue(ns3::Seconds(delay)));
      ns3::NetDeviceContainer d = p2p.Install(r.Get(0), core.Get(0));
      addressPair(d);
      regions_.push_back({{"region", name}, {"delay_s", delay}});
    }
    for (const int n : used) {
      const double nodeDelay = h.node.at(n);
      ns3::Ptr<ns3::Node> router = regionRouter.at(h.regionOf.at(n));
      ns3::NodeContainer node;
      node.Create(1);
      stack.Install(node);
      ns3::PointToPointHelper p2p;
      p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", ns3::StringValue("1000p"));
      p2p.SetChannelAttribute("Delay", ns3::TimeValue(ns3::Seconds(nodeDelay)));
      ns3::NetDeviceContainer d = p2p.Install(node.Get(0), router);
      // Goodput rates: the device sends PPP frames of IP packets, 1502 bytes for 1448 of payload.
      auto wire = [](double goodput) {
        return ns3::DataRate(
            static_cast<uint64_t>((goodput > 0 ? goodput : kUnlimitedBps) * 1502.0 / kSegment));
      };
      d.Get(0)->GetObject<ns3::PointToPointNetDevice>()->SetDataRate(wire(net_.node(n).upBps));
      d.Get(1)->GetObject<ns3::PointToPointNetDevice>()->SetDataRate(wire(net_.node(n).downBps));
      const ns3::Ipv4InterfaceContainer ifc = addressPair(d);
      node_[n] = node.Get(0);
      address_[n] = ifc.GetAddress(0);
      devices_.push_back({{"node", net_.node(n).name},
                          {"up_bps", net_.node(n).upBps},
                          {"down_bps", net_.node(n).downBps},
                          {"region", h.regionOf.at(n)},
                          {"delay_s", nodeDelay}});
    }
    ns3::Ipv4GlobalRoutingHelper::PopulateRoutingTables();
    // Packets the devices dropped (their queues full, or a receiving device's error): counted.
    ns3::Config::ConnectWithoutContext(
        "/NodeList/*/DeviceList/*/$ns3::PointToPointNetDevice/TxQueue/Drop",
        ns3::MakeCallback(&Ns3Network::dropped, this));
    ns3::Config::ConnectWithoutContext(
        "/NodeList/*/DeviceList/*/$ns3::PointToPointNetDevice/PhyRxDrop",
        ns3::MakeCallback(&Ns3Network::dropped, this));
    ns3::Config::ConnectWithoutContext(
        "/NodeList/*/DeviceList/*/$ns3::PointToPointNetDevice/MacTxDrop",
        ns3::MakeCallback(&Ns3Network::dropped, this));
  }

  Conn& connection(int src, int dst) {
    const auto key = std::make_pair(src, dst);
    auto it = conns_.find(key);
    if (it != conns_.end()) return *it->second;
    auto c = std::make_unique<Conn>();
    Conn* conn = c.get();
    conns_.emplace(key, std::move(c));
    const uint16_t port = static_cast<uint16_t>(10000 + nextPort_[rankNode_[dst]]++);
    ns3::Ptr<ns3::Socket> listen =
        ns3::Socket::CreateSocket(node_.at(rankNode_[dst]), ns3::TcpSocketFactory::GetTypeId());
    listen->Bind(ns3::InetSocketAddress(ns3::Ipv4Address::GetAny(), port));
    listen->Listen();
    listen->SetAcceptCallback(
        ns3::MakeNullCallback<bool, ns3::Ptr<ns3::Socket>, const ns3::Address&>(),
        ns3::MakeCallback(&Ns3Network::accepted, this));
    listeners_.push_back(listen);  // kept alive until the run ends
    listening_[{listen->GetNode()->GetId(), port}] = conn;
    conn->tx =
        ns3::Socket::CreateSocket(node_.at(rankNode_[src]), ns3::TcpSocketFactory::GetTypeId());
    conn->tx->Bind();
    senders_[conn->tx] = conn;
    conn->tx->SetConnectCallback(ns3::MakeCallback(&Ns3Network::connected, this),
                                 ns3::MakeCallback(&Ns3Network::failed, this));
    conn->tx->SetSendCallback(ns3::MakeCallback(&Ns3Network::writable, this));
    conn->tx->Connect(ns3::InetSocketAddress(address_.at(rankNode_[dst]), port));
    return *conn;
  }

  void dropped(ns3::Ptr<const ns3::Packet>) { ++drops_; }

  void accepted(ns3::Ptr<ns3::Socket> s, const ns3::Address&) {
    // Every connection has a listening port of its own on its receiver's node: the one it came in
    // on.
    ns3::Address local;
    s->GetSockName(local);
    Conn* conn = listening_.at(
        {s->GetNode()->GetId(), ns3::InetSocketAddress::ConvertFrom(local).GetPort()});
    conn->rx = s;
    receivers_[s] = conn;
    s->SetRecvCallback(ns3::MakeCallback(&Ns3Network::readable, this));
  }
  void connected(ns3::Ptr<ns3::Socket> s) {
    Conn* c = senders_.at(s);
    c->connected = true;
    write(*c);
  }
  void failed(ns3::Ptr<ns3::Socket>) {
    throw std::runtime_error("network.model ns3: a connection failed to open");
  }
  void writable(ns3::Ptr<ns3::Socket> s, uint32_t) { write(*senders_.at(s)); }

  void write(Conn& c) {
    if (!c.connected) return;
    while (!c.toWrite.empty()) {
      const uint32_t room = c.tx->GetTxAvailable();
      if (room == 0) return;
      const uint32_t n =
          static_cast<uint32_t>(std::min<uint64_t>({room, c.toWrite.front(), 1u << 20}));
      const int sent = c.tx->Send(ns3::Create<ns3::Packet>(n));
      if (sent <= 0) return;
      c.toWrite.front() -= static_cast<uint64_t>(sent);
      if (c.toWrite.front() == 0) c.toWrite.pop_front();
    }
  }

  void readable(ns3::Ptr<ns3::Socket> s) {
    Conn* c = receivers_.at(s);
    while (ns3::Ptr<ns3::Packet> p = s->Recv()) c->received += p->GetSize();
    while (!c->expect.empty() && c->received >= c->expect.front().first) {
      c->received -= c->expect.front().first;
      auto done = std::move(c->expect.front().second);
      c->expect.pop_front();
      done(now());
    }
  }

  emulator::NodeNetwork net_;
  std::vector<int> rankNode_;
  emulator::LinkSpec local_;
  double origin_ = 0;
  std::map<int, ns3::Ptr<ns3::Node>> node_;
  std::map<int, ns3::Ipv4Address> address_;
  std::map<int, int> nextPort_;
  std::map<std::pair<int, int>, std::unique_ptr<Conn>> conns_;
  std::map<ns3::Ptr<ns3::Socket>, Conn*> senders_, receivers_;
  std::map<std::pair<uint32_t, uint16_t>, Conn*> listening_;  // (receiver's node id, port)
  std::vector<ns3::Ptr<ns3::Socket>> listeners_;
  std::map<std::pair<int, int>, double> localFree_;
  json devices_ = json::array(), regions_ = json::array(), tcp_;
  int64_t messages_ = 0, drops_ = 0;
};

}  // namespace

std::unique_ptr<PacketNetwork> makeNs3Network(const runtime::RunSpec& spec,
                                              const runtime::LinkTable& links) {
  return std::make_unique<Ns3Network>(spec, links);
}

}  // namespace slowpipe::simulator
