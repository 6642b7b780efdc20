// One progress line on stderr: rewritten in place ('\r') on a terminal; in a log (stderr not a
// tty) one whole line per update at most every kLogIntervalS seconds, and always the last one, so
// a log is readable lines instead of one giant line.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "emulator/shaped_socket.h"

namespace slowpipe::runtime {

class ProgressLine {
 public:
  static constexpr double kLogIntervalS = 5.0;
  explicit ProgressLine(FILE* out = stderr) : out_(out), tty_(isatty(fileno(out)) == 1) {}
  // `last`: the final update (printed in a log whatever the interval).
  void update(const std::string& text, bool last = false) {
    const double t = emulator::monotonicNow();
    if (tty_) {
      std::fprintf(out_, "\r%s   ", text.c_str());
      open_ = true;
    } else if (last || t - printed_ >= kLogIntervalS) {
      std::fprintf(out_, "%s\n", text.c_str());
      printed_ = t;
    }
    std::fflush(out_);
  }
  // A step of `total`: on a terminal every update; in a log a line each time another 10% is done
  // (and the last), so a long wait says how far it is without flooding the log.
  void milestone(const std::string& text, int64_t done, int64_t total) {
    if (tty_ || total <= 0) {
      update(text, total > 0 && done >= total);
      return;
    }
    const int64_t tenth = done * 10 / total;
    if (tenth > lastTenth_ || done >= total) {
      lastTenth_ = tenth;
      std::fprintf(out_, "%s\n", text.c_str());
      std::fflush(out_);
    }
  }
  // Ends the line on a terminal (a log's lines are already whole).
  void finish() {
    if (tty_ && open_) std::fprintf(out_, "\n");
    open_ = false;
  }
  bool tty() const { return tty_; }

 private:
  FILE* out_;
  bool tty_;
  bool open_ = false;
  double printed_ = -1e300;
  int64_t lastTenth_ = 0;
};

// "120/400 steps (30%), 35 s, ETA 82 s" (without a total: "120 steps, 35 s").
inline std::string progressText(int64_t done, int64_t total, double elapsedS,
                                const char* unit = "steps") {
  char b[160];
  if (total <= 0 || done <= 0) {
    std::snprintf(b, sizeof b, "%lld %s, %.0f s", static_cast<long long>(done), unit, elapsedS);
  } else {
    std::snprintf(b, sizeof b, "%lld/%lld %s (%.0f%%), %.0f s, ETA %.0f s",
                  static_cast<long long>(done), static_cast<long long>(total), unit,
                  100.0 * done / total, elapsedS, elapsedS * (total - done) / done);
  }
  return b;
}

}  // namespace slowpipe::runtime
