// A worker started by an external launcher (mpirun, srun, torchrun-style variables): its
// bootstrap through the rendezvous, the watchdog, and rank 0's coordinator thread.
#include <unistd.h>
#include <cstdlib>

#include <atomic>
#include <filesystem>
#include <future>
#include <thread>

#include <torch/torch.h>
#include <zmq.hpp>

#include "compression/parallel.h"
#include "emulator/devshaper.h"
#include "emulator/netns.h"
#include "emulator/shaped_socket.h"
#include "runtime/exec/pipeline_worker.h"
#include "runtime/launch/bootstrap.h"
#include "runtime/launch/launcher.h"
#include "runtime/launch/rendezvous.h"
#include "runtime/launch/security.h"
#include "runtime/launch/worker.h"
#include "runtime/model/data.h"
#include "runtime/records/result.h"

namespace slowpipe::runtime {

using nlohmann::json;

namespace {

// The ranks a launcher started on this node (they share its cores, unless each has a CPU set of its
// own, which the affinity mask then shows): Open MPI's and Slurm's word for it, else 1.
int ranksOnThisNode() {
  for (const char* var :
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_STEP_TASKS_PER_NODE"}) {
    const char* v = std::getenv(var);
    if (v && std::atoi(v) >= 1) return std::atoi(v);  // Slurm's "4(x2)" reads as 4
  }
  return 1;
}

// Runs across hosts: a heartbeat to the coordinator every 0.5 s, and the coordinator's events. On
// "abort" (another rank failed, or the coordinator stopped the run) this process exits at once;
// when the coordinator's own heartbeat stops for 5 s it exits too (the coordinator is gone).
// `coordinatorDone` (rank 0, whose process hosts the coordinator): on "abort" wait until the
// coordinator has returned (at most 5 s), so that its abort reaches the other ranks before this
// process ends. Exiting at once killed the coordinator before its I/O thread had sent the abort
// to every rank; one then waited out the 5 s heartbeat instead (seen: 1 of 30 runs under load).
class Watchdog {
 public:
  Watchdog(zmq::context_t& ctx, const Context& c, const std::string& events,
           const std::atomic<bool>* coordinatorDone)
      : thread_([this, &ctx, rank = c.rank, control = c.control, events, own = c.security->own,
                 key = c.coordinatorKey, coordinatorDone] {
          zmq::socket_t beat(ctx, zmq::socket_type::push), sub(ctx, zmq::socket_type::sub);
          beat.set(zmq::sockopt::linger, 0);
          sub.set(zmq::sockopt::linger, 0);
          makeCurveClient(beat, own, key);
          makeCurveClient(sub, own, key);
          sub.set(zmq::sockopt::subscribe, "");
          beat.connect(control);
          sub.connect(events);
          const std::string beatText = json{{"type", "beat"}, {"rank", rank}}.dump();
          double heard = emulator::hostClockNow(), sent = 0;
          bool ended = false;
          while (!stop_) {
            const double t = emulator::hostClockNow();
            if (!ended && t - sent >= 0.5) {
              (void)beat.send(zmq::buffer(beatText), zmq::send_flags::dontwait);
              sent = t;
            }
            zmq::pollitem_t item{static_cast<void*>(sub), 0, ZMQ_POLLIN, 0};
            zmq::poll(&item, 1, std::chrono::milliseconds(100));
            zmq::message_t m;
            while (sub.recv(m, zmq::recv_flags::dontwait)) {
              const json e = json::parse(m.to_string(), nullptr, false);
              const std::string type = e.is_object() ? e.value("type", "") : "";
              heard = emulator::hostClockNow();
              if (type == "end") ended = true;
              if (type == "abort") {
                std::fprintf(stderr, "slowpipe worker %d: the coordinator stopped the run: %s\n",
                             rank, e.value("reason", "").c_str());
                std::fflush(stderr);
                emulator::removeAllDeviceShaping();
                for (const double until = emulator::hostClockNow() + 5.0;
                     coordinatorDone && !*coordinatorDone && emulator::hostClockNow() < until;)
                  usleep(10000);
                _exit(4);
              }
            }
            if (!ended && emulator::hostClockNow() - heard > 5.0) {
              std::fprintf(stderr,
                           "slowpipe worker %d: no heartbeat from the coordinator for 5 s (%s): it "
                           "is gone; exiting\n",
                           rank, events.c_str());
              std::fflush(stderr);
              emulator::removeAllDeviceShaping();
              // The coordinator in this process (rank 0) stalled with it (SIGSTOP, starvation):
              // it notices its own stall and writes the failed result; wait for that (5 s at most).
              for (const double until = emulator::hostClockNow() + 5.0;
                   coordinatorDone && !*coordinatorDone && emulator::hostClockNow() < until;)
                usleep(10000);
              _exit(5);
            }
          }
        }) {}
  ~Watchdog() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

namespace {

// A one-line error record to the coordinator from a process whose worker could not be built.
void reportError(zmq::context_t& ctx, const Context& c, const std::string& what) {
  zmq::socket_t s(ctx, zmq::socket_type::push);
  connectControl(ctx, s, c);
  const int rank = c.rank;
  s.set(zmq::sockopt::sndtimeo, 2000);
  const std::string text = json{{"type", "error"}, {"rank", rank}, {"message", what}}.dump();
  (void)s.send(zmq::buffer(text), zmq::send_flags::none);
}

}  // namespace

namespace {

// Who this process is and where the rendezvous is: from the flags, else the launcher's
// environment (mpirun, srun, torchrun-style variables).
struct Identity {
  int rank = -1, size = 0;
  std::string source = "flags", rvHost, secret;
  int rvPort = 0;
};

Identity identify(const ExternalWorkerArgs& a) {
  Identity id;
  id.rank = a.rank;
  id.size = a.size;
  if (id.rank < 0) {
    const auto b = bootstrapFromEnv(processEnv());
    if (!b)
      throw std::invalid_argument(
          "no rank: start the workers with mpirun, srun or torchrun-style variables (RANK, "
          "WORLD_SIZE), "
          "or give --rank and --size");
    id.rank = b->rank;
    id.size = b->size;
    id.source = b->source;
    if (!b->masterAddr.empty()) {
      if (b->masterPort <= 0)
        throw std::invalid_argument("environment: MASTER_ADDR is set but MASTER_PORT is not");
      id.rvHost = b->masterAddr;
      id.rvPort = b->masterPort;
    }
  } else if (id.size <= id.rank) {
    throw std::invalid_argument("--rank " + std::to_string(id.rank) + " needs --size above it");
  }
  if (!a.rendezvous.empty())
    std::tie(id.rvHost, id.rvPort) = parseHostPort(a.rendezvous, "--rendezvous");
  if (id.rvHost.empty())
    throw std::invalid_argument(
        "no rendezvous: give --rendezvous HOST:PORT (rank 0's host and a free port) or set "
        "MASTER_ADDR "
        "and MASTER_PORT");
  id.secret = loadSecret(processEnv());
  return id;
}

// Rank 0 runs the coordinator in a thread of its own process (launchRun with the external
// bootstrap); finish() joins it and returns the run's status.
class CoordinatorThread {
 public:
  void start(const ExternalWorkerArgs& a, const Identity& id) {
    if (a.specPath.empty() || a.outDir.empty())
      throw std::invalid_argument("rank 0 runs the coordinator: give --spec and --out");
    spec_ = loadRunSpec(a.specPath);
    LaunchOptions o;
    o.outDir = a.outDir;
    o.progress = false;
    o.external.enabled = true;
    o.external.listenHost = id.rvHost;
    o.external.listenPort = id.rvPort;
    o.external.secret = id.secret;
    o.external.joinTimeoutS = a.joinTimeoutS;
    auto ready = std::make_shared<std::promise<std::string>>();
    std::future<std::string> isReady = ready->get_future();
    o.external.ready = [ready](const std::string& error) { ready->set_value(error); };
    thread_ = std::thread([this, o] {
      try {
        rc_ = launchRun(spec_, o);
      } catch (const std::exception&
                   e) {  // the folder cannot take this run's result (held, or a folder)
        if (o.external.ready) o.external.ready(e.what());
        rc_ = 2;
      }
      done_ = true;
    });
    const std::string error =
        isReady.get();  // the corpus is prepared before the rendezvous listens
    if (!error.empty()) throw std::runtime_error("the coordinator did not start: " + error);
  }
  int finish(int rc) {
    if (thread_.joinable()) thread_.join();
    return rc != 0 ? rc : rc_.load();
  }
  const std::atomic<bool>* done() const { return &done_; }

