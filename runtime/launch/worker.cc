// What every worker shares: the allocator settings and the run's frame bound. The worker itself is
// runtime/exec/pipeline_worker.cc; its bootstraps worker_local.cc (slowpipe run) and
// worker_external.cc (mpirun, srun, torchrun); the single-process trainer single_process.cc.
#include "runtime/launch/worker.h"

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "compression/codec.h"
#include "compression/plugin.h"
#include "runtime/dp/dp.h"
#include "runtime/dp/grad_sync.h"
#include "runtime/records/result.h"

namespace slowpipe::runtime {

using nlohmann::json;

// Per-message buffers (frames, tensors) are 0.1-10 MB. With glibc's default, dynamic mmap
// threshold they were often mmap'ed and munmap'ed for every message, page-faulting on each reuse,
// and whether that happened depended on unrelated allocations (an AC-SGD buffer store raised the
// threshold as a side effect): fp32 runs measured ~8% more compute time than AC-SGD runs at 10
// Gbps. Fixing the thresholds gives every codec the same allocator behaviour.
std::string errorText(const std::exception& e) {
  const auto* torchError = dynamic_cast<const c10::Error*>(&e);
  std::string text =
      torchError ? "libtorch: " + std::string(torchError->what_without_backtrace()) : e.what();
  if (text.size() > 1000) text = text.substr(0, 1000) + " [...]";
  return text;
}

namespace {

int gCrashFd = -1;

// Async-signal-safe: fixed buffers, write(2), no allocation.
void appendText(char* buf, size_t cap, size_t& at, const char* s) {
  while (s && *s && at + 1 < cap) buf[at++] = *s++;
}

void onCrash(int sig) {
  char line[1024];
  size_t at = 0;
  char num[8] = {0};
  int v = sig, n = 0;
  char rev[8];
  do rev[n++] = static_cast<char>('0' + v % 10);
  while ((v /= 10) && n < 7);
  for (int i = 0; i < n; ++i) num[i] = rev[n - 1 - i];
  const char* name = sig == SIGSEGV  ? "SIGSEGV"
                     : sig == SIGBUS ? "SIGBUS"
                     : sig == SIGILL ? "SIGILL"
                     : sig == SIGFPE ? "SIGFPE"
                                     : "SIGABRT";
  appendText(line, sizeof line, at, "slowpipe worker: crashed with signal ");
  appendText(line, sizeof line, at, num);
  appendText(line, sizeof line, at, " (");
  appendText(line, sizeof line, at, name);
  appendText(line, sizeof line, at, ")");
  if (const char* plugin = compression::pluginInUse()) {
    appendText(line, sizeof line, at, " inside ");
    appendText(line, sizeof line, at, plugin);
  }
  line[at++] = '\n';
  ssize_t ignored = ::write(2, line, at);
  if (gCrashFd >= 0) ignored = ::write(gCrashFd, line, at);
  (void)ignored;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void installCrashReport(int alsoFd) {
  gCrashFd = alsoFd;
  struct sigaction sa {};
  sa.sa_handler = onCrash;
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(sig, &sa, nullptr);
}

std::string crashLineIn(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(std::max<std::streamoff>(0, size - 8192));
  std::string tail((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = tail.rfind("slowpipe worker: crashed with signal");
  if (at == std::string::npos) return "";
  const size_t end = tail.find('\n', at);
  return tail.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

void startResultKeeper(const std::string& resultPath, const std::string& crashFile) {
  const std::string pid = std::to_string(getpid());
  std::vector<std::string> args = {"/proc/self/exe", "worker", "--keep-result", resultPath,
                                   "--keep-pid",     pid,      "--crash-file",  crashFile};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) throw std::runtime_error("cannot start the result keeper: /proc/self/exe unreadable");
  exe[n] = '\0';
  const pid_t child = ::fork();
  if (child < 0)
    throw std::runtime_error("cannot start the result keeper: fork failed: " +
                             std::string(std::strerror(errno)));
  if (child == 0) {
    ::setsid();  // out of the launcher's process group: mpirun's kill of the job's processes spares
                 // it
    // Nothing of the launcher's output pipes: mpirun (or a test reading the output to its end)
    // must not wait for the keeper.
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    ::execv(exe, argv.data());
    ::_exit(127);
  }
}

int keepResult(int pid, const std::string& resultPath, const std::string& crashFile) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_IGN);
  while (::kill(pid, 0) == 0 || errno == EPERM) {
    if (::getppid() != pid) {  // reparented: the process is gone (a zombie answers kill(pid, 0))
      ::usleep(200000);
      break;
    }
    ::usleep(200000);
  }
  const std::string crash = crashLineIn(crashFile);
  std::error_code ec;
  std::filesystem::remove(crashFile, ec);
  json doc;
  try {
    doc = readJsonFile(resultPath, "result");
  } catch (const std::exception&) {
    return 0;  // nothing to finish (the run never wrote one)
  }
  // Only a result this process was writing (another run may hold the folder) that it left running.
  const json launcher = doc.value("launcher", json::object());
  if (doc.value("status", "") != "running" || !launcher.is_object() ||
      launcher.value("pid", 0) != pid)
    return 0;
  doc["status"] = "failed";
  doc["reason"] =
      "rank 0's process (pid " + std::to_string(pid) +
      ", where the coordinator ran) ended before the run did: " +
      (crash.empty() ? std::string("it was killed or crashed (see its output)") : crash) +
      "; this result was finished by its keeper";
  writeFinalResult(resultPath, doc);
  return 0;
}

void tuneAllocator() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest value glibc accepts on 64-bit
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

// Measured on the VM this was written on (4 KiB faults at 13.6 us each; THP "madvise"): a run of
// 32 MiB activations at 10 Gbps (2 stages, 2 steps, 2 runs each) took 26.3-34.7 s a step with
// glibc's default and 5.8-9.8 s with huge pages (the faults were in the frames, in ZeroMQ's receive
// buffers and in every large tensor), its workers' peak RSS 1.339 GB against 1.346 GB. Keeping
// such blocks in the heap instead (M_MMAP_MAX 0) was as fast on frames but doubled that RSS.
std::string hugePageTunables() {
  const char* opt = std::getenv("SLOWPIPE_MALLOC_HUGEPAGES");
  if (opt && std::string(opt) == "0") return "";
  const char* now = std::getenv("GLIBC_TUNABLES");
  const std::string tunables = now ? now : "";
  if (tunables.find("glibc.malloc.hugetlb") != std::string::npos) return "";
  return (tunables.empty() ? "" : tunables + ":") + std::string("glibc.malloc.hugetlb=1");
}

namespace {
bool restartedForTunable = false;
}  // namespace

void takeHugePageRestartMark() {
  const char* mark = std::getenv(kHugePageRestartEnv);
  restartedForTunable = mark && std::string(mark) == "1";
  unsetenv(kHugePageRestartEnv);
}

bool restartedForHugePages() { return restartedForTunable; }

int64_t largestFrameBytes(const RunSpec& spec) {
  const int64_t mb = spec.pipeline.microBatchSize;
  const compression::Shape act = {mb, spec.model.seqLen, spec.model.width};
  // Each codec's own bound on its payload (topk's indices, lowrank's basis and plug-ins may
  // exceed fp32), with the frame header and one example id per row.
  uint64_t payload = 4 * static_cast<uint64_t>(compression::numelOf(act));
  for (const std::string& c : {spec.compression.forward, spec.compression.backward})
    payload = std::max(payload, compression::makeCodec(c, "frame-bound")->maxPayloadBytes(act) +
                                    8 * static_cast<uint64_t>(mb));
  if (spec.pipeline.replicas > 1) {
    const auto none = compression::makeCodec("none"),
               message = compression::makeCodec(gradientCompressor(spec.dp)->messageCodec(),
                                                "frame-bound");
    for (int s = 0; s < spec.pipeline.stages; ++s)
      for (int round = 0; round < dpShape(spec).rounds; ++round) {
        const compression::Shape chunk = {
            protocol::dpLargestChunk(dpRoundValues(spec, s, round), spec.pipeline.replicas)};
        payload =
            std::max({payload, none->maxPayloadBytes(chunk), message->maxPayloadBytes(chunk)});
      }
  }
  return static_cast<int64_t>(payload) + (64 << 10);
}

}  // namespace slowpipe::runtime
