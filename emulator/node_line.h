// The node line: network.nodes on the kernel path (backend tc). One namespace per node, a TUN
// device in each (10.215.<k>.<n+1>/24: the node's address; the /24 routes every other node through
// the device), and one forwarding thread that carries each IP packet from node a to node b through
// three packet links in a row (emulator/packet_link.h, as Mahimahi chains its shells):
//   a's uplink (a's `up` rate, drop-tail queue) -> the core a -> b (its latency, jitter, loss,
//   rate if it has one) -> b's downlink (b's `down` rate, drop-tail queue)
// so every connection of a node shares its uplink and downlink as packets, and the workers' own
// kernel TCP (congestion control, windows, retransmissions) runs on top. Rates are goodput
// (LinkSpec), run as IP-packet rates x mtu / (mtu - 52). A packet leaves one link at its due time
// and is offered to the next at that time (never before what that link was last offered).
// The namespaces are a NetnsFabric's (removed on exit, on signals and by `slowpipe emulator
// cleanup`); the TUN devices vanish with this process. Root only.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/calibrate.h"
#include "emulator/netns.h"
#include "emulator/nodes.h"
#include "emulator/packet_link.h"

namespace slowpipe::emulator {

class NodeLine {
 public:
  // Namespaces for the nodes of `net` the run uses (`used`; empty: all of them; mtu: the TUN
  // devices', 1500 unless `mtu` > 0) and the forwarding thread. Throws (after removing what it
  // made) if not root or without TUN.
  explicit NodeLine(const NodeNetwork& net, std::vector<int> used = {}, int mtu = 0);
  ~NodeLine();
  NodeLine(const NodeLine&) = delete;
  NodeLine& operator=(const NodeLine&) = delete;

  // The nodes it joins (indices into the network), each with its namespace and address.
  const std::vector<int>& nodes() const { return nodes_; }
  const std::string& nsName(int node) const { return fabric_->nsName(slotOf_.at(node)); }
  const std::string& address(int node) const { return addr_.at(slotOf_.at(node)); }
  // Per node it joins ("nodes"), its uplink and downlink, and every core pair that carried
  // packets: offered, delivered, lost, dropped.
  nlohmann::json stats() const;
  nlohmann::json describe() const;
  void stop();

 private:
  struct Forwarder;
  void forward();
  void wakeUp();

  const NodeNetwork net_;
  std::vector<int> nodes_;     // slot -> node index
  std::map<int, int> slotOf_;  // node index -> slot
  int mtu_;
  std::unique_ptr<NetnsFabric> fabric_;
  std::vector<std::string> addr_;  // by slot
  std::vector<int> tun_;
  int wake_ = -1;
  std::vector<std::unique_ptr<PacketLink>> up_, down_, core_;  // core_[a * N + b]
  mutable std::mutex statsMutex_;
  std::vector<PacketLinkStats> statsRaw_;  // the forwarder's copy: uplinks, core pairs, downlinks
  uint64_t foreign_ = 0;                   // packets not addressed to another node
  ThreadCpuClock forwardingCpu_;           // the forwarding thread's
  std::atomic<int64_t> wakeups_{0};        // times the forwarding thread woke: a packet, its timer
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace slowpipe::emulator
