// Measurements through a delay line (see delay_line_probes.h).
#include "emulator/delay_line_probes.h"

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

constexpr int kEchoPort = 9;

// A socket of `type` (SOCK_DGRAM, SOCK_STREAM) bound (bind = true) or connected to ip:port,
// after `prepare` (socket options that must precede it); throws naming what failed.
int ipv4Socket(int type, const std::string& ip, int port, bool bindIt,
               const std::function<void(int)>& prepare = {}) {
  const int s = socket(AF_INET, type | SOCK_CLOEXEC, 0);
  if (s < 0) throw delayLineError("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  try {
    if (prepare) prepare(s);
    const int rc = bindIt ? bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a)
                          : connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    if (rc != 0)
      throw delayLineError(std::string(bindIt ? "bind" : "connect") + " a socket to " + ip + ":" +
                           std::to_string(port));
  } catch (...) {
    close(s);
    throw;
  }
  return s;
}
int udpSocket(const std::string& ip, int port, bool bindIt) {
  return ipv4Socket(SOCK_DGRAM, ip, port, bindIt);
}

// Round trips of UDP probes a -> b -> a (an echo in b's namespace), one every gapS.
json roundTrips(const DelayLine& line, const DelayLineOptions& lineOpt,
                const DelayLineProbe& probe) {
  std::atomic<bool> done{false};
  std::exception_ptr echoError;
  std::thread echo([&] {
    try {
      inNamespace(line.nsB(), [&] {
        const int s = udpSocket(line.addressB(), kEchoPort, true);
        timeval tv{0, 100000};
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char b[2048];
        while (!done) {
          sockaddr_in from{};
          socklen_t len = sizeof from;
          const ssize_t n = recvfrom(s, b, sizeof b, 0, reinterpret_cast<sockaddr*>(&from), &len);
          if (n > 0)
            sendto(s, b, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), len);
        }
        close(s);
      });
    } catch (...) {
      echoError = std::current_exception();
    }
  });
  std::vector<double> rtt;
  int lost = 0;
  std::exception_ptr probeError;
  try {
    inNamespace(line.nsA(), [&] {
      const int s = udpSocket(line.addressB(), kEchoPort, false);
      const double timeout = 1.0 + 4 * (lineOpt.aToB.delayS + lineOpt.bToA.delayS);
      timeval tv{static_cast<time_t>(timeout),
                 static_cast<suseconds_t>((timeout - std::floor(timeout)) * 1e6)};
      setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      std::vector<char> msg(static_cast<size_t>(std::max(16, probe.probeBytes)), 0);
      for (int i = 0; i < probe.probes; ++i) {
        std::memcpy(msg.data(), &i, sizeof i);
        const double t0 = hostClockNow();
        if (send(s, msg.data(), msg.size(), 0) < 0) throw delayLineError("send a probe");
        char back[2048];
        bool got = false;
        for (ssize_t n; !got && (n = recv(s, back, sizeof back, 0)) >=
                                    0;) {  // a late answer to an earlier probe is skipped
          int k = -1;
          std::memcpy(&k, back, sizeof k);
          got = k == i;
        }
        if (got)
          rtt.push_back(hostClockNow() - t0);
        else
          ++lost;
        const double wait = t0 + probe.gapS - hostClockNow();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      }
      close(s);
    });
  } catch (...) {
    probeError = std::current_exception();
  }
  done = true;
  echo.join();
  if (probeError) std::rethrow_exception(probeError);
  if (echoError) std::rethrow_exception(echoError);
  if (rtt.empty()) return json();
  std::sort(rtt.begin(), rtt.end());
  double mean = 0;
  for (double x : rtt) mean += x / static_cast<double>(rtt.size());
  return {{"min", rtt.front()},
          {"median", rtt[rtt.size() / 2]},
          {"p99", rtt[std::min(rtt.size() - 1, rtt.size() * 99 / 100)]},
          {"max", rtt.back()},
          {"mean", mean},
          {"probes", rtt.size()},
          {"lost", lost}};
}

