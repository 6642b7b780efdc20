// Launcher: the local process group: spawn, placement, supervision, stop, hang diagnosis (see
// launcher_internal.h).
#include "runtime/launch/launcher_internal.h"

namespace slowpipe::runtime::detail {

void Launcher::spawn(int r) {
  const std::string log =
      (fs::path(opt_.outDir) / ("worker-" + std::to_string(r) + ".log")).string();
  std::vector<std::string> args = {
      "slowpipe",  "worker",   "--spec",  specPath_, "--rank",         std::to_string(r),
      "--control", controlEp_, "--peers", peerEp(r), "--launcher-pid", std::to_string(getpid())};
  if (nodeLine_) {  // network.nodes on tc: the rank's node's namespace and address, toward both
                    // neighbours
    const int node = links().rankNodes().at(r);
    args.insert(args.end(), {"--netns", nodeLine_->nsName(node), "--bind-prev",
                             nodeLine_->address(node), "--bind-next", nodeLine_->address(node)});
  } else if (fabric_) {
    // The rank's namespace and its addresses; its links (the kernel paces them, who adds which
    // delay) come with its peer table.
    // Each side binds on the edge toward that neighbour (around the ring with model chunks).
    args.insert(args.end(), {"--netns", fabric_->nsName(r)});
    const RankId id = layout_.id(r);
    if (const int p = protocol::neighbourStage(layout_, id.stage, Action::Peer::kPrev); p >= 0)
      args.insert(args.end(),
                  {"--bind-prev", fabric_->address(edgeBetween(p, id.stage), id.stage)});
    if (const int n = protocol::neighbourStage(layout_, id.stage, Action::Peer::kNext); n >= 0)
      args.insert(args.end(),
                  {"--bind-next", fabric_->address(edgeBetween(id.stage, n), id.stage)});
  }
  // Everything the child needs is built before fork: the child only redirects and execs.
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // This environment, with glibc's malloc asking for huge pages (hugePageTunables): the worker
  // then needs no second start to get it.
  const std::string tunables = hugePageTunables();
  std::vector<std::string> envStrings;
  for (char** e = environ; *e; ++e)
    if (tunables.empty() || std::strncmp(*e, "GLIBC_TUNABLES=", 15) != 0) envStrings.push_back(*e);
  if (!tunables.empty()) envStrings.push_back("GLIBC_TUNABLES=" + tunables);
  std::vector<char*> envp;
  for (auto& e : envStrings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const int fd =
      createFileNoFollow(log);  // a link planted at worker-N.log is refused, its target untouched
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    throw std::runtime_error("fork failed: " + std::string(std::strerror(errno)));
  }
  const int cpu = r < static_cast<int>(cpus_.size()) ? cpus_[r] : -1;
  if (pid == 0) {
    // Only async-signal-safe calls here; a failure exits with a status describeExit names.
    if (dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
      _exit(kExitNoLog);  // dup2 clears O_CLOEXEC on the copies
    if (cpu >= 0) {       // inherited by everything the worker starts (torch's threads too)
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      if (sched_setaffinity(0, sizeof set, &set) != 0) {
        dprintf(2, "slowpipe: sched_setaffinity(CPU %d) failed: %s\n", cpu, strerror(errno));
        _exit(kExitNoPin);
      }
    }
    execve(opt_.exe.c_str(), argv.data(), envp.data());
    dprintf(2, "slowpipe: cannot execute '%s': %s\n", opt_.exe.c_str(), strerror(errno));
    _exit(kExitNoExec);
  }
  close(fd);
  workers_[r].pid = pid;
  const RankId id = layout_.id(r);
  result_["workers"].push_back({{"rank", r},
                                {"stage", id.stage},
                                {"replica", id.replica},
                                {"pid", pid},
                                {"cpu", cpu >= 0 ? json(cpu) : json("any")}});
}

// runtime.pin_cores: one worker per CPU of this process's affinity mask, if there are enough.
void Launcher::planPlacement() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> allowed;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) allowed.push_back(c);
  json placement = {
      {"requested", spec_.runtime.pinCores}, {"cpus_available", allowed}, {"workers", N_}};
  if (spec_.runtime.pinCores && static_cast<int>(allowed.size()) >= N_) {
    cpus_.assign(allowed.begin(), allowed.begin() + N_);
    placement["pinned"] = true;
  } else {
    placement["pinned"] = false;
    if (spec_.runtime.pinCores) {
      placement["reason"] =
          std::to_string(N_) + " workers but " + std::to_string(allowed.size()) + " CPUs";
      std::fprintf(stderr, "slowpipe: runtime.pin_cores: not pinned (%d workers, %zu CPUs)\n", N_,
                   allowed.size());
    }
  }
  result_["placement"] = placement;
}

