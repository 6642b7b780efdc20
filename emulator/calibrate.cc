// Calibration runs for the user and kernel backends (definitions in calibrate.h).
#include "emulator/calibrate.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "emulator/command.h"
#include "emulator/netns.h"
#include "emulator/shaped_socket.h"

namespace slowpipe::emulator {
namespace {

using nlohmann::json;

constexpr uint64_t kProbeBytes = 64;

struct Sample {
  double sent, delivered;
  uint64_t bytes;
};

int messagesFor(const CalibrationOptions& o) {
  if (o.messages > 0) return o.messages;
  const double perSecond = o.link.bandwidthBps / (8.0 * static_cast<double>(o.messageBytes));
  return std::clamp(static_cast<int>(2.0 * perSecond), 8, 2000);
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// maxBytes: ZMQ_MAXMSGSIZE of a socket that binds (the calibration's own messages and envelope).
void configure(zmq::socket_t& s, int64_t maxBytes = -1) {
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::rcvhwm, 0);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::maxmsgsize, maxBytes);
}

int64_t messageLimit(uint64_t messageBytes) {
  return static_cast<int64_t>(messageBytes) + (64 << 10);
}

// Receives `count` messages; after the first `bulk` ones, tells the sender (via `done`) to start
// probes.
std::vector<Sample> receiveAll(zmq::socket_t& pull, ShapedReceiver& rx, int count, int bulk,
                               const std::function<void()>& bulkDone) {
  std::vector<Sample> out;
  out.reserve(count);
  for (int i = 0; i < count; ++i) {
    auto m = rx.recv(30000);
    if (!m)
      throw std::runtime_error("calibration: no message for 30 s (received " + std::to_string(i) +
                               " of " + std::to_string(count) + ")");
    out.push_back({m->envelope.sendTime, m->deliveredAt, m->envelope.bytes});
    if (i + 1 == bulk) bulkDone();
  }
  return out;
}

void sendAll(ShapedSender& tx, uint64_t bytes, int bulk, int probes,
             const std::function<void()>& waitBulk, double rateBps) {
  std::vector<uint8_t> buf(bytes, 0x5a);
  for (int i = 0; i < bulk; ++i) tx.send(buf.data(), buf.size());
  waitBulk();
  const double spacing = std::max(1e-3, 4 * 8.0 * kProbeBytes / rateBps);
  double next = monotonicNow();
  for (int i = 0; i < probes; ++i) {
    sleepUntil(next);
    tx.send(buf.data(), kProbeBytes);
    next += spacing;
  }
}

json summarize(const CalibrationOptions& o, const std::vector<Sample>& s, int bulk) {
  const double first = s.front().delivered, last = s[bulk - 1].delivered;
  const double achieved =
      bulk > 1 ? 8.0 * static_cast<double>(o.messageBytes) * (bulk - 1) / (last - first) : NAN;
  std::vector<double> lat;
  const double rate = o.link.trace.empty() ? o.link.bandwidthBps : o.link.trace.rateAt(0);
  for (size_t i = bulk; i < s.size(); ++i)
    lat.push_back(s[i].delivered - s[i].sent - 8.0 * kProbeBytes / rate);
  json j = {{"backend", o.backend},
            {"configured_bps", o.link.bandwidthBps},
            {"achieved_bps", achieved},
            {"rate_error", achieved / o.link.bandwidthBps - 1.0},
            {"latency_configured_s", o.link.latencyS},
            {"latency_median_s", median(lat)},
            {"latency_p99_s", percentile(lat, 0.99)},
            {"latency_error_s", median(lat) - o.link.latencyS},
            {"jitter_configured_s", o.link.jitterS},
            {"message_bytes", o.messageBytes},
            {"messages", bulk},
            {"probes", static_cast<int>(lat.size())},
            {"duration_s", last - s.front().sent}};
  if (!o.link.trace.empty()) {
    // Achieved goodput within each trace segment (deliveries relative to the first send).
    json segs = json::array();
    const auto& pts = o.link.trace.points();
    const double t0 = s.front().sent;
    for (size_t k = 0; k < pts.size(); ++k) {
      const double a = pts[k].first, b = k + 1 < pts.size() ? pts[k + 1].first : INFINITY;
      std::vector<double> times;
      for (int i = 0; i < bulk; ++i)
        if (s[i].delivered - t0 >= a && s[i].delivered - t0 < b) times.push_back(s[i].delivered);
      const double bps = times.size() > 1 ? 8.0 * o.messageBytes * (times.size() - 1) /
                                                (times.back() - times.front())
                                          : NAN;
      segs.push_back({{"from_s", a},
                      {"configured_bps", pts[k].second},
                      {"achieved_bps", bps},
                      {"messages", times.size()}});
    }
    j["trace"] = o.link.trace.source;
    j["trace_segments"] = segs;
  }
  return j;
}

json calibrateUser(const CalibrationOptions& o) {
  zmq::context_t ctx(2);
  zmq::socket_t pull(ctx, zmq::socket_type::pull), push(ctx, zmq::socket_type::push);
  configure(pull, messageLimit(o.messageBytes));
  configure(push);
  pull.bind("tcp://127.0.0.1:*");
  push.connect(pull.get(zmq::sockopt::last_endpoint));
  const int bulk = messagesFor(o);
  std::atomic<bool> drained{false};
  std::vector<Sample> samples;
  std::exception_ptr err;
  std::thread receiver([&] {
    try {
      ShapedReceiver rx(pull);
      samples = receiveAll(pull, rx, bulk + o.probes, bulk, [&] { drained = true; });
    } catch (...) {
      err = std::current_exception();
      drained = true;
    }
  });
  ShapedSender tx(push, o.link, &linkModel("pipelined"));
  sendAll(
      tx, o.messageBytes, bulk, o.probes,
      [&] {
        while (!drained) std::this_thread::sleep_for(std::chrono::microseconds(200));
      },
      o.link.bandwidthBps);
  receiver.join();
  if (err) std::rethrow_exception(err);
  json j = summarize(o, samples, bulk);
  j["mechanism"] = {{"rate", "user-space (sender-side link clock)"},
                    {"delay", "user-space"},
                    {"jitter", "user-space"},
                    {"loss", "user-space retransmission delay"}};
  return j;
}

// Runs fn in a child process inside namespace ns; fn's string result comes back through a pipe.
pid_t spawnIn(const std::string& ns, const std::function<std::string()>& fn, int* readFd) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // It dies with the process that forked it: a launcher killed outright (kill -9, a crash) must
    // not leave its calibration's children running out their own timeouts, up to a minute.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // that process died before the line above
    close(fds[0]);
    std::string out;
    try {
      enterNamespace(ns);
      out = "OK" + fn();
    } catch (const std::exception& e) {
      out = std::string("ER") + e.what();
    }
    const char* p = out.data();
    size_t left = out.size();
    while (left > 0) {
      const ssize_t w = write(fds[1], p, left);
      if (w <= 0) break;
      p += w;
      left -= static_cast<size_t>(w);
    }
    _exit(0);
  }
  close(fds[1]);
  *readFd = fds[0];
  return pid;
}

