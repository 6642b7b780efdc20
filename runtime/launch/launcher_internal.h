// The launcher's parts (runtime/launch/launcher.h is the interface): one Launcher per run, its
// definitions spread over launcher.cc (the run, its result file), launcher_links.cc (link setup
// per backend, calibration, traces), launcher_local.cc (the local process group and its
// supervision), launcher_external.cc (the coordinator of workers started by mpirun/srun/torchrun:
// rendezvous, membership by heartbeats and socket monitor), launcher_records.cc (records into the
// result: steps, evaluations, timelines, progress). Internal: only those files include it.
#pragma once
// Launcher: process management, record collection, result assembly (see launcher.h).
#include "runtime/launch/launcher.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <zmq.hpp>

#include "emulator/calibrate.h"
#include "emulator/netns.h"
#include "emulator/node_line.h"
#include "emulator/shaped_socket.h"
#include "runtime/comm/link_table.h"
#include "runtime/dp/dp.h"
#include "runtime/exec/ranks.h"
#include "runtime/launch/listen_guard.h"
#include "runtime/launch/rendezvous.h"
#include "runtime/launch/security.h"
#include "runtime/launch/worker.h"
#include "runtime/model/data.h"
#include "runtime/records/progress.h"
#include "runtime/records/records.h"
#include "runtime/records/result.h"

namespace slowpipe::runtime::detail {

namespace fs = std::filesystem;
using nlohmann::json;

extern std::atomic<int> gInterrupt;
void onInterrupt(int sig);
double now();
double unixNow();

struct Worker {
  pid_t pid = -1;
  bool done = false, exited = false;
  int status = 0;
  int64_t lastStep = -1;
  long cpuAtProgress =
      0;  // CPU ticks when a hang was first suspected (no record for half the timeout)
};

// zmq::poll that returns 0 when a signal interrupts it (EINTR), so that the caller's signal check
// names the signal; other errors throw as before.
int pollOrInterrupted(zmq::pollitem_t* items, int n, int ms);
int pollControl(zmq::socket_t& control, int ms);
// What is wrong with a rendezvous request / a worker's record, or "" (launcher.cc says what is
// checked).
std::string requestProblem(const json& req);
std::string recordProblem(const json& rec);

// Exit statuses of a worker's child side before exec (spawn()).
constexpr int kExitNoPin = 124, kExitNoLog = 125, kExitNoExec = 127;
std::string describeExit(int status);

class ExternalCoordinator;  // launcher_external.cc

class Launcher {
 public:
  Launcher(const RunSpec& spec, const LaunchOptions& opt)
      : spec_(spec),
        opt_(opt),
        S_(spec.pipeline.stages),
        layout_(rankLayout(spec)),
        N_(layout_.size()),
        workers_(layout_.size()) {}
  // Never throws: every failure, setup included, ends in a result.json with status "failed" and
  // the reason (an exception escaping here would terminate a coordinator thread or a sweep).
  int run();