 private:
  std::thread thread_;
  std::atomic<int> rc_{0};
  std::atomic<bool> done_{false};  // launchRun returned (its sockets flushed and closed)
  RunSpec spec_;                   // outlives the thread
};

// tc-dev: the kernel paces the rate on each host's interface, this worker's toward its peers; the
// hello says whether this host's kernel adds the delays (netem) of what it sends, else the
// receivers add them (the link table in the peer table says which).
void kernelPacedLinks(const RunSpec& spec, Context& c) {
  c.shapeDevice = spec.network.dev;
  c.hello["kernel"] = {{"netem", emulator::kernelFeatures().netem}};
}

// Joins at the rendezvous (rank and size from the environment, the rest from the coordinator:
// control socket, keys, clock offset, spec), then runs the worker under the watchdog.
void joinAndRun(const ExternalWorkerArgs& a, const Identity& id, zmq::context_t& ctx,
                SocketSecurity& security, Context& c, const std::atomic<bool>* coordinatorDone) {
  const std::string address =
      a.bindHost.empty() ? localAddressToward(id.rvHost) : resolveIPv4(a.bindHost);
  c.bindPrev = c.bindNext = c.bindDp = address;
  RendezvousClient rv(ctx, id.rvHost, id.rvPort, id.secret, a.joinTimeoutS);
  const json join = rv.call({{"type", "join"},
                             {"rank", id.rank},
                             {"size", id.size},
                             {"key", security.own.publicKey},
                             {"host", hostName()},
                             {"address", address},
                             {"pid", getpid()},
                             {"bootstrap", id.source}},
                            a.joinTimeoutS + 10);
  c.control = join.at("control").get<std::string>();
  c.coordinatorKey = join.at("coordinator_key").get<std::string>();
  for (const auto& [k, v] : join.at("keys").items())
    security.rankKeys[std::stoi(k)] = v.get<std::string>();
  // The coordinator's clock, NTP-style; rank 0 shares its process (and clock).
  const ClockEstimate clock = id.rank == 0 ? ClockEstimate{} : rv.estimateClock();
  emulator::setClockOffset(clock.offsetS);
  c.hello = {
      {"host", hostName()},
      {"address", address},
      {"bootstrap", id.source},
      {"clock",
       {{"offset_s", clock.offsetS}, {"rtt_s", clock.rttS}, {"error_bound_s", 0.5 * clock.rttS}}}};
  const RunSpec spec = runSpecFromJson(join.at("spec"), "the run's spec (from the rendezvous)");
  c.id = rankLayout(spec).id(id.rank);
  if (spec.network.backend == "tc-dev") kernelPacedLinks(spec, c);
  c.peerTable = [&rv, rank = id.rank, &spec](zmq::context_t&,
                                             const std::function<void()>& sayHello) {
    sayHello();  // the coordinator answers once every rank said hello
    return rv.call({{"type", "table"}, {"rank", rank}}, 2 * spec.runtime.stepTimeoutS);
  };
  if (id.rank != 0) prepareCorpus(spec.data);  // rank 0's coordinator prepared it on its host
  torch::set_num_threads(spec.runtime.threadsPerWorker);
  compression::setCodecThreads(codecThreadsFor(spec, ranksOnThisNode()));
  security.maxMessageBytes = largestFrameBytes(spec);
  Watchdog dog(ctx, c, join.at("events").get<std::string>(), coordinatorDone);
  runPipelineWorker(spec, c, ctx);
}

}  // namespace

int runExternalWorker(const ExternalWorkerArgs& a) {
  tuneAllocator();
  std::string who = "slowpipe worker";
  CoordinatorThread coordinator;
  Identity id;
  try {
    id = identify(a);
    who += " " + std::to_string(id.rank);
    if (id.rank == 0 && !a.outDir.empty()) {
      // The coordinator runs in this process: if it dies (a plug-in's crash, SIGKILL), a keeper
      // finishes result.json as failed, with the crash line this process writes.
      const std::string crashFile = (std::filesystem::path(a.outDir) / ".rank0-crash").string();
      std::filesystem::create_directories(a.outDir);
      installCrashReport(createFileNoFollow(crashFile));
      startResultKeeper((std::filesystem::path(a.outDir) / "result.json").string(), crashFile);
      coordinator.start(a, id);
    } else {
      installCrashReport();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
    return coordinator.finish(2);
  }
  int rc = 0;
  {
    zmq::context_t ctx(1);
    CurveGate gate(ctx);
    SocketSecurity security;
    security.own = newCurveKeyPair();
    security.gate = &gate;
    Context c;
    c.rank = id.rank;
    c.size = id.size;
    c.security = &security;
    try {
      joinAndRun(a, id, ctx, security, c, id.rank == 0 ? coordinator.done() : nullptr);
    } catch (const std::exception& e) {
      // A signal to this process (rank 0: the coordinator's handler) interrupts a blocking call:
      // the signal is the reason, not the call it cut short.
      const int sig = launchInterrupted();
      const std::string why = sig ? "interrupted by signal " + std::to_string(sig) : errorText(e);
      std::fprintf(stderr, "%s: %s\n", who.c_str(), why.c_str());
      if (!c.control.empty()) reportError(ctx, c, why);
      rc = 3;
    }
  }
  return coordinator.finish(rc);
}

}  // namespace slowpipe::runtime
