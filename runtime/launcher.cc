// Launcher: process management, record collection, result assembly (see launcher.h).
#include "runtime/launcher.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <cmath>
#include <filesystem>
#include <map>
#include <zmq.hpp>

#include "emulator/calibrate.h"
#include "emulator/netns.h"
#include "emulator/shaped_socket.h"
#include "runtime/data.h"
#include "runtime/dp.h"
#include "runtime/progress.h"
#include "runtime/ranks.h"
#include "runtime/rendezvous.h"
#include "runtime/result.h"
#include "runtime/security.h"

namespace slowpipe::runtime {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::atomic<int> gInterrupt{0};
void onInterrupt(int sig) { gInterrupt = sig; }

double now() { return emulator::monotonicNow(); }
double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Worker {
  pid_t pid = -1;
  bool done = false, exited = false;
  int status = 0;
  int64_t lastStep = -1;
  long cpuAtProgress = 0;  // CPU ticks when a hang was first suspected (no record for half the timeout)
};

// zmq::poll that returns 0 when a signal interrupts it (EINTR), so that the caller's signal check
// names the signal; other errors throw as before.
int pollOrInterrupted(zmq::pollitem_t* items, int n, int ms) {
  try {
    return zmq::poll(items, n, std::chrono::milliseconds(ms));
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return 0;
    throw;
  }
}

int pollControl(zmq::socket_t& control, int ms) {
  zmq::pollitem_t item{static_cast<void*>(control), 0, ZMQ_POLLIN, 0};
  return pollOrInterrupted(&item, 1, ms);
}

// What is wrong with a rendezvous request, or "" (its shape: {"type": "time"}, {"type": "join",
// "rank": int, "size": int, "key": 40-character Z85, optional "host"/"address"/"bootstrap"
// strings and "pid" int}, {"type": "table", "rank": int}). Anyone holding the secret can send
// anything: nothing after this check may throw on a field's type.
std::string requestProblem(const json& req) {
  if (req.is_discarded()) return "not JSON";
  if (!req.is_object()) return std::string("a JSON ") + req.type_name() + ", expected an object";
  if (!req.contains("type") || !req["type"].is_string()) return "no string field 'type'";
  const std::string type = req["type"];
  auto needInt = [&](const char* k) -> std::string {
    return req.contains(k) && req[k].is_number_integer() ? "" : std::string("'") + type + "' without an integer '" + k + "'";
  };
  if (type == "time") return "";
  if (type == "table") return needInt("rank");
  if (type != "join") return "unknown request type '" + type.substr(0, 40) + "'";
  for (const char* k : {"rank", "size"})
    if (const std::string p = needInt(k); !p.empty()) return p;
  if (!req.contains("key") || !req["key"].is_string() || req["key"].get<std::string>().size() != 40)
    return "'join' without a 40-character Z85 'key'";
  for (const char* k : {"host", "address", "bootstrap"})
    if (req.contains(k) && !req[k].is_string()) return std::string("'join' with a non-string '") + k + "'";
  if (req.contains("pid") && !req["pid"].is_number_integer()) return "'join' with a non-integer 'pid'";
  return "";
}

// What is wrong with a worker's record on the control socket, or "": an object with a string
// "type" and an integer "rank" (the rest is checked where it is read; see handle()).
std::string recordProblem(const json& rec) {
  if (rec.is_discarded()) return "not JSON";
  if (!rec.is_object()) return std::string("a JSON ") + rec.type_name() + ", expected an object";
  if (!rec.contains("type") || !rec["type"].is_string()) return "no string field 'type'";
  if (!rec.contains("rank") || !rec["rank"].is_number_integer()) return "no integer field 'rank'";
  return "";
}

// Exit statuses of a worker's child side before exec (spawn()).
constexpr int kExitNoPin = 124, kExitNoLog = 125, kExitNoExec = 127;

std::string describeExit(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  const int code = WEXITSTATUS(status);
  const char* why = code == kExitNoPin    ? " (could not be pinned to its CPU: sched_setaffinity failed, see its log)"
                    : code == kExitNoLog  ? " (could not redirect its output to its log: dup2 failed)"
                    : code == kExitNoExec ? " (the slowpipe binary could not be executed, see its log)"
                                          : "";
  return "exited with status " + std::to_string(code) + why;
}

class Launcher {
 public:
  Launcher(const RunSpec& spec, const LaunchOptions& opt)
      : spec_(spec), opt_(opt), S_(spec.pipeline.stages), layout_(rankLayout(spec)),
        N_(layout_.size()), workers_(layout_.size()) {}

  // Never throws: every failure, setup included, ends in a result.json with status "failed" and
  // the reason (an exception escaping here would terminate a coordinator thread or a sweep).
  int run() {
    resultPath_ = (fs::path(opt_.outDir) / "result.json").string();
    specPath_ = (fs::path(opt_.outDir) / "spec.json").string();
    doc_ = {{"schema", kResultSchema}, {"status", "running"}, {"steps", json::array()}, {"evals", json::array()},
            {"launcher", launcherInfo()}};
    int rc = 1;
    try {
      fs::create_directories(opt_.outDir);
      doc_["spec"] = toJson(spec_);
      doc_["inputs"] = specInputs(doc_["spec"]);  // content digests of the files the spec loads
      // Environment (build provenance, host) is captured once, here, before any worker starts.
      doc_["environment"] = environmentInfo("");
      writeJsonAtomically(specPath_, spec_.source.is_null() ? toJson(spec_) : spec_.source);
      const CorpusInfo corpus = prepareCorpus(spec_.data);
      doc_["data"] = {{"dir", corpus.dir}, {"finetune_tokens", corpus.finetuneTokens}, {"pretrain_tokens", corpus.pretrainTokens}};
      if (!spec_.training.initCheckpoint.empty() && !fs::exists(spec_.training.initCheckpoint))
        throw std::invalid_argument("training.init_checkpoint: '" + spec_.training.initCheckpoint +
                                    "' does not exist (make it with `slowpipe pretrain`)");
      writeJsonAtomically(resultPath_, finalDoc());
      setupNetwork();
      rc = opt_.external.enabled ? superviseExternal() : supervise();
    } catch (const std::exception& e) {
      rc = fail(std::string("launcher: ") + e.what());
      if (opt_.external.enabled && !readySent_ && opt_.external.ready) opt_.external.ready(e.what());
    }
    try {
      if (!opt_.external.enabled) stopWorkers();
      fabric_.reset();
    } catch (const std::exception& e) {
      rc = fail(std::string("launcher: cleanup: ") + e.what());
    }
    return writeResult(rc);
  }

