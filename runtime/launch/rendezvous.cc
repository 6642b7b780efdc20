// Rendezvous client, addresses (see rendezvous.h).
#include "runtime/launch/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <stdexcept>

#include "emulator/shaped_socket.h"

namespace slowpipe::runtime {

using nlohmann::json;

std::string resolveIPv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    throw std::invalid_argument("cannot resolve host '" + host + "': " + gai_strerror(rc));
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof buf);
  freeaddrinfo(res);
  return buf;
}

std::string localAddressToward(const std::string& host) {
  const std::string ip = resolveIPv4(host);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) throw std::runtime_error("socket(): " + std::string(std::strerror(errno)));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);  // any port: connect() on UDP only picks the route, nothing is sent
  inet_pton(AF_INET, ip.c_str(), &to.sin_addr);
  sockaddr_in me{};
  socklen_t len = sizeof me;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0;
  close(fd);
  if (!ok) throw std::runtime_error("no route from this host to " + host + " (" + ip + ")");
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf);
  return buf;
}

namespace {

std::string addressOf(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(a.sin_port));
}

}  // namespace

std::string peerOf(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sin_family != AF_INET)
    return "";
  return addressOf(a);
}

std::string connectedFrom(zmq::context_t& ctx, zmq::socket_t& s, const std::string& endpoint) {
  static std::atomic<int> seq{0};
  const std::string mon = "inproc://connected-from-" + std::to_string(seq++);
  if (zmq_socket_monitor(s.handle(), mon.c_str(), ZMQ_EVENT_CONNECTED) != 0)
    throw std::runtime_error("cannot monitor a socket: " + std::string(zmq_strerror(zmq_errno())));
  zmq::socket_t events(ctx, zmq::socket_type::pair);
  events.set(zmq::sockopt::linger, 0);
  events.connect(mon);
  s.connect(endpoint);
  std::string from;
  zmq::pollitem_t item{static_cast<void*>(events), 0, ZMQ_POLLIN, 0};
  const double until = emulator::hostClockNow() + 10;
  while (from.empty() && emulator::hostClockNow() < until) {
    zmq::poll(&item, 1, std::chrono::milliseconds(100));
    zmq::message_t ev, addr;
    if (!events.recv(ev, zmq::recv_flags::dontwait)) continue;
    if (ev.more()) (void)events.recv(addr);
    uint16_t id = 0;
    int32_t fd = -1;
    if (ev.size() >= 6) {
      std::memcpy(&id, ev.data(), 2);
      std::memcpy(&fd, static_cast<const uint8_t*>(ev.data()) + 2, 4);
    }
    if (id != ZMQ_EVENT_CONNECTED) continue;
    sockaddr_in a{};
    socklen_t len = sizeof a;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) from = addressOf(a);
  }
  zmq_socket_monitor(s.handle(), nullptr, 0);
  if (from.empty()) throw std::runtime_error("no TCP connection to " + endpoint + " within 10 s");
  return from;
}

RendezvousClient::RendezvousClient(zmq::context_t& ctx, const std::string& host, int port,
                                   const std::string& secret, double timeoutS)
    : req_(ctx, zmq::socket_type::req),
      monitor_(ctx, zmq::socket_type::pair),
      endpoint_("tcp://" + resolveIPv4(host) + ":" + std::to_string(port)),
      timeoutS_(timeoutS) {
  req_.set(zmq::sockopt::linger, 0);
  makeCurveClient(req_, curveKeyPairFromSecret(secret, "rendezvous/client"),
                  curveKeyPairFromSecret(secret, "rendezvous/server").publicKey);
  // Handshakes that fail (the server cannot open this process's greeting: another secret) show as
  // disconnects before any handshake succeeded.
  const std::string mon =
      "inproc://rendezvous-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  if (zmq_socket_monitor(req_.handle(), mon.c_str(),
                         ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
    throw std::runtime_error("rendezvous: cannot monitor the socket: " +
                             std::string(zmq_strerror(zmq_errno())));
  monitor_.connect(mon);
  req_.connect(endpoint_);
}

json RendezvousClient::call(const json& request, double timeoutS) {
  if (timeoutS < 0) timeoutS = timeoutS_;
  const std::string text = request.dump();
  req_.send(zmq::buffer(text), zmq::send_flags::none);
  const double deadline = emulator::hostClockNow() + timeoutS;
  bool handshook = false;
  while (true) {
    const double left = deadline - emulator::hostClockNow();
    if (left <= 0) break;
    zmq::pollitem_t items[] = {{static_cast<void*>(req_), 0, ZMQ_POLLIN, 0},
                               {static_cast<void*>(monitor_), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 2, std::chrono::milliseconds(static_cast<long>(left * 1000) + 1));
    if (items[1].revents & ZMQ_POLLIN) {
      zmq::message_t ev, addr;
      if (monitor_.recv(ev) && ev.more()) (void)monitor_.recv(addr);
      uint16_t id = 0;
      if (ev.size() >= 2) std::memcpy(&id, ev.data(), 2);
      // A refused handshake is one FAILED event (its DISCONNECTED follows and is not another
      // refusal: counting both said "refused 3 times" where the server had refused twice).
      if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
        handshook = true;
      else if (!handshook && id != ZMQ_EVENT_DISCONNECTED)
        ++handshakeFailures_;
      if (handshakeFailures_ >= 3)
        throw std::runtime_error("the rendezvous at " + endpoint_ +
                                 " refused this process's handshake " +
                                 std::to_string(handshakeFailures_) +
                                 " times: its secret (SLOWPIPE_SECRET_FILE) differs "
                                 "from the one rank 0 uses");
    }
    zmq::message_t m;
    if ((items[0].revents & ZMQ_POLLIN) && req_.recv(m, zmq::recv_flags::dontwait)) {
      json answer = json::parse(m.to_string());
      if (answer.contains("error"))
        throw std::runtime_error("rendezvous at " + endpoint_ + ": " +
                                 answer["error"].get<std::string>());
      return answer;
    }
  }
  throw std::runtime_error("no answer from the rendezvous at " + endpoint_ + " within " +
                           std::to_string(static_cast<int>(timeoutS)) + " s to '" +
                           request.value("type", "") +
                           "' (is rank 0 running there, with the same world size?)");
}

ClockEstimate RendezvousClient::estimateClock(int samples) {
  ClockEstimate best;
  best.rttS = 1e300;
  for (int i = 0; i < samples; ++i) {
    const double t0 = emulator::hostClockNow();
    const json a = call({{"type", "time"}});
    const double t1 = emulator::hostClockNow();
    if (t1 - t0 < best.rttS) {
      best.rttS = t1 - t0;
      best.offsetS = a.at("t").get<double>() - 0.5 * (t0 + t1);
    }
  }
  return best;
}

}  // namespace slowpipe::runtime
