// Launcher: the run, its result file, the shared helpers (see launcher_internal.h).
#include "runtime/launch/launcher_internal.h"

#include <algorithm>
#include <thread>

#include "emulator/command.h"
#include "runtime/model/plan.h"
#include "runtime/model/safetensors.h"

namespace slowpipe::runtime::detail {

std::atomic<int> gInterrupt{0};
void onInterrupt(int sig) { gInterrupt = sig; }

double now() { return emulator::monotonicNow(); }
double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

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
    return req.contains(k) && req[k].is_number_integer()
               ? ""
               : std::string("'") + type + "' without an integer '" + k + "'";
  };
  if (type == "time") return "";
  if (type == "table") return needInt("rank");
  if (type != "join") return "unknown request type '" + type.substr(0, 40) + "'";
  for (const char* k : {"rank", "size"})
    if (const std::string p = needInt(k); !p.empty()) return p;
  if (!req.contains("key") || !req["key"].is_string() || req["key"].get<std::string>().size() != 40)
    return "'join' without a 40-character Z85 'key'";
  for (const char* k : {"host", "address", "bootstrap"})
    if (req.contains(k) && !req[k].is_string())
      return std::string("'join' with a non-string '") + k + "'";
  if (req.contains("pid") && !req["pid"].is_number_integer())
    return "'join' with a non-integer 'pid'";
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

std::string describeExit(int status) {
  if (WIFSIGNALED(status)) return emulator::exitStatusText(status);
  const int code = WEXITSTATUS(status);
  const char* why =
      code == kExitNoPin
          ? " (could not be pinned to its CPU: sched_setaffinity failed, see its log)"
      : code == kExitNoLog  ? " (could not redirect its output to its log: dup2 failed)"
      : code == kExitNoExec ? " (the slowpipe binary could not be executed, see its log)"
                            : "";
  return emulator::exitStatusText(status) + why;
}

// Never throws: every failure, setup included, ends in a result.json with status "failed" and
// the reason (an exception escaping here would terminate a coordinator thread or a sweep).
int Launcher::run() {
  resultPath_ = (fs::path(opt_.outDir) / "result.json").string();
  specPath_ = (fs::path(opt_.outDir) / "spec.json").string();
  result_ = ResultBuilder(spec_, layout_, "running");
  result_["launcher"] = launcherInfo();
  int rc = 1;
  try {
    fs::create_directories(opt_.outDir);
    result_["inputs"] =
        specInputs(result_.doc()["spec"]);  // content digests of the files the spec loads
    // Environment (build provenance, host) is captured once, here, before any worker starts.
    result_["environment"] = environmentInfo("");
    writeJsonAtomically(specPath_, spec_.source.is_null() ? toJson(spec_) : spec_.source);
    const CorpusInfo corpus = prepareCorpus(spec_.data);
    result_["data"] = {{"dir", corpus.dir},
                       {"finetune_tokens", corpus.finetuneTokens},
                       {"pretrain_tokens", corpus.pretrainTokens}};
    if (!spec_.training.initCheckpoint.empty() && !fs::exists(spec_.training.initCheckpoint))
      throw std::invalid_argument("training.init_checkpoint: '" + spec_.training.initCheckpoint +
                                  "' does not exist (make it with `slowpipe pretrain`)");
    // The checkpoint's weights opened here (index or header only), so that a folder holding
    // config.json alone, or a damaged index, fails the run before any worker starts. External
    // launches leave it to the workers: their hosts hold their own copies.
    if (!spec_.model.checkpoint.empty() && !opt_.external.enabled) {
      const Checkpoint opened(spec_.model.checkpoint);
    }
    writeJsonAtomically(resultPath_, finalDoc());
    setupNetwork();
    shareAccessLinks();
    rc = opt_.external.enabled ? superviseExternal() : supervise();
  } catch (const std::exception& e) {
    rc = fail(std::string("launcher: ") + e.what());
    if (opt_.external.enabled && !readySent_ && opt_.external.ready) opt_.external.ready(e.what());
  }
  try {
    if (!opt_.external.enabled) stopWorkers();
    if (accessFd_ >= 0) {
      close(accessFd_);
      unsetenv(emulator::kAccessFdEnv);
      accessFd_ = -1;
    }
    if (fabric_)
      if (json lines = fabric_->lineStats(); !lines.is_null()) {
        // The delay lines' forwarding threads share the cores with the workers: their CPU time.
        double cpu = 0, wall = 0;
        for (const auto& l : lines)
          if (l["stats"].contains("forwarding")) {
            cpu += l["stats"]["forwarding"]["cpu_s"].get<double>();
            wall = std::max(wall, l["stats"]["forwarding"]["wall_s"].get<double>());
          }
        result_["network"]["delay_lines"] = std::move(lines);
        noteForwardingCost(cpu, wall);
      }
    fabric_.reset();
    if (nodeLine_) {
      nodeLine_->stop();
      result_["network"]["node_line"] = nodeLine_->stats();
      if (const auto& n = result_["network"]["node_line"]; n.contains("forwarding"))
        noteForwardingCost(n["forwarding"]["cpu_s"].get<double>(),
                           n["forwarding"]["wall_s"].get<double>());
      nodeLine_.reset();
    }
  } catch (const std::exception& e) {
    rc = fail(std::string("launcher: cleanup: ") + e.what());
  }
  return writeResult(rc);
}

