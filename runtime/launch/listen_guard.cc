// The guard of every socket that binds (see listen_guard.h).
#include "runtime/launch/listen_guard.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "runtime/launch/rendezvous.h"

namespace slowpipe::runtime {

namespace {

constexpr int kRefusedEvents = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
// Bytes a server has received from a client once its handshake is complete: ZMTP 3 greeting (64)
// + HELLO (200) + INITIATE (at least 257) under CURVE; greeting + READY (at least 20) under NULL.
constexpr uint64_t kCurveHandshakeBytes = 64 + 200 + 257, kNullHandshakeBytes = 64 + 20;

double steadyNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Bytes this TCP connection has received (false: not a TCP socket any more).
bool bytesReceived(int fd, uint64_t& bytes) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  if (len < offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received) return false;
  bytes = info.tcpi_bytes_received;
  return true;
}

}  // namespace

struct ListenGuard::Watched {
  std::string name;
  uint64_t handshakeBytes = kNullHandshakeBytes;
  int extraEvents = 0;
  std::unique_ptr<zmq::socket_t> pair;
  std::map<int, Conn> conns;  // fd -> connection, from ACCEPTED to DISCONNECTED
  std::string failed;         // a handshake failure waiting for its connection's DISCONNECTED
};

ListenGuard::ListenGuard(zmq::context_t& ctx, Limits limits) : ctx_(ctx), limits_(limits) {
  const std::string ep =
      "inproc://slowpipe-guard-wake-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  wakeRecv_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::pair);
  wakeRecv_->set(zmq::sockopt::linger, 0);
  wakeRecv_->bind(ep);
  wakeSend_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::pair);
  wakeSend_->set(zmq::sockopt::linger, 0);
  wakeSend_->connect(ep);
  thread_ = std::thread([this] { serve(); });  // owns wakeRecv_ from here on
}

ListenGuard::~ListenGuard() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    (void)wakeSend_->send(zmq::message_t(), zmq::send_flags::dontwait);
  }
  if (thread_.joinable()) thread_.join();
  wakeSend_->close();
}

void ListenGuard::watch(zmq::socket_t& s, const std::string& name, bool curve, int extraEvents) {
  s.set(zmq::sockopt::handshake_ivl, limits_.handshakeMs);
  static std::atomic<int> seq{0};
  const std::string ep = "inproc://slowpipe-guard-" +
                         std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" +
                         std::to_string(seq++);
  const int events =
      kRefusedEvents | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
  if (zmq_socket_monitor(s.handle(), ep.c_str(), events) != 0)
    throw std::runtime_error("cannot monitor the " + name +
                             " socket: " + zmq_strerror(zmq_errno()));
  auto w = std::make_unique<Watched>();
  w->name = name;
  w->handshakeBytes = curve ? kCurveHandshakeBytes : kNullHandshakeBytes;
  w->extraEvents = extraEvents;
  w->pair = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::pair);
  w->pair->set(zmq::sockopt::linger, 0);
  w->pair->connect(ep);  // connected here, read by the thread (handed over under mu_)
  std::lock_guard<std::mutex> lock(mu_);
  added_.push_back(std::move(w));
  (void)wakeSend_->send(zmq::message_t(), zmq::send_flags::dontwait);
}

void ListenGuard::serve() {
  std::vector<std::unique_ptr<Watched>> watched;
  while (!stop_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& w : added_) watched.push_back(std::move(w));
      added_.clear();
    }
    std::vector<zmq::pollitem_t> items = {{static_cast<void*>(*wakeRecv_), 0, ZMQ_POLLIN, 0}};
    for (auto& w : watched) items.push_back({static_cast<void*>(*w->pair), 0, ZMQ_POLLIN, 0});
    try {
      // Events and watch() wake it at once; the timeout is a backstop only.
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(200));
      zmq::message_t ignored;
      while (wakeRecv_->recv(ignored, zmq::recv_flags::dontwait)) {
      }
      for (size_t i = 1; i < items.size(); ++i)
        if (items[i].revents & ZMQ_POLLIN) drain(*watched[i - 1]);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      if (e.num() != EINTR) throw;
    }
  }
  for (auto& w : watched) w->pair->close();
  wakeRecv_->close();
}

void ListenGuard::drain(Watched& w) {
  zmq::message_t ev, addr;
  while (w.pair->recv(ev, zmq::recv_flags::dontwait)) {
    if (ev.more()) (void)w.pair->recv(addr);
    uint16_t id = 0;
    int32_t value = 0;
    if (ev.size() < 6) continue;
    std::memcpy(&id, ev.data(), 2);
    std::memcpy(&value, static_cast<const uint8_t*>(ev.data()) + 2, 4);
    if (id & kRefusedEvents) {
      // libzmq follows a failed handshake with its connection's DISCONNECTED (one I/O thread):
      // recorded then, with the peer's address.
      if (!w.failed.empty()) record(w.name, w.failed, "");
      w.failed = kindOf(id, value);
      continue;
    }
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      std::lock_guard<std::mutex> lock(mu_);
      ++authenticated_[w.name];
    }
    if (id == ZMQ_EVENT_ACCEPTED) onAccepted(w, value);
    if (id == ZMQ_EVENT_DISCONNECTED) onDisconnected(w, value);
    if (id & w.extraEvents) {
      const auto it = w.conns.find(value);
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back({w.name, it != w.conns.end() ? it->second.peer : peerOf(value), id, value});
    }
    if (id == ZMQ_EVENT_DISCONNECTED) w.conns.erase(value);
  }
}

