// The worker of one rank (runtime/exec/ranks.h): its stage runners (one per model chunk), its
// channels to its pipeline peers (runtime/comm/transport.h) and replicas (runtime/dp/dp.h), built
// from the Context its bootstrap made (runtime/launch/context.h: local launcher,
// mpirun/srun/torchrun); runs every step's action list (runtime/exec/schedule.h) and every epoch's
// evaluation list, reporting one record per step to the launcher or coordinator, and its codec
// states and timeline at the end.
#pragma once

#include <string>
#include <zmq.hpp>

#include "runtime/launch/context.h"
#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

// Builds the worker of rank c.rank and trains; throws on any failure (the bootstrap reports it).
void runPipelineWorker(const RunSpec& spec, const Context& c, zmq::context_t& ctx);

// The control socket to the launcher / coordinator. Returns, across hosts, this end's
// "address:port" of the TCP connection (the coordinator maps a dropped connection back to its
// rank with it); "" on one host.
std::string connectControl(zmq::context_t& ctx, zmq::socket_t& s, const Context& c);

}  // namespace slowpipe::runtime
