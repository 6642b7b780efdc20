// Names of live kernel objects (namespaces, shaped interfaces) kept in fixed storage, so that a
// signal handler can walk them and remove each without allocating, and the one SIGINT / SIGTERM /
// SIGHUP handler that runs every backend's cleanup: the exit path of the kernel backends
// (netns.cc, devshaper.cc).
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>

namespace slowpipe::emulator {

// Registers `cleanup` (idempotent per function) to run, with every other registered one, when the
// process gets SIGINT, SIGTERM or SIGHUP; then the signal takes its default action. The handler is
// installed on the first registration.
void addSignalCleanup(void (*cleanup)());

// For the cleanups: runs argv (a null-terminated list; argv[0] found on PATH) and waits for it,
// its stderr to /dev/null when `quiet`. Async-signal-safe: _Fork(), not fork(), so no atfork
// handler runs, and a signal that lands while this process is inside fork() (which holds glibc's
// atfork lock) cannot deadlock the handler; the child only dups, execs and exits.
void runFromSignal(const char* const argv[], bool quiet);

// Each name belongs to the process that added it: a child forked without exec (a calibration's
// sender and receiver) inherits the list and the handler, and a signal that reaches only the child
// must not remove what its parent is still using.
template <int N>
class LiveNames {
 public:
  // Throws naming `what` when all N slots are taken.
  void add(const std::string& name, const char* what) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < count_.load(); ++i)
      if (!names_[i][0]) {
        std::snprintf(names_[i], sizeof names_[i], "%s", name.c_str());
        owners_[i] = getpid();
        return;
      }
    if (count_.load() >= N)
      throw std::runtime_error(std::string("more than ") + std::to_string(N) + " live " + what);
    std::snprintf(names_[count_.load()], sizeof names_[0], "%s", name.c_str());
    owners_[count_.load()] = getpid();
    count_.fetch_add(1);
  }
  void remove(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < count_.load(); ++i)
      if (name == names_[i]) names_[i][0] = '\0';
  }
  // For signal handlers: no lock, no allocation; the names this process added.
  template <typename F>
  void forEach(F f) const {
    const int n = count_.load();
    const pid_t self = getpid();
    for (int i = 0; i < n; ++i)
      if (names_[i][0] && owners_[i] == self) f(names_[i]);
  }

 private:
  char names_[N][64] = {};
  pid_t owners_[N] = {};
  std::atomic<int> count_{0};
  std::mutex mu_;
};

}  // namespace slowpipe::emulator
