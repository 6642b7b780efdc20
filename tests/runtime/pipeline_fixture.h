// Shared fixture of the end-to-end runtime tests: a tiny corpus this test writes itself, a small
// spec, and helpers that launch real runs of the real CLI binary.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/launch/launcher.h"
#include "runtime/spec/spec.h"
#include "tests/runtime/held_connections.h"

namespace slowpipe::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

// A small English corpus: sentences recombined deterministically so the model has structure to
// learn.
inline void writeCorpus(const fs::path& dir) {
  fs::create_directories(dir);
  const std::vector<std::string> subjects = {"The old sailor", "A quiet child", "My neighbour",
                                             "The tired doctor", "Every farmer"};
  const std::vector<std::string> verbs = {"walked to", "looked at", "painted", "remembered",
                                          "sang about"};
  const std::vector<std::string> objects = {"the grey harbour", "a small garden", "the winter sky",
                                            "an empty road", "the long river"};
  std::ofstream pre(dir / "pretrain.txt"), ft(dir / "finetune.txt");
  for (int i = 0; i < 300; ++i) {
    const std::string line =
        subjects[i % 5] + " " + verbs[(i / 5) % 5] + " " + objects[(i / 25) % 5] + ".\n";
    (i % 4 == 0 ? pre : ft) << line;
    if (i % 7 == 0) ft << "%\n";
  }
}

class PipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("slowpipe-pipeline-test-" + std::to_string(getpid()));
    writeCorpus(root_ / "corpus");
  }
  static void TearDownTestSuite() {
    if (!std::getenv("SLOWPIPE_KEEP_TEST_DIR")) fs::remove_all(root_);
  }

  json baseSpec(int stages, const std::string& schedule) const {
    return {{"name", "t"},
            {"model", {{"seq_len", 16}, {"layers", 4}, {"width", 32}, {"heads", 4}, {"seed", 3}}},
            {"data",
             {{"source", (root_ / "corpus").string()},
              {"finetune_files", {"finetune.txt"}},
              {"cache_dir", (root_ / "cache").string()},
              {"max_val_examples", 16}}},
            {"pipeline",
             {{"stages", stages},
              {"schedule", schedule},
              {"micro_batches", 4},
              {"micro_batch_size", 2}}},
            {"training",
             {{"epochs", 20},
              {"max_steps", 20},
              {"lr", 0.003},
              {"warmup_steps", 3},
              {"clip_norm", 0.5},
              {"eval_each_epoch", false}}},
            {"compression", {{"forward", "none"}, {"backward", "none"}}},
            {"network", {{"links", {{"bandwidth", "100Gbps"}, {"latency", "0ms"}}}}},
            {"runtime", {{"step_timeout_s", 15}}}};
  }

  json launch(const json& specJson, const std::string& tag, bool expectOk = true,
              bool calibrate = false) const {
    const RunSpec spec = runSpecFromJson(specJson);
    LaunchOptions o;
    o.outDir = (root_ / tag).string();
    o.exe = SLOWPIPE_BINARY;
    o.progress = false;
    o.calibrate = calibrate;
    const int rc = launchRun(spec, o);
    json r = json::parse(std::ifstream(o.outDir + "/result.json"));
    if (expectOk)
      EXPECT_EQ(rc, 0) << r.value("reason", "");
    else
      EXPECT_NE(rc, 0);
    return r;
  }

  // Starts `slowpipe run` as a child process (the launcher) and waits until its result file has
  // three steps; *result gets that file. Returns the launcher's pid.
  pid_t startRun(const json& spec, const std::string& tag, json* result) const {
    const fs::path specFile = root_ / (tag + ".json"), out = root_ / tag;
    std::ofstream(specFile) << spec.dump();
    const pid_t launcher = fork();
    if (launcher == 0) {
      const int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 2);
      execl(SLOWPIPE_BINARY, "slowpipe", "run", specFile.c_str(), "--out", out.c_str(), "--quiet",
            nullptr);
      _exit(127);
    }
    for (int i = 0; i < 300; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      try {
        *result = json::parse(std::ifstream(out / "result.json"));
        if ((*result)["steps"].size() >= 3) break;
      } catch (const std::exception&) {
      }
    }
    return launcher;
  }

  static fs::path root_;
};
inline fs::path PipelineTest::root_;

// The TCP ports process `pid` listens on (its socket inodes against /proc/net/tcp).
inline std::vector<int> listeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fdDir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = opendir(fdDir.c_str())) {
    while (dirent* e = readdir(d)) {
      char link[256] = {0};
      if (readlink((fdDir + "/" + e->d_name).c_str(), link, sizeof link - 1) > 0 &&
          std::string(link).rfind("socket:[", 0) == 0)
        inodes.insert(std::string(link).substr(8, std::string(link).size() - 9));
    }
    closedir(d);
  }
  std::vector<int> ports;
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::istringstream in(line);
    std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
    in >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (st == "0A" && inodes.count(inode))
      ports.push_back(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
  }
  return ports;
}

// The pid of the child of `parent` whose command line has `arg` (a worker: "--rank\0001"), or -1.
inline pid_t childWith(pid_t parent, const std::string& arg) {
  DIR* d = opendir("/proc");
  pid_t found = -1;
  while (dirent* e = d ? readdir(d) : nullptr) {
    const pid_t p = std::atoi(e->d_name);
    if (p <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
    std::string statText((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t close = statText.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(statText.substr(close + 2));
    char state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::ifstream cmd("/proc/" + std::to_string(p) + "/cmdline");
    const std::string cmdline((std::istreambuf_iterator<char>(cmd)),
                              std::istreambuf_iterator<char>());
    if (cmdline.find(arg) != std::string::npos) found = p;
  }
  if (d) closedir(d);
  return found;
}

}  // namespace slowpipe::runtime