// One iperf3 TCP stream a -> b; its goodput, the second half's median, retransmits, and the line
// rate it drew (goodput x mtu / (mtu - 52): IP, TCP and timestamp headers).
json iperfThrough(const DelayLine& line, const DelayLineOptions& lineOpt,
                  const DelayLineProbe& probe) {
  const std::string port = "5201";
  std::thread server([&] {
    runCommand({"ip", "netns", "exec", line.nsB(), "iperf3", "-s", "-1", "-B", line.addressB(),
                "-p", port});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::vector<std::string> client = {"ip",
                                     "netns",
                                     "exec",
                                     line.nsA(),
                                     "iperf3",
                                     "-c",
                                     line.addressB(),
                                     "-p",
                                     port,
                                     "-t",
                                     std::to_string(probe.iperfS),
                                     "-J"};
  if (!probe.cc.empty()) client.insert(client.end(), {"-C", probe.cc});
  const CommandResult r = runCommand(client);
  server.join();
  try {
    const json j = json::parse(r.output);
    if (j.contains("error")) throw std::runtime_error(j["error"].get<std::string>());
    std::vector<double> late;  // the second half's per-second intervals: past the slow start
    const json& iv = j.value("intervals", json::array());
    for (size_t k = iv.size() / 2; k < iv.size(); ++k)
      late.push_back(iv[k]["sum"]["bits_per_second"].get<double>());
    std::sort(late.begin(), late.end());
    const double goodput = j["end"]["sum_received"]["bits_per_second"].get<double>();
    const int mtu = lineOpt.aToB.mtu;
    return {{"seconds", probe.iperfS},
            {"bits_per_second", goodput},
            {"second_half_median_bps", late.empty() ? json() : json(late[late.size() / 2])},
            {"retransmits", j["end"]["sum_sent"].value("retransmits", 0)},
            {"congestion", j["end"].value("sender_tcp_congestion", probe.cc)},
            {"line_rate_bps", goodput * mtu / (mtu - 52.0)}};
  } catch (const std::exception& e) {
    throw std::runtime_error("delay line: iperf3 through the line failed (status " +
                             std::to_string(r.status) + "): " + e.what() +
                             "; output: " + r.output.substr(0, 400));
  }
}

}  // namespace

namespace {

constexpr int kMessagePort = 5301;

// Waits (poll) until one of `fds` can do `events`; throws naming `what` after 300 s.
void awaitAny(std::vector<pollfd>& fds, short events, const std::string& what) {
  for (auto& p : fds) p.events = p.fd >= 0 ? events : 0, p.revents = 0;
  const int n = poll(fds.data(), fds.size(), 300000);
  if (n < 0 && errno != EINTR) throw delayLineError("poll while " + what);
  if (n == 0) throw std::runtime_error("delay line: nothing moved for 300 s while " + what);
}

// b's side: accepts probe.streams connections and reads the messages whole (each its stripe on
// every connection), each one's end time in done[k] before `received` counts it.
void receiveMessages(const DelayLine& line, const MessageProbe& probe, std::vector<double>& done,
                     std::atomic<size_t>& received, std::atomic<bool>& listening) {
  const int l = ipv4Socket(SOCK_STREAM, line.addressB(), kMessagePort, true, [](int fd) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  });
  timeval tv{30, 0};  // a client that failed never connects: the accept gives up
  setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (listen(l, probe.streams) != 0) {
    close(l);
    throw delayLineError("listen in b");
  }
  listening = true;
  std::vector<pollfd> conns;
  auto closeAll = [&] {
    for (auto& p : conns) close(p.fd);
  };
  for (int c = 0; c < probe.streams; ++c) {
    // One connection reads blocking, as it always did; several are polled.
    const int fd =
        accept4(l, nullptr, nullptr, (probe.streams > 1 ? SOCK_NONBLOCK : 0) | SOCK_CLOEXEC);
    if (fd < 0) {
      close(l);
      closeAll();
      throw delayLineError("accept connection " + std::to_string(c) + " in b");
    }
    timeval rt{300, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rt, sizeof rt);
    conns.push_back({fd, 0, 0});
  }
  close(l);
  std::vector<char> buf(1 << 20);
  try {
    for (size_t k = 0; k < probe.bytes.size(); ++k) {
      std::vector<uint64_t> left(conns.size());
      uint64_t total = 0;
      for (size_t c = 0; c < conns.size(); ++c)
        total += left[c] = stripeOf(probe.bytes[k], probe.streams, c).bytes;
      while (total > 0) {
        // Several connections: read those poll says are readable. One: read it (blocking), as if
        // poll had said so; its EAGAIN is SO_RCVTIMEO's 300 s running out.
        const bool polled = conns.size() > 1;
        std::vector<pollfd> waiting;
        for (size_t c = 0; c < conns.size(); ++c)
          waiting.push_back({left[c] ? conns[c].fd : -1, 0, POLLIN});
        if (polled) awaitAny(waiting, POLLIN, "receiving message " + std::to_string(k));
        for (size_t c = 0; c < conns.size(); ++c) {
          if (!waiting[c].revents) continue;
          const ssize_t n =
              recv(conns[c].fd, buf.data(), std::min<uint64_t>(buf.size(), left[c]), 0);
          if (n == 0 || (n < 0 && errno != EINTR && !(polled && errno == EAGAIN)))
            throw delayLineError("receive message " + std::to_string(k));
          if (n > 0) left[c] -= static_cast<uint64_t>(n), total -= static_cast<uint64_t>(n);
        }
      }
      done[k] = hostClockNow();
      received = k + 1;
    }
  } catch (...) {
    closeAll();
    throw;
  }
  closeAll();
}

// Samples [host time, cwnd, packets unacked, bytes acked, bytes sent, bytes not sent, send buffer,
// send window, pacing rate] of connection `fd` every `everyS` while `on`.
constexpr const char* kTraceColumns[] = {"cwnd",       "unacked",        "bytes_acked",
                                         "bytes_sent", "notsent_bytes",  "sndbuf",
                                         "snd_wnd",    "pacing_rate_bps"};
void traceConnection(int fd, double everyS, const std::atomic<bool>& on, json& trace) {
  trace = json::array();
  while (on) {
    const json i = socketTcpInfo(fd);
    json row = {hostClockNow()};
    for (const char* c : kTraceColumns) row.push_back(i[c]);
    trace.push_back(std::move(row));
    std::this_thread::sleep_for(std::chrono::duration<double>(everyS));
  }
}

// Writes all of `bytes` to blocking socket `fd` from `payload` (repeated); throws naming message k
// (a peer that closed gives an error, not SIGPIPE).
void sendAll(int fd, uint64_t bytes, const std::vector<char>& payload, size_t k) {
  for (uint64_t put = 0; put < bytes;) {
    const ssize_t n =
        send(fd, payload.data(), std::min<uint64_t>(payload.size(), bytes - put), MSG_NOSIGNAL);
    if (n <= 0) throw delayLineError("send message " + std::to_string(k));
    put += static_cast<uint64_t>(n);
  }
}

// a's probe.streams connections to b, their congestion control set before connecting; none left
// open when one fails.
std::vector<int> openStreams(const DelayLine& line, const MessageProbe& probe) {
  std::vector<int> fds;
  try {
    for (int c = 0; c < probe.streams; ++c)
      fds.push_back(ipv4Socket(SOCK_STREAM, line.addressB(), kMessagePort, false, [&](int fd) {
        if (!probe.cc.empty() &&
            setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, probe.cc.data(), probe.cc.size()) != 0)
          throw delayLineError("congestion control '" + probe.cc + "'");
      }));
  } catch (...) {
    for (int fd : fds) close(fd);
    throw;
  }
  return fds;
}