int Launcher::supervise() {
  zmq::context_t ctx(1);
  controlEp_ = "ipc:///tmp/slowpipe-" + std::to_string(getpid()) + "-" +
               std::to_string(static_cast<long>(now() * 1000) % 1000000);
  zmq::socket_t control(ctx, zmq::socket_type::pull);
  control.set(zmq::sockopt::maxmsgsize, kControlMaxBytes);
  ListenGuard guard(ctx);  // handshake timeout and refusals of the sockets this launcher binds
  guard.watch(control, "control", false);
  control.bind(controlEp_);
  std::vector<std::unique_ptr<zmq::socket_t>> peers;
  for (int r = 0; r < N_; ++r) {
    peers.push_back(std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::push));
    peers.back()->set(zmq::sockopt::linger, 0);
    peers.back()->set(zmq::sockopt::sndtimeo, 5000);  // a worker connects before its hello
    peers.back()->set(zmq::sockopt::maxmsgsize, int64_t{4096});  // a PUSH takes nothing in
    guard.watch(*peers.back(), "peer table of rank " + std::to_string(r), false);
    peers.back()->bind(peerEp(r));
  }
  struct sigaction sa {};
  sa.sa_handler = onInterrupt;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);  // an ssh session closing: stopped like SIGTERM, with a result
  start_ = now();
  result_["workers"] = json::array();
  planPlacement();
  for (int r = 0; r < N_; ++r) spawn(r);
  writeJsonAtomically(resultPath_, finalDoc());
  lastProgress_ = now();
  bool sentPeers = false;
  while (doneCount_ < N_) {
    pollControl(control, pollMs());
    applyTraces();
    if (coordinatorRefusals_.is_null() ||
        guard.refused() != coordinatorRefusals_.value("count", int64_t{0}))
      coordinatorRefusals_ = guard.report(0);  // rebuilt only when something was refused
    writeHeartbeat();
    zmq::message_t m;
    while (control.recv(m, zmq::recv_flags::dontwait))
      if (!handleChecked(m)) return fail(error_);
    if (!sentPeers && static_cast<int>(hellos_.size()) == N_) {
      for (int r = 0; r < N_; ++r) {
        const json table = peerTable(r);
        if (!peers[r]->send(zmq::buffer(table.dump()), zmq::send_flags::none))
          return fail("rank " + std::to_string(r) + " did not take its peer table within 5 s");
      }
      sentPeers = true;
    }
    if (gInterrupt)
      return fail(std::string("launcher interrupted by signal ") +
                  std::to_string(gInterrupt.load()));
    if (const std::string why = exitedWorker(control); !why.empty()) return fail(why);
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

// A worker that exited before its "done" (or not cleanly), as the run's reason; "" while none has.
// Records sent just before an exit (its "done", or its error message) may still be on their way
// through the socket: a clean exit waits up to 2 s for its "done".
std::string Launcher::exitedWorker(zmq::socket_t& control) {
  zmq::message_t m;
  for (int r = 0; r < N_; ++r) {
    Worker& w = workers_[r];
    int status = 0;
    if (w.exited || waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
    w.exited = true;
    w.status = status;
    const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    for (const double until = now() + (clean ? 2.0 : 0.2); !w.done && now() < until;) {
      pollControl(control, 20);
      while (control.recv(m, zmq::recv_flags::dontwait))
        if (!handleChecked(m)) return error_;
    }
    if (clean && w.done) continue;
    // A crash names itself in the rank's log (runtime/launch/worker.h installCrashReport), with the
    // plug-in it happened in.
    const std::string log =
        (fs::path(opt_.outDir) / ("worker-" + std::to_string(r) + ".log")).string();
    const std::string crash = WIFSIGNALED(status) ? crashLineIn(log) : "";
    return "rank " + std::to_string(r) + " (pid " + std::to_string(w.pid) + ") " +
           describeExit(status) +
           (w.lastStep >= 0 ? " after step " + std::to_string(w.lastStep)
                            : " before its first step") +
           (crash.empty() ? "" : "; its log: " + crash);
  }
  return "";
}

// Where the kernel carries the links' delay (tc, tc-dev), a connection's TCP handshake and
// ZeroMQ's greeting and READY exchange take about three round trips before its first message can
// go: four round trips of the slowest link more before the first step, so that step 0 times the
// training, not the connection set-up (which the links' models do not bill, and a real run does
// once). On the user backend the delays are stamped and the connections are on loopback: none.
double Launcher::connectMarginS() const {
  if (spec_.network.backend == "user") return 0;
  const emulator::Topology topo = emulator::topologyFromJson(spec_.network.links, "network.links");
  double oneWay = topo.defaultLink.latencyS + 3 * topo.defaultLink.jitterS;
  for (const auto& [pair, l] : topo.overrides)
    oneWay = std::max(oneWay, l.latencyS + 3 * l.jitterS);
  return 4 * 2 * oneWay;
}

// Where rank r's neighbours and replicas take its messages (from their hellos).
json Launcher::peerTable(int r) {
  // Time 0 of every link's bandwidth trace and the run's first step on every rank (each waits for
  // it), as the simulator's time 0: a moment after the tables go out, for the ranks to connect.
  if (traceOrigin_ < 0) {
    traceOrigin_ = now() + kStartMarginS + connectMarginS();
    result_["trace_origin_s"] = traceOrigin_ - start_;  // on the steps' wall_s scale
  }
  const RankId id = layout_.id(r);
  json table = {{"pipeline", json::object()},
                {"dp_peers", json::object()},
                {"trace_origin_s", traceOrigin_},
                {"links", links().ofRankJson(r)}};
  // Each pipeline peer's endpoint for what this rank sends it (one per peer: with two stages in
  // a ring the previous and the next stage are one peer).
  for (const auto side : {Action::Peer::kPrev, Action::Peer::kNext})
    if (const int p = protocol::pipelinePeer(layout_, r, side); p >= 0)
      table["pipeline"][std::to_string(p)] = hellos_[p]["pipeline"].value(std::to_string(r), "");
  // Replica q's endpoint for what this replica sends it.
  for (int q = 0; q < layout_.replicas; ++q)
    if (q != id.replica)
      table["dp_peers"][std::to_string(q)] =
          hellos_[layout_.rank({id.stage, q})]["dp"][std::to_string(id.replica)];
  return table;
}

// The run's link table as this backend carries it: the kernel paces the pipeline's rates on tc
// (this host's namespaces) and tc-dev (each sender's host); the path carries the delay where it
// can (tc: netem or the delay line between the namespaces; tc-dev: netem on the sender's host,
// from its hello), else the receiver adds it.
const LinkTable& Launcher::links() {
  if (!links_) {
    LinkCarriage c;
    const std::string& backend = spec_.network.backend;
    c.kernelPacesRate = backend == "tc" || backend == "tc-dev";
    if (backend == "tc")
      c.pathDelays = [this](int) { return nodeLine_ || (fabric_ && fabric_->pathCarriesDelay()); };
    if (backend == "tc-dev")
      c.pathDelays = [this](int src) {
        return hellos_.count(src) &&
               hellos_[src].value("kernel", json::object()).value("netem", false);
      };
    links_ = std::make_unique<LinkTable>(spec_, c);
  }
  return *links_;
}

// /proc/<pid>/stat: state letter and CPU ticks (user + system).
std::pair<char, long> Launcher::procState(pid_t pid) {
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
std::string Launcher::diagnoseHang() {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  int culprit = -1;
  std::string why;
  double busiest = 0;
  for (int r = 0; r < N_; ++r) {
    const auto [state, cpu] = procState(workers_[r].pid);
    if (state == 'T' || state == 't' || state == 'D') {
      culprit = r;
      why = std::string("process state ") + state +
            (state == 'D' ? " (uninterruptible)" : " (stopped)");
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
  return "rank " + std::to_string(culprit) + " made no progress for " +
         std::to_string(spec_.runtime.stepTimeoutS) + " s (runtime.step_timeout_s; " + why +
         "); last step " + std::to_string(workers_[culprit].lastStep);
}

void Launcher::stopWorkers() {
  // After a successful run the workers are on their way out (flushing sockets, freeing codec
  // state): give them a few seconds before SIGTERM.
  const double grace = doneCount_ == N_ ? now() + 5.0 : now();
  for (auto& w : workers_) {
    while (w.pid > 0 && !w.exited && now() < grace) {
      if (waitpid(w.pid, nullptr, WNOHANG) == w.pid)
        w.exited = true;
      else
        usleep(5000);
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

}  // namespace slowpipe::runtime::detail
