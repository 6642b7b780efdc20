// Shared fixture of the end-to-end runtime tests: a tiny corpus this test writes itself, a small
// spec, and helpers that launch real runs of the real CLI binary.
#pragma once

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/launcher.h"
#include "runtime/spec.h"

namespace slowpipe::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

// A small English corpus: sentences recombined deterministically so the model has structure to learn.
inline void writeCorpus(const fs::path& dir) {
  fs::create_directories(dir);
  const std::vector<std::string> subjects = {"The old sailor", "A quiet child", "My neighbour", "The tired doctor", "Every farmer"};
  const std::vector<std::string> verbs = {"walked to", "looked at", "painted", "remembered", "sang about"};
  const std::vector<std::string> objects = {"the grey harbour", "a small garden", "the winter sky", "an empty road", "the long river"};
  std::ofstream pre(dir / "pretrain.txt"), ft(dir / "finetune.txt");
  for (int i = 0; i < 300; ++i) {
    const std::string line = subjects[i % 5] + " " + verbs[(i / 5) % 5] + " " + objects[(i / 25) % 5] + ".\n";
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
            {"data", {{"source", (root_ / "corpus").string()}, {"finetune_files", {"finetune.txt"}},
                      {"cache_dir", (root_ / "cache").string()}, {"max_val_examples", 16}}},
            {"pipeline", {{"stages", stages}, {"schedule", schedule}, {"micro_batches", 4}, {"micro_batch_size", 2}}},
            {"training", {{"epochs", 20}, {"max_steps", 20}, {"lr", 0.003}, {"warmup_steps", 3}, {"clip_norm", 0.5},
                          {"eval_each_epoch", false}}},
            {"compression", {{"forward", "none"}, {"backward", "none"}}},
            {"network", {{"links", {{"bandwidth", "100Gbps"}, {"latency", "0ms"}}}}},
            {"runtime", {{"step_timeout_s", 15}}}};
  }

  json launch(const json& specJson, const std::string& tag, bool expectOk = true, bool calibrate = false) const {
    const RunSpec spec = runSpecFromJson(specJson);
    LaunchOptions o;
    o.outDir = (root_ / tag).string();
    o.exe = SLOWPIPE_BINARY;
    o.progress = false;
    o.calibrate = calibrate;
    const int rc = launchRun(spec, o);
    json r = json::parse(std::ifstream(o.outDir + "/result.json"));
    if (expectOk) EXPECT_EQ(rc, 0) << r.value("reason", "");
    else EXPECT_NE(rc, 0);
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
      execl(SLOWPIPE_BINARY, "slowpipe", "run", specFile.c_str(), "--out", out.c_str(), "--quiet", nullptr);
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


}  // namespace slowpipe::runtime
