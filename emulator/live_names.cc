// The shared fatal-signal handler of the kernel backends (see live_names.h).
#include "emulator/live_names.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace slowpipe::emulator {

namespace {

constexpr int kMaxCleanups = 8;
void (*gCleanups[kMaxCleanups])() = {};
std::atomic<int> gCleanupCount{0};
std::mutex gCleanupMutex;

void onFatalSignal(int sig) {
  const int n = gCleanupCount.load();
  for (int i = 0; i < n; ++i) gCleanups[i]();
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void runFromSignal(const char* const argv[], bool quiet) {
  const pid_t pid = _Fork();
  if (pid == 0) {
    if (quiet) {
      const int devnull = open("/dev/null", O_WRONLY);
      if (devnull >= 0) dup2(devnull, 2);
    }
    execvp(argv[0], const_cast<char* const*>(argv));
    _exit(127);
  }
  if (pid > 0)
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
}

void addSignalCleanup(void (*cleanup)()) {
  std::lock_guard<std::mutex> lock(gCleanupMutex);
  const int n = gCleanupCount.load();
  for (int i = 0; i < n; ++i)
    if (gCleanups[i] == cleanup) return;
  if (n >= kMaxCleanups) throw std::runtime_error("more than 8 signal cleanups");
  gCleanups[n] = cleanup;
  gCleanupCount.store(n + 1);
  if (n == 0)
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction sa {};
      sa.sa_handler = onFatalSignal;
      sigemptyset(&sa.sa_mask);
      sigaction(sig, &sa, nullptr);
    }
}

}  // namespace slowpipe::emulator
