// Authenticated sockets for runs across hosts (ZeroMQ CURVE: Curve25519 keys, encrypted and
// authenticated connections). Torch-free.
//
//   rendezvous   keys derived from the run's shared secret (SLOWPIPE_SECRET_FILE): the server key
//                pair and one client key pair, so only a process holding the secret can complete
//                the handshake, and the server admits only the secret's client key.
//   per run      every rank makes a fresh key pair and hands its public key over the rendezvous;
//                every socket that binds admits exactly the ranks that may send to it (its ZAP
//                domain lists their keys), every socket that connects checks its server's key.
//
// CurveGate is the ZAP handler of one ZeroMQ context (libzmq asks it about every CURVE handshake of
// that context's server sockets): a connection whose client key is not listed for the socket's
// domain is refused, and counted.
#pragma once

#include <atomic>
#include <cstring>
#include <memory>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include <nlohmann/json.hpp>

namespace slowpipe::runtime {

struct CurveKeyPair {
  std::string publicKey, secretKey;  // Z85 text, 40 characters each
};

// A fresh key pair (libsodium's random source).
CurveKeyPair newCurveKeyPair();
// A key pair derived from `secret` for `purpose` (BLAKE2b of both as the secret key): every
// holder of the secret derives the same pair, nobody else can.
CurveKeyPair curveKeyPairFromSecret(const std::string& secret, const std::string& purpose);

class CurveGate {
 public:
  // Binds the context's ZAP endpoint: create it before any CURVE server socket of `ctx`.
  explicit CurveGate(zmq::context_t& ctx);
  ~CurveGate();
  CurveGate(const CurveGate&) = delete;
  CurveGate& operator=(const CurveGate&) = delete;
  // Admits the client key `publicKey` on server sockets of ZAP domain `domain`.
  void allow(const std::string& domain, const std::string& publicKey);
  int64_t refused() const { return refused_.load(); }
  // "domain from address" of each refused handshake (the first 100).
  std::vector<std::string> refusals() const;

 private:
  void serve();
  zmq::context_t& ctx_;
  mutable std::mutex mu_;
  std::map<std::string, std::set<std::string>> allowed_;  // domain -> Z85 client keys
  std::vector<std::string> refusals_;
  std::atomic<int64_t> refused_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A worker's keys and the run's: what its sockets need.
struct SocketSecurity {
  CurveKeyPair own;
  std::map<int, std::string> rankKeys;  // public key of every rank
  CurveGate* gate = nullptr;
  int64_t maxMessageBytes = -1;  // ZMQ_MAXMSGSIZE of sockets that take frames (-1: no limit)
  // A socket that binds and admits `fromRank` only (call before bind).
  void server(zmq::socket_t& s, int fromRank) const;
  // A socket that connects to `toRank`'s server (call before connect).
  void client(zmq::socket_t& s, int toRank) const;
};

// CURVE options by hand (the coordinator's sockets): a server of `domain` with `own` keys that
// takes messages of at most `maxMessageBytes` (ZMQ_MAXMSGSIZE: a larger one drops the connection
// before it is buffered; every socket that binds has a limit fitting its messages); a client of
// the server whose public key is `serverKey`.
void makeCurveServer(zmq::socket_t& s, const CurveKeyPair& own, const std::string& domain, int64_t maxMessageBytes);

// Handshakes that server sockets refused, from their socket monitors: a client without CURVE
// (NULL mechanism), one whose server key is not this server's (another secret, random keys: the
// cryptographic handshake fails before ZAP), one whose key ZAP did not admit. ZAP alone sees only
// the last kind.
class HandshakeMonitor {
 public:
  explicit HandshakeMonitor(zmq::context_t& ctx) : ctx_(ctx) {}
  // Monitors `s` (before bind), calling it `name` in the refusals; `extraEvents` are passed to
  // `onEvent` of poll() (e.g. ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED).
  void watch(zmq::socket_t& s, const std::string& name, int extraEvents = 0);
  // Drains every monitor: counts refusals; other events go to onEvent(socket name, event, value).
  template <typename F>
  void poll(F&& onEvent) {
    for (auto& m : monitors_) drain(m, onEvent);
  }
  void poll() {
    poll([](const std::string&, int, int) {});
  }
  int64_t refused() const { return refused_; }
  // {"count", "by_kind": {kind: n}, "first": [{"socket", "kind", "address"}...] (the first 100)}.
  nlohmann::json report() const;
  // The kind of a refused handshake event (ZMQ_EVENT_HANDSHAKE_FAILED_*) with its value.
  static std::string kindOf(int event, int value);

 private:
  struct Monitor {
    std::string name;
    std::unique_ptr<zmq::socket_t> pair;
  };
  template <typename F>
  void drain(Monitor& m, F& onEvent) {
    zmq::message_t ev, addr;
    while (m.pair->recv(ev, zmq::recv_flags::dontwait)) {
      if (ev.more()) (void)m.pair->recv(addr);
      uint16_t id = 0;
      int32_t value = 0;
      if (ev.size() >= 6) {
        std::memcpy(&id, ev.data(), 2);
        std::memcpy(&value, static_cast<const uint8_t*>(ev.data()) + 2, 4);
      }
      if (id & kRefusedEvents) record(m.name, kindOf(id, value), addr.to_string());
      else onEvent(m.name, static_cast<int>(id), static_cast<int>(value));
    }
  }
  void record(const std::string& socket, const std::string& kind, const std::string& address);
  static constexpr int kRefusedEvents =
      ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
  zmq::context_t& ctx_;
  std::vector<Monitor> monitors_;
  int64_t refused_ = 0;
  std::map<std::string, int64_t> byKind_;
  std::vector<nlohmann::json> first_;
};
void makeCurveClient(zmq::socket_t& s, const CurveKeyPair& own, const std::string& serverKey);

}  // namespace slowpipe::runtime
