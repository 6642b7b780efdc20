// Link calibration: push runtime-sized messages over ZeroMQ through a shaped link and measure
// what it delivered. Backs `slowpipe bench link`.
//
// Definitions (also in README "Metrics"):
//   achieved_bps    = 8 * (N-1) * B / (last delivery - first delivery), bulk phase, N messages of B bytes
//   latency sample  = delivery - send time - 8*b/R for probe messages of b = 64 bytes, sent one at a
//                     time after the bulk phase has drained
//   error ratios    = achieved/configured - 1 and measured median latency - configured latency (s)
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "emulator/link.h"

namespace slowpipe::emulator {

struct CalibrationOptions {
  std::string backend = "user";  // "user" (no privileges) or "tc" (root: netns + veth + tc)
  LinkSpec link;
  uint64_t messageBytes = 1u << 20;
  int messages = 0;  // 0: enough for ~2 s of emulated transfer, within [8, 2000]
  int probes = 200;
  bool iperf = false;  // tc backend: also measure with iperf3 through the same namespaces
};

// Also records host_cpu_steal: the share of this machine's CPU time the hypervisor took during the
// calibration (/proc/stat's steal over all of its time; absent where /proc/stat cannot be read). A
// user-space delay line or shaper loses rate and adds delay when it is high: on these 2-core VMs,
// 12% steal went with 0.70-0.91 of 1 Gbps and under 1% with 0.97-1.0.
nlohmann::json calibrateLink(const CalibrationOptions& opt);

// The machine's CPU time (seconds, all CPUs) and the part of it stolen by a hypervisor, from
// /proc/stat's first line; both 0 where it cannot be read.
struct CpuTimes {
  double total = 0, steal = 0;
};
CpuTimes cpuTimes();
// The stolen share of the CPU time between two readings (0 when none passed).
double stealShare(const CpuTimes& from, const CpuTimes& to);
// Past this share, timing on these 2-core machines is the hypervisor's: measured at 1 Gbps, 12%
// steal went with 0.90-0.91 of the rate and 0.15-6% with 0.97 and more. The tests that check a
// shaped rate or delay skip, with the figures, when they miss it while steal passed this.
constexpr double kStealNoticeable = 0.03;
// Unshaped ZeroMQ goodput over TCP loopback with this message size: the user backend's ceiling.
double loopbackCeilingBps(uint64_t messageBytes, int messages);

}  // namespace slowpipe::emulator
