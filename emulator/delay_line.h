// The delay line: a packet-level link between two network namespaces that needs no netem, built as
// Mahimahi's shells are (mm-delay, mm-link, mm-loss): each namespace gets a TUN device, and one
// forwarding thread of this process reads what a namespace's kernel sends to the other side,
// carries it through that direction's PacketLink (emulator/packet_link.h: loss, drop-tail queue,
// rate or delivery trace, delay, jitter) and writes it into the other namespace's TUN device at its
// delivery time. Both kernels' own TCP stacks run on top, so congestion control, windows and
// retransmissions are real.
//
// Everything is named with the project prefix and this process's pid; the TUN devices are not
// persistent (they vanish with this process, whatever kills it) and the namespaces are the
// NetnsFabric's (removed on exit, on signals, and by `slowpipe emulator cleanup`). Traffic only
// ever runs between the two namespaces. Root only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "emulator/calibrate.h"
#include "emulator/netns.h"
#include "emulator/packet_link.h"
#include "emulator/park_gate.h"

namespace slowpipe::emulator {

struct DelayLineOptions {
  PacketLinkSpec aToB, bToA;  // each direction's link (their mtu sets the TUN devices' MTU)
  // A timer that fires after a long sleep wakes late (up to a few hundred microseconds here): a
  // delivery more than 200 us away is slept for until min(spinS, half the gap) before it and the
  // rest spun. 0: sleep on the timer alone (no spinning: what a run's fabric uses, its workers
  // need the cores).
  double spinS = 500e-6;
  // Interrupt moderation: while packets stream, the line wakes to deliver at most once per batchS
  // and writes everything due by then (each packet at most batchS late; a packet after a quiet
  // spell of batchS goes on time), as a NIC coalesces its interrupts. Every wake-up costs this host
  // a timer's arming (a hypervisor exit in a virtual machine) and the receiver's wake-up: at 0 (no
  // moderation, the default) both come per packet, 32-36 us of forwarding CPU a packet at 200 Mbps
  // / 25 ms here, 19-27 us at 100 us; at 1 Gbps it slows the kernel's slow start (results/README.md
  // section 14). Negative: "auto", moderationFor the shorter direction's delay. Runs:
  // network.moderation_us.
  double batchS = 0;
};

// Moderation "auto": a fiftieth of the one-way delay, at most 100 us (what real NICs' interrupt
// coalescing spans), so that no packet is held later than 2% of its delay; a 0 ms link is not
// moderated.
double moderationFor(double oneWayDelayS);

class DelayLine {
 public:
  // Creates two namespaces, a TUN device in each (a: 10.214.<k>.1, b: 10.214.<k>.2, point to
  // point), and starts forwarding. Throws (after removing what it made) if not root or if TUN is
  // missing.
  explicit DelayLine(const DelayLineOptions& opt);
  // Between two namespaces the caller made (and removes): device devA in nsA with address addrA,
  // devB in nsB with addrB, point to point.
  DelayLine(const DelayLineOptions& opt, const std::string& nsA, const std::string& nsB,
            const std::string& addrA, const std::string& addrB, const std::string& devA,
            const std::string& devB);
  ~DelayLine();
  DelayLine(const DelayLine&) = delete;
  DelayLine& operator=(const DelayLine&) = delete;

  const std::string& nsA() const { return nsA_; }
  const std::string& nsB() const { return nsB_; }
  // A constant-rate direction's new rate (a bandwidth trace's change), from any thread.
  void setRate(bool aToB, double bps);
  const std::string& addressA() const { return addrA_; }
  const std::string& addressB() const { return addrB_; }
  // Per direction: offered, delivered, lost, dropped packets, bytes, the queue's high-water mark,
  // and how late the line wrote packets into the other side (lateness_us: median, p99, max).
  nlohmann::json stats() const;
  nlohmann::json describe() const;
  // Stops forwarding and removes the devices and namespaces (also done by the destructor).
  void stop();
  // Parks the forwarding thread at the top of its loop, where it holds no lock and allocates
  // nothing, until unpark(): a fork() without exec in between copies no lock the thread held
  // (AddressSanitizer's allocator has no fork handlers: a child forked while the forwarder
  // allocated deadlocked in its first malloc, 1 run in 4 of the 1 Gbps calibration under ASan).
  void park();
  void unpark();

 private:
  void attach();   // the TUN devices, their addresses, the forwarding thread
  void forward();  // the forwarding thread's loop
  void wakeUp();   // makes the loop come round (the eventfd)

  DelayLineOptions opt_;
  std::unique_ptr<NetnsFabric> fabric_;  // the namespaces, when this line made them
  std::string nsA_, nsB_, addrA_, addrB_, devA_, devB_;
  std::atomic<double> rateAB_{-1}, rateBA_{-1};  // pending setRate (< 0: none)
  int fdA_ = -1, fdB_ = -1, wake_ = -1;          // TUN devices; an eventfd that stops the loop
  std::unique_ptr<PacketLink> ab_, ba_;
  mutable std::mutex statsMutex_;
  PacketLinkStats statsAB_, statsBA_;
  std::vector<double> lateAB_,
      lateBA_;  // seconds each packet was written after its delivery time (first 10^6)
  ThreadCpuClock forwardingCpu_;  // the forwarding thread's (under statsMutex_)
  int64_t wakeups_ =
      0;  // times the forwarding thread woke: a packet, its timer (under statsMutex_)
  std::atomic<bool> stop_{false};
  ParkGate gate_;
  std::thread thread_;
};

// A non-persistent TUN device (it vanishes with its last descriptor), created in the calling
// thread's network namespace; non-blocking, close-on-exec.
int openTunDevice(const std::string& name);

// Runs fn on a thread that has entered namespace `ns` (network namespaces are per thread) and
// waits for it; rethrows what it threw.
void inNamespace(const std::string& ns, const std::function<void()>& fn);

// An error naming what failed and errno's text ("delay line: <what>: <strerror>").
std::runtime_error delayLineError(const std::string& what);

}  // namespace slowpipe::emulator
