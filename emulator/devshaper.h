// Backend "tc-dev": shaping on a real interface, for runs across hosts. Each worker shapes the
// egress of its host's interface toward each peer it sends to: an HTB root qdisc on `dev`, one
// class per destination (peer address and port, so two peers on one host get their own links) with
// the link's rate (raised to TCP goodput as the tc backend does), a u32 filter steering the
// destination's packets into it, and netem under the class for delay/jitter/loss when the kernel
// has netem (otherwise the receiver adds delay and jitter in user space, and loss is refused).
// Unmatched traffic takes a default class at the interface's full rate.
//
// Cleanup: the destructor removes the root qdisc, and so does a SIGINT/SIGTERM/SIGHUP handler and
// removeAllDeviceShaping() (called before a worker _exit()s on an abort). A registry file per
// shaper, /run/slowpipe/tc-dev/<pid>-<dev>.json with the namespace it lives in, lets
// `slowpipe emulator cleanup` remove what a killed process (kill -9) left.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/link.h"

namespace slowpipe::emulator {

// The interface that holds IPv4 address `address` (in this network namespace); throws naming it.
std::string interfaceWithAddress(const std::string& address);

class DeviceShaper {
 public:
  // Takes over the egress of `dev` (root only; throws naming what is missing).
  explicit DeviceShaper(const std::string& dev, int mtu = 1500);
  ~DeviceShaper();
  DeviceShaper(const DeviceShaper&) = delete;
  DeviceShaper& operator=(const DeviceShaper&) = delete;
  // Shapes what this host sends to ip:port with `link`.
  void addDestination(const std::string& ip, int port, const LinkSpec& link);
  // {"rate": "htb", "delay": "netem" | "user-space", ...}
  nlohmann::json mechanism() const;
  void remove();

 private:
  std::string dev_, registry_;
  int mtu_, nextClass_ = 10;
  bool netem_ = false, removed_ = false;
};

// Removes every live shaper's qdisc (async-signal-safe enough for an abort path: fork + exec).
void removeAllDeviceShaping();
// Removes what shapers of processes that are gone left behind (registry files). Returns "dev
// (netns)" for each root qdisc it deleted; a record whose interface is gone (with its namespace) is
// dropped and not returned.
std::vector<std::string> cleanupDeviceShaping();

}  // namespace slowpipe::emulator