// a's side: probe.streams connections (their congestion control set first); each message after
// its idle time, cut into one stripe per connection as the runtime's channel cuts a frame
// (stripeOf), all written at once (blocking writes: connection 0's by this thread, the others' by
// one thread each), the next only once b has read the last one whole. Connection 0's TCP_INFO is
// read before each message and once after the last (info: one more entry than messages); with
// several, every connection's after the last.
void sendMessages(const DelayLine& line, const MessageProbe& probe, std::vector<double>& sent,
                  std::vector<json>& info, json& trace, json& connections,
                  const std::atomic<size_t>& received, const std::atomic<bool>& failed) {
  const std::vector<int> fds = openStreams(line, probe);
  const std::vector<char> payload(1 << 20, 'x');
  std::atomic<bool> sending{true};
  std::mutex mu;
  std::condition_variable cv;
  size_t go = 0;  // messages released to the stripe writers
  std::exception_ptr writerError;
  std::vector<std::thread> writers;
  for (int c = 1; c < probe.streams; ++c)
    writers.emplace_back([&, c] {
      for (size_t k = 0; k < probe.bytes.size(); ++k) {
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return go > k || !sending; });
          if (go <= k) return;
        }
        try {
          sendAll(fds[c], stripeOf(probe.bytes[k], probe.streams, c).bytes, payload, k);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!writerError) writerError = std::current_exception();
          return;
        }
      }
    });
  std::thread tracer;
  if (probe.traceS > 0)
    tracer = std::thread([&] { traceConnection(fds[0], probe.traceS, sending, trace); });
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      sending = false;
    }
    cv.notify_all();
    for (auto& w : writers) w.join();
    if (tracer.joinable()) tracer.join();
    for (int fd : fds) close(fd);
  };
  try {
    for (size_t k = 0; k < probe.bytes.size(); ++k) {
      std::this_thread::sleep_for(std::chrono::duration<double>(probe.idleS[k]));
      info.push_back(socketTcpInfo(fds[0]));
      sent[k] = hostClockNow();
      {
        std::lock_guard<std::mutex> lock(mu);
        go = k + 1;
      }
      cv.notify_all();
      sendAll(fds[0], stripeOf(probe.bytes[k], probe.streams, 0).bytes, payload, k);
      while (received <= k && !failed) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (writerError) std::rethrow_exception(writerError);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    info.push_back(socketTcpInfo(fds[0]));
    if (fds.size() > 1)
      for (int fd : fds)
        connections.push_back(socketTcpInfo(fd));  // every stripe's connection at the end
  } catch (...) {
    finish();
    throw;
  }
  finish();
}

