// Running system tools (ip, tc, ethtool, iperf3) without a shell: argv in, exit code and
// combined output back.
#pragma once

#include <string>
#include <vector>

namespace slowpipe::emulator {

struct CommandResult {
  int status = -1;  // exit code, or 128 + signal
  std::string output;
};

CommandResult runCommand(const std::vector<std::string>& argv);
// runCommand, throwing std::runtime_error naming the command and its output if it fails.
std::string runChecked(const std::vector<std::string>& argv, const std::string& purpose);
std::string joinArgs(const std::vector<std::string>& argv);
// A waitpid status in words: "killed by signal 9 (Killed)" or "exited with status 3".
std::string exitStatusText(int status);

}  // namespace slowpipe::emulator
