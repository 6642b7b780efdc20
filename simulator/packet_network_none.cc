// The ns-3 tier's place in a build without ns-3 (-DSLOWPIPE_NS3=OFF): network.model ns3 is refused
// by name.
#include <stdexcept>

#include "simulator/packet_network.h"

namespace slowpipe::simulator {

bool haveNs3() { return false; }

std::unique_ptr<PacketNetwork> makeNs3Network(const runtime::RunSpec&, const runtime::LinkTable&) {
  throw std::invalid_argument(
      "network.model ns3: this build has no ns-3 tier; configure with -DSLOWPIPE_NS3=ON (Debian's "
      "libns3-dev)");
}

}  // namespace slowpipe::simulator
