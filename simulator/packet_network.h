// A packet-level network under the simulator (network.model "ns3"): the simulator's events run on
// the network's own scheduler and every message travels as bytes on a TCP connection per directed
// rank pair, so its arrival is known only when its last byte is delivered. The ns-3 tier
// (simulator/ns3_network.cc, built with -DSLOWPIPE_NS3=ON) implements it over the run's
// network.nodes as two stars: each node joined to its region's router by a point-to-point link
// whose node-side device sends at the node's uplink rate and router-side device at its downlink
// rate, each region router joined to one core router, the pair latencies split into per-node and
// per-region delays (latencies no such split fits are refused), drop-tail device queues of 1000
// packets as the node line's, no queue discs;
// ns-3's TCP (its CUBIC, Linux Reno or BBR as network.tcp says, 1448-byte segments, initial window
// 10, delayed ACKs every 2 segments or 40 ms, minimum RTO 200 ms, send buffer network.tcp.wmem_max
// or 4 MiB). Connections between pipeline neighbours are opened before time 0, as ZeroMQ's are
// before a run's first step; other pairs (the replicas') when their first message goes, which then
// pays the handshake. Ranks on one node exchange over its `local` link, billed as the pipelined
// model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace slowpipe::runtime {
struct RunSpec;
class LinkTable;
}  // namespace slowpipe::runtime

namespace slowpipe::simulator {

class PacketNetwork {
 public:
  virtual ~PacketNetwork() = default;
  // Hands `bytes` from rank src to rank dst at now(); `delivered(t)` runs at the time t its last
  // byte reaches dst (messages on one connection arrive in order).
  virtual void send(int src, int dst, uint64_t bytes, std::function<void(double)> delivered) = 0;
  // Runs fn at time t >= now() (seconds on the run's clock: 0 is its first step).
  virtual void at(double t, std::function<void()> fn) = 0;
  virtual double now() const = 0;
  // Runs events until none is left.
  virtual void run() = 0;
  // What the network was built as, for the record (nodes, devices, TCP settings, connections).
  virtual nlohmann::json describe() const = 0;
};

// Whether this build has the ns-3 tier.
bool haveNs3();
// The ns-3 network of `spec` (network.nodes, placement, network.tcp); throws naming what it cannot
// model, or that the build has no ns-3.
std::unique_ptr<PacketNetwork> makeNs3Network(const runtime::RunSpec& spec,
                                              const runtime::LinkTable& links);

}  // namespace slowpipe::simulator