// What the sender's TCP_INFO says of one message: the window it started with and what held it back.
json kernelDuring(const json& before, const json& after) {
  auto grew = [&](const char* k) { return after[k].get<double>() - before[k].get<double>(); };
  return {{"cwnd_before", before["cwnd"]},
          {"ssthresh_before", before["ssthresh"]},
          {"snd_wnd_before", before["snd_wnd"]},
          {"rto_before_s", before["rto_s"]},
          {"sndbuf_before", before["sndbuf"]},
          {"pacing_rate_before_bps", before["pacing_rate_bps"]},
          {"min_rtt_before_s", before["min_rtt_s"]},
          {"cwnd_after", after["cwnd"]},
          {"retrans", grew("total_retrans")},
          {"busy_s", grew("busy_s")},
          {"rwnd_limited_s", grew("rwnd_limited_s")},
          {"sndbuf_limited_s", grew("sndbuf_limited_s")}};
}

}  // namespace

void billTcpModel(json& run) {
  const int mtu = run.at("mtu").get<int>();
  LinkSpec l;
  l.bandwidthBps = run.at("rate_bps").get<double>() * (mtu - 52.0) / mtu;  // the line's goodput
  l.latencyS = run.at("delay_s").get<double>();
  l.mtu = mtu;
  l.loss = run.at("loss").get<double>();
  l.tcp.congestionControl = run.at("cc").get<std::string>();
  if (run.contains("tcp")) {  // the buffers' maxima the run set (absent: the kernel's defaults)
    const TcpSettings t = tcpSettingsFromJson(run["tcp"], "tcp");
    l.tcp.wmemMax = t.wmemMax;
    l.tcp.rmemMax = t.rmemMax;
    l.tcp.streams = t.streams;
  }
  LinkClock clock(
      l, 0.0, run.at("seed").get<uint64_t>());  // the model draws its losses with the line's seed
  clock.setOpenedAt(0.0);                       // the probe connects right before its first message
  auto model = linkModel("tcp").make();
  for (auto& m : run.at("messages")) {
    const double at = m.at("sent_s").get<double>();
    const double predicted = model->stamp(clock, at, m.at("bytes").get<uint64_t>()) - at;
    m["model_s"] = predicted;
    m["error"] = predicted / m.at("measured_s").get<double>() - 1;
  }
}