void ListenGuard::onAccepted(Watched& w, int fd) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++accepted_[w.name];
  }
  w.conns[fd] = {peerOf(fd), steadyNow(), false};
  enforceCap(w);
}

void ListenGuard::onDisconnected(Watched& w, int fd) {
  const auto it = w.conns.find(fd);
  const bool evicted = it != w.conns.end() && it->second.evicted;
  if (!w.failed.empty() && !evicted) {  // evicted: counted when it was shut down
    std::string kind = w.failed;
    if (kind == kindOf(ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL, 0) && it != w.conns.end() &&
        steadyNow() - it->second.acceptedAt >= 0.9 * limits_.handshakeMs / 1000.0)
      kind = "handshake timed out (" + std::to_string(limits_.handshakeMs) + " ms)";
    record(w.name, kind, it != w.conns.end() ? it->second.peer : "");
  }
  w.failed.clear();
}

// Above the cap, the oldest connections that have not sent a finished handshake's bytes are shut
// down: libzmq sees the end of the stream and closes them (and says DISCONNECTED).
void ListenGuard::enforceCap(Watched& w) {
  std::vector<std::pair<double, int>> pending;  // (accepted at, fd)
  for (auto& [fd, c] : w.conns) {
    uint64_t bytes = 0;
    if (c.evicted || !bytesReceived(fd, bytes)) continue;  // ipc, or closed already
    if (bytes < w.handshakeBytes) pending.push_back({c.acceptedAt, fd});
  }
  const int over = static_cast<int>(pending.size()) - limits_.maxUnauthenticated;
  if (over <= 0) return;
  std::sort(pending.begin(), pending.end());
  for (int i = 0; i < over; ++i) {
    Conn& c = w.conns[pending[i].second];
    // The descriptor is libzmq's: shut down only while it is still the connection accepted (an
    // fd closed and reused meanwhile has another peer).
    if (peerOf(pending[i].second) != c.peer) continue;
    ::shutdown(pending[i].second, SHUT_RDWR);
    c.evicted = true;
    record(w.name,
           "over the cap of " + std::to_string(limits_.maxUnauthenticated) +
               " connections not yet authenticated",
           c.peer);
  }
}

void ListenGuard::record(const std::string& socket, const std::string& kind,
                         const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  ++refused_;
  ++byKind_[kind];
  ++bySocket_[socket];
  // The ZAP handler (CurveGate) prints the keys it did not admit itself; of the rest, the first 5
  // per socket (1,000 held connections must not become 1,000 lines).
  if (kind.rfind("key not admitted", 0) != 0 && printed_[socket]++ < 5)
    std::fprintf(stderr, "slowpipe: refused a connection on the %s socket from %s: %s%s\n",
                 socket.c_str(), address.empty() ? "?" : address.c_str(), kind.c_str(),
                 printed_[socket] == 5
                     ? " (further refusals on this socket are counted in the result, not printed)"
                     : "");
  if (first_.size() < 100)
    first_.push_back({{"socket", socket}, {"kind", kind}, {"address", address}});
}

std::vector<ListenGuard::Event> ListenGuard::takeEvents() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Event> out(events_.begin(), events_.end());
  events_.clear();
  return out;
}

int64_t ListenGuard::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

nlohmann::json ListenGuard::report(int settleMs) const {
  if (settleMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(settleMs));
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json connections = nlohmann::json::object();
  for (const auto& [socket, n] : accepted_)
    connections[socket] = {
        {"accepted", n},
        {"authenticated", authenticated_.count(socket) ? authenticated_.at(socket) : 0}};
  return {{"count", refused_},
          {"by_kind", byKind_},
          {"by_socket", bySocket_},
          {"limits",
           {{"handshake_timeout_ms", limits_.handshakeMs},
            {"max_unauthenticated_per_socket", limits_.maxUnauthenticated}}},
          {"connections", connections},
          {"first", first_}};
}

std::string ListenGuard::kindOf(int event, int value) {
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
    return "key not admitted (ZAP status " + std::to_string(value) + ")";
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
      return "not CURVE (mechanism mismatch, e.g. a NULL client)";
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
      return "CURVE handshake failed (wrong server key: another secret?)";
    return "protocol error " + std::to_string(value);
  }
  return "handshake failed (no detail)";
}

}  // namespace slowpipe::runtime
