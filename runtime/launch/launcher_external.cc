// Launcher: the coordinator of externally started workers (see launcher_internal.h): the
// rendezvous (joins, the peer tables), membership (heartbeats, the control connections' socket
// monitor), the workers' records; its events socket carries the coordinator's heartbeat and, at
// the end, "end" or "abort" with the reason.
#include "runtime/launch/launcher_internal.h"

#include <thread>

namespace slowpipe::runtime::detail {

// Whether this process ran at all: a thread that notes the time every 50 ms. A SIGSTOP (a debugger,
// swap) stops it with the rest of the process; once continued, the gap it saw, or the one it has
// not yet seen (the main thread may run first), is the stall. Measured around the whole loop, not
// only its poll: a stop that lands while records are handled is a stall too.
class StallWatch {
 public:
  StallWatch() : last_(now()), thread_([this] { tick(); }) {}
  ~StallWatch() {
    stop_ = true;
    thread_.join();
  }
  // The longest time this process did not run since the last call (seconds).
  double take() {
    const double pending = now() - last_.load();
    return std::max(worst_.exchange(0.0), pending);
  }

 private:
  void tick() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const double t = now(), gap = t - last_.exchange(t);
      if (gap > worst_.load()) worst_ = gap;
    }
  }
  std::atomic<double> last_, worst_{0.0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One run of the external coordinator: its sockets and what it knows of each rank.
class ExternalCoordinator {
 public:
  explicit ExternalCoordinator(Launcher& l)
      : l_(l),
        ex_(l.opt_.external),
        gate_(ctx_),
        rv_(ctx_, zmq::socket_type::router),
        control_(ctx_, zmq::socket_type::pull),
        events_(ctx_, zmq::socket_type::pub),
        refusals_(ctx_),
        lastSeen_(l.N_, 0) {}

  int run() {
    listen();
    while (l_.doneCount_ < l_.N_) {
      zmq::pollitem_t items[] = {{static_cast<void*>(control_), 0, ZMQ_POLLIN, 0},
                                 {static_cast<void*>(rv_), 0, ZMQ_POLLIN, 0}};
      pollOrInterrupted(items, 2, 100);
      // This process did not run for seconds (SIGSTOP, a debugger, swap), and every rank has given
      // up on its heartbeat meanwhile, so say so first.
      if (const std::string why = stalled(); !why.empty()) return finish(l_.fail(why));
      l_.writeHeartbeat();
      if (now() - lastBeat_ >= 0.5) {
        publish({{"type", "beat"}});
        lastBeat_ = now();
      }
      serveRendezvous();
      // A signal first: rank 0's worker shares this process, and its blocking call returns EINTR
      // ("Interrupted system call") as an error record the moment the signal lands.
      if (gInterrupt) return finish(l_.fail(membershipProblem()));
      if (!collectRecords()) return finish(l_.fail(gInterrupt ? membershipProblem() : l_.error_));
      watchConnections();
      if (!tablesSent_ && static_cast<int>(l_.hellos_.size()) == l_.N_ &&
          static_cast<int>(tableIds_.size()) == l_.N_) {
        for (const auto& [r, id] : tableIds_) reply(id, l_.peerTable(r));
        tablesSent_ = true;
      }
      // A stop that landed after the poll is the cause of any silence seen now.
      if (const std::string why = stalled(); !why.empty()) return finish(l_.fail(why));
      if (const std::string why = membershipProblem(); !why.empty()) return finish(l_.fail(why));
    }
    return finish(l_.checkCodecStates());
  }

 private:
  // Binds the rendezvous (the secret's keys), the control and events sockets (this run's keys).
  void listen() {
    gate_.allow("rendezvous", curveKeyPairFromSecret(ex_.secret, "rendezvous/client").publicKey);
    const std::string ip = resolveIPv4(ex_.listenHost);
    for (auto* s : {&rv_, &control_, &events_}) s->set(zmq::sockopt::linger, 1000);
    // Message limits: rendezvous requests are a few hundred bytes; a worker's records are small
    // but its "done" carries its timeline (runtime.timeline "all": every step's events); the
    // events socket only takes subscriptions.
    makeCurveServer(rv_, curveKeyPairFromSecret(ex_.secret, "rendezvous/server"), "rendezvous",
                    Launcher::kRendezvousMaxBytes);
    makeCurveServer(control_, me_, "control", Launcher::kControlMaxBytes);
    makeCurveServer(events_, me_, "control", 4096);
    refusals_.watch(rv_, "rendezvous", true);
    refusals_.watch(events_, "events", true);
    rvEp_ = "tcp://" + ip + ":" + std::to_string(ex_.listenPort);
    try {
      rv_.bind(rvEp_);
    } catch (const zmq::error_t& e) {
      throw std::runtime_error("rendezvous: cannot listen on " + rvEp_ + ": " + e.what());
    }
    // Connections to the control socket, by the peer's address:port: a worker's hello names its
    // end of the connection, so a connection that drops before its "done" names the rank at once.
    refusals_.watch(control_, "control", true, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED);
    control_.bind("tcp://" + ip + ":*");
    events_.bind("tcp://" + ip + ":*");
    controlEp_ = control_.get(zmq::sockopt::last_endpoint);
    eventsEp_ = events_.get(zmq::sockopt::last_endpoint);
    l_.result_["bootstrap"] = {
        {"kind", "external"},
        {"rendezvous", rvEp_},
        {"security", "CURVE (keys per run; rendezvous keys from the shared secret)"}};
    l_.result_["workers"] = json::array();
    l_.readySent_ = true;
    if (ex_.ready) ex_.ready("");
    struct sigaction sa {};
    sa.sa_handler = onInterrupt;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);  // an ssh session closing: stopped like SIGTERM, with a result
    l_.start_ = now();
    l_.lastProgress_ = now();
  }

  std::string stalled() {
    stallWorst_ = std::max(stallWorst_, stall_.take());
    if (stallWorst_ <= Launcher::kStallS) return "";
    char text[200];
    std::snprintf(text, sizeof text,
                  "the coordinator (in rank 0's process, pid %d) did not run for %.1f s (process "
                  "stopped or starved); the ranks stop after 5 s without its heartbeat",
                  static_cast<int>(getpid()), stallWorst_);
    return text;
  }

  void reply(const std::string& id, const json& j) {
    rv_.send(zmq::buffer(id), zmq::send_flags::sndmore);
    rv_.send(zmq::message_t(), zmq::send_flags::sndmore);
    rv_.send(zmq::buffer(j.dump()), zmq::send_flags::none);
  }
  void publish(const json& j) { events_.send(zmq::buffer(j.dump()), zmq::send_flags::dontwait); }

  int finish(int rc) {
    // The result first: a worker in this process exits as soon as it hears "abort".
    if (rc == 0) l_.result_.ok();
    l_.coordinatorRefusals_ = refusals_.report();
    l_.coordinatorRefusals_["zap"] = gate_.refusals();
    writeJsonAtomically(l_.resultPath_, l_.finalDoc());
    for (int i = 0; i < 3;
         ++i) {  // a subscriber may miss one message; it acts on the first it gets
      publish(rc == 0 ? json{{"type", "end"}}
                      : json{{"type", "abort"}, {"reason", l_.result_.reason()}});
      usleep(100000);
    }
    return rc;
  }

  // Rendezvous requests: [routing id][empty][json]; a malformed one is refused and counted.
  void serveRendezvous() {
    std::vector<zmq::message_t> parts;
    while (true) {
      parts.clear();
      zmq::message_t part;
      if (!rv_.recv(part, zmq::recv_flags::dontwait)) break;
      parts.push_back(std::move(part));
      while (parts.back().more() && rv_.recv(part)) parts.push_back(std::move(part));
      const std::string id = parts[0].to_string();
      const json req =
          parts.size() == 3 ? json::parse(parts[2].to_string(), nullptr, false) : json();
      std::string problem = parts.size() != 3
                                ? "expected [empty][json] after the routing id, got " +
                                      std::to_string(parts.size() - 1) + " part(s)"
                                : requestProblem(req);
      if (problem.empty() && req["type"] == "table")
        problem = tableProblem(req["rank"].get<int64_t>());
      if (!problem.empty()) {  // refused, counted; the run goes on
        l_.badMessage("rendezvous", problem);
        reply(id, {{"error", "bad request: " + problem}});
        continue;
      }
      const std::string type = req["type"];
      if (type == "time")
        reply(id, {{"t", now()}});
      else if (type == "join")
        join(id, req);
      else
        tableIds_[req["rank"].get<int>()] = id;  // "table": requestProblem admits no other type
    }
  }

  // A "table" request may come only from a rank of this run that has joined (an unknown rank hung
  // the run until its step timeout: it was never range-checked).
  std::string tableProblem(int64_t r) const {
    if (r < 0 || r >= l_.N_)
      return "'table' for rank " + std::to_string(r) + ", not a rank of this run (0.." +
             std::to_string(l_.N_ - 1) + ")";
    if (!joins_.count(static_cast<int>(r)))
      return "'table' for rank " + std::to_string(r) + ", which has not joined";
    if (tableIds_.count(static_cast<int>(r)))
      return "'table' for rank " + std::to_string(r) + " asked twice";
    return "";
  }

  // A join: refused (world size, a taken or unknown rank) or taken; once every rank has joined,
  // each gets the spec, the endpoints and every rank's key.
  void join(const std::string& id, const json& req) {
    const int r = req.value("rank", -1), size = req.value("size", -1), N = l_.N_;
    if (size != N) {
      const std::string why =
          "rank " + std::to_string(r) + " was started with world size " + std::to_string(size) +
          "; this run has " + std::to_string(N) +
          " workers (pipeline.stages x pipeline.replicas = " + std::to_string(l_.S_) + " x " +
          std::to_string(l_.layout_.replicas) + ")";
      refusedJoins_[r] = why;
      reply(id, {{"error", why}});
    } else if (r < 0 || r >= N || joins_.count(r) || joined_) {
      const std::string why = "rank " + std::to_string(r) + " is not a free rank of this run (0.." +
                              std::to_string(N - 1) + (joins_.count(r) ? ", already joined" : "") +
                              ")";
      refusedJoins_[r] = why;
      reply(id, {{"error", why}});
    } else {
      joins_[r] = req;
      joinIds_[r] = id;
      gate_.allow("control", req.value("key", ""));
    }
    if (joined_ || static_cast<int>(joins_.size()) != N) return;
    json keys = json::object();
    for (const auto& [k, j] : joins_) keys[std::to_string(k)] = j["key"];
    for (const auto& [k, j] : joins_) {
      const RankId rid = l_.layout_.id(k);
      l_.result_["workers"].push_back({{"rank", k},
                                       {"stage", rid.stage},
                                       {"replica", rid.replica},
                                       {"host", j.value("host", "")},
                                       {"address", j.value("address", "")},
                                       {"pid", j.value("pid", 0)},
                                       {"bootstrap", j.value("bootstrap", "")}});
      reply(joinIds_[k], {{"spec", l_.spec_.source.is_null() ? toJson(l_.spec_) : l_.spec_.source},
                          {"control", controlEp_},
                          {"events", eventsEp_},
                          {"coordinator_key", me_.publicKey},
                          {"keys", keys}});
      lastSeen_[k] = now();
    }
    joined_ = true;
    l_.lastProgress_ = now();
  }

  // The workers' records and heartbeats; false on an error record (l_.error_ says what).
  bool collectRecords() {
    zmq::message_t m;
    while (control_.recv(m, zmq::recv_flags::dontwait)) {
      const json rec = json::parse(m.to_string(), nullptr, false);
      if (const std::string problem = recordProblem(rec); !problem.empty()) {
        l_.badMessage("control", problem);
        continue;
      }
      const int64_t r64 = rec["rank"].get<int64_t>();
      if (r64 < 0 || r64 >= l_.N_) {  // every rank from the wire is range-checked
        l_.badMessage("control", rec["type"].get<std::string>().substr(0, 40) +
                                     " record for rank " + std::to_string(r64) +
                                     ", not a rank of this run (0.." + std::to_string(l_.N_ - 1) +
                                     ")");
        continue;
      }
      const int r = static_cast<int>(r64);
      lastSeen_[r] = now();
      if (rec["type"] == "beat") continue;
      try {
        if (rec["type"] == "hello" && rec.contains("clock"))
          l_.result_["clock"][std::to_string(r)] = rec["clock"];
        if (rec["type"] == "hello" && !rec.value("control_from", "").empty())
          rankOfPeer_[rec["control_from"]] = r;
        if (!l_.handle(rec)) return false;
      } catch (const json::exception& e) {  // a field of the wrong type: refused, counted
        l_.badMessage("control", rec.value("type", "?") + " record: " + e.what());
      }
    }
    return true;
  }

  // The control connections as the socket monitor sees them: a rank whose connection drops
  // before its "done" is noted (membershipProblem names it after 0.5 s).
  void watchConnections() {
    refusals_.poll([&](const ListenGuard::Event& e) {
      if (e.event != ZMQ_EVENT_DISCONNECTED) return;
      const auto it = rankOfPeer_.find(e.peer);
      if (it != rankOfPeer_.end() && !l_.workers_[it->second].done)
        droppedAt_.emplace(it->second, now());
    });
  }

  // A rank's host as its join named it: the peer's own words, quoted and said to be (any holder of
  // the secret may join under any name), with the address its control connection came from.
  std::string claimedHost(int r) const {
    const auto it = joins_.find(r);
    std::string host = it == joins_.end() ? "?" : it->second.value("host", "?").substr(0, 64);
    for (char& ch : host)
      if (!std::isprint(static_cast<unsigned char>(ch))) ch = '?';
    std::string from;
    for (const auto& [peer, rank] : rankOfPeer_)
      if (rank == r) from = peer;
    return "host '" + host + "' as it said at its join" +
           (from.empty() ? "" : ", connected from " + from);
  }

  std::string lastStepOf(int r) const {
    return l_.workers_[r].lastStep >= 0 ? "; last step " + std::to_string(l_.workers_[r].lastStep)
                                        : "; before its first step";
  }

  // Why the run cannot go on, or "": a dropped connection, a silent rank, ranks that never
  // joined, a signal, no progress for the step timeout.
  std::string membershipProblem() {
    const int N = l_.N_;
    if (gInterrupt) {
      // Under mpirun/srun a SIGTERM usually follows a rank's death by milliseconds: say which
      // rank's connection had dropped, if one had.
      std::string why;
      for (const auto& [r, at] : droppedAt_)
        if (!l_.workers_[r].done) why += (why.empty() ? "" : ", ") + ("rank " + std::to_string(r));
      return std::string("coordinator interrupted by signal ") + std::to_string(gInterrupt.load()) +
             (why.empty() ? "" : "; before it, the connection of " + why + " had dropped (died?)");
    }
    for (const auto& [r, at] :
         droppedAt_)  // a dropped connection whose "done" has not come within 0.5 s
      if (!l_.workers_[r].done && now() - at > 0.5)
        return "rank " + std::to_string(r) + " (" + claimedHost(r) +
               ") lost its connection to the coordinator: it died or its host is unreachable" +
               lastStepOf(r);
    if (!joined_ && now() - l_.start_ > ex_.joinTimeoutS) {
      std::string missing;
      for (int r = 0; r < N; ++r)
        if (!joins_.count(r))
          missing += (missing.empty() ? "" : ", ") + std::to_string(r) +
                     (refusedJoins_.count(r) ? " (refused: " + refusedJoins_[r] + ")"
                                             : " (never asked to join)");
      return std::to_string(joins_.size()) + " of " + std::to_string(N) +
             " ranks joined the rendezvous at " + rvEp_ + " within " +
             std::to_string(static_cast<int>(ex_.joinTimeoutS)) + " s; missing: " + missing;
    }
    if (joined_)
      for (int r = 0; r < N; ++r)
        if (!l_.workers_[r].done && now() - lastSeen_[r] > Launcher::kSilentS)
          return "rank " + std::to_string(r) + " (" + claimedHost(r) + ") sent nothing for " +
                 std::to_string(static_cast<int>(Launcher::kSilentS)) +
                 " s: it died or its host is unreachable" + lastStepOf(r);
    if (joined_ && now() - l_.lastProgress_ > l_.spec_.runtime.stepTimeoutS)
      return l_.diagnoseHang();
    return "";
  }

  Launcher& l_;
  const LaunchOptions::External& ex_;
  zmq::context_t ctx_{1};
  CurveGate gate_;
  const CurveKeyPair me_ = newCurveKeyPair();
  zmq::socket_t rv_, control_, events_;
  ListenGuard refusals_;  // declared after the sockets it watches: its monitors close first
  std::string rvEp_, controlEp_, eventsEp_;
  std::map<std::string, int> rankOfPeer_;
  std::map<int, double> droppedAt_;  // rank -> when its control connection dropped
  std::map<int, json> joins_;
  std::map<int, std::string> joinIds_, tableIds_, refusedJoins_;  // refusedJoins_: rank -> why
  std::vector<double> lastSeen_;
  bool joined_ = false, tablesSent_ = false;
  double lastBeat_ = 0;
  StallWatch stall_;
  double stallWorst_ = 0;
};

int Launcher::superviseExternal() { return ExternalCoordinator(*this).run(); }

}  // namespace slowpipe::runtime::detail
