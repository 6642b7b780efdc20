// ListenGuard: what every socket that binds accepts and refuses. Torch-free.
//
// A socket that binds is open to anyone who can reach its port. libzmq holds a connection that
// has not finished its ZMTP/CURVE handshake for ZMQ_HANDSHAKE_IVL (default 30 s) and has no cap on
// how many it holds, so an outsider without the secret could take every file descriptor of a rank
// (1,100 held connections against a 1,024-descriptor limit failed a run). The guard:
//   - sets the handshake timeout of each socket it watches (Limits::handshakeMs);
//   - caps the connections of a socket that have not authenticated (Limits::maxUnauthenticated):
//     a TCP connection counts as unauthenticated while the bytes it sent are fewer than a finished
//     handshake needs (TCP_INFO's tcpi_bytes_received: greeting 64 + HELLO 200 + INITIATE >= 257
//     under CURVE; greeting + READY under NULL); above the cap the oldest such connection is shut
//     down (shutdown(2): libzmq sees its end and closes it), so a new client always gets its turn;
//   - counts every refusal by socket and kind (handshake failed or timed out, key not admitted,
//     mechanism mismatch, over the cap), with the peer's address, into report().
// Its thread reads the sockets' monitors as events come, so the cap acts within milliseconds.
// Events the owner asked for (watch's extraEvents) are queued for poll(), with the peer's address
// read at accept time.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include <nlohmann/json.hpp>

namespace slowpipe::runtime {

class ListenGuard {
 public:
  struct Limits {
    int handshakeMs = 3000;       // ZMQ_HANDSHAKE_IVL of every watched socket
    int maxUnauthenticated = 64;  // per watched socket
  };
  struct Event {
    std::string socket, peer;  // peer: "address:port" read at accept ("" for ipc)
    int event = 0, fd = -1;
  };

  explicit ListenGuard(zmq::context_t& ctx) : ListenGuard(ctx, Limits{}) {}
  ListenGuard(zmq::context_t& ctx, Limits limits);
  ~ListenGuard();
  ListenGuard(const ListenGuard&) = delete;
  ListenGuard& operator=(const ListenGuard&) = delete;

  // Watches `s` (call before bind), calling it `name`; `curve`: it is a CURVE server (the bytes of
  // a finished handshake differ); `extraEvents` (e.g. ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED)
  // are queued for poll().
  void watch(zmq::socket_t& s, const std::string& name, bool curve, int extraEvents = 0);
  // Hands the queued events to onEvent(const Event&), in order.
  template <typename F>
  void poll(F&& onEvent) {
    for (const Event& e : takeEvents()) onEvent(e);
  }
  int64_t refused() const;
  // {"count", "by_kind": {kind: n}, "by_socket": {socket: n}, "limits": {...},
  //  "connections": {socket: {"accepted", "authenticated"}},
  //  "first": [{"socket", "kind", "address"}...] (the first 100)}. Every accepted connection
  // that has ended is either authenticated or refused once: accepted = authenticated + refused +
  // those still in their handshake. Refusals beyond an outsider's connections are the ranks' own
  // attempts that a flood delayed past the handshake timeout or the cap (they retry). Waits up to
  // `settleMs` for events still on their way (a refusal just before the end).
  nlohmann::json report(int settleMs = 200) const;
  // The kind of a refused handshake event (ZMQ_EVENT_HANDSHAKE_FAILED_*) with its value.
  static std::string kindOf(int event, int value);

 private:
  struct Watched;
  struct Conn {
    std::string peer;
    double acceptedAt = 0;
    bool evicted = false;
  };
  void serve();
  void drain(Watched& w);
  void onAccepted(Watched& w, int fd);
  void onDisconnected(Watched& w, int fd);
  void enforceCap(Watched& w);
  void record(const std::string& socket, const std::string& kind, const std::string& address);
  std::vector<Event> takeEvents();

  zmq::context_t& ctx_;
  const Limits limits_;
  // watch() wakes the thread through this pair (sent under mu_; the other end is the thread's), so
  // a new socket's monitor is read from its first event, not from the thread's next turn.
  std::unique_ptr<zmq::socket_t> wakeSend_, wakeRecv_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Watched>> added_;  // handed to the thread at its next turn
  std::deque<Event> events_;
  int64_t refused_ = 0;
  std::map<std::string, int64_t> byKind_, bySocket_, accepted_, authenticated_;
  std::vector<nlohmann::json> first_;
  std::map<std::string, int> printed_;  // refusals printed per socket (the first 5)
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace slowpipe::runtime
