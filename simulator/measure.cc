// The profiler's measurements (see measure.h).
#include "simulator/measure.h"

#include <torch/torch.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "compression/codec.h"
#include "compression/frame.h"
#include "compression/timing.h"
#include "emulator/shaped_socket.h"
#include "runtime/dp/dp.h"
#include "runtime/dp/grad_sync.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/protocol.h"
#include "runtime/exec/schedule.h"
#include "runtime/exec/stage_runner.h"
#include "runtime/launch/launcher.h"
#include "runtime/records/result.h"
#include "simulator/codec_cost.h"

namespace slowpipe::simulator {
namespace {

using nlohmann::json;

// The upper median (0 of nothing).
double medianOf(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Forward/backward of one micro-batch and the optimizer step of every stage, timed with the code a
// worker runs (StageRunner), one stage at a time with the worker's thread count. Median of `reps`.
// Data-parallel host work of one stage under `v`'s compressor (GradientSync, the worker's code) at
// a step that exchanges (after qadam's warm-up): per round DpBegin (pack) and DpEnd (unpack), then
// OuterStep where the spec has one. Median of `reps`.
simulator::DpCost measureDpCost(const runtime::RunSpec& v, runtime::StageRunner& runner, int stage,
                                int reps) {
  const std::unique_ptr<runtime::GradientSync> made =
      runtime::makeGradientSync(v, {&runner}, stage);
  runtime::GradientSync& sync = *made;
  const runtime::DpShape dp = runtime::dpShape(v);
  int64_t g = std::max<int64_t>(0, dp.afterStepFrom);
  while (!dp.syncs(g)) ++g;
  std::vector<std::vector<double>> begin(dp.rounds), end(dp.rounds);
  std::vector<double> outer;
  std::vector<float> buf;
  for (int rep = 0; rep < reps + 1; ++rep) {  // rep 0 warms up
    if (dp.afterStep(g) && sync.replacesStep(g))
      sync.clipAndMomentum(1.0);  // qadam: the momentum to exchange
    for (int round = 0; round < dp.rounds; ++round) {
      const double t0 = nowSeconds();
      sync.pack(round, g, buf);
      const double t1 = nowSeconds();
      sync.unpack(round, g, buf);
      if (rep) {
        begin[round].push_back(t1 - t0);
        end[round].push_back(nowSeconds() - t1);
      }
    }
    if (dp.afterStep(g)) {
      const double t0 = nowSeconds();
      sync.outerStep(g, buf);
      if (rep) outer.push_back(nowSeconds() - t0);
    }
  }
  simulator::DpCost c;
  for (int round = 0; round < dp.rounds; ++round) {
    c.beginS.push_back(medianOf(begin[round]));
    c.endS.push_back(medianOf(end[round]));
  }
  c.outerStepS = medianOf(outer);
  return c;
}

// A compute-only backend (runtime/exec/executor.h): the profiler walks a stage's action list in the
// order of the schedule it profiles and times each compute action of one model chunk (the
// runner's) on random inputs, as the worker runs it. Messages, GradNorm and the DP actions cost
// nothing here: codecs, the transport and the DP host work are measured on their own.
class TimingBackend : public runtime::Backend {
 public:
  // idleS > 0: the backend sleeps that long before each compute action, as a worker blocked on a
  // receive does (StageCost::idle).
  TimingBackend(runtime::StageRunner& runner, const runtime::RunSpec& spec, int chunk,
                double idleS = 0)
      : runner_(runner),
        chunk_(chunk),
        idleS_(idleS),
        b_(spec.pipeline.microBatchSize),
        T_(spec.model.seqLen),
        C_(spec.model.width) {}
  // Runs `list` `reps` + 1 times (the first warms up, untimed).
  void measure(const runtime::RankLayout& layout, int rank,
               const std::vector<runtime::Action>& list, int reps) {
    runtime::StepExecutor ex(layout, rank);
    for (int rep = 0; rep < reps + 1; ++rep) {
      timing_ = rep > 0;
      runtime::ActionContext where;
      where.step = rep;
      ex.start(list, where, now(), false);
      if (!ex.run(*this)) throw std::logic_error("the profiler's backend left an action pending");
    }
  }
  // The median time of the actions of `kind` (0 if none ran).
  double median(runtime::Action::Kind kind) const {
    const auto it = times_.find(kind);
    return it == times_.end() ? 0.0 : medianOf(it->second);
  }

  double now() override { return nowSeconds(); }
  runtime::Progress compute(const runtime::Action& a, const runtime::ActionContext&) override {
    using K = runtime::Action::Kind;
    if (a.chunk != chunk_ || a.kind == K::kGradNorm || a.kind == K::kEvalForward)
      return runtime::Progress::kDone;
    // This action's random inputs, made before its timer starts.
    torch::Tensor in, tgt, grad;
    if (a.kind == K::kForward) {
      in = runner_.first() ? torch::randint(0, 256, {b_, T_}, torch::kLong)
                           : torch::randn({b_, T_, C_});
      tgt = torch::randint(0, 256, {b_, T_}, torch::kLong);
    } else if (a.kind != K::kBackwardWeight && !runner_.last()) {
      grad = torch::randn({b_, T_, C_});
    }
    idle();
    const double t0 = now();
    if (a.kind == K::kForward)
      runner_.forward(a.microBatch, in, tgt);
    else if (a.kind == K::kBackward)
      runner_.backward(a.microBatch, grad);
    else if (a.kind == K::kBackwardInput)
      runner_.backwardInput(a.microBatch, grad);
    else
      runner_.backwardWeight(a.microBatch);
    record(a.kind, t0);
    return runtime::Progress::kDone;
  }
  runtime::Progress step(const runtime::Action& a, const runtime::ActionContext& c) override {
    idle();
    const double t0 = now();
    runner_.step(c.step, std::sqrt(runner_.localGradSquaredNorm()));
    record(a.kind, t0);
    return runtime::Progress::kDone;
  }
  runtime::Progress send(const runtime::Action&, const runtime::ActionContext&) override {
    return runtime::Progress::kDone;
  }
  runtime::Progress recv(const runtime::Action&, const runtime::ActionContext&) override {
    return runtime::Progress::kDone;
  }
  runtime::Progress dpBegin(const runtime::Action&, const runtime::ActionContext&) override {
    return runtime::Progress::kDone;
  }
  runtime::Progress dpEnd(const runtime::Action&, const runtime::ActionContext&) override {
    return runtime::Progress::kDone;
  }
  runtime::Progress outerStep(const runtime::Action&, const runtime::ActionContext&) override {
    return runtime::Progress::kDone;
  }

 private:
  void record(runtime::Action::Kind kind, double t0) {
    if (timing_) times_[kind].push_back(now() - t0);
  }
  void idle() const {
    if (idleS_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(idleS_));
  }
  runtime::StageRunner& runner_;
  int chunk_;
  double idleS_;
  int64_t b_, T_, C_;
  bool timing_ = false;
  std::map<runtime::Action::Kind, std::vector<double>> times_;
};

// Virtual stage k's compute timed in the order of `schedule` (stage k mod S's list of a run with
// `chunks` model chunks, its chunk k / S timed; chunks 1: chunk 0), on a runner of `spec`; idleS:
// asleep that long before each compute action.
TimingBackend timeStage(const runtime::RunSpec& spec, runtime::StageRunner& runner, int k,
                        const std::string& schedule, int chunks, int reps, double idleS = 0) {
  const runtime::RankLayout layout{spec.pipeline.stages, 1, chunks};
  const int S = layout.stages, stage = layout.stageOfVirtual(k);
  TimingBackend b(runner, spec, chunks > 1 ? layout.chunkOfVirtual(k) : 0, idleS);
  b.measure(layout, stage,
            runtime::computeOnly(
                runtime::makeSchedule(schedule, S, spec.pipeline.microBatches, stage, chunks)),
            reps);
  return b;
}

// What a wait before a compute action adds to it (StageCost::idle): the schedule's order timed
// again with a sleep of each length before every compute action, per kind the median minus the
// back-to-back median (`own`), clamped at 0; min(reps, 3) steps per length.
simulator::StageCost::IdleExtra measureIdleExtra(const runtime::RunSpec& spec,
                                                 runtime::StageRunner& runner, int k, int chunks,
                                                 int reps, const TimingBackend& own) {
  using K = runtime::Action::Kind;
  simulator::StageCost::IdleExtra e;
  e.afterS = {0.002, 0.005, 0.01, 0.03, 0.1};
  for (double idleS : e.afterS) {
    const TimingBackend slept =
        timeStage(spec, runner, k, spec.pipeline.schedule, chunks, std::min(reps, 3), idleS);
    for (K kind : {K::kForward, K::kBackward, K::kBackwardInput, K::kBackwardWeight, K::kStep}) {
      if (own.median(kind) <= 0) continue;
      runtime::Action a;
      a.kind = kind;
      e.extraS[runtime::protocol::eventName(a)].push_back(
          std::max(0.0, slept.median(kind) - own.median(kind)));
    }
  }
  return e;
}

// split: also measure the parts of a split backward (a profiled schedule splits them).
std::vector<simulator::StageCost> measureStages(const runtime::RunSpec& spec, int reps,
                                                const std::vector<runtime::RunSpec>& dpVariants,
                                                bool split, const std::function<void()>& onStage) {
  using K = runtime::Action::Kind;
  torch::set_num_threads(spec.runtime.threadsPerWorker);
  torch::manual_seed(0);
  const int chunks = runtime::rankLayout(spec).chunks;
  const bool splits = runtime::scheduleInfo(spec.pipeline.schedule).splitsBackward;
  std::vector<simulator::StageCost> out;
  // One entry per virtual stage (with model chunks, stages x virtual_stages of them).
  for (int k = 0; k < static_cast<int>(runtime::stageLayers(spec).size()); ++k) {
    runtime::StageRunner runner(spec, k, 1000);
    const TimingBackend own = timeStage(spec, runner, k, spec.pipeline.schedule, chunks, reps);
    simulator::StageCost c{
        own.median(K::kForward), own.median(K::kBackward), own.median(K::kStep), {}};
    c.backwardInputS = own.median(K::kBackwardInput);
    c.backwardWeightS = own.median(K::kBackwardWeight);
    if (splits) {  // the whole backward, as 1F1B runs it (a splitting schedule has one chunk per
                   // stage)
      runtime::RunSpec whole = spec;
      whole.pipeline.schedule = "1f1b";
      runtime::StageRunner r(whole, k, 1000);
      c.backwardS = timeStage(whole, r, k, "1f1b", 1, reps).median(K::kBackward);
    } else if (split) {  // the parts, as zero-bubble H1 runs them
      runtime::StageRunner r(spec, k, 1000);
      r.enableSplitBackward();
      const TimingBackend parts = timeStage(spec, r, k, "zb_h1", 1, reps);
      c.backwardInputS = parts.median(K::kBackwardInput);
      c.backwardWeightS = parts.median(K::kBackwardWeight);
    }
    c.idle = measureIdleExtra(spec, runner, k, chunks, reps, own);
    for (const auto& v : dpVariants)
      c.dp[simulator::dpCostKey(v)] = measureDpCost(v, runner, k, reps);
    out.push_back(c);
    onStage();
  }
  return out;
}

// One unit of a stage's work: forward and backward of one micro-batch, on a runner of its own.
struct StageUnit {
  runtime::StageRunner runner;
  torch::Tensor in, tgt, grad;
  StageUnit(const runtime::RunSpec& spec, int stage) : runner(spec, stage, 1000) {
    const int b = spec.pipeline.microBatchSize, T = spec.model.seqLen, C = spec.model.width;
    torch::manual_seed(stage);
    in = runner.first() ? torch::randint(0, 256, {b, T}, torch::kLong) : torch::randn({b, T, C});
    tgt = torch::randint(0, 256, {b, T}, torch::kLong);
    if (!runner.last()) grad = torch::randn({b, T, C});
  }
  void run() {
    runner.forward(0, in, tgt);
    runner.backward(0, grad);
  }
};

// A started `slowpipe profile-unit` process and its pipes.
struct UnitProcess {
  pid_t pid = -1;
  FILE* in = nullptr;   // its stdin
  FILE* out = nullptr;  // its stdout
};

UnitProcess spawnUnit(const std::string& specPath, int stage, double windowS) {
  // Close-on-exec: a child must not inherit the pipes of its siblings (a sibling's stdin kept
  // open by another child never sees EOF).
  int toChild[2], fromChild[2];
  if (pipe2(toChild, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("profile: pipe2() failed: ") + std::strerror(errno));
  if (pipe2(fromChild, O_CLOEXEC) != 0) {
    const int e = errno;
    close(toChild[0]);
    close(toChild[1]);
    throw std::runtime_error(std::string("profile: pipe2() failed: ") + std::strerror(e));
  }
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args = {
      exe,       "profile-unit",        "--spec",   specPath,
      "--stage", std::to_string(stage), "--window", std::to_string(windowS)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {toChild[0], toChild[1], fromChild[0], fromChild[1]}) close(fd);
    throw std::runtime_error(std::string("profile: fork() failed: ") + std::strerror(e));
  }
  if (pid == 0) {
    // dup2 clears close-on-exec on the copies; a failure leaves the child nothing to talk over.
    if (dup2(toChild[0], 0) < 0 || dup2(fromChild[1], 1) < 0) _exit(126);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  close(toChild[0]);
  close(fromChild[1]);
  UnitProcess p{pid, fdopen(toChild[1], "w"), fdopen(fromChild[0], "r")};
  if (!p.in || !p.out) {
    const int e = errno;
    if (p.in)
      fclose(p.in);
    else
      close(toChild[1]);
    if (p.out)
      fclose(p.out);
    else
      close(fromChild[0]);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    throw std::runtime_error(std::string("profile: fdopen() failed: ") + std::strerror(e));
  }
  return p;
}

// The host-speed children of one measurement: killed and reaped however it ends, and SIGPIPE
// ignored meanwhile, so a child that died makes a write fail with EPIPE (an error naming its
// stage) instead of killing the CLI.
class UnitGroup {
 public:
  UnitGroup() {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &saved_);
  }
  ~UnitGroup() {
    for (auto& p : ps) {
      if (p.in) fclose(p.in);
      if (p.out) fclose(p.out);
      if (p.pid > 0) {
        kill(p.pid, SIGKILL);
        waitpid(p.pid, nullptr, 0);
      }
    }
    sigaction(SIGPIPE, &saved_, nullptr);
  }
  UnitGroup(const UnitGroup&) = delete;
  UnitGroup& operator=(const UnitGroup&) = delete;
  std::vector<UnitProcess> ps;

 private:
  struct sigaction saved_ {};
};

// Speed of a stage while n stages compute at once on this host (n = 1..stages), relative to
// computing alone. The workers of an emulated run are processes, so this is measured with
// processes: n `slowpipe profile-unit` children (stages first, first + 1, ... mod S), each
// repeating its stage's forward and backward of one micro-batch with the worker's thread count,
// released together and counted over the same window. Captures what processor sharing alone does
// not: SMT siblings, shared caches and memory bandwidth, process switches. Each stage's rate alone
// is measured the same way; speed(n) = mean over the n processes of rate / rate alone, median of
// `reps` windows.
std::vector<double> measureHostSpeed(const json& runJson, int stages, int workers, double windowS,
                                     int reps) {
  const std::string specPath = (std::filesystem::temp_directory_path() /
                                ("slowpipe-profile-" + std::to_string(getpid()) + ".json"))
                                   .string();
  runtime::writeJsonAtomically(specPath, runJson);
  auto rates = [&](int n, int first) {
    UnitGroup g;
    auto& ps = g.ps;
    auto failed = [&](int i, const std::string& what) {
      return std::runtime_error("profile: the host-speed process for stage " +
                                std::to_string(runtime::ringIndex(first + i, stages)) + " " + what);
    };
    for (int i = 0; i < n; ++i)
      ps.push_back(spawnUnit(specPath, runtime::ringIndex(first + i, stages), windowS));
    std::vector<double> out(n, -1);
    char line[128];
    for (int i = 0; i < n; ++i)  // each says "ready" once its runner is built and warm
      if (!fgets(line, sizeof line, ps[i].out)) throw failed(i, "exited before it was ready");
    const double start = emulator::monotonicNow() + 0.05;
    for (int i = 0; i < n; ++i)
      if (std::fprintf(ps[i].in, "%.9f\n", start) < 0 || std::fflush(ps[i].in) != 0)
        throw failed(i, std::string("could not be released: ") + std::strerror(errno));
    for (int i = 0; i < n; ++i) {
      if (fgets(line, sizeof line, ps[i].out)) out[i] = std::atof(line);
      fclose(ps[i].in);
      fclose(ps[i].out);
      ps[i].in = ps[i].out = nullptr;
      int status = 0;
      waitpid(ps[i].pid, &status, 0);
      ps[i].pid = -1;
      if (out[i] <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw failed(i, "failed (exit status " + std::to_string(status) + ")");
    }
    return out;
  };
  std::vector<double> speed = {1.0};
  try {
    std::vector<double> alone(stages);
    for (int s = 0; s < stages; ++s) {
      std::vector<double> r;
      for (int k = 0; k < reps; ++k) r.push_back(rates(1, s)[0]);
      alone[s] = medianOf(r);
    }
    for (int n = 2; n <= workers; ++n) {
      std::vector<double> r;
      for (int k = 0; k < reps; ++k) {
        const std::vector<double> got = rates(n, runtime::ringIndex(k, stages));
        double sum = 0;
        for (int i = 0; i < n; ++i) sum += got[i] / alone[runtime::ringIndex(k + i, stages)];
        r.push_back(sum / n);
      }
      // Sharing the host never speeds a stage up: a ratio above 1 means the machine was busier
      // while the stages ran alone (other load, a slow spell). It is recorded as 1 and said.
      const double m = medianOf(r);
      if (m > 1.05)
        std::fprintf(stderr,
                     "profile: with %d stages busy each ran at %.2fx its speed alone; the host was "
                     "busy while "
                     "they ran alone (other load?): recorded as 1.00\n",
                     n, m);
      speed.push_back(std::min(1.0, m));
    }
  } catch (...) {
    std::filesystem::remove(specPath);
    throw;
  }
  std::filesystem::remove(specPath);
  return speed;
}

// Host CPU time of moving one message of `bytes` over the workers' transport (a ZeroMQ PUSH/PULL
// pair over TCP loopback through ShapedSender/ShapedReceiver, unpaced), all threads of this process
// included (the sender, the receiver and ZeroMQ's I/O threads): median over batches of 64 messages.
double transportCpuSeconds(size_t bytes) {
  zmq::context_t ctx(1);
  zmq::socket_t pull(ctx, zmq::socket_type::pull), push(ctx, zmq::socket_type::push);
  for (auto* s : {&pull, &push}) {
    s->set(zmq::sockopt::sndhwm, 0);
    s->set(zmq::sockopt::rcvhwm, 0);
  }
  pull.bind("tcp://127.0.0.1:*");
  push.connect(pull.get(zmq::sockopt::last_endpoint));
  emulator::ShapedSender tx(push, emulator::LinkSpec{}, nullptr);
  emulator::ShapedReceiver rx(pull);
  const std::vector<uint8_t> buf(bytes, 1);
  auto cpuNow = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  constexpr int kBatch = 64;
  std::vector<double> perMessage;
  for (int rep = 0; rep < 8; ++rep) {
    const double c0 = cpuNow();
    std::thread sender([&] {
      for (int i = 0; i < kBatch; ++i) tx.send(buf.data(), bytes);
    });
    for (int i = 0; i < kBatch; ++i)
      if (!rx.recv(10000))
        throw std::runtime_error("profile: the loopback transport lost a message");
    sender.join();
    if (rep) perMessage.push_back((cpuNow() - c0) / kBatch);  // rep 0 warms up
  }
  std::nth_element(perMessage.begin(), perMessage.begin() + perMessage.size() / 2,
                   perMessage.end());
  return perMessage[perMessage.size() / 2];
}

// Encode/decode seconds per raw byte of a codec at the run's message shape, in steady state
// (acsgd: deltas of examples seen before), as the transport calls it (frames included).

// A real run of `runJson` on this host for the host-speed fit: the spec's pipeline, its codecs and
// data, over user-space links so fast that compute dominates (the stages overlap as much as they
// can), 12 steps with every step's timeline. Returns the run's timeline.
json calibrationTimeline(const json& runJson, const std::string& bandwidth) {
  json doc = runJson;
  doc["name"] = "host-speed-calibration";
  doc["network"] = {{"backend", "user"}, {"links", {{"bandwidth", bandwidth}, {"latency", "0ms"}}}};
  doc["training"]["epochs"] = 1000;
  doc["training"]["max_steps"] = 12;
  doc["training"]["eval_each_epoch"] = false;
  doc["runtime"]["timeline"] = "all";
  struct TempDir {  // removed on every way out, a throwing launch included
    std::string path;
    ~TempDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir{(std::filesystem::temp_directory_path() /
         ("slowpipe-calibration-" + std::to_string(getpid())))
            .string()};
  runtime::LaunchOptions lo;
  lo.outDir = dir.path;
  lo.progress = false;
  lo.calibrate = false;  // links are not what is measured here
  const int rc = runtime::launchRun(
      runtime::runSpecFromJson(doc, "profile --host-from-run: the calibration run"), lo);
  const json result = runtime::readJsonFile(dir.path + "/result.json", "calibration run result");
  if (rc != 0 || result.value("status", "") != "ok")
    throw std::runtime_error("profile --host-from-run: the calibration run ended with status '" +
                             result.value("status", std::string("?")) + "' (" +
                             result.value("reason", std::string("no reason given")) + ")");
  return result["timeline"];
}

}  // namespace

// `slowpipe profile-unit` (internal): build the stage's unit, warm it, print "ready", read the
// start time (monotonic seconds) from stdin, then print the units per second it completed in the
// window.
int runProfileUnit(const std::string& specPath, int stage, double windowS) {
  const runtime::RunSpec spec =
      runtime::runSpecFromJson(runtime::readSpecFile(specPath), "spec", /*simulation=*/true);
  torch::set_num_threads(spec.runtime.threadsPerWorker);
  StageUnit unit(spec, stage);
  unit.run();
  std::printf("ready\n");
  std::fflush(stdout);
  double start = 0;
  if (std::scanf("%lf", &start) != 1) return 2;
  emulator::sleepUntil(start);
  int done = 0;
  double t = emulator::monotonicNow();
  while (t - start < windowS) {
    unit.run();
    ++done;
    t = emulator::monotonicNow();
  }
  std::printf("%.9f\n", done / (t - start));
  return 0;
}

// host_speed, the stages' run factors and warm-ups fitted to two real calibration runs of the spec
// here: links at 100 Gbps (the stages compute side by side) and links on which one fp32 activation
// takes as long as the slowest stage's forward (they also compute alone, and after waits); each
// other schedule the points use gets its speeds from the same two runs in its order, with the
// spec's stage factors. p.hostSpeed holds the side-by-side speeds (the fallback) on entry.
static void fitToCalibrationRuns(simulator::Profile& p, const json& runJson,
                                 const runtime::RunSpec& spec, int workers,
                                 const std::set<std::string>& schedules) {
  const double slowestForward =
      std::max_element(p.stages.begin(), p.stages.end(), [](const auto& a, const auto& b) {
        return a.forwardS < b.forwardS;
      })->forwardS;
  const double actBits =
      8.0 * 4.0 *
      static_cast<double>(spec.pipeline.microBatchSize * spec.model.seqLen * spec.model.width);
  char balanced[32];
  std::snprintf(balanced, sizeof balanced, "%.0fMbps",
                std::max(1.0, std::round(actBits / std::max(slowestForward, 1e-6) / 1e6)));
  auto calibrationOf = [&](const json& doc) {
    return std::vector<json>{calibrationTimeline(doc, "100Gbps"),
                             calibrationTimeline(doc, balanced)};
  };
  const std::vector<json> calibration = calibrationOf(runJson);
  const std::vector<double> sideBySide = p.hostSpeed;
  auto fitOf = [&](const std::vector<json>& timelines, bool perStage) {
    return simulator::fitHostSpeed(timelines, p.stages, workers, /*firstStep=*/2, sideBySide,
                                   perStage);
  };
  auto describe = [](const simulator::HostSpeedFit& f) {
    return json{{"events", f.events},
                {"coverage_s", f.coverageS},
                {"raw_speed", f.rawSpeed},
                {"lone_speed", f.loneSpeed},
                {"stage_factor", f.stageFactor}};
  };
  const simulator::HostSpeedFit fit = fitOf(calibration, true);
  p.device["host_speed_side_by_side"] = sideBySide;
  p.device["host_speed_fit"] = describe(fit);
  p.device["host_speed_fit"]["method"] =
      "least squares over the compute events of two real 12-step pipelined runs of the "
      "spec here (user links at 100 Gbps and at " +
      std::string(balanced) +
      ", steps 2-11), against "
      "the stage costs above plus their idle extras, with a factor per stage "
      "(stages[].run_factor) by alternating least squares, speeds clamped to [0.05, 1.5]";
  p.device["host_speed_fit"]["schedule"] = spec.pipeline.schedule;
  p.device["warmup_fit"] =
      "stages[].warmup_s: per event kind, step 0's events of the 100 Gbps run minus as many times "
      "the median of its steps 2-11 (the first step's extra compute; simulated on step 0)";
  p.hostSpeed = fit.speed;
  for (size_t v = 0; v < p.stages.size(); ++v) p.stages[v].runFactor = fit.stageFactor[v];
  // The same run's first step: what its compute events cost beyond the later steps' (warm-up).
  const std::vector<std::map<std::string, double>> warmup =
      simulator::fitWarmup(calibration[0], p.stages.size());
  for (size_t v = 0; v < p.stages.size(); ++v) p.stages[v].warmupS = warmup[v];
  if (schedules.size() <= 1) return;
  p.hostSpeedBySchedule[spec.pipeline.schedule] = fit.speed;
  for (const auto& name : schedules) {
    if (name == spec.pipeline.schedule) continue;
    json doc = runJson;
    doc["pipeline"]["schedule"] = name;
    const simulator::HostSpeedFit other =
        fitOf(calibrationOf(doc), false);  // the spec's stage factors
    p.device["host_speed_fit_by_schedule"][name] = describe(other);
    p.hostSpeedBySchedule[name] = other.speed;
  }
}

// `schedules`: every schedule the profiled points use (a sweep may vary it); with --host-from-run
// each gets its own calibration run and fit (host_speed_by_schedule), host_speed is the spec's.
simulator::Profile measuredProfile(const json& runJson, const runtime::RunSpec& spec, int reps,
                                   const std::vector<std::string>& extraCodecs,
                                   const HostSpeedOptions& host,
                                   const std::vector<runtime::RunSpec>& dpVariants,
                                   const std::set<std::string>& schedules,
                                   const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<std::string> codecs = {spec.compression.forward, spec.compression.backward, "none"};
  codecs.insert(codecs.end(), extraCodecs.begin(), extraCodecs.end());
  for (const auto& v : dpVariants)
    codecs.push_back(runtime::gradientCompressor(v.dp)->messageCodec());
  // Parts: every virtual stage, the host speed, the calibration fit, the transport, every codec.
  const int64_t total = static_cast<int64_t>(runtime::stageLayers(spec).size()) + 3 +
                        static_cast<int64_t>(codecs.size());
  int64_t done = 0;
  auto step = [&] {
    if (progress) progress(++done, total);
  };
  simulator::Profile p;
  p.source = "measured";
  p.device = {
      {"host", "this machine"},
      {"threads_per_stage", spec.runtime.threadsPerWorker},
      {"method", "StageRunner forward/backward/step per stage, one stage at a time, median of " +
                     std::to_string(reps) +
                     " steps after one warm-up; codecs: median encode/decode "
                     "of one message at the run's shape (steady state), cost proportional to its "
                     "bytes; host_speed: n "
                     "processes computing stages at once (median of --host-reps windows of "
                     "--host-window s); transport: process CPU time per message over "
                     "ZeroMQ TCP loopback"}};
  const bool split = std::any_of(schedules.begin(), schedules.end(), [](const std::string& n) {
    return runtime::scheduleInfo(n).splitsBackward;
  });
  p.stages = measureStages(spec, reps, dpVariants, split, step);
  const std::vector<int64_t> shape = {spec.pipeline.microBatchSize, spec.model.seqLen,
                                      spec.model.width};
  // The emulated workers are processes on this host: they share its cores (in units of one
  // worker's threads), at the speeds measured with n stages busy at once.
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  const int workers =
      spec.pipeline.stages * spec.pipeline.replicas;  // every one may be busy at once
  p.hostCores = std::max(1, cpus / std::max(1, spec.runtime.threadsPerWorker));
  if (host.dedicated) {
    p.hostCores = workers;
    p.hostSpeed.assign(static_cast<size_t>(workers), 1.0);
    p.device["dedicated"] =
        "each worker on a processor of its own (--dedicated): host_speed 1, not measured";
    step();
  } else {
    p.hostSpeed = measureHostSpeed(runJson, spec.pipeline.stages, workers, host.windowS, host.reps);
    step();
    if (host.fromRun) fitToCalibrationRuns(p, runJson, spec, workers, schedules);
  }
  step();  // the calibration fit's part, done or not needed
  p.device["runtime_device"] = spec.runtime.device;
  // Transport CPU cost, fitted through a small and an activation-sized message.
  const size_t small = 64, large = static_cast<size_t>(4 * compression::numelOf(shape));
  const double cSmall = transportCpuSeconds(small), cLarge = transportCpuSeconds(large);
  const double slope = std::max(0.0, (cLarge - cSmall) / static_cast<double>(large - small));
  p.transport = {std::max(0.0, cSmall - slope * small), slope};
  step();
  p.device["cpus"] = cpus;
  for (const auto& c : codecs) {
    p.codecs[compression::makeCodec(c)->spec()] = simulator::measureCodecOnHost(c, shape);
    step();
  }
  return p;
}

}  // namespace slowpipe::simulator
