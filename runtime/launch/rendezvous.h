// The rendezvous of a run started by an external launcher (mpirun, srun, torchrun-style scripts):
// a small authenticated request/reply service the coordinator (runtime/launch/launcher.h, external
// mode; rank 0 runs it unless --rendezvous names another host) offers on one TCP port. Torch-free.
//
// Every request is one JSON object over a CURVE connection whose keys derive from the run's shared
// secret (runtime/launch/security.h), so a process without the secret cannot take part:
//   {"type": "join", "rank", "size", "key", "host"}   answered once every rank has joined:
//       {"spec", "control", "events", "coordinator_key", "keys": {"<rank>": public key}}
//       or {"error": "..."} (a rank twice, another world size);
//   {"type": "time"}                                   answered at once: {"t": coordinator clock};
//   {"type": "table", "rank"}                          answered once every rank said hello on the
//       control socket: the rank's peer table (as the local launcher sends it).
//
// Time across hosts: the worker estimates the offset of the coordinator's clock to its own,
// NTP-style: 16 "time" requests, the one with the shortest round trip, offset = t_coordinator -
// (sent + received) / 2, its error at most half that round trip. From then on every process
// stamps and reads envelope times on the coordinator's clock (emulator::setClockOffset), so a
// link's arrival times mean the same on both hosts; the offsets and their error bounds are
// recorded in result.json ("clock").
#pragma once

#include <map>
#include <string>
#include <zmq.hpp>

#include <nlohmann/json.hpp>

#include "runtime/launch/security.h"

namespace slowpipe::runtime {

struct ClockEstimate {
  double offsetS = 0;  // coordinator clock - this host's clock
  double rttS = 0;     // the shortest round trip; the offset's error is at most rttS / 2
};

class RendezvousClient {
 public:
  // Connects to tcp://host:port with the secret's client keys.
  RendezvousClient(zmq::context_t& ctx, const std::string& host, int port,
                   const std::string& secret, double timeoutS);
  // Sends `request`, returns the answer; throws naming the rendezvous when none comes within the
  // timeout (and saying when the handshake itself failed: a different secret).
  nlohmann::json call(const nlohmann::json& request, double timeoutS = -1);
  ClockEstimate estimateClock(int samples = 16);

 private:
  zmq::socket_t req_, monitor_;
  std::string endpoint_;
  double timeoutS_;
  int handshakeFailures_ = 0;
};

// Connects `s` to `endpoint` and returns this end of the TCP connection, "address:port" (waits up
// to 10 s for the connection; throws naming the endpoint). The coordinator sees the same pair as
// the peer of the connection it accepted, so a dropped connection names its rank.
std::string connectedFrom(zmq::context_t& ctx, zmq::socket_t& s, const std::string& endpoint);
// "address:port" of the peer of a connected TCP socket (getpeername), "" if unknown.
std::string peerOf(int fd);

// This host's address on the route to `host` (a UDP socket connected there, nothing sent):
// where this worker's sockets bind so that peers on other hosts reach them.
std::string localAddressToward(const std::string& host);
// host as an IPv4 address (getaddrinfo); throws naming it.
std::string resolveIPv4(const std::string& host);

}  // namespace slowpipe::runtime
