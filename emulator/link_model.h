// Link models: when a message of B bytes handed to a link at time t arrives. One interface, billed
// identically by the emulator's shaped sockets (emulator/shaped_socket.h: ShapedSender stamps,
// ShapedReceiver bills) and the simulator (simulator/simulate.cc, in virtual time):
//   stamp  the sender's part, per directed link (its LinkClock: rate or trace, latency, jitter):
//          the arrival, or < 0 to leave the billing to the receiver;
//   bill   the receiver's part, per receiving rank (one model instance each: its state is that
//          rank's inbound side, shared by its inbound links): the arrival of a message the sender
//          left unstamped, when the receiver retrieves it.
// A model is one file in emulator/link_models/ (its LinkModelInfo too: what it models, what it
// needs, its settings' check), listed by one line in emulator/link_models/registry.cc; a run names
// it in network.model. Kernel backends (tc, tc-dev) shape the rate in the kernel: only models
// the kernel can express run there (LinkModelInfo::kernelBackends).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/link.h"

namespace slowpipe::emulator {

class LinkModel {
 public:
  virtual ~LinkModel() = default;
  // Sender: the arrival of `bytes` handed to the link of `clock` at `sentAt`; < 0: unstamped.
  virtual double stamp(LinkClock& clock, double sentAt, uint64_t bytes) = 0;
  // Receiver: the arrival of an unstamped message sent at `sentAt` over `link`, retrieved now.
  virtual double bill(const LinkSpec& link, double sentAt, uint64_t bytes) = 0;
};

struct LinkModelInfo {
  const char* name;
  const char* summary;  // one line: what it models
  std::unique_ptr<LinkModel> (*make)();
  // The sender paces in user space: it waits while the link's backlog exceeds its queue limit.
  bool pacesAtSender = true;
  bool kernelBackends = true;  // runs on tc / tc-dev (the kernel shapes the rate)
  bool modelsVariation =
      true;                 // bills jitter, loss and bandwidth traces (else: rate and latency only)
  bool modelsLoss = false;  // without modelsVariation: bills the links' (packet) loss all the same
  // The sender stamps every message's arrival (else the receiver bills it: serial_fifo). Access
  // links (network.nodes) need it: the sender books the path's uplink, core and downlink.
  bool stampsAtSender = true;
  // Only the simulator runs it (a run refuses it), and it builds its network from network.nodes.
  bool simulatorOnly = false;
  bool buildsFromNodes = false;
  // The settings it reads from a run's network section (the tcp model: network.tcp), validated
  // where the model runs them (backend user, or the simulator); throws std::invalid_argument
  // naming "<where>.<field>". Null: it reads none.
  void (*checkSettings)(const nlohmann::json& network, const std::string& where) = nullptr;
};

// Every registered model, in registration order; "pipelined, serial_fifo, ...".
const std::vector<LinkModelInfo>& linkModels();
std::string linkModelNames();
// Throws std::invalid_argument naming the registered ones.
const LinkModelInfo& linkModel(const std::string& name);

}  // namespace slowpipe::emulator
