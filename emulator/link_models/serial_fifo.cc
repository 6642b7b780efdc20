// serial_fifo: one inbound wire per receiving rank, shared by all its inbound links (forward and
// backward traffic), billed in the receiver's retrieval order: start = max(previous arrival,
// sent), arrival = start + 8B/R + latency, R and latency those of the link the message came over
// (Protocol NanoGPT's meter). The sender only stamps its send time.
#include "emulator/link_model.h"

#include <algorithm>

namespace slowpipe::emulator {

namespace {
class SerialFifo : public LinkModel {
 public:
  double stamp(LinkClock&, double, uint64_t) override { return -1; }
  double bill(const LinkSpec& link, double sentAt, uint64_t bytes) override {
    arrivesAt_ = std::max(arrivesAt_, sentAt) +
                 8.0 * static_cast<double>(bytes) / link.bandwidthBps + link.latencyS;
    return arrivesAt_;
  }

 private:
  double arrivesAt_ = 0;
};
}  // namespace

std::unique_ptr<LinkModel> makeSerialFifo() { return std::make_unique<SerialFifo>(); }

LinkModelInfo serialFifoModel() {
  LinkModelInfo m{"serial_fifo", "one inbound wire per receiving rank, billed in retrieval order",
                  makeSerialFifo};
  m.pacesAtSender = false;
  m.kernelBackends = false;
  m.modelsVariation = false;
  m.modelsLoss = false;
  m.stampsAtSender = false;
  return m;
}

}  // namespace slowpipe::emulator