 private:
  // The last write of result.json (short form on a full disk); 1 when even that failed.
  int writeResult(int rc) {
    try {
      if (!writeFinalResult(resultPath_, finalDoc())) return 1;  // the short form: status "failed"
    } catch (const std::exception& e) {
      std::fprintf(stderr, "slowpipe: %s\n", e.what());
      return 1;
    }
    return rc;
  }

  // Who writes this result (a reader on the same host tells a dead writer by its pid) and when it
  // last did (a reader elsewhere tells a dead writer by a stale heartbeat): see resultStatus.
  json launcherInfo() const {
    return {{"pid", getpid()}, {"host", hostName()}, {"heartbeat_unix_s", unixNow()}};
  }

  void setupNetwork() {
    const emulator::Topology topo = emulator::topologyFromJson(spec_.network.links, "network.links");
    if (geteuid() == 0 && spec_.network.backend == "tc") {
      // Namespaces of runs whose launcher was killed (kill -9 skips every cleanup path).
      const auto removed = emulator::cleanupNamespaces(false);
      if (!removed.empty()) {
        std::string names;
        for (const auto& n : removed) names += (names.empty() ? "" : ", ") + n;
        std::fprintf(stderr, "slowpipe: removed %zu namespace(s) left by runs whose owner is gone: %s\n", removed.size(),
                     names.c_str());
        doc_["network_cleanup"] = removed;
      }
    }
    if (opt_.external.enabled && spec_.network.backend == "tc")
      throw std::invalid_argument("network.backend 'tc': its namespaces live on one host; a run started by an external "
                                  "launcher shapes in user space (backend user) or on the hosts' interfaces (tc-dev)");
    if (!opt_.external.enabled && spec_.network.backend == "tc-dev")
      throw std::invalid_argument("network.backend 'tc-dev' shapes real interfaces between hosts: start the workers with "
                                  "mpirun or srun (README: Running on a cluster); on one host use backend tc");
    if (spec_.network.backend == "tc") {
      std::vector<emulator::FabricEdge> edges;
      for (int s = 0; s + 1 < S_; ++s) edges.push_back({s, s + 1, topo.link(s, s + 1), topo.link(s + 1, s)});
      fabric_ = std::make_unique<emulator::NetnsFabric>(S_, edges);
      doc_["network"] = {{"backend", "tc"}, {"mechanism", fabric_->mechanism()}};
      for (int e = 0; e < static_cast<int>(edges.size()); ++e)
        for (int from : {e, e + 1}) {
          const emulator::LinkSpec& l = from == e ? edges[e].aToB : edges[e].bToA;
          if (!l.trace.empty()) traces_.push_back({e, from, l.trace, 1});  // point 0 is set at creation
        }
    } else if (spec_.network.backend == "tc-dev") {
      doc_["network"] = {{"backend", "tc-dev"}, {"dev", spec_.network.dev},
                         {"mechanism", "per worker: htb per destination on its interface (result.json workers[].shaping)"}};
    } else {
      json mech = {{"rate", "user-space"}, {"delay", "user-space"}, {"jitter", "user-space"}};
      mech["loss"] = "user-space retransmission delay (a lost message arrives retransmit_s later)";
      doc_["network"] = {{"backend", "user"}, {"mechanism", mech}};
    }
    doc_["network"]["links"] = topo;
    if (layout_.replicas > 1) {
      doc_["network"]["dp_links"] = dpTopology(spec_);
      doc_["network"]["dp_mechanism"] = "user-space (rate, delay, jitter) on one PUSH/PULL pair per directed replica link";
    }
    if (opt_.calibrate && S_ > 1 && !opt_.external.enabled) calibrate(topo);
    if (opt_.external.enabled)
      doc_["calibration_note"] = "not calibrated: the links run between the workers' hosts, not on this one";
  }

  // Calibrates every distinct directed link of the pipeline (traffic only on loopback or inside
  // the project's namespaces) and flags the run when a link misses its rate by more than 3%.
  void calibrate(const emulator::Topology& topo) {
    constexpr double kTolerance = 0.03;
    std::map<std::string, json> seen;
    bool ok = true;
    json all = json::array();
    for (int s = 0; s + 1 < S_; ++s)
      for (const auto& [src, dst] : {std::pair{s, s + 1}, std::pair{s + 1, s}}) {
        const emulator::LinkSpec& l = topo.link(src, dst);
        json entry = {{"src", src}, {"dst", dst}, {"link", l.describe()}};
        if (!l.trace.empty()) {
          entry["note"] = "bandwidth trace: rate follows the trace, not calibrated against one rate";
          all.push_back(entry);
          continue;
        }
        const std::string key = json(l).dump();
        if (!seen.count(key)) {
          emulator::CalibrationOptions c;
          c.backend = spec_.network.backend;
          c.link = l;
          // The run's message size, at least 64 KiB, for ~0.3 s of traffic: shorter bursts measure
          // scheduling noise on the first and last delivery, not the link.
          c.messageBytes = static_cast<uint64_t>(spec_.pipeline.microBatchSize) * spec_.model.seqLen * spec_.model.width * 4;
          c.messageBytes = std::max<uint64_t>(c.messageBytes, 64 << 10);
          c.messages = std::clamp(static_cast<int>(0.3 * c.link.bandwidthBps / (8.0 * c.messageBytes)), 16, 2000);
          c.probes = 30;
          const std::string name = "link " + std::to_string(src) + "->" + std::to_string(dst) + " (" + l.describe() + ")";
          // A time limit up front: at a mistyped rate (50 bit/s) the bulk alone would take days.
          const double expectS = 8.0 * static_cast<double>(c.messageBytes) * c.messages / l.bandwidthBps + 2 * l.latencyS;
          if (expectS > kCalibrationLimitS)
            throw std::invalid_argument("calibrating " + name + ": " + std::to_string(c.messages) + " messages of " +
                                        std::to_string(c.messageBytes) + " bytes would take " + std::to_string(expectS) +
                                        " s, more than the " + std::to_string(static_cast<int>(kCalibrationLimitS)) +
                                        " s limit; is the bandwidth's unit right?");
          try {
            seen[key] = emulator::calibrateLink(c);
          } catch (const std::exception& e) {
            throw std::runtime_error("calibrating " + name + ": " + e.what());
          }
        }
        entry["calibration"] = seen[key];
        const double err = seen[key].value("rate_error", 0.0);
        entry["link_ok"] = std::isfinite(err) && std::fabs(err) <= kTolerance;
        if (!entry["link_ok"].get<bool>()) {
          ok = false;
          std::fprintf(stderr, "slowpipe: warning: link %d->%d (%s) achieved %.4g bps, %+.1f%% off its configured rate "
                       "(tolerance 3%%); results at this setting are flagged link_ok=false\n", src, dst,
                       l.describe().c_str(), seen[key].value("achieved_bps", 0.0), 100 * err);
        }
        all.push_back(entry);
      }
    doc_["calibration"] = all.empty() ? json() : all[0].value("calibration", json());  // first link, as before
    doc_["calibration_links"] = all;
    doc_["link_ok"] = ok;
  }

