// The shared fatal-signal handler of the kernel backends (see live_names.h).
#include "emulator/live_names.h"

#include <signal.h>

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
