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
#include <cstdint>
#include <map>
#include <memory>
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
void makeCurveServer(zmq::socket_t& s, const CurveKeyPair& own, const std::string& domain,
                     int64_t maxMessageBytes);

void makeCurveClient(zmq::socket_t& s, const CurveKeyPair& own, const std::string& serverKey);

}  // namespace slowpipe::runtime
