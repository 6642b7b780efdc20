// Link calibration: push runtime-sized messages over ZeroMQ through a shaped link and measure
// what it delivered. Backs `slowpipe bench link`.
//
// Definitions (also in README "Metrics"):
//   achieved_bps    = 8 * (N-1) * B / (last delivery - first delivery), bulk phase, N messages of B
//   bytes latency sample  = delivery - send time - 8*b/R for probe messages of b = 64 bytes, sent
//   one at a
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
// user-space delay line or shaper loses rate and adds delay when it is high (kStealNoticeable).
nlohmann::json calibrateLink(const CalibrationOptions& opt);

// The machine's CPU time (seconds, all CPUs) and the part of it stolen by a hypervisor, from
// /proc/stat's first line; both 0 where it cannot be read.
struct CpuTimes {
  double total = 0, steal = 0;
};
CpuTimes cpuTimes();
// The stolen share of the CPU time between two readings (0 when none passed).
double stealShare(const CpuTimes& from, const CpuTimes& to);
// Past this share, timing on these 2-core machines is the hypervisor's: three tc calibrations at
// 1 Gbps read 0.70-0.91 of the rate (best 0.91, 0.90) with 11.9% and 12.4% steal over them, and
// passed the 5% bound with 0.15% and about 6%. The tests that check a shaped rate or delay skip,
// with the figures, when they miss it while steal passed this.
constexpr double kStealNoticeable = 0.03;
// What a thread of this process costs the machine: its CPU time over its life. The thread calls
// start() as it begins and end() as it finishes; any thread may read() it meanwhile (the running
// thread's pthread CPU clock) or after. Not synchronised: the owner guards it with its own mutex.
class ThreadCpuClock {
 public:
  void start();
  void end();
  // {"cpu_s", "wall_s", "cpu_share"}; null before start() or where the clock cannot be read.
  nlohmann::json read() const;

 private:
  double startedAt_ = -1, endedAt_ = -1, cpuS_ = -1;
  unsigned long thread_ = 0;
  bool running_ = false;
};
// A forwarding thread's cost so far (a delay line's, the node line's): clock.read() and its
// wake-ups ("wakeups", "wakeups_per_s": each one takes a core from whatever ran there, a stage's
// compute on a small machine); null before the clock started.
nlohmann::json forwardingCost(const ThreadCpuClock& clock, int64_t wakeups);
// Unshaped ZeroMQ goodput over TCP loopback with this message size: the user backend's ceiling.
double loopbackCeilingBps(uint64_t messageBytes, int messages);

}  // namespace slowpipe::emulator
