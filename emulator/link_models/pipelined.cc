// pipelined: every directed link is its own pipe. The sender's link clock bills each message
// (serialised at the link's rate or trace after the previous one on that link, plus latency and
// jitter); links do not share anything.
#include "emulator/link_model.h"

namespace slowpipe::emulator {

namespace {
class Pipelined : public LinkModel {
 public:
  double stamp(LinkClock& clock, double sentAt, uint64_t bytes) override {
    return clock.send(sentAt, bytes);
  }
  double bill(const LinkSpec&, double sentAt, uint64_t) override {
    return sentAt;
  }  // never unstamped
};
}  // namespace

std::unique_ptr<LinkModel> makePipelined() { return std::make_unique<Pipelined>(); }

LinkModelInfo pipelinedModel() {
  LinkModelInfo m{
      "pipelined",
      "every directed link its own pipe (rate or trace, latency, jitter), billed by the sender",
      makePipelined};
  return m;
}

}  // namespace slowpipe::emulator
