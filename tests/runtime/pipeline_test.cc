// End-to-end pipeline tests with real worker processes over real ZeroMQ sockets, on a tiny corpus
// this test writes itself:
//  - equivalence: codec none, no shaping: S = 2 and 4, GPipe and 1F1B, per-step losses equal a
//    single-process run to 1e-5 relative over 20 steps;
//  - AC-SGD end to end: loss falls, forward wire bytes after the warm-up epoch <= 1/12 of fp32's;
//  - fault: kill -9 of a worker stops the run within 5 s with status failed and no orphans;
//  - malformed specs fail before any process starts.
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "emulator/command.h"
#include "runtime/data.h"
#include "runtime/launcher.h"
#include "runtime/worker.h"

namespace slowpipe::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A small English corpus: sentences recombined deterministically so the model has structure to learn.
void writeCorpus(const fs::path& dir) {
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

  json launch(const json& specJson, const std::string& tag) const {
    const RunSpec spec = runSpecFromJson(specJson);
    LaunchOptions o;
    o.outDir = (root_ / tag).string();
    o.exe = SLOWPIPE_BINARY;
    o.progress = false;
    o.calibrate = false;
    const int rc = launchRun(spec, o);
    json r = json::parse(std::ifstream(o.outDir + "/result.json"));
    EXPECT_EQ(rc, 0) << r.value("reason", "");
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
fs::path PipelineTest::root_;

class EquivalenceTest : public PipelineTest, public ::testing::WithParamInterface<std::tuple<int, std::string>> {};

TEST_P(EquivalenceTest, LossesEqualSingleProcess) {
  const auto [stages, schedule] = GetParam();
  const json spec = baseSpec(stages, schedule);
  std::vector<double> reference;
  prepareCorpus(runSpecFromJson(spec).data);
  runSingleProcess(runSpecFromJson(spec), "finetune", [&](const json& r) {
    if (r["type"] == "step") reference.push_back(r["loss"].get<double>());
  });
  ASSERT_EQ(reference.size(), 20u);
  const json result = launch(spec, "eq-" + std::to_string(stages) + schedule);
  ASSERT_EQ(result["status"], "ok") << result.value("reason", "");
  ASSERT_EQ(result["steps"].size(), 20u);
  for (size_t i = 0; i < reference.size(); ++i) {
    const double got = result["steps"][i]["loss"].get<double>();
    EXPECT_NEAR(got, reference[i], 1e-5 * std::fabs(reference[i])) << "step " << i;
  }
  EXPECT_LT(reference.back(), reference.front());  // it is training, not standing still
}

INSTANTIATE_TEST_SUITE_P(Shapes, EquivalenceTest,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values("gpipe", "1f1b")),
                         [](const auto& info) { return std::to_string(std::get<0>(info.param)) + "stages_" + std::get<1>(info.param); });

TEST_F(PipelineTest, AcsgdLossFallsAndForwardBytesShrink) {
  json spec = baseSpec(2, "gpipe");
  spec["training"]["epochs"] = 4;
  spec["training"]["max_steps"] = 0;
  spec["training"]["eval_each_epoch"] = true;
  spec["data"]["max_train_examples"] = 96;  // 6 steps per epoch
  // 128 tokens per micro-batch and 64 channels: enough values per channel scale that the scales
  // (one fp32 per channel) and the frame header do not dominate a 2-bit payload.
  spec["model"]["width"] = 64;
  spec["model"]["seq_len"] = 32;
  spec["pipeline"]["micro_batch_size"] = 4;
  spec["network"]["links"] = {{"bandwidth", "1Gbps"}, {"latency", "1ms"}};
  json fp32 = spec;
  spec["compression"] = {{"forward", "acsgd:bits=2"}, {"backward", "quant:bits=4"}};
  const json a = launch(spec, "acsgd"), f = launch(fp32, "fp32");
  ASSERT_EQ(a["status"], "ok");
  // The AC-SGD buffers of stage 0 (sender) and stage 1 (receiver), two processes, are identical
  // after every example was seen four times, and not trivially so.
  EXPECT_TRUE(a["codec_states_match"].get<bool>());
  EXPECT_EQ(a["codec_state"]["0"]["fwd_sender_digest"], a["codec_state"]["1"]["fwd_receiver_digest"]);
  EXPECT_NE(a["codec_state"]["0"]["fwd_sender_digest"], f["codec_state"]["0"]["fwd_sender_digest"]);
  const auto& steps = a["steps"];
  EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>() - 0.3);
  EXPECT_LT(a["evals"].back()["val_loss"].get<double>(), a["evals"].front()["val_loss"].get<double>());
  const double fp32Wire = f["steps"][10]["bytes"]["forward"]["wire"].get<double>();
  RecordProperty("fp32_forward_wire_per_step", std::to_string(fp32Wire));
  RecordProperty("acsgd_forward_wire_per_step", steps.back()["bytes"]["forward"]["wire"].dump());
  for (const auto& st : steps) {
    if (st["epoch"].get<int>() == 0) continue;  // first sighting of every example: full precision
    EXPECT_LE(st["bytes"]["forward"]["wire"].get<double>() * 12, fp32Wire) << "step " << st["step"];
  }
  EXPECT_LT(steps[0]["bytes"]["forward"]["wire"].get<double>() * 12, fp32Wire * 13);  // epoch 0 is ~ fp32
}

