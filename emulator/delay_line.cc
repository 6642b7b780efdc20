// The delay line (see delay_line.h).
#include "emulator/delay_line.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "emulator/calibrate.h"
#include "emulator/command.h"
#include "emulator/link.h"
#include "emulator/link_model.h"
#include "emulator/shaped_socket.h"
#include "emulator/tcp_settings.h"

namespace slowpipe::emulator {

using nlohmann::json;

namespace {

std::atomic<int> gLineSeq{0};

}  // namespace

std::runtime_error delayLineError(const std::string& what) {
  return std::runtime_error("delay line: " + what + ": " + std::strerror(errno));
}

int openTunDevice(const std::string& name) {
  const int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw delayLineError("open /dev/net/tun (is the tun module available?)");
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
    const auto e = delayLineError("create TUN device " + name);
    close(fd);
    throw e;
  }
  return fd;
}

void inNamespace(const std::string& ns, const std::function<void()>& fn) {
  std::exception_ptr error;
  std::thread t([&] {
    try {
      const int fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) throw delayLineError("open namespace " + ns);
      const int rc = setns(fd, CLONE_NEWNET);
      close(fd);
      if (rc != 0) throw delayLineError("enter namespace " + ns);
      fn();
    } catch (...) {
      error = std::current_exception();
    }
  });
  t.join();
  if (error) std::rethrow_exception(error);
}

DelayLine::DelayLine(const DelayLineOptions& opt) : opt_(opt) {
  const int k = gLineSeq.fetch_add(1) % 250;
  const int mtu = std::max(opt_.aToB.mtu, opt_.bToA.mtu);
  fabric_ =
      std::make_unique<NetnsFabric>(2, std::vector<FabricEdge>{}, mtu);  // namespaces only, no veth
  nsA_ = fabric_->nsName(0);
  nsB_ = fabric_->nsName(1);
  addrA_ = "10.214." + std::to_string(k) + ".1";
  addrB_ = "10.214." + std::to_string(k) + ".2";
  const std::string base = "sp" + std::to_string(getpid() % 10000000) + "t" + std::to_string(k);
  devA_ = base + "a";
  devB_ = base + "b";
  attach();
}

DelayLine::DelayLine(const DelayLineOptions& opt, const std::string& nsA, const std::string& nsB,
                     const std::string& addrA, const std::string& addrB, const std::string& devA,
                     const std::string& devB)
    : opt_(opt), nsA_(nsA), nsB_(nsB), addrA_(addrA), addrB_(addrB), devA_(devA), devB_(devB) {
  attach();
}

void DelayLine::attach() {
  if (opt_.batchS < 0)
    opt_.batchS = moderationFor(std::min(opt_.aToB.delayS, opt_.bToA.delayS));  // "auto"
  const int mtu = std::max(opt_.aToB.mtu, opt_.bToA.mtu);
  try {
    inNamespace(nsA_, [&] { fdA_ = openTunDevice(devA_); });
    inNamespace(nsB_, [&] { fdB_ = openTunDevice(devB_); });
    for (const auto& [ns, dev, me, peer] :
         {std::tuple{nsA_, devA_, addrA_, addrB_}, std::tuple{nsB_, devB_, addrB_, addrA_}}) {
      runChecked({"ip", "-n", ns, "addr", "add", me, "peer", peer, "dev", dev},
                 "address the TUN device");
      // A long transmit queue: the line's own queue is the bottleneck's, never the device's (its
      // default 500 packets dropped a cubic window's bursts before the line had read them).
      runChecked({"ip", "-n", ns, "link", "set", "dev", dev, "mtu", std::to_string(mtu),
                  "txqueuelen", "100000", "up"},
                 "bring up the TUN device");
    }
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_ < 0) throw delayLineError("eventfd");
  } catch (...) {
    stop();
    throw;
  }
  ab_ = std::make_unique<PacketLink>(opt_.aToB);
  ba_ = std::make_unique<PacketLink>(opt_.bToA);
  thread_ = std::thread([this] { forward(); });
}

void DelayLine::setRate(bool aToB, double bps) {
  (aToB ? rateAB_ : rateBA_) = bps;
  const uint64_t one = 1;
  (void)!write(wake_, &one, sizeof one);
}

DelayLine::~DelayLine() { stop(); }

void DelayLine::park() {
  if (thread_.joinable()) gate_.park([this] { wakeUp(); }, stop_);
}

void DelayLine::unpark() { gate_.unpark(); }

void DelayLine::wakeUp() {
  const uint64_t one = 1;
  (void)!write(wake_, &one, sizeof one);
}

void DelayLine::stop() {
  if (thread_.joinable()) {
    stop_ = true;
    gate_.release();
    wakeUp();
    thread_.join();
  }
  for (int* fd : {&fdA_, &fdB_, &wake_})
    if (*fd >= 0) {
      close(*fd);
      *fd = -1;
    }
  if (fabric_) fabric_->destroy();
}

json DelayLine::stats() const {
  std::lock_guard<std::mutex> lock(statsMutex_);
  json out = {{"a_to_b", toJson(statsAB_)}, {"b_to_a", toJson(statsBA_)}};
  // What forwarding cost this machine (the workers of a run share the cores with it), so far.
  if (json cpu = forwardingCost(forwardingCpu_, wakeups_); !cpu.is_null())
    out["forwarding"] = std::move(cpu);
  for (const auto& [key, late] : {std::pair{"a_to_b", &lateAB_}, std::pair{"b_to_a", &lateBA_}}) {
    if (late->empty()) continue;  // (known once forwarding has stopped)
    std::vector<double> v = *late;
    std::sort(v.begin(), v.end());
    out[key]["lateness_us"] = {{"median", 1e6 * v[v.size() / 2]},
                               {"p99", 1e6 * v[std::min(v.size() - 1, v.size() * 99 / 100)]},
                               {"max", 1e6 * v.back()},
                               {"packets", v.size()}};
  }
  return out;
}

