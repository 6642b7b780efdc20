// One progress line on stderr: rewritten in place ('\r') on a terminal; in a log (stderr not a
// tty) one whole line per update at most every kLogIntervalS seconds, and always the last one, so
// a log is readable lines instead of one giant line.
#pragma once

#include <unistd.h>

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
};

}  // namespace slowpipe::runtime
