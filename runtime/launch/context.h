// A worker's place in the run, built once by a bootstrap and handed to the worker (DESIGN.md:
// "Context, as in gloo"). Two bootstraps build it: the local launcher's command line
// (runWorker: a child of `slowpipe run`) and the rendezvous of a run started by mpirun, srun or a
// torchrun-style script (runExternalWorker). The worker does not know which made it. Torch-free.
#pragma once

#include <functional>
#include <string>
#include <zmq.hpp>

#include <nlohmann/json.hpp>

#include "runtime/exec/ranks.h"

namespace slowpipe::runtime {

struct SocketSecurity;  // runtime/launch/security.h

struct Context {
  int rank = 0, size = 1;
  RankId id;            // (stage, replica)
  std::string control;  // where the worker's records go
  // Where its sockets bind: toward the previous stage, the next stage, the other replicas.
  std::string bindPrev = "127.0.0.1", bindNext = "127.0.0.1", bindDp = "127.0.0.1";
  // The rank's links are not here: they come with the peer table (runtime/comm/link_table.h).
  // Across hosts: CURVE on every socket (nullptr: one host, plain sockets), the coordinator's key.
  const SocketSecurity* security = nullptr;
  std::string coordinatorKey;
  // tc-dev: the worker shapes this interface ("auto": the one holding bindNext) toward its peers.
  std::string shapeDevice;
  nlohmann::json hello =
      nlohmann::json::object();  // what the bootstrap adds to the hello (host, clock)
  // Says hello (sayHello() sends it to the coordinator) and returns the peer table in exchange:
  // {"pipeline": endpoints, "dp_peers": endpoints, "links": [LinkEntry...], "trace_origin_s"}.
  std::function<nlohmann::json(zmq::context_t&, const std::function<void()>& sayHello)> peerTable;
};

}  // namespace slowpipe::runtime
