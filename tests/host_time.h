// Host time in the timing tests. On these shared machines the hypervisor takes CPU time at will
// ("steal" in /proc/stat; 27% in one CI run); a stall only lowers a shaped rate and lengthens a
// delay. So a test checks first what no stall can produce (a rate above the configured, a delivery
// before its delay), then skips, with the figures, when a rate or delay check missed while the
// hypervisor took more than emulator::kStealNoticeable of the CPU, and only then checks it.
#pragma once

#include <gtest/gtest.h>

#include "emulator/calibrate.h"

namespace slowpipe::testsupport {

// The hypervisor's share of this machine's CPU since construction.
class StealMeter {
 public:
  double share() const { return emulator::stealShare(start_, emulator::cpuTimes()); }

 private:
  emulator::CpuTimes start_ = emulator::cpuTimes();
};

}  // namespace slowpipe::testsupport

// In a test body: skips when `missed` and `steal` passed kStealNoticeable; what follows the macro
// with << is streamed into the skip message.
#define SKIP_IF_HOST_TIME(missed, steal)                                 \
  if (!((missed) && (steal) > ::slowpipe::emulator::kStealNoticeable)) { \
  } else                                                                 \
    GTEST_SKIP() << "the hypervisor took " << 100 * (steal) << "% of this machine's CPU: "