// network.nodes: the access links' calendars in memory every worker inherits (a memfd: nothing
// to clean up after a crash), and which node each rank sits on, for the record.
void Launcher::shareAccessLinks() {
  if (spec_.network.nodes.is_null()) return;
  result_["network"]["nodes"] = links().nodesRecord();
  if (spec_.network.backend != "user") return;  // tc: the node line carries the access links
  if (opt_.external.enabled)
    throw std::invalid_argument(
        "network.nodes: access links are shared through memory the local launcher hands its "
        "workers; "
        "workers an external launcher (mpirun, srun) starts cannot share them");
  // Every link comes from the nodes: the paths the ranks use, each with the access links it books.
  json paths = json::array();
  for (int r = 0; r < N_; ++r)
    for (const auto& e : links().ofRank(r))
      if (e.src == r) paths.push_back(toJson(e));
  result_["network"]["links"] = {{"from", "network.nodes"}, {"paths", paths}};
  result_["network"].erase("dp_links");
  result_["network"]["mechanism"]["access_links"] =
      "user-space: the sender books its node's uplink, the core and the receiver's "
      "downlink in calendars the workers share (emulator/nodes.h)";
  accessFd_ = emulator::AccessLinks::createShared(links().accessCalendars());
  setenv(emulator::kAccessFdEnv, std::to_string(accessFd_).c_str(), 1);
}

// On the tc backend without netem, packets go through the delay lines' forwarding threads, which
// run on the cores the stages compute on: on 2 cores a 4-stage run at 200 Mbps / 25 ms computed
// 18-41% slower than on the user backend (results/README.md section 17). The run says how much.
void Launcher::noteForwardingCost(double cpuS, double wallS) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  result_["network"]["forwarding_cpu_s"] = cpuS;
  if (wallS <= 0) return;
  const double share = cpuS / (wallS * cores);
  result_["network"]["forwarding_cpu_share"] = share;
  if (share <= 0.05) return;
  // And what it cost the stages: each wake-up of a line takes a core from whatever ran there.
  std::string preempted;
  if (const json doc = result_.snapshot();
      doc.contains("summary") && doc["summary"].contains("stage_cpu")) {
    char b[160];
    std::snprintf(b, sizeof b,
                  "; each stage's process was preempted %.0f times a second (summary.stage_cpu)",
                  doc["summary"]["stage_cpu"]["preemptions_per_s"].get<double>());
    preempted = b;
  }
  std::fprintf(stderr,
               "slowpipe: note: the delay lines' forwarding took %.1f CPU-s, %.1f%% of this "
               "machine's %u cores over "
               "%.1f s; the stages computed on the rest (result: network.forwarding_cpu_s)%s\n",
               cpuS, 100 * share, cores, wallS, preempted.c_str());
}