  void spawn(int r) {
    const std::string log = (fs::path(opt_.outDir) / ("worker-" + std::to_string(r) + ".log")).string();
    std::vector<std::string> args = {"slowpipe", "worker", "--spec", specPath_, "--rank", std::to_string(r),
                                     "--control", controlEp_, "--peers", peerEp(r), "--launcher-pid",
                                     std::to_string(getpid())};
    if (fabric_) {
      args.insert(args.end(), {"--netns", fabric_->nsName(r), "--kernel-rate"});
      // Each direction gets its own latency/jitter: what arrives from r-1 crossed edge r-1 from
      // endpoint r-1; what arrives from r+1 crossed edge r from endpoint r+1.
      if (r > 0) args.insert(args.end(), {"--bind-prev", fabric_->address(r - 1, r), "--prev-latency",
                                          std::to_string(fabric_->userLatency(r - 1, r - 1)), "--prev-jitter",
                                          std::to_string(fabric_->userJitter(r - 1, r - 1))});
      if (r + 1 < S_) args.insert(args.end(), {"--bind-next", fabric_->address(r, r), "--next-latency",
                                               std::to_string(fabric_->userLatency(r, r + 1)), "--next-jitter",
                                               std::to_string(fabric_->userJitter(r, r + 1))});
    }
    // Everything the child needs is built before fork: the child only redirects and execs.
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("cannot create worker log '" + log + "': " + std::strerror(errno));
    const pid_t pid = fork();
    if (pid < 0) {
      close(fd);
      throw std::runtime_error("fork failed: " + std::string(std::strerror(errno)));
    }
    const int cpu = r < static_cast<int>(cpus_.size()) ? cpus_[r] : -1;
    if (pid == 0) {
      // Only async-signal-safe calls here; a failure exits with a status describeExit names.
      if (dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(kExitNoLog);  // dup2 clears O_CLOEXEC on the copies
      if (cpu >= 0) {  // inherited by everything the worker starts (torch's threads too)
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) {
          dprintf(2, "slowpipe: sched_setaffinity(CPU %d) failed: %s\n", cpu, strerror(errno));
          _exit(kExitNoPin);
        }
      }
      execv(opt_.exe.c_str(), argv.data());
      dprintf(2, "slowpipe: cannot execute '%s': %s\n", opt_.exe.c_str(), strerror(errno));
      _exit(kExitNoExec);
    }
    close(fd);
    workers_[r].pid = pid;
    const RankId id = layout_.id(r);
    doc_["workers"].push_back({{"rank", r}, {"stage", id.stage}, {"replica", id.replica}, {"pid", pid},
                               {"cpu", cpu >= 0 ? json(cpu) : json("any")}});
  }

  // runtime.pin_cores: one worker per CPU of this process's affinity mask, if there are enough.
  void planPlacement() {
    cpu_set_t set;
    CPU_ZERO(&set);
    std::vector<int> allowed;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) allowed.push_back(c);
    json placement = {{"requested", spec_.runtime.pinCores}, {"cpus_available", allowed}, {"workers", N_}};
    if (spec_.runtime.pinCores && static_cast<int>(allowed.size()) >= N_) {
      cpus_.assign(allowed.begin(), allowed.begin() + N_);
      placement["pinned"] = true;
    } else {
      placement["pinned"] = false;
      if (spec_.runtime.pinCores) {
        placement["reason"] = std::to_string(N_) + " workers but " + std::to_string(allowed.size()) + " CPUs";
        std::fprintf(stderr, "slowpipe: runtime.pin_cores: not pinned (%d workers, %zu CPUs)\n", N_, allowed.size());
      }
    }
    doc_["placement"] = placement;
  }

  std::string peerEp(int r) const { return controlEp_ + "-w" + std::to_string(r); }