json DelayLine::describe() const {
  return {{"mechanism",
           "delay line: TUN device per namespace, one forwarding thread in user space (no netem)"},
          {"a_to_b", opt_.aToB.describe()},
          {"b_to_a", opt_.bToA.describe()},
          {"a", addrA_},
          {"b", addrB_},
          {"moderation_us", 1e6 * opt_.batchS}};
}

double moderationFor(double oneWayDelayS) { return std::clamp(oneWayDelayS / 50, 0.0, 100e-6); }

namespace {

// What the forwarding thread holds: the packets inside the links (by id), the start of its clock,
// how late each write began.
struct Forwarder {
  struct Side {
    int in, out;
    PacketLink* link;
    std::vector<double>* late;
  };
  Side sides[2];
  double start = hostClockNow();
  std::unordered_map<uint64_t, std::vector<uint8_t>> held;
  uint64_t nextId = 0;
  std::vector<uint8_t> buf = std::vector<uint8_t>(65536);
  std::vector<double> due;

  double now() const { return hostClockNow() - start; }
  double next() const { return std::min(sides[0].link->nextEvent(), sides[1].link->nextEvent()); }
  // Offers everything the kernels have sent to their directions' links.
  void readAll() {
    for (const Side& s : sides)
      for (ssize_t n; (n = read(s.in, buf.data(), buf.size())) > 0;) {
        const uint64_t id = nextId++;
        if (s.link->offer(now(), static_cast<uint32_t>(n), id))
          held.emplace(id, std::vector<uint8_t>(buf.begin(), buf.begin() + n));
      }
  }
  // Writes what is due into the other side (a full receiver queue drops it, as a NIC would).
  void deliverDue() {
    const double t = now();
    for (const Side& s : sides) {
      due.clear();
      const std::vector<uint64_t> ids = s.link->pop(t, &due);
      for (size_t k = 0; k < ids.size(); ++k) {
        auto it = held.find(ids[k]);
        if (s.late->size() < 1000000) s.late->push_back(now() - due[k]);  // when its write begins
        (void)!write(s.out, it->second.data(), it->second.size());
        held.erase(it);
      }
    }
  }
};

}  // namespace

// Reads what each side's kernel sends, offers it to that direction's link, writes what is due
// into the other side, and sleeps on a timer until the next delivery (timer slack 1 ns). A timer
// that fires after a long sleep wakes late (up to a few hundred microseconds here, the CPU idle):
// a gap of more than 200 us is slept until min(spinS, half the gap) before the event and the rest
// spun (polling the devices), so deliveries keep their time; shorter gaps sleep on the timer alone.
void DelayLine::forward() {
  {
    std::lock_guard<std::mutex> lock(statsMutex_);
    forwardingCpu_.start();
  }
  prctl(PR_SET_TIMERSLACK, 1UL);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  const int timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  for (int fd : {fdA_, fdB_, wake_, timer}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  }
  std::vector<double> lateAB, lateBA;
  Forwarder f;
  f.sides[0] = {fdA_, fdB_, ab_.get(), &lateAB};
  f.sides[1] = {fdB_, fdA_, ba_.get(), &lateBA};
  constexpr double kLongS = 200e-6;
  double lastTimedWake = -1;  // the forwarder's clock
  int64_t wakes = 0;
  while (!stop_) {
    gate_.checkpoint(stop_);  // park(): held still (no lock held, nothing allocated) around a fork
    for (auto [pending, link] : {std::pair{&rateAB_, ab_.get()}, std::pair{&rateBA_, ba_.get()}})
      if (const double r = pending->exchange(-1); r >= 0) link->setRate(f.now(), r);
    f.readAll();
    f.deliverDue();
    {
      std::lock_guard<std::mutex> lock(statsMutex_);
      statsAB_ = ab_->stats();
      statsBA_ = ba_->stats();
      wakeups_ = wakes;
    }
    const double nextDue = f.next(), gap = nextDue - f.now();
    if (gap <= 0) continue;
    const bool spin = std::isfinite(nextDue) && gap > kLongS && opt_.spinS > 0;
    itimerspec its{};
    if (std::isfinite(nextDue)) {
      const double wake = std::max(nextDue - (spin ? std::min(opt_.spinS, gap / 2) : 0.0),
                                   lastTimedWake + opt_.batchS);
      const double at = f.start + std::max(wake, 0.0) + 1e-9;
      its.it_value.tv_sec = static_cast<time_t>(at);
      its.it_value.tv_nsec = static_cast<long>((at - std::floor(at)) * 1e9);
    }
    timerfd_settime(timer, TFD_TIMER_ABSTIME, &its, nullptr);  // zero: disarmed
    epoll_event evs[4];
    const int n = epoll_wait(ep, evs, 4, -1);
    wakes += n > 0;
    bool timed = false;
    for (int i = 0; i < n; ++i)
      if (evs[i].data.fd == timer || evs[i].data.fd == wake_) {
        uint64_t count;
        (void)!read(evs[i].data.fd, &count, sizeof count);
        timed |= evs[i].data.fd == timer;
      }
    if (timed) lastTimedWake = f.now();
    if (spin && timed)
      while (!stop_ && f.now() < f.next()) f.readAll();
  }
  close(timer);
  close(ep);
  std::lock_guard<std::mutex> lock(statsMutex_);
  lateAB_ = std::move(lateAB);
  lateBA_ = std::move(lateBA);
  forwardingCpu_.end();
}

}  // namespace slowpipe::emulator