 private:
  friend class ExternalCoordinator;
  // The last write of result.json (short form on a full disk); 1 when even that failed.
  int writeResult(int rc);
  // Who writes this result (a reader on the same host tells a dead writer by its pid) and when it
  // last did (a reader elsewhere tells a dead writer by a stale heartbeat): see resultStatus.
  json launcherInfo() const;
  void setupNetwork();
  void setupFabric(const emulator::Topology& topo);       // backend tc without network.nodes
  void flagBimodalLinks(const emulator::Topology& topo);  // backend user, network.model tcp
  void shareAccessLinks();
  // Records what the delay lines' forwarding cost (network.forwarding_cpu_s, and its share of this
  // machine's CPU over the lines' life) and says so on stderr past 5%.
  void noteForwardingCost(double cpuS, double wallS);
  void setupNodeLine();
  // Calibrates every distinct directed link of the pipeline (traffic only on loopback or inside
  // the project's namespaces) and flags the run when a link misses its rate by more than 3%.
  void calibrate(const emulator::Topology& topo);
  emulator::CalibrationOptions calibrationOf(const emulator::LinkSpec& l,
                                             const std::string& name) const;
  void spawn(int r);
  // runtime.pin_cores: one worker per CPU of this process's affinity mask, if there are enough.
  void planPlacement();
  std::string peerEp(int r) const { return controlEp_ + "-w" + std::to_string(r); }
  int supervise();
  // Where rank r's neighbours and replicas take its messages (from their hellos), and its links.
  json peerTable(int r);
  const LinkTable& links();
  std::vector<std::pair<int, int>> pipelineEdges() const;
  int edgeBetween(int a, int b) const;
  // External bootstrap (LaunchOptions::External): the workers join at the rendezvous, send
  // records and heartbeats to the control socket; the events socket carries the coordinator's
  // heartbeat and, at the end, "end" or "abort" with the reason.
  int superviseExternal();
  // Sender and receiver codec states must be bit-identical across every link, both directions,
  // and every data-parallel codec pair, each reported by both of its ends (codecStatesProblem).
  int checkCodecStates();
  // One record from a worker. Returns false on an error record (error_ says what).
  bool handle(const json& rec);
  // The last step's (runtime.timeline "all": every step's) events of every stage, on one time axis
  // (all workers share the host's monotonic clock), in the simulator's timeline schema.
  void recordTimeline();
  // Kernel backend with bandwidth traces: the launcher changes the HTB rate of each traced
  // direction when the trace says (time 0 = when the workers were started).
  void applyTraces();
  // Poll interval: 100 ms, shorter when a trace point is due sooner.
  int pollMs() const;
  // /proc/<pid>/stat: state letter and CPU ticks (user + system).
  static std::pair<char, long> procState(pid_t pid);
  // Which rank hangs? Neighbours of a hung stage are blocked waiting for it, so "fewest steps"
  // cannot tell. A stopped (T) or uninterruptible (D) process is the culprit; otherwise the one
  // that burned CPU without progress (a busy loop); otherwise the one with the fewest steps.
  std::string diagnoseHang();
  void onStep(const json& rec);
  void onEval(const json& rec);
  void progress(const json& st);
  int64_t totalSteps();  // computed once: it reads the token file
  int fail(const std::string& reason);
  void stopWorkers();
  json finalDoc();
  // result.json rewritten at least every kHeartbeatWriteS (its launcher.heartbeat_unix_s is what a
  // reader on another host judges a live run by: runtime::resultStatus).
  void writeHeartbeat();
  // One malformed message from a holder of the secret: refused, counted, the first 20 kept.
  void badMessage(const std::string& socket, const std::string& problem);
  json refusalsReport() const;
  bool handleChecked(const zmq::message_t& m);
  std::string exitedWorker(
      zmq::socket_t& control);  // local: a worker that ended before its "done"  // handle() of a
                                // record not yet parsed or checked

  static constexpr double kCalibrationLimitS = 120;  // the longest a link's calibration may take
  static constexpr double kSilentS =
      3.0;  // external: a rank this long without a record or heartbeat is gone
  static constexpr double kStallS =
      2.5;  // external: this process not run this long is a stall (StallWatch)
  static constexpr double kHeartbeatWriteS = 5.0;  // result.json's heartbeat, at least this often
  static constexpr int64_t kRendezvousMaxBytes = 64 << 10;
  static constexpr int64_t kControlMaxBytes = int64_t{256} << 20;
  ProgressLine progressLine_;
  int64_t badMessages_ = 0;
  json badFirst_ = json::array();
  json coordinatorRefusals_;            // the coordinator's sockets (null: none watched)
  json rankRefusals_ = json::object();  // rank -> what its sockets refused (from its "done")
  bool readySent_ = false;
  const RunSpec& spec_;
  LaunchOptions opt_;
  int S_;
  RankLayout layout_;  // (stage, replica) <-> rank
  int N_;              // worker processes: stages x replicas
  std::vector<Worker> workers_;
  std::unique_ptr<emulator::NetnsFabric> fabric_;
  std::unique_ptr<emulator::NodeLine> nodeLine_;  // tc with network.nodes
  std::string resultPath_, specPath_, controlEp_;
  ResultBuilder result_;  // result.json (runtime/records/records.h)
  std::map<int64_t, std::map<int, RankStepRecord>> pending_;  // steps not every rank reported yet
  std::map<int, json> hellos_, timelines_;
  std::unique_ptr<LinkTable> links_;  // links(): made when the first peer table goes out
  int accessFd_ = -1;  // network.nodes: the access links' shared memory (workers inherit it)
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
  double traceOrigin_ = -1;  // time 0 of the links' traces and the first step (peerTable)
  static constexpr double kStartMarginS = 0.2;  // from the peer tables to the first step
  double connectMarginS() const;  // and, where the kernel carries the delay, 4 RTT more
};

}  // namespace slowpipe::runtime::detail
