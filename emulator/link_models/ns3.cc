// ns3: the simulator's packet-level tier (simulator/packet_network.h): messages travel as TCP flows
// over ns-3's links, on ns-3's scheduler. It has no closed form to stamp or bill a message with, so
// this entry only names it; the simulator replays runs under it, and a backend that would stamp
// with it is refused when the spec is read.
#include <stdexcept>

#include "emulator/link_model.h"

namespace slowpipe::emulator {

namespace {
class Ns3 : public LinkModel {
 public:
  double stamp(LinkClock&, double, uint64_t) override {
    throw std::logic_error("network.model ns3 runs in the simulator only");
  }
  double bill(const LinkSpec&, double, uint64_t) override {
    throw std::logic_error("network.model ns3 runs in the simulator only");
  }
};
}  // namespace

std::unique_ptr<LinkModel> makeNs3() { return std::make_unique<Ns3>(); }

LinkModelInfo ns3Model() {
  LinkModelInfo m{
      "ns3",
      "the simulator's packet-level tier: every message a TCP flow over ns-3 links built from "
      "network.nodes (simulator only; -DSLOWPIPE_NS3=ON)",
      makeNs3};
  m.pacesAtSender = false;
  m.kernelBackends = false;
  m.modelsVariation = false;
  m.modelsLoss = false;
  m.simulatorOnly = true;
  m.buildsFromNodes = true;
  return m;
}

}  // namespace slowpipe::emulator