TEST_F(PipelineTest, KilledWorkerFailsTheRunWithin5sAndLeavesNoOrphans) {
  json spec = baseSpec(2, "gpipe");
  spec["training"]["max_steps"] = 0;
  spec["training"]["epochs"] = 200;  // long enough to be killed mid-run
  spec["network"]["links"] = {{"bandwidth", "100Mbps"}, {"latency", "2ms"}};
  const fs::path out = root_ / "fault";
  json r;
  const pid_t launcher = startRun(spec, "fault", &r);
  ASSERT_GE(r["steps"].size(), 3u) << "run did not start";
  const pid_t victim = r["workers"][1]["pid"], other = r["workers"][0]["pid"];
  const auto t0 = std::chrono::steady_clock::now();
  kill(victim, SIGKILL);
  int status = 0;
  waitpid(launcher, &status, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 5.0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  r = json::parse(std::ifstream(out / "result.json"));
  EXPECT_EQ(r["status"], "failed");
  EXPECT_NE(r["reason"].get<std::string>().find("rank 1"), std::string::npos) << r["reason"];
  EXPECT_NE(r["reason"].get<std::string>().find("signal 9"), std::string::npos) << r["reason"];
  EXPECT_GE(r["steps"].size(), 3u);
  EXPECT_TRUE(kill(other, 0) != 0 && errno == ESRCH) << "worker 0 survived";
  EXPECT_TRUE(kill(victim, 0) != 0 && errno == ESRCH);
}

TEST_F(PipelineTest, HungWorkerIsNamedAndStoppedAfterTheStepTimeout) {
  json spec = baseSpec(2, "gpipe");
  spec["training"]["max_steps"] = 0;
  spec["training"]["epochs"] = 200;
  spec["runtime"]["step_timeout_s"] = 2;
  const fs::path out = root_ / "hang";
  json r;
  const pid_t launcher = startRun(spec, "hang", &r);
  ASSERT_GE(r["steps"].size(), 3u) << "run did not start";
  const pid_t hung = r["workers"][1]["pid"], other = r["workers"][0]["pid"];
  const auto t0 = std::chrono::steady_clock::now();
  kill(hung, SIGSTOP);  // alive but making no progress
  int status = 0;
  waitpid(launcher, &status, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 2.0 + 5.0) << "timeout 2 s, then at most 5 s to stop everything";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  r = json::parse(std::ifstream(out / "result.json"));
  EXPECT_EQ(r["status"], "failed");
  EXPECT_NE(r["reason"].get<std::string>().find("rank 1 made no progress"), std::string::npos) << r["reason"];
  EXPECT_TRUE(kill(hung, 0) != 0 && errno == ESRCH) << "the hung worker survived";
  EXPECT_TRUE(kill(other, 0) != 0 && errno == ESRCH) << "worker 0 survived";
}

TEST_F(PipelineTest, MalformedSpecFailsBeforeAnyProcessStarts) {
  for (const auto& [mutate, expect] : std::vector<std::pair<std::function<void(json&)>, std::string>>{
           {[](json& j) { j.erase("model"); }, "spec.model: missing"},
           {[](json& j) { j["pipeline"]["micro_batches"] = "4"; }, "pipeline.micro_batches: wrong type"},
           {[](json& j) { j["compression"]["backward"] = "quant:bits=12"; }, "compression.backward"},
           {[](json& j) { j["pipeline"]["stages"] = 8; }, "stages <= model.layers"}}) {
    json spec = baseSpec(2, "gpipe");
    mutate(spec);
    const fs::path file = root_ / "bad.json", out = root_ / "bad-out";
    std::ofstream(file) << spec.dump();
    const auto r = emulator::runCommand({SLOWPIPE_BINARY, "run", file.string(), "--out", out.string()});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.output.find(expect), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out)) << "something ran for a bad spec";
  }
}

}  // namespace
}  // namespace slowpipe::runtime
