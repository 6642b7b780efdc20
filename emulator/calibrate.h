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

nlohmann::json calibrateLink(const CalibrationOptions& opt);
// Unshaped ZeroMQ goodput over TCP loopback with this message size: the user backend's ceiling.
double loopbackCeilingBps(uint64_t messageBytes, int messages);

}  // namespace slowpipe::emulator
