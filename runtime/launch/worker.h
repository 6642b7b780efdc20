// One OS process = one (stage, replica) of the run (runtime/exec/ranks.h): runs its step's schedule
// with real tensors over the stage transport and reports one record per step to the launcher.
// Also the single-process trainer (all layers in one process) used by `pretrain` and as the
// reference the pipeline must match.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

// The local launcher's bootstrap: what `slowpipe run` puts on a worker's command line (runWorker
// turns it into the worker's Context, runtime/launch/context.h).
struct WorkerArgs {
  std::string specPath;  // resolved spec written by the launcher
  int rank = 0;
  std::string control;  // launcher's ipc endpoint for records
  std::string peers;    // launcher's ipc endpoint this worker pulls its peer table from
  std::string netns;    // kernel backend: namespace to enter before opening sockets
  std::string bindPrev = "127.0.0.1", bindNext = "127.0.0.1";
  int launcherPid = 0;  // the parent this worker must not outlive (0: not checked)
};

// The largest frame a worker of `spec` may legally receive (ZMQ_MAXMSGSIZE of its sockets): the
// largest payload bound (Codec::maxPayloadBytes) of the run's pipeline codecs on a micro-batch's
// activation and of its DP codecs on the largest chunk, plus the frame header.
int64_t largestFrameBytes(const RunSpec& spec);

// An exception as a reason a result can carry: libtorch's errors without their backtrace (a
// 25-frame backtrace was a run's reason), at most 1,000 characters.
std::string errorText(const std::exception& e);

// On SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT this process writes one line, "slowpipe worker:
// crashed with signal N (NAME)[ inside codec plug-in '...', in its encode]", to stderr (and to
// `alsoFd` when >= 0), then dies of the signal as it would have. The launcher puts the line in
// the run's reason (the plug-in that crashed, by name).
void installCrashReport(int alsoFd = -1);
// The crash line in the last 8 KiB of a worker's log (or a crash file), or "".
std::string crashLineIn(const std::string& path);

// Rank 0 of an external launcher holds the coordinator: when its process dies (a crash, SIGKILL)
// nobody would finish result.json. A keeper process (the same binary, started here, in its own
// session) waits for this process to end and then, if result.json still says "running", writes
// it as failed with the reason (the crash line of `crashFile` when there is one).
void startResultKeeper(const std::string& resultPath, const std::string& crashFile);
// The keeper's own work (`slowpipe worker --keep-result PATH --keep-pid PID --crash-file F`).
int keepResult(int pid, const std::string& resultPath, const std::string& crashFile);

int runWorker(const WorkerArgs& args);

// A worker started by an external launcher: `mpirun -np N slowpipe worker --spec S --out DIR`,
// `srun -n N ...`, or processes with torchrun-style RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT.
// Its rank and the world size come from the environment (runtime/launch/bootstrap.h) unless given;
// rank 0 also runs the coordinator (the rendezvous, record collection and DIR/result.json on its
// host); every rank joins at the rendezvous with the shared secret (SLOWPIPE_SECRET_FILE), takes
// the run's spec, keys and clock offset from it, then runs as a local worker over CURVE sockets
// bound on its host's address toward the rendezvous. Returns the exit status (rank 0: the run's).
struct ExternalWorkerArgs {
  std::string specPath, outDir;  // read and written by rank 0
  std::string rendezvous;        // HOST:PORT; empty: MASTER_ADDR:MASTER_PORT
  std::string bindHost;          // empty: this host's address toward the rendezvous
  int rank = -1, size = 0;       // -1: from the environment
  double joinTimeoutS = 120;
};
int runExternalWorker(const ExternalWorkerArgs& args);

// The glibc allocator settings every worker runs with (worker.cc says why): large per-message
// buffers are reused instead of being mmap'ed and page-faulted afresh. Benchmarks that claim to
// measure what a run pays call it too.
void tuneAllocator();

// glibc's malloc maps every block past its mmap threshold (32 MiB at most) afresh and unmaps it on
// free: each such frame, received message, activation or gradient costs a page fault per 4 KiB.
// The tunable glibc.malloc.hugetlb=1 makes those mappings ask for transparent huge pages, a fault
// per 2 MiB; glibc reads it only when a process starts. hugePageTunables() is the GLIBC_TUNABLES
// value that adds it to this process's, or "" where nothing is to be added: already named there,
// or SLOWPIPE_MALLOC_HUGEPAGES=0 (glibc's default kept).
std::string hugePageTunables();

// A command that starts once more for that tunable (tools/main.cc) puts kHugePageRestartEnv=1 in
// its environment before the exec; the second start takes it out again first thing
// (takeHugePageRestartMark), so nothing it starts inherits it. restartedForHugePages(): this
// process is such a second start (workers say so in their hello; a worker the launcher started
// with the tunable in its environment never is).
inline constexpr const char* kHugePageRestartEnv = "SLOWPIPE_RESTARTED_FOR_HUGE_PAGES";
void takeHugePageRestartMark();
bool restartedForHugePages();

// Trains every layer in this process with the same data, micro-batching, optimizer and seeds as a
// pipeline run of `spec`. split: "finetune" or "pretrain". Calls onRecord with each step's and
// each evaluation's record; saves the model to checkpoint (if not empty) at the end.
void runSingleProcess(const RunSpec& spec, const std::string& split,
                      const std::function<void(const nlohmann::json&)>& onRecord,
                      const std::string& checkpoint = "");

}  // namespace slowpipe::runtime
