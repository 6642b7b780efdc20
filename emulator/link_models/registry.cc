// The registered link models (emulator/link_model.h): one file each, one line here.
#include <stdexcept>

#include "emulator/link_model.h"

namespace slowpipe::emulator {

std::unique_ptr<LinkModel> makePipelined();
std::unique_ptr<LinkModel> makeSerialFifo();
std::unique_ptr<LinkModel> makeTcp();
std::unique_ptr<LinkModel> makeNs3();

const std::vector<LinkModelInfo>& linkModels() {
  static const std::vector<LinkModelInfo> models = {
      {"pipelined",
       "every directed link its own pipe (rate or trace, latency, jitter), billed by the sender",
       makePipelined, true, true, true},
      {"serial_fifo", "one inbound wire per receiving rank, billed in retrieval order",
       makeSerialFifo, false, false, false, false, false},
      {"tcp",
       "every directed link one TCP connection, ACK-clocked: slow start, Reno / CUBIC / BBR, "
       "packet loss, the "
       "send buffer and the receive window's ceiling, restart after idle (Linux's defaults unless "
       "network.tcp says)",
       makeTcp, true, false, false, true},
      {"ns3",
       "the simulator's packet-level tier: every message a TCP flow over ns-3 links built from "
       "network.nodes "
       "(simulator only; -DSLOWPIPE_NS3=ON)",
       makeNs3, false, false, false, false, true},
  };
  return models;
}

std::string linkModelNames() {
  std::string s;
  for (const auto& m : linkModels()) s += (s.empty() ? "" : ", ") + std::string(m.name);
  return s;
}

const LinkModelInfo& linkModel(const std::string& name) {
  for (const auto& m : linkModels())
    if (name == m.name) return m;
  throw std::invalid_argument("'" + name + "' is not a link model; expected one of " +
                              linkModelNames());
}

}  // namespace slowpipe::emulator