// Both children's reports (receiver, sender). The first to fail, by an error or by dying, stops
// the other at once: otherwise the survivor waits out its own timeout (up to a minute) for a peer
// that is gone, or blocks for good on a send nobody takes, and the run with it.
std::pair<std::string, std::string> collectBoth(pid_t rxPid, int rxFd, pid_t txPid, int txFd) {
  struct Child {
    pid_t pid;
    int fd;
    const char* who;
    std::string out;
    bool reaped = false;
  };
  Child c[2] = {{rxPid, rxFd, "receiver", {}}, {txPid, txFd, "sender", {}}};
  auto stop = [](Child& x) {
    if (x.fd >= 0) close(x.fd);
    x.fd = -1;
    if (!x.reaped) {
      kill(x.pid, SIGKILL);
      while (waitpid(x.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      x.reaped = true;
    }
  };
  while (c[0].fd >= 0 || c[1].fd >= 0) {
    pollfd p[2];
    int at[2], n = 0;
    for (int i = 0; i < 2; ++i)
      if (c[i].fd >= 0) {
        p[n] = {c[i].fd, POLLIN, 0};
        at[n++] = i;
      }
    if (poll(p, static_cast<nfds_t>(n), -1) < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::string("calibration: poll failed: ") + std::strerror(errno);
      stop(c[0]);
      stop(c[1]);
      throw std::runtime_error(why);
    }
    for (int k = 0; k < n; ++k) {
      if (p[k].revents == 0) continue;
      Child& x = c[at[k]];
      char buf[65536];
      const ssize_t got = read(x.fd, buf, sizeof buf);
      if (got > 0) {
        x.out.append(buf, static_cast<size_t>(got));
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      close(x.fd);  // end of its report
      x.fd = -1;
      int status = 0;
      while (waitpid(x.pid, &status, 0) < 0 && errno == EINTR) {
      }
      x.reaped = true;
      if (x.out.rfind("OK", 0) != 0) {
        const std::string why =
            std::string("calibration ") + x.who + ": " +
            (x.out.size() > 2 ? x.out.substr(2)
                              : "died: " + exitStatusText(status) + " without a report");
        stop(c[0]);
        stop(c[1]);
        throw std::runtime_error(why);
      }
    }
  }
  return {c[0].out.substr(2), c[1].out.substr(2)};
}

double iperfCheck(NetnsFabric& fabric, double seconds) {
  const std::string server = fabric.address(0, 1);
  const pid_t srv = fork();
  if (srv == 0) {
    const char* argv[] = {"ip",           "netns", "exec", fabric.nsName(1).c_str(),
                          "iperf3",       "-s",    "-1",   "-B",
                          server.c_str(), "-p",    "5201", nullptr};
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execvp("ip", const_cast<char* const*>(argv));
    _exit(127);
  }
  usleep(500000);
  const CommandResult r =
      runCommand({"ip", "netns", "exec", fabric.nsName(0), "iperf3", "-c", server, "-p", "5201",
                  "-t", std::to_string(static_cast<int>(seconds)), "-J"});
  kill(srv, SIGTERM);
  waitpid(srv, nullptr, 0);
  if (r.status != 0) throw std::runtime_error("iperf3 client failed: " + r.output.substr(0, 400));
  return json::parse(r.output).at("end").at("sum_received").at("bits_per_second").get<double>();
}

// The kernel path's receiving child (in namespace 1): every message's send and delivery times as
// JSON; it tells the sender when the bulk part is in.
std::string kernelReceiver(const CalibrationOptions& o, int bulk, const std::string& dataEp,
                           const std::string& doneEp, double userLat, double userJit) {
  zmq::context_t ctx(1);
  zmq::socket_t pull(ctx, zmq::socket_type::pull), done(ctx, zmq::socket_type::push);
  configure(pull, messageLimit(o.messageBytes));
  configure(done);
  pull.bind(dataEp);
  done.connect(doneEp);
  ShapedReceiver rx(pull, userLat, userJit);
  auto s = receiveAll(pull, rx, bulk + o.probes, bulk, [&] { done.send(zmq::str_buffer("d")); });
  json arr = json::array();
  for (const auto& x : s) arr.push_back({x.sent, x.delivered, x.bytes});
  usleep(100000);
  return arr.dump();
}

// The kernel path's sending child (in namespace 0): the bulk messages, then, on the receiver's
// go-ahead, the latency probes; the kernel paces the rate.
std::string kernelSender(const CalibrationOptions& o, int bulk, const std::string& dataEp,
                         const std::string& doneEp) {
  zmq::context_t ctx(1);
  zmq::socket_t push(ctx, zmq::socket_type::push), done(ctx, zmq::socket_type::pull);
  configure(push);
  configure(done, 64);
  done.bind(doneEp);
  push.connect(dataEp);
  ShapedSender tx(push, o.link, nullptr);  // the kernel paces
  done.set(zmq::sockopt::rcvtimeo,
           60000);  // a receiver that died must not leave the sender waiting
  sendAll(
      tx, o.messageBytes, bulk, o.probes,
      [&] {
        zmq::message_t m;
        if (!done.recv(m))
          throw std::runtime_error(
              "no go-ahead from the receiver for 60 s after the bulk transfer");
      },
      o.link.bandwidthBps);
  usleep(200000);
  return std::string();
}

json calibrateKernel(const CalibrationOptions& o) {
  NetnsFabric fabric(2, {FabricEdge{0, 1, o.link, o.link}});
  const int bulk = messagesFor(o);
  const std::string dataEp = "tcp://" + fabric.address(0, 1) + ":5555";
  const std::string doneEp = "tcp://" + fabric.address(0, 0) + ":5556";
  const double userLat = fabric.userLatency(0, 0), userJit = fabric.userJitter(0, 0);
  int rxFd = -1, txFd = -1;
  pid_t rxPid = -1, txPid = -1;
  // The children are forked without exec: the delay lines' threads hold still meanwhile.
  fabric.withForwardersParked([&] {
    rxPid = spawnIn(
        fabric.nsName(1), [&] { return kernelReceiver(o, bulk, dataEp, doneEp, userLat, userJit); },
        &rxFd);
  });
  fabric.withForwardersParked([&] {
    txPid = spawnIn(
        fabric.nsName(0), [&] { return kernelSender(o, bulk, dataEp, doneEp); }, &txFd);
  });
  // Bandwidth trace: the kernel rate follows it, changed with `tc class change` at each step.
  std::atomic<bool> stop{false};
  std::thread tracer;
  if (!o.link.trace.empty()) {
    tracer = std::thread([&, t0 = monotonicNow()] {
      for (const auto& [at, bps] : o.link.trace.points()) {
        while (!stop && monotonicNow() < t0 + at) usleep(1000);
        if (stop) return;
        fabric.setRate(0, 0, bps);
      }
    });
  }
  std::pair<std::string, std::string> reports;
  try {
    reports = collectBoth(rxPid, rxFd, txPid, txFd);
  } catch (...) {
    stop = true;
    if (tracer.joinable()) tracer.join();
    throw;
  }
  stop = true;
  if (tracer.joinable()) tracer.join();
  const json arr = json::parse(reports.first);
  std::vector<Sample> samples;
  for (const auto& x : arr)
    samples.push_back({x[0].get<double>(), x[1].get<double>(), x[2].get<uint64_t>()});
  json j = summarize(o, samples, bulk);
  j["mechanism"] = fabric.mechanism();
  j["kernel_rate_bps"] = wireRateFor(o.link.bandwidthBps, 9000);
  if (o.iperf) {
    const double bps = iperfCheck(fabric, 3);
    j["iperf3_bps"] = bps;
    j["iperf3_rate_error"] = bps / o.link.bandwidthBps - 1.0;
  }
  return j;
}

// The kernel path at a WAN delay: one TCP connection's short bulk transfer is bound by its slow
// start and window (4 MiB a round trip), not by the link, so the rate is measured with the delay
// and jitter set to 0 and the delay with the probes over the link as configured.
json calibrateKernelPath(const CalibrationOptions& o) {
  if (o.link.latencyS == 0 && o.link.jitterS == 0) return calibrateKernel(o);
  CalibrationOptions delay = o;
  delay.messages = 2;
  delay.iperf = false;
  json j = calibrateKernel(delay);
  CalibrationOptions rate = o;
  rate.link.latencyS = rate.link.jitterS = 0;
  rate.probes = 1;
  const json r = calibrateKernel(rate);
  for (const char* k : {"achieved_bps", "rate_error", "messages", "duration_s", "iperf3_bps",
                        "iperf3_rate_error", "trace_segments"})
    if (r.contains(k)) j[k] = r[k];
  j["rate_measured_with"] =
      "delay 0: over the configured round trip one TCP connection is bound by its window, not the "
      "link";
  return j;
}

}  // namespace

json forwardingCost(const ThreadCpuClock& clock, int64_t wakeups) {
  json cpu = clock.read();
  if (cpu.is_null()) return cpu;
  cpu["wakeups"] = wakeups;
  if (cpu["wall_s"].get<double>() > 0)
    cpu["wakeups_per_s"] = static_cast<double>(wakeups) / cpu["wall_s"].get<double>();
  return cpu;
}

double loopbackCeilingBps(uint64_t messageBytes, int messages) {
  zmq::context_t ctx(2);
  zmq::socket_t pull(ctx, zmq::socket_type::pull), push(ctx, zmq::socket_type::push);
  configure(pull, messageLimit(messageBytes));
  configure(push);
  pull.bind("tcp://127.0.0.1:*");
  push.connect(pull.get(zmq::sockopt::last_endpoint));
  double first = 0, last = 0;
  std::thread receiver([&] {
    for (int i = 0; i < messages; ++i) {
      zmq::message_t m;
      (void)pull.recv(m);
      (i == 0 ? first : last) = monotonicNow();
    }
  });
  std::vector<uint8_t> buf(messageBytes, 1);
  for (int i = 0; i < messages; ++i)
    push.send(zmq::message_t(buf.data(), buf.size()), zmq::send_flags::none);
  receiver.join();
  return 8.0 * static_cast<double>(messageBytes) * (messages - 1) / (last - first);
}

CpuTimes cpuTimes() {
  CpuTimes t;
  std::ifstream in("/proc/stat");
  std::string cpu;
  in >> cpu;
  if (cpu != "cpu") return t;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  // user nice system idle iowait irq softirq steal (guest time is counted in user already)
  for (int k = 0; k < 8; ++k) {
    double v = 0;
    if (!(in >> v)) return CpuTimes{};
    t.total += v / tick;
    if (k == 7) t.steal = v / tick;
  }
  return t;
}

namespace {
double seconds(const timespec& t) {
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}
}  // namespace

void ThreadCpuClock::start() {
  startedAt_ = monotonicNow();
  thread_ = static_cast<unsigned long>(pthread_self());
  running_ = true;
}

void ThreadCpuClock::end() {
  timespec t{};
  cpuS_ = clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) == 0 ? seconds(t) : -1;
  endedAt_ = monotonicNow();
  running_ = false;
}

json ThreadCpuClock::read() const {
  double cpu = cpuS_, wall = endedAt_ - startedAt_;
  if (running_) {
    clockid_t clock;
    timespec t{};
    const bool ok = pthread_getcpuclockid(static_cast<pthread_t>(thread_), &clock) == 0 &&
                    clock_gettime(clock, &t) == 0;
    cpu = ok ? seconds(t) : -1;
    wall = monotonicNow() - startedAt_;
  }
  if (startedAt_ < 0 || cpu < 0 || wall <= 0) return nullptr;
  return {{"cpu_s", cpu}, {"wall_s", wall}, {"cpu_share", cpu / wall}};
}

double stealShare(const CpuTimes& from, const CpuTimes& to) {
  const double total = to.total - from.total;
  return total > 0 ? (to.steal - from.steal) / total : 0.0;
}

json calibrateLink(const CalibrationOptions& o) {
  if (o.messageBytes < kProbeBytes)
    throw std::invalid_argument("--message-bytes " + std::to_string(o.messageBytes) +
                                ": expected >= 64");
  if (o.backend != "user" && o.backend != "tc")
    throw std::invalid_argument("--backend '" + o.backend + "': expected 'user' or 'tc'");
  const CpuTimes before = cpuTimes();
  json j = o.backend == "user" ? calibrateUser(o) : calibrateKernelPath(o);
  const CpuTimes after = cpuTimes();
  if (after.total > before.total) j["host_cpu_steal"] = stealShare(before, after);
  return j;
}

}  // namespace slowpipe::emulator