  int supervise() {
    zmq::context_t ctx(1);
    controlEp_ = "ipc:///tmp/slowpipe-" + std::to_string(getpid()) + "-" + std::to_string(static_cast<long>(now() * 1000) % 1000000);
    zmq::socket_t control(ctx, zmq::socket_type::pull);
    control.set(zmq::sockopt::maxmsgsize, kControlMaxBytes);
    control.bind(controlEp_);
    std::vector<std::unique_ptr<zmq::socket_t>> peers;
    for (int r = 0; r < N_; ++r) {
      peers.push_back(std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::push));
      peers.back()->set(zmq::sockopt::linger, 0);
      peers.back()->set(zmq::sockopt::sndtimeo, 5000);  // a worker connects before its hello
      peers.back()->set(zmq::sockopt::maxmsgsize, int64_t{4096});  // a PUSH takes nothing in
      peers.back()->bind(peerEp(r));
    }
    struct sigaction sa {};
    sa.sa_handler = onInterrupt;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    start_ = now();
    doc_["workers"] = json::array();
    planPlacement();
    for (int r = 0; r < N_; ++r) spawn(r);
    writeJsonAtomically(resultPath_, finalDoc());
    lastProgress_ = now();
    bool sentPeers = false;
    while (doneCount_ < N_) {
      pollControl(control, pollMs());
      applyTraces();
      writeHeartbeat();
      zmq::message_t m;
      while (control.recv(m, zmq::recv_flags::dontwait))
        if (!handle(json::parse(m.to_string()))) return fail(error_);
      if (!sentPeers && static_cast<int>(hellos_.size()) == N_) {
        for (int r = 0; r < N_; ++r) {
          const json table = peerTable(r);
          if (!peers[r]->send(zmq::buffer(table.dump()), zmq::send_flags::none))
            return fail("rank " + std::to_string(r) + " did not take its peer table within 5 s");
        }
        sentPeers = true;
      }
      if (gInterrupt) return fail(std::string("launcher interrupted by signal ") + std::to_string(gInterrupt.load()));
      for (int r = 0; r < N_; ++r) {
        Worker& w = workers_[r];
        if (w.exited) continue;
        int status = 0;
        if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
          w.exited = true;
          w.status = status;
          const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
          // Records sent just before the exit (its "done", or its error message) may still be on
          // their way through the socket: a clean exit waits up to 2 s for its "done".
          for (const double until = now() + (clean ? 2.0 : 0.2); !w.done && now() < until;) {
            pollControl(control, 20);
            while (control.recv(m, zmq::recv_flags::dontwait))
              if (!handle(json::parse(m.to_string()))) return fail(error_);
          }
          if (!clean || !w.done) {
            return fail("rank " + std::to_string(r) + " (pid " + std::to_string(w.pid) + ") " + describeExit(status) +
                        (w.lastStep >= 0 ? " after step " + std::to_string(w.lastStep) : " before its first step"));
          }
        }
      }
      // /proc is read only once a hang is suspected (no record for half the timeout), never
      // while steps run normally.
      const double quiet = now() - lastProgress_;
      if (!cpuSampled_ && quiet > 0.5 * spec_.runtime.stepTimeoutS) {
        for (auto& w : workers_) w.cpuAtProgress = procState(w.pid).second;
        cpuSampledAt_ = now();
        cpuSampled_ = true;
      }
      if (quiet > spec_.runtime.stepTimeoutS) return fail(diagnoseHang());
    }
    return checkCodecStates();
  }

  // Where rank r's neighbours and replicas take its messages (from their hellos).
  json peerTable(int r) {
    const RankId id = layout_.id(r);
    json table = {{"pipeline", json::object()}, {"dp_peers", json::object()}};
    // Each pipeline peer's endpoint for what this rank sends it (one per peer: with two stages in
    // a ring the previous and the next stage are one peer).
    for (const auto side : {Action::Peer::kPrev, Action::Peer::kNext})
      if (const int p = protocol::pipelinePeer(layout_, r, side); p >= 0)
        table["pipeline"][std::to_string(p)] = hellos_[p]["pipeline"].value(std::to_string(r), "");
    // Replica q's endpoint for what this replica sends it.
    for (int q = 0; q < layout_.replicas; ++q)
      if (q != id.replica)
        table["dp_peers"][std::to_string(q)] = hellos_[layout_.rank({id.stage, q})]["dp"][std::to_string(id.replica)];
    return table;
  }

  // External bootstrap (LaunchOptions::External): the workers join at the rendezvous, send
  // records and heartbeats to the control socket; the events socket carries the coordinator's
  // heartbeat and, at the end, "end" or "abort" with the reason.
  int superviseExternal() {
    const LaunchOptions::External& ex = opt_.external;
    zmq::context_t ctx(1);
    CurveGate gate(ctx);
    gate.allow("rendezvous", curveKeyPairFromSecret(ex.secret, "rendezvous/client").publicKey);
    const CurveKeyPair me = newCurveKeyPair();
    const std::string ip = resolveIPv4(ex.listenHost);
    zmq::socket_t rv(ctx, zmq::socket_type::router), control(ctx, zmq::socket_type::pull), events(ctx, zmq::socket_type::pub);
    for (auto* s : {&rv, &control, &events}) s->set(zmq::sockopt::linger, 1000);
    // Message limits: rendezvous requests are a few hundred bytes; a worker's records are small
    // but its "done" carries its timeline (runtime.timeline "all": every step's events); the
    // events socket only takes subscriptions.
    makeCurveServer(rv, curveKeyPairFromSecret(ex.secret, "rendezvous/server"), "rendezvous", kRendezvousMaxBytes);
    makeCurveServer(control, me, "control", kControlMaxBytes);
    makeCurveServer(events, me, "control", 4096);
    HandshakeMonitor refusals(ctx);
    refusals.watch(rv, "rendezvous");
    refusals.watch(events, "events");
    const std::string rvEp = "tcp://" + ip + ":" + std::to_string(ex.listenPort);
    try {
      rv.bind(rvEp);
    } catch (const zmq::error_t& e) {
      throw std::runtime_error("rendezvous: cannot listen on " + rvEp + ": " + e.what());
    }
    // Connections to the control socket, by the peer's address:port: a worker's hello names its
    // end of the connection, so a connection that drops before its "done" names the rank at once.
    refusals.watch(control, "control", ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED);
    std::map<int, std::string> peerOfFd;
    std::map<std::string, int> rankOfPeer;
    std::map<int, double> droppedAt;  // rank -> when its control connection dropped
    control.bind("tcp://" + ip + ":*");
    events.bind("tcp://" + ip + ":*");
    const std::string controlEp = control.get(zmq::sockopt::last_endpoint), eventsEp = events.get(zmq::sockopt::last_endpoint);
    doc_["bootstrap"] = {{"kind", "external"}, {"rendezvous", rvEp}, {"security", "CURVE (keys per run; rendezvous keys from the shared secret)"}};
    doc_["workers"] = json::array();
    readySent_ = true;
    if (ex.ready) ex.ready("");
    struct sigaction sa {};
    sa.sa_handler = onInterrupt;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    start_ = now();
    lastProgress_ = now();
    std::map<int, json> joins;
    std::map<int, std::string> joinIds, tableIds;
    std::vector<double> lastSeen(N_, 0);
    bool joined = false, tablesSent = false;
    double lastBeat = 0;
    auto reply = [&](const std::string& id, const json& j) {
      rv.send(zmq::buffer(id), zmq::send_flags::sndmore);
      rv.send(zmq::message_t(), zmq::send_flags::sndmore);
      rv.send(zmq::buffer(j.dump()), zmq::send_flags::none);
    };
    auto publish = [&](const json& j) { events.send(zmq::buffer(j.dump()), zmq::send_flags::dontwait); };
    auto finish = [&](int rc) {
      // The result first: a worker in this process exits as soon as it hears "abort".
      if (rc == 0) doc_["status"] = "ok";
      refusals.poll();
      doc_["refused_connections"] = refusals.report();
      doc_["refused_connections"]["zap"] = gate.refusals();
      doc_["bad_messages"] = {{"count", badMessages_}, {"first", badFirst_}};
      writeJsonAtomically(resultPath_, finalDoc());
      for (int i = 0; i < 3; ++i) {  // a subscriber may miss one message; it acts on the first it gets
        publish(rc == 0 ? json{{"type", "end"}} : json{{"type", "abort"}, {"reason", doc_.value("reason", "")}});
        usleep(100000);
      }
      return rc;
    };
    std::map<int, std::string> refusedJoins;  // rank -> why its join was refused
    while (doneCount_ < N_) {
      zmq::pollitem_t items[] = {{static_cast<void*>(control), 0, ZMQ_POLLIN, 0}, {static_cast<void*>(rv), 0, ZMQ_POLLIN, 0}};
      const double polled = now();
      pollOrInterrupted(items, 2, 100);
      // A 100 ms poll that returned seconds later: this process did not run (SIGSTOP, a debugger,
      // swap; handling records is not counted), and every rank has given up on its heartbeat
      // meanwhile, so say so first.
      if (const double gap = now() - polled; gap > kStallS) {
        char text[200];
        std::snprintf(text, sizeof text, "the coordinator (in rank 0's process, pid %d) did not run for %.1f s (process "
                      "stopped or starved); the ranks stop after 5 s without its heartbeat", static_cast<int>(getpid()), gap);
        return finish(fail(text));
      }
      writeHeartbeat();
      if (now() - lastBeat >= 0.5) {
        publish({{"type", "beat"}});
        lastBeat = now();
      }
      std::vector<zmq::message_t> parts;
      while (true) {  // requests: [routing id][empty][json]
        parts.clear();
        zmq::message_t part;
        if (!rv.recv(part, zmq::recv_flags::dontwait)) break;
        parts.push_back(std::move(part));
        while (parts.back().more() && rv.recv(part)) parts.push_back(std::move(part));
        const std::string id = parts[0].to_string();
        const json req = parts.size() == 3 ? json::parse(parts[2].to_string(), nullptr, false) : json();
        const std::string problem = parts.size() != 3 ? "expected [empty][json] after the routing id, got " +
                                                            std::to_string(parts.size() - 1) + " part(s)"
                                                      : requestProblem(req);
        if (!problem.empty()) {  // refused, counted; the run goes on
          badMessage("rendezvous", problem);
          reply(id, {{"error", "bad request: " + problem}});
          continue;
        }
        const std::string type = req["type"];
        if (type == "time") {
          reply(id, {{"t", now()}});
        } else if (type == "join") {
          const int r = req.value("rank", -1), size = req.value("size", -1);
          if (size != N_) {
            const std::string why = "rank " + std::to_string(r) + " was started with world size " + std::to_string(size) +
                                    "; this run has " + std::to_string(N_) + " workers (pipeline.stages x pipeline.replicas = " +
                                    std::to_string(S_) + " x " + std::to_string(layout_.replicas) + ")";
            refusedJoins[r] = why;
            reply(id, {{"error", why}});
          } else if (r < 0 || r >= N_ || joins.count(r) || joined) {
            const std::string why = "rank " + std::to_string(r) + " is not a free rank of this run (0.." + std::to_string(N_ - 1) +
                                    (joins.count(r) ? ", already joined" : "") + ")";
            refusedJoins[r] = why;
            reply(id, {{"error", why}});
          } else {
            joins[r] = req;
            joinIds[r] = id;
            gate.allow("control", req.value("key", ""));
          }
          if (!joined && static_cast<int>(joins.size()) == N_) {
            json keys = json::object();
            for (const auto& [k, j] : joins) keys[std::to_string(k)] = j["key"];
            for (const auto& [k, j] : joins) {
              const RankId rid = layout_.id(k);
              doc_["workers"].push_back({{"rank", k}, {"stage", rid.stage}, {"replica", rid.replica}, {"host", j.value("host", "")},
                                         {"address", j.value("address", "")}, {"pid", j.value("pid", 0)},
                                         {"bootstrap", j.value("bootstrap", "")}});
              reply(joinIds[k], {{"spec", spec_.source.is_null() ? toJson(spec_) : spec_.source}, {"control", controlEp},
                                 {"events", eventsEp}, {"coordinator_key", me.publicKey}, {"keys", keys}});
              lastSeen[k] = now();
            }
            joined = true;
            lastProgress_ = now();
          }
        } else {  // "table": requestProblem admits no other type
          tableIds[req["rank"].get<int>()] = id;
        }
      }
      zmq::message_t m;
      while (control.recv(m, zmq::recv_flags::dontwait)) {
        const json rec = json::parse(m.to_string(), nullptr, false);
        if (const std::string problem = recordProblem(rec); !problem.empty()) {
          badMessage("control", problem);
          continue;
        }
        const int r = rec["rank"];
        if (r >= 0 && r < N_) lastSeen[r] = now();
        if (rec["type"] == "beat") continue;
        bool ok = true;
        try {
          if (rec["type"] == "hello" && rec.contains("clock")) doc_["clock"][std::to_string(r)] = rec["clock"];
          if (rec["type"] == "hello" && !rec.value("control_from", "").empty()) rankOfPeer[rec["control_from"]] = r;
          ok = handle(rec);
        } catch (const json::exception& e) {  // a field of the wrong type: refused, counted
          badMessage("control", rec.value("type", "?") + " record: " + e.what());
          continue;
        }
        if (!ok) return finish(fail(error_));
      }
      refusals.poll([&](const std::string& socket, int id, int fd) {
        if (id == ZMQ_EVENT_ACCEPTED) {
          peerOfFd[fd] = peerOf(fd);
        } else if (id == ZMQ_EVENT_DISCONNECTED) {
          const auto it = rankOfPeer.find(peerOfFd[fd]);
          if (it != rankOfPeer.end() && !workers_[it->second].done) droppedAt.emplace(it->second, now());
          peerOfFd.erase(fd);
        }
      });
      // A dropped connection whose "done" has not come within 0.5 s: the process is gone.
      for (const auto& [r, at] : droppedAt)
        if (!workers_[r].done && now() - at > 0.5)
          return finish(fail("rank " + std::to_string(r) + " (host " + joins[r].value("host", "?") + ", " +
                             joins[r].value("address", "?") + ") lost its connection to the coordinator: it died or its host is "
                             "unreachable" + (workers_[r].lastStep >= 0 ? "; last step " + std::to_string(workers_[r].lastStep)
                                                                         : "; before its first step")));
      if (!tablesSent && static_cast<int>(hellos_.size()) == N_ && static_cast<int>(tableIds.size()) == N_) {
        for (const auto& [r, id] : tableIds) reply(id, peerTable(r));
        tablesSent = true;
      }
      if (!joined && now() - start_ > ex.joinTimeoutS) {
        std::string missing;
        for (int r = 0; r < N_; ++r)
          if (!joins.count(r))
            missing += (missing.empty() ? "" : ", ") + std::to_string(r) +
                       (refusedJoins.count(r) ? " (refused: " + refusedJoins[r] + ")" : " (never asked to join)");
        return finish(fail(std::to_string(joins.size()) + " of " + std::to_string(N_) + " ranks joined the rendezvous at " + rvEp +
                           " within " + std::to_string(static_cast<int>(ex.joinTimeoutS)) + " s; missing: " + missing));
      }
      if (joined)
        for (int r = 0; r < N_; ++r)
          if (!workers_[r].done && now() - lastSeen[r] > kSilentS)
            return finish(fail("rank " + std::to_string(r) + " (host " + joins[r].value("host", "?") + ") sent nothing for " +
                               std::to_string(static_cast<int>(kSilentS)) + " s: it died or its host is unreachable" +
                               (workers_[r].lastStep >= 0 ? "; last step " + std::to_string(workers_[r].lastStep)
                                                          : "; before its first step")));
      if (gInterrupt) {
        // Under mpirun/srun a SIGTERM usually follows a rank's death by milliseconds: say which
        // rank's connection had dropped, if one had.
        std::string why;
        for (const auto& [r, at] : droppedAt)
          if (!workers_[r].done) why += (why.empty() ? "" : ", ") + std::to_string(r);
        return finish(fail(std::string("coordinator interrupted by signal ") + std::to_string(gInterrupt.load()) +
                           (why.empty() ? "" : "; the connection of rank(s) " + why + " had dropped before (died?)")));
      }
      if (joined && now() - lastProgress_ > spec_.runtime.stepTimeoutS) return finish(fail(diagnoseHang()));
    }
    return finish(checkCodecStates());
  }

  // Sender and receiver codec states must be bit-identical across every link, both directions,
  // and every data-parallel codec pair, each reported by both of its ends (codecStatesProblem).
  int checkCodecStates() {
    const std::string problem = codecStatesProblem(doc_.value("codec_state", json::object()), S_, layout_.replicas, layout_.chunks > 1);
    doc_["codec_states_match"] = problem.empty();
    if (!problem.empty()) return fail("codec state of a sender and its receiver differ after the run: " + problem);
    doc_["status"] = "ok";
    return 0;
  }

  // One record from a worker. Returns false on an error record (error_ says what).
  bool handle(const json& rec) {
    const std::string type = rec.value("type", "");
    const int r = rec.value("rank", -1);
    if (r < 0 || r >= N_) return true;
    lastProgress_ = now();
    cpuSampled_ = false;
    if (type == "hello") {
      hellos_[r] = rec;
      doc_["environment"]["libtorch"] = rec.value("torch_version", "");
    } else if (type == "step") {
      onStep(rec);
    } else if (type == "eval") {
      onEval(rec);
    } else if (type == "done") {
      if (!workers_[r].done) ++doneCount_;
      workers_[r].done = true;
      json state = rec;
      state.erase("timeline");
      if (rec.contains("shaping") && !rec["shaping"].is_null()) doc_["shaping"][std::to_string(r)] = rec["shaping"];
      state.erase("shaping");
      doc_["codec_state"][std::to_string(r)] = state;
      timelines_[r] = rec.value("timeline", json::array());
      if (doneCount_ == N_) recordTimeline();
    } else if (type == "error") {
      error_ = "rank " + std::to_string(r) + ": " + rec.value("message", "error");
      return false;
    }
    return true;
  }

  // The last step's (runtime.timeline "all": every step's) events of every stage, on one time axis (all workers share the host's
  // monotonic clock), in the simulator's timeline schema.
  void recordTimeline() {
    double t0 = 1e300;
    for (const auto& [r, ev] : timelines_)
      for (const auto& e : ev) t0 = std::min(t0, e["start_s"].get<double>());
    json tl = json::array();
    for (const auto& [r, ev] : timelines_) {
      json out = json::array();
      for (const auto& e : ev) {
        out.push_back({{"what", e["what"]}, {"mb", e["mb"]}, {"start_s", e["start_s"].get<double>() - t0},
                       {"end_s", e["end_s"].get<double>() - t0}});
        if (e.contains("step")) out.back()["step"] = e["step"];
      }
      const RankId id = layout_.id(r);
      tl.push_back({{"stage", id.stage}, {"replica", id.replica}, {"rank", r}, {"events", out}});
    }
    doc_["timeline"] = tl;
  }

  // Kernel backend with bandwidth traces: the launcher changes the HTB rate of each traced
  // direction when the trace says (time 0 = when the workers were started).
  void applyTraces() {
    for (auto& t : traces_) {
      const auto& pts = t.trace.points();
      while (t.next < pts.size() && now() - start_ >= pts[t.next].first) {
        fabric_->setRate(t.edge, t.from, pts[t.next].second);
        doc_["trace_changes"].push_back({{"at_s", now() - start_}, {"due_s", pts[t.next].first}, {"edge", t.edge},
                                         {"from", t.from}, {"bandwidth_bps", pts[t.next].second}});
        ++t.next;
      }
    }
  }

  // Poll interval: 100 ms, shorter when a trace point is due sooner.
  int pollMs() const {
    double wait = 0.1;
    for (const auto& t : traces_)
      if (t.next < t.trace.points().size()) wait = std::min(wait, t.trace.points()[t.next].first - (now() - start_));
    return std::max(1, static_cast<int>(wait * 1000));
  }

  // /proc/<pid>/stat: state letter and CPU ticks (user + system).
  static std::pair<char, long> procState(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close == std::string::npos) return {'?', 0};
    std::istringstream rest(text.substr(close + 2));
    char state = '?';
    std::string skip;
    rest >> state;
    for (int i = 0; i < 10; ++i) rest >> skip;  // fields 4..13
    long utime = 0, stime = 0;
    rest >> utime >> stime;
    return {state, utime + stime};
  }

  // Which rank hangs? Neighbours of a hung stage are blocked waiting for it, so "fewest steps"
  // cannot tell. A stopped (T) or uninterruptible (D) process is the culprit; otherwise the one
  // that burned CPU without progress (a busy loop); otherwise the one with the fewest steps.
  std::string diagnoseHang() {
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    int culprit = -1;
    std::string why;
    double busiest = 0;
    for (int r = 0; r < N_; ++r) {
      const auto [state, cpu] = procState(workers_[r].pid);
      if (state == 'T' || state == 't' || state == 'D') {
        culprit = r;
        why = std::string("process state ") + state + (state == 'D' ? " (uninterruptible)" : " (stopped)");
        break;
      }
      const double used = cpuSampled_ ? (cpu - workers_[r].cpuAtProgress) / ticks : 0.0;
      if (used > busiest) {
        busiest = used;
        if (used > 0.8 * (now() - cpuSampledAt_)) {  // busy most of the time since the sample
          culprit = r;
          why = "busy for " + std::to_string(used) + " s of CPU without progress";
        }
      }
    }
    if (culprit < 0) {
      culprit = 0;
      for (int r = 1; r < N_; ++r)
        if (workers_[r].lastStep < workers_[culprit].lastStep) culprit = r;
      why = "fewest completed steps";
    }
    return "rank " + std::to_string(culprit) + " made no progress for " + std::to_string(spec_.runtime.stepTimeoutS) +
           " s (runtime.step_timeout_s; " + why + "); last step " + std::to_string(workers_[culprit].lastStep);
  }

  void onStep(const json& rec) {
    const int r = rec["rank"];
    const int64_t step = rec["step"];
    workers_[r].lastStep = step;
    pending_[step][r] = rec;
    if (static_cast<int>(pending_[step].size()) < N_) return;
    const auto& parts = pending_[step];
    json st = {{"step", step}, {"epoch", parts.at(0)["epoch"]}};
    double time = 0;
    json fwd = {{"raw", 0}, {"wire", 0}}, bwd = {{"raw", 0}, {"wire", 0}}, grad = {{"raw", 0}, {"wire", 0}};
    json perStage = json::array(), breakdown = {{"compute", 0.0}, {"encode", 0.0}, {"decode", 0.0}, {"wait", 0.0}};
    if (layout_.replicas > 1) breakdown["allreduce"] = 0.0;
    for (int r2 = 0; r2 < N_; ++r2) {
      const json& p = parts.at(r2);
      time = std::max(time, p["time_s"].get<double>());
      for (auto& [j, k] : {std::pair{&fwd, "fwd"}, std::pair{&bwd, "bwd"}, std::pair{&grad, "grad"}}) {
        (*j)["raw"] = (*j)["raw"].get<int64_t>() + p[std::string(k) + "_raw"].get<int64_t>();
        (*j)["wire"] = (*j)["wire"].get<int64_t>() + p[std::string(k) + "_wire"].get<int64_t>();
      }
      for (const char* k : {"compute", "encode", "decode", "wait"})
        breakdown[k] = breakdown[k].get<double>() + p[std::string(k) + "_s"].get<double>() / N_;
      // The data-parallel exchange's wall time (its encode/decode/wait are also in the columns
      // above: it is a share of the step, not an extra part of it).
      if (p.contains("dp_s")) breakdown["allreduce"] = breakdown["allreduce"].get<double>() + p["dp_s"].get<double>() / N_;
      const RankId id = layout_.id(r2);
      json stage = {{"compute", p["compute_s"]}, {"encode", p["encode_s"]}, {"decode", p["decode_s"]}, {"wait", p["wait_s"]}};
      if (layout_.replicas > 1) {
        stage["stage"] = id.stage;
        stage["replica"] = id.replica;
        stage["allreduce"] = p.value("dp_s", 0.0);
      }
      if (p.contains("recv_delay_s")) stage["recv_delay_s"] = p["recv_delay_s"];
      perStage.push_back(stage);
    }
    // Tokens of the global batch; the loss is the replicas' mean (each the mean over its micro-batches).
    const int64_t tokens = int64_t{spec_.pipeline.microBatches} * spec_.pipeline.microBatchSize * spec_.model.seqLen *
                           layout_.replicas;
    double loss = 0;
    bool haveLoss = true;
    for (int q = 0; q < layout_.replicas; ++q) {
      const json& l = parts.at(layout_.rank({S_ - 1, q}))["loss"];
      haveLoss = haveLoss && l.is_number();
      if (l.is_number()) loss += l.get<double>() / layout_.replicas;
    }
    st["loss"] = haveLoss ? json(loss) : json();
    if (layout_.replicas > 1) {
      json per = json::array();
      for (int q = 0; q < layout_.replicas; ++q) per.push_back(parts.at(layout_.rank({S_ - 1, q}))["loss"]);
      st["loss_per_replica"] = per;
    }
    st["time_s"] = time;
    st["wall_s"] = now() - start_;
    st["tokens"] = tokens;
    st["tokens_per_s"] = tokens / time;
    st["bytes"] = {{"forward", fwd}, {"backward", bwd}};
    if (layout_.replicas > 1) st["bytes"]["gradient"] = grad;
    st["breakdown_s"] = breakdown;
    st["breakdown_s_per_stage"] = perStage;
    st["grad_norm"] = parts.at(0)["grad_norm"];
    st["lr"] = parts.at(0)["lr"];
    doc_["steps"].push_back(st);
    pending_.erase(step);
    progress(st);
    // The partial result is rewritten at most once a second: serialising a growing document after
    // every step would cost the workers CPU (the launcher shares the cores) while they are timed.
    if (now() - lastWrite_ >= 1.0) {
      writeJsonAtomically(resultPath_, finalDoc());
      lastWrite_ = now();
    }
  }

  void onEval(const json& rec) {
    if (rec["rank"] != layout_.rank({S_ - 1, 0})) return;  // replica 0 evaluates
    doc_["evals"].push_back({{"epoch", rec["epoch"]}, {"step", rec["step"]}, {"val_loss", rec["val_loss"]},
                             {"wall_s", now() - start_}});
  }

  void progress(const json& st) {
    if (!opt_.progress) return;
    const int64_t total = totalSteps();
    const double elapsed = now() - start_;
    const double eta = elapsed / (st["step"].get<int64_t>() + 1) * (total - st["step"].get<int64_t>() - 1);
    char text[256];
    std::snprintf(text, sizeof text, "[%s] step %lld/%lld  loss %.4f  %.0f tok/s  ETA %.0fs", spec_.name.c_str(),
                  static_cast<long long>(st["step"].get<int64_t>() + 1), static_cast<long long>(total),
                  st["loss"].is_number() ? st["loss"].get<double>() : NAN, st["tokens_per_s"].get<double>(), eta);
    progressLine_.update(text, st["step"].get<int64_t>() + 1 >= total);
  }

  int64_t totalSteps() {  // computed once: it reads the token file
    if (totalSteps_ < 0) {
      const ExampleSet train(spec_.data, "finetune", "train", spec_.model.seqLen);
      totalSteps_ = train.size() / (int64_t{spec_.pipeline.microBatches} * spec_.pipeline.microBatchSize * layout_.replicas) *
                    spec_.training.epochs;
      if (spec_.training.maxSteps > 0) totalSteps_ = std::min(totalSteps_, spec_.training.maxSteps);
    }
    return totalSteps_;
  }

  int fail(const std::string& reason) {
    if (doc_.value("status", "") != "failed") {
      doc_["status"] = "failed";
      doc_["reason"] = reason;
    }
    return 1;
  }

  void stopWorkers() {
    // After a successful run the workers are on their way out (flushing sockets, freeing codec
    // state): give them a few seconds before SIGTERM.
    const double grace = doneCount_ == N_ ? now() + 5.0 : now();
    for (auto& w : workers_) {
      while (w.pid > 0 && !w.exited && now() < grace) {
        if (waitpid(w.pid, nullptr, WNOHANG) == w.pid) w.exited = true;
        else usleep(5000);
      }
    }
    for (auto& w : workers_)
      if (w.pid > 0 && !w.exited) kill(w.pid, SIGTERM);
    const double deadline = now() + 2.0;
    for (auto& w : workers_) {
      while (w.pid > 0 && !w.exited) {
        int status = 0;
        const pid_t r = waitpid(w.pid, &status, WNOHANG);
        if (r == w.pid || r < 0) {
          w.exited = true;
          break;
        }
        if (now() > deadline) kill(w.pid, SIGKILL);
        usleep(10000);
      }
    }
    if (!controlEp_.empty()) {  // empty: the run failed before its sockets existed
      for (int r = 0; r < N_; ++r) unlink((peerEp(r).substr(6)).c_str());
      unlink(controlEp_.substr(6).c_str());
    }
    if (opt_.progress) progressLine_.finish();
  }

  json finalDoc() {
    doc_["launcher"]["heartbeat_unix_s"] = unixNow();
    json d = doc_;
    d["summary"] = summarizeSteps(d["steps"], d["evals"]);
    return d;
  }

  // result.json rewritten at least every kHeartbeatWriteS (its launcher.heartbeat_unix_s is what a
  // reader on another host judges a live run by: runtime::resultStatus).
  void writeHeartbeat() {
    if (now() - lastWrite_ < kHeartbeatWriteS) return;
    writeJsonAtomically(resultPath_, finalDoc());
    lastWrite_ = now();
  }

  // One malformed message from a holder of the secret: refused, counted, the first 20 kept.
  void badMessage(const std::string& socket, const std::string& problem) {
    ++badMessages_;
    std::fprintf(stderr, "slowpipe: coordinator: refused a malformed %s message: %s\n", socket.c_str(), problem.c_str());
    if (badFirst_.size() < 20) badFirst_.push_back({{"socket", socket}, {"problem", problem}});
  }

  static constexpr double kCalibrationLimitS = 120;  // the longest a link's calibration may take
  static constexpr double kSilentS = 3.0;  // external: a rank this long without a record or heartbeat is gone
  static constexpr double kStallS = 2.5;   // external: a 100 ms poll returning this late means it did not run
  static constexpr double kHeartbeatWriteS = 5.0;  // result.json's heartbeat, at least this often
  static constexpr int64_t kRendezvousMaxBytes = 64 << 10;
  static constexpr int64_t kControlMaxBytes = int64_t{256} << 20;
  ProgressLine progressLine_;
  int64_t badMessages_ = 0;
  json badFirst_ = json::array();
  bool readySent_ = false;
  const RunSpec& spec_;
  LaunchOptions opt_;
  int S_;
  RankLayout layout_;  // (stage, replica) <-> rank
  int N_;              // worker processes: stages x replicas
  std::vector<Worker> workers_;
  std::unique_ptr<emulator::NetnsFabric> fabric_;
  std::string resultPath_, specPath_, controlEp_;
  json doc_;
  std::map<int64_t, std::map<int, json>> pending_;
  std::map<int, json> hellos_, timelines_;
  struct TraceCursor {
    int edge, from;
    emulator::BandwidthTrace trace;
    size_t next;
  };
  std::vector<TraceCursor> traces_;
  std::vector<int> cpus_;  // cpu per rank when pinned
  std::string error_;
  int doneCount_ = 0;
  bool cpuSampled_ = false;
  double cpuSampledAt_ = 0;
  double start_ = 0, lastProgress_ = 0, lastWrite_ = 0;
  int64_t totalSteps_ = -1;
};

}  // namespace

int launchInterrupted() { return gInterrupt.load(); }

int launchRun(const RunSpec& spec, const LaunchOptions& opt) {
  Launcher l(spec, opt);
  return l.run();
}

}  // namespace slowpipe::runtime