// The last write of result.json (short form on a full disk); 1 when even that failed.
int Launcher::writeResult(int rc) {
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
json Launcher::launcherInfo() const {
  return {{"pid", getpid()}, {"host", hostName()}, {"heartbeat_unix_s", unixNow()}};
}

// Sender and receiver codec states must be bit-identical across every link, both directions,
// and every data-parallel codec pair, each reported by both of its ends (codecStatesProblem).
int Launcher::checkCodecStates() {
  const std::string problem = codecStatesProblem(result_.doc().value("codec_state", json::object()),
                                                 S_, layout_.replicas, layout_.chunks > 1);
  result_["codec_states_match"] = problem.empty();
  if (!problem.empty())
    return fail("codec state of a sender and its receiver differ after the run: " + problem);
  result_.ok();
  return 0;
}

// Poll interval: 100 ms, shorter when a trace point is due sooner.
int Launcher::pollMs() const {
  double wait = 0.1;
  for (const auto& t : traces_)
    if (t.next < t.trace.points().size())
      wait = std::min(wait, t.trace.points()[t.next].first - (now() - start_));
  return std::max(1, static_cast<int>(wait * 1000));
}

int64_t Launcher::totalSteps() {  // computed once: it reads the token file
  if (totalSteps_ < 0)
    totalSteps_ = Plan(spec_, "finetune").totalSteps;  // the workers' own data plan
  return totalSteps_;
}

int Launcher::fail(const std::string& reason) {
  result_.fail(reason);
  return 1;
}

json Launcher::finalDoc() {
  result_["launcher"]["heartbeat_unix_s"] = unixNow();
  result_["refused_connections"] = refusalsReport();
  result_["bad_messages"] = {{"count", badMessages_}, {"first", badFirst_}};
  return result_.snapshot();
}

// result.json rewritten at least every kHeartbeatWriteS (its launcher.heartbeat_unix_s is what a
// reader on another host judges a live run by: runtime::resultStatus).
void Launcher::writeHeartbeat() {
  if (now() - lastWrite_ < kHeartbeatWriteS) return;
  writeJsonAtomically(resultPath_, finalDoc());
  lastWrite_ = now();
}

// A record from the local control socket (ipc: this host's processes), checked as the external
// coordinator checks its own: malformed ones are counted, not parsed into an exception.
bool Launcher::handleChecked(const zmq::message_t& m) {
  const json rec = json::parse(m.to_string(), nullptr, false);
  if (const std::string problem = recordProblem(rec); !problem.empty()) {
    badMessage("control", problem);
    return true;
  }
  try {
    return handle(rec);
  } catch (const json::exception& e) {
    badMessage("control", rec.value("type", "?") + " record: " + e.what());
    return true;
  }
}

// What every listening socket refused (runtime/launch/listen_guard.h): the coordinator's and each
// rank's, summed by kind; count is the total.
json Launcher::refusalsReport() const {
  json total = {{"count", 0},
                {"by_kind", json::object()},
                {"coordinator", coordinatorRefusals_},
                {"ranks", rankRefusals_}};
  std::vector<json> parts;
  if (coordinatorRefusals_.is_object()) parts.push_back(coordinatorRefusals_);
  for (const auto& [r, j] : rankRefusals_.items()) parts.push_back(j);
  for (const json& j : parts) {
    total["count"] = total["count"].get<int64_t>() + j.value("count", int64_t{0});
    const json byKind =
        j.value("by_kind", json::object());  // named: a temporary's items() would dangle
    for (const auto& [kind, n] : byKind.items())
      total["by_kind"][kind] =
          total["by_kind"].value(kind, int64_t{0}) + (n.is_number_integer() ? n.get<int64_t>() : 0);
  }
  return total;
}

// One malformed message from a holder of the secret: refused, counted, the first 20 kept.
void Launcher::badMessage(const std::string& socket, const std::string& problem) {
  ++badMessages_;
  std::fprintf(stderr, "slowpipe: coordinator: refused a malformed %s message: %s\n",
               socket.c_str(), problem.c_str());
  if (badFirst_.size() < 20) badFirst_.push_back({{"socket", socket}, {"problem", problem}});
}

}  // namespace slowpipe::runtime::detail

namespace slowpipe::runtime {

int launchInterrupted() { return detail::gInterrupt.load(); }

int launchRun(const RunSpec& spec, const LaunchOptions& opt) {
  namespace fs = std::filesystem;
  // Before anything is written: the folder may hold another live run's files.
  FolderLock lock(opt.outDir, "run");
  // A result.json that is a folder: no result could ever be written (it ended in a JSON parse
  // error), so the run is refused here; every other setup failure is a failed result.
  {
    const fs::path p = fs::path(opt.outDir) / "result.json";
    std::error_code ec;
    const auto st = fs::symlink_status(p, ec);
    if (!ec && fs::exists(st) && !fs::is_regular_file(st) && !fs::is_symlink(st))
      throw std::invalid_argument(
          "'" + p.string() + "' is a " + (fs::is_directory(st) ? "folder" : "special file") +
          ", not a file: the run writes its result there; remove it or choose another --out");
  }
  detail::Launcher l(spec, opt);
  return l.run();
}

}  // namespace slowpipe::runtime
