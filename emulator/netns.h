// Kernel backend: network namespaces per endpoint, veth pairs per edge, egress shaped by tc.
//
// Everything created is named with the project prefix and the owner's pid: namespaces
// "slowpipe-<pid>-<n>-<endpoint>", veths "sp<pid>e<edge><a|b>". The fabric removes it all in its
// destructor, on SIGINT/SIGTERM/SIGHUP (signal handler), and `slowpipe emulator cleanup` removes
// what a killed process (kill -9) left: namespaces whose owner pid is gone. It never touches
// interfaces it did not create. Deleting a namespace deletes the veth ends inside it.
//
// Two ways to join a pair of namespaces, chosen by what the kernel offers:
//  - with netem: a veth pair, HTB on each veth egress with the rate raised by (mtu+14)/(mtu-52) so
//    that TCP goodput, not wire rate, equals the configured bandwidth (segmentation offloads
//    TSO/GSO/GRO off so the qdisc sees real packets), and netem under the HTB class for delay,
//    jitter and loss;
//  - without netem (these machines): the delay line (emulator/delay_line.h), a TUN device in each
//    namespace and a forwarding thread of this process carrying each direction through a
//    PacketLink at the goodput-compensated rate R x mtu/(mtu-52) (it counts IP packets), with the
//    link's delay, jitter (no reordering) and loss, and a drop-tail queue of 1000 packets (a
//    veth's default queue). The kernels' TCP then sees the path's real round trip.
// Every result records which mechanism carried each property (mechanism()).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/link.h"

namespace slowpipe::emulator {

class DelayLine;  // emulator/delay_line.h

struct KernelFeatures {
  bool root = false, htb = false, tbf = false, netem = false;
  std::string note;  // why something is missing
};
// Probes in a throwaway namespace (root only); the result is cached for the process.
const KernelFeatures& kernelFeatures();

struct FabricEdge {
  int a = 0, b = 1;     // endpoints
  LinkSpec aToB, bToA;  // shaping per direction
  // The delay line's interrupt moderation where no netem makes one (DelayLineOptions::batchS:
  // seconds; negative: auto).
  double moderationS = 0;
};

class NetnsFabric {
 public:
  // Creates `endpoints` namespaces and one veth pair per edge. Throws (after removing what it
  // created) if not root, if a tool is missing or if the kernel lacks a rate qdisc.
  NetnsFabric(int endpoints, std::vector<FabricEdge> edges, int mtu = 9000);
  ~NetnsFabric();
  NetnsFabric(const NetnsFabric&) = delete;
  NetnsFabric& operator=(const NetnsFabric&) = delete;

  const std::string& nsName(int endpoint) const { return ns_.at(endpoint); }
  // Address of `endpoint` on edge `edge` (10.213.<edge>.1 for a, .2 for b).
  std::string address(int edge, int endpoint) const;
  // Changes the kernel rate of one direction (bandwidth traces). from = the sending endpoint.
  void setRate(int edge, int from, double bps);
  // Latency/jitter the receiver of direction from->to must add itself (0: the kernel path
  // carries it, netem or the delay line).
  double userLatency(int edge, int from) const;
  double userJitter(int edge, int from) const;
  // Whether the path between the namespaces carries delay, jitter and loss itself.
  bool pathCarriesDelay() const;
  // What each direction's delay line did (packets, drops, lateness); null on veth pairs.
  nlohmann::json lineStats() const;
  // Which mechanism carries each property, e.g. {"rate": "htb", "delay": "user-space", ...}.
  nlohmann::json mechanism() const { return mechanism_; }
  void destroy();
  // Every delay line's forwarding thread held still (DelayLine::park) while `fn` runs: for a
  // fork() without exec from this process.
  void withForwardersParked(const std::function<void()>& fn);

 private:
  void shape(int edge, int from, const LinkSpec& spec);
  void joinByVeth(int edge);
  int edgeMtu(int edge) const;  // the edge's links' mtu, else the fabric's
  void joinByLine(int edge);
  std::string vethName(int edge, int endpoint) const;

  std::vector<std::string> ns_;
  std::vector<std::unique_ptr<DelayLine>> lines_;  // one per edge on the delay-line path
  std::vector<FabricEdge> edges_;
  int mtu_;
  nlohmann::json mechanism_;
};

// Moves the calling process into namespace `name` (call in a child before opening sockets).
void enterNamespace(const std::string& name);
// Removes slowpipe namespaces whose owner pid is gone (all of them with all=true). Returns names.
std::vector<std::string> cleanupNamespaces(bool all);
// Kernel rate that gives `goodputBps` of TCP payload at this MTU.
double wireRateFor(double goodputBps, int mtu);

}  // namespace slowpipe::emulator