json messageTimes(const DelayLineOptions& lineOpt, const MessageProbe& probe) {
  if (probe.bytes.size() != probe.idleS.size())
    throw std::invalid_argument("message probe: one idle time per message");
  if (probe.streams < 1 || probe.streams > 64)
    throw std::invalid_argument("message probe: streams must be in 1..64");
  DelayLine line(lineOpt);
  TcpSettings buffers;
  buffers.wmemMax = probe.wmemMax;
  buffers.rmemMax = probe.rmemMax;
  json applied;
  if (buffers.wmemMax || buffers.rmemMax)
    for (const std::string& ns : {line.nsA(), line.nsB()})
      applied[ns == line.nsA() ? "a" : "b"] = applyTcpSettings(ns, buffers);
  buffers.streams = probe.streams;  // the model's, recorded with the buffers
  std::vector<double> sent(probe.bytes.size()), done(probe.bytes.size());
  std::vector<json> info;
  json trace, connections = json::array();
  std::exception_ptr serverError, clientError;
  std::atomic<bool> listening{false}, failed{false};
  std::atomic<size_t> received{0};
  std::thread server([&] {
    try {
      inNamespace(line.nsB(), [&] { receiveMessages(line, probe, done, received, listening); });
    } catch (...) {
      serverError = std::current_exception();
      failed = true;
      listening = true;
    }
  });
  while (!listening) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  try {
    inNamespace(line.nsA(), [&] {
      sendMessages(line, probe, sent, info, trace, connections, received, failed);
    });
  } catch (...) {
    clientError = std::current_exception();
  }
  server.join();
  if (clientError) std::rethrow_exception(clientError);
  if (serverError) std::rethrow_exception(serverError);
  json out = {{"line", line.describe()},
              {"rate_bps", lineOpt.aToB.rateBps},
              {"delay_s", lineOpt.aToB.delayS},
              {"mtu", lineOpt.aToB.mtu},
              {"cc", probe.cc},
              {"loss", lineOpt.aToB.loss},
              {"seed", lineOpt.aToB.seed},
              {"messages", json::array()}};
  if (!buffers.empty()) out["tcp"] = toJson(buffers);
  if (!applied.is_null()) out["tcp_applied"] = applied;
  if (!connections.empty())
    out["connections_at_end"] = connections;  // streams > 1: each connection's TCP_INFO
  for (size_t k = 0; k < probe.bytes.size(); ++k)
    out["messages"].push_back({{"bytes", probe.bytes[k]},
                               {"idle_s", probe.idleS[k]},
                               {"sent_s", sent[k] - sent[0]},
                               {"measured_s", done[k] - sent[k]},
                               {"kernel", kernelDuring(info[k], info[k + 1])}});
  billTcpModel(out);
  if (probe.traceS > 0) {
    for (auto& row : trace) row[0] = row[0].get<double>() - sent[0];
    json columns = {"t_s"};
    for (const char* c : kTraceColumns) columns.push_back(c);
    out["trace"] = {{"columns", std::move(columns)}, {"rows", std::move(trace)}};
  }
  return out;
}

json probeDelayLine(const DelayLineOptions& lineOpt, const DelayLineProbe& probe) {
  DelayLine line(lineOpt);
  json out = {{"line", line.describe()},
              {"expected_rtt_s", lineOpt.aToB.delayS + lineOpt.bToA.delayS}};
  // The hypervisor's share of the CPU over the whole probe (round trips and stream): a stalled
  // forwarding thread lowers the rate and lengthens round trips alike.
  const CpuTimes before = cpuTimes();
  if (json rtt = roundTrips(line, lineOpt, probe); !rtt.is_null()) out["rtt_s"] = std::move(rtt);
  if (probe.iperfS > 0) {
    out["iperf3"] = iperfThrough(line, lineOpt, probe);
    // A set rate not reached within 3% (a machine too slow to forward it, or a window too small
    // for the path) says link_ok false.
    if (lineOpt.aToB.rateBps > 0 && lineOpt.aToB.deliveryMs.empty()) {
      const double err = out["iperf3"]["line_rate_bps"].get<double>() / lineOpt.aToB.rateBps - 1;
      out["rate_error"] = err;
      out["link_ok"] = std::fabs(err) <= 0.03;
    }
  }
  if (const CpuTimes after = cpuTimes(); after.total > before.total)
    out["host_cpu_steal"] = stealShare(before, after);
  line.stop();
  out["stats"] = line.stats();
  return out;
}

}  // namespace slowpipe::emulator
