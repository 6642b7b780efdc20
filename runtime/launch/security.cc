// CURVE keys and the ZAP handler (see security.h).
#include "runtime/launch/security.h"

#include <sodium.h>

#include <cstdio>
#include <stdexcept>

namespace slowpipe::runtime {

namespace {

std::string z85(const uint8_t* key32) {
  char out[41];
  if (!zmq_z85_encode(out, key32, 32)) throw std::runtime_error("curve: Z85 encoding failed");
  return std::string(out, 40);
}

}  // namespace

CurveKeyPair newCurveKeyPair() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    throw std::runtime_error("curve: libzmq has no CURVE support (zmq_curve_keypair: " +
                             std::string(zmq_strerror(zmq_errno())) + ")");
  return {std::string(pub, 40), std::string(sec, 40)};
}

CurveKeyPair curveKeyPairFromSecret(const std::string& secret, const std::string& purpose) {
  if (sodium_init() < 0) throw std::runtime_error("curve: libsodium failed to initialise");
  uint8_t key[32];
  const std::string in = "slowpipe/" + purpose;
  crypto_generichash(key, sizeof key, reinterpret_cast<const uint8_t*>(in.data()), in.size(),
                     reinterpret_cast<const uint8_t*>(secret.data()),
                     std::min<size_t>(secret.size(), crypto_generichash_KEYBYTES_MAX));
  // Long secrets: fold the rest in as well (the key above takes at most 64 bytes of it).
  if (secret.size() > crypto_generichash_KEYBYTES_MAX) {
    const std::string all = in + secret;
    crypto_generichash(key, sizeof key, reinterpret_cast<const uint8_t*>(all.data()), all.size(),
                       key, sizeof key);
  }
  CurveKeyPair p;
  p.secretKey = z85(key);
  sodium_memzero(key, sizeof key);
  char pub[41];
  if (zmq_curve_public(pub, p.secretKey.c_str()) != 0)
    throw std::runtime_error("curve: zmq_curve_public failed");
  p.publicKey = std::string(pub, 40);
  return p;
}

CurveGate::CurveGate(zmq::context_t& ctx) : ctx_(ctx) {
  // Bound here, before any server socket of this context exists; served by the thread.
  auto rep = std::make_shared<zmq::socket_t>(ctx_, zmq::socket_type::rep);
  rep->set(zmq::sockopt::linger, 0);
  rep->bind("inproc://zeromq.zap.01");
  thread_ = std::thread([this, rep] {
    zmq::pollitem_t item{static_cast<void*>(*rep), 0, ZMQ_POLLIN, 0};
    while (!stop_) {
      try {
        if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
        std::vector<zmq::message_t> req;
        zmq::message_t part;
        if (!rep->recv(part, zmq::recv_flags::dontwait)) continue;  // a wake-up without a request
        req.push_back(std::move(part));
        while (req.back().more() && rep->recv(part)) req.push_back(std::move(part));
        // ZAP/1.0: version, request id, domain, address, identity, mechanism, credentials.
        const std::string version = req.size() > 0 ? req[0].to_string() : "";
        const std::string id = req.size() > 1 ? req[1].to_string() : "";
        const std::string domain = req.size() > 2 ? req[2].to_string() : "";
        const std::string address = req.size() > 3 ? req[3].to_string() : "";
        const std::string mechanism = req.size() > 5 ? req[5].to_string() : "";
        bool ok = false;
        if (version == "1.0" && mechanism == "CURVE" && req.size() > 6 && req[6].size() == 32) {
          const std::string key = z85(static_cast<const uint8_t*>(req[6].data()));
          std::lock_guard<std::mutex> lock(mu_);
          const auto it = allowed_.find(domain);
          ok = it != allowed_.end() && it->second.count(key);
        }
        if (!ok) {
          ++refused_;
          std::fprintf(stderr,
                       "slowpipe: refused a %s connection from %s on '%s' (key not admitted)\n",
                       mechanism.c_str(), address.c_str(), domain.c_str());
          std::lock_guard<std::mutex> lock(mu_);
          if (refusals_.size() < 100) refusals_.push_back(domain + " from " + address);
        }
        const std::vector<std::string> reply = {
            "1.0", id, ok ? "200" : "400", ok ? "OK" : "key not admitted", ok ? domain : "", ""};
        for (size_t i = 0; i < reply.size(); ++i)
          rep->send(zmq::buffer(reply[i]),
                    i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) break;
      }
    }
    rep->close();
  });
}

CurveGate::~CurveGate() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void CurveGate::allow(const std::string& domain, const std::string& publicKey) {
  std::lock_guard<std::mutex> lock(mu_);
  allowed_[domain].insert(publicKey);
}

std::vector<std::string> CurveGate::refusals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refusals_;
}

void makeCurveServer(zmq::socket_t& s, const CurveKeyPair& own, const std::string& domain,
                     int64_t maxMessageBytes) {
  s.set(zmq::sockopt::maxmsgsize, maxMessageBytes);
  s.set(zmq::sockopt::curve_server, true);
  s.set(zmq::sockopt::curve_secretkey, own.secretKey);
  s.set(zmq::sockopt::zap_domain, domain);
}

void makeCurveClient(zmq::socket_t& s, const CurveKeyPair& own, const std::string& serverKey) {
  s.set(zmq::sockopt::curve_serverkey, serverKey);
  s.set(zmq::sockopt::curve_publickey, own.publicKey);
  s.set(zmq::sockopt::curve_secretkey, own.secretKey);
}

void SocketSecurity::server(zmq::socket_t& s, int fromRank) const {
  const auto it = rankKeys.find(fromRank);
  if (it == rankKeys.end() || !gate)
    throw std::logic_error("security: no key of rank " + std::to_string(fromRank));
  const std::string domain = "from-rank-" + std::to_string(fromRank);
  gate->allow(domain, it->second);
  makeCurveServer(s, own, domain, maxMessageBytes);
}

void SocketSecurity::client(zmq::socket_t& s, int toRank) const {
  const auto it = rankKeys.find(toRank);
  if (it == rankKeys.end())
    throw std::logic_error("security: no key of rank " + std::to_string(toRank));
  makeCurveClient(s, own, it->second);
}

}  // namespace slowpipe::runtime
