// The local launcher's bootstrap (`slowpipe run`): a worker process from its command line.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <torch/torch.h>
#include <zmq.hpp>

#include "compression/parallel.h"
#include "emulator/netns.h"
#include "runtime/exec/pipeline_worker.h"
#include "runtime/launch/worker.h"

namespace slowpipe::runtime {

using nlohmann::json;

int runWorker(const WorkerArgs& args) {
  const bool orphanGuard = prctl(PR_SET_PDEATHSIG, SIGKILL) == 0;  // never outlive the launcher
  const int prctlErrno = errno;
  tuneAllocator();
  installCrashReport();  // a crash names itself (and the plug-in it happened in) in this rank's log
  // The launcher died before prctl took effect: our parent is no longer the pid it told us. (Not
  // getppid() == 1: in a container the launcher itself may be pid 1.)
  if (args.launcherPid > 0 && getppid() != args.launcherPid) return 4;
  zmq::context_t ctx(1);
  try {
    if (!orphanGuard)  // reported to the launcher like any error (the catch below)
      throw std::runtime_error(std::string("prctl(PR_SET_PDEATHSIG) failed: ") +
                               std::strerror(prctlErrno) +
                               "; refusing to run a worker that could outlive its launcher");
    // Everything, setup included, runs inside the try: a failed setup is reported like any error.
    if (!args.netns.empty()) emulator::enterNamespace(args.netns);
    const RunSpec spec = loadRunSpec(args.specPath);
    torch::set_num_threads(spec.runtime.threadsPerWorker);
    compression::setCodecThreads(codecThreadsFor(spec, rankLayout(spec).size()));
    // The local launcher's bootstrap: everything from its command line; the peer table comes on
    // a socket of this rank's own.
    Context c;
    c.rank = args.rank;
    c.size = spec.pipeline.stages * spec.pipeline.replicas;
    c.id = rankLayout(spec).id(args.rank);
    c.control = args.control;
    c.bindPrev = args.bindPrev;
    c.bindNext = args.bindNext;
    c.peerTable = [&args](zmq::context_t& zctx, const std::function<void()>& sayHello) {
      // Connect the peer-table socket *before* saying hello: the launcher answers a hello with a
      // send to this socket, which must already have its reader.
      zmq::socket_t peers(zctx, zmq::socket_type::pull);
      peers.set(zmq::sockopt::linger, 0);
      peers.connect(args.peers);
      sayHello();
      zmq::message_t m;
      zmq::pollitem_t item{static_cast<void*>(peers), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::seconds(60)) == 0 ||
          !peers.recv(m, zmq::recv_flags::dontwait))
        throw std::runtime_error("rank " + std::to_string(args.rank) +
                                 ": no peer table from the launcher within 60 s");
      return json::parse(m.to_string());
    };
    runPipelineWorker(spec, c, ctx);
  } catch (const std::exception& e) {
    const std::string why = errorText(e);
    std::fprintf(stderr, "slowpipe worker %d: %s\n", args.rank, why.c_str());
    zmq::socket_t control(ctx, zmq::socket_type::push);
    control.set(zmq::sockopt::linger, 2000);
    control.set(zmq::sockopt::sndtimeo, 2000);
    control.connect(args.control);
    const std::string s = json{{"type", "error"}, {"rank", args.rank}, {"message", why}}.dump();
    (void)control.send(zmq::buffer(s), zmq::send_flags::none);
    return 3;
  }
  return 0;
}

}  // namespace slowpipe::runtime
