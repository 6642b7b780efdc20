// result.json's writer on a full disk, the codec-state check, the inputs a spec loads and the
// build's provenance (runtime/records/result.h). Torch-free.
#include "runtime/records/result.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compression/strict_int.h"
#include "runtime/dp/dp.h"
#include "runtime/records/records.h"
#include "slowpipe_provenance.h"

namespace slowpipe::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A 16 KiB tmpfs of this test's own (root only; skipped elsewhere), unmounted at the end.
class SmallDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("slowpipe-small-disk-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=16k") != 0)
      GTEST_SKIP() << "cannot mount a tmpfs (not root?)";
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) umount(dir_.c_str());
    fs::remove_all(dir_);
  }
  static json big(size_t kib) {
    return {{"status", "running"}, {"blob", std::string(kib << 10, 'x')}};
  }
  // No temporary file of any name is left beside the result.
  bool noTemporaries() const {
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().find(".tmp") != std::string::npos) return false;
    return true;
  }
  fs::path dir_;
  bool mounted_ = false;
};

TEST_F(SmallDisk, FailedWriteSaysTheErrnoKeepsTheLastGoodFileAndLeavesNoTmp) {
  const std::string path = (dir_ / "result.json").string();
  writeJsonAtomically(path, big(2));
  try {
    writeJsonAtomically(path, big(40));
    FAIL() << "a 40 KiB write to a 16 KiB disk succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device (errno 28)"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(noTemporaries());
  EXPECT_EQ(json::parse(std::ifstream(path))["blob"].get<std::string>().size(), 2u << 10);
}

TEST_F(SmallDisk, FinalResultOnAFullDiskIsAShortFailedDocumentNotRunning) {
  const std::string path = (dir_ / "result.json").string();
  writeJsonAtomically(path, big(6));
  std::ofstream(dir_ / "filler") << std::string(7 << 10, 'f');  // the disk is nearly full now
  json doc = big(40);
  doc["status"] = "ok";
  doc["launcher"] = {{"pid", 1}, {"host", "h"}};
  writeFinalResult(path, doc);
  const json r = json::parse(std::ifstream(path));
  EXPECT_EQ(r["status"], "failed");
  EXPECT_EQ(r["truncated"], true);
  EXPECT_NE(r["reason"].get<std::string>().find("No space left on device"), std::string::npos)
      << r["reason"];
  EXPECT_EQ(r["launcher"]["pid"], 1);
  EXPECT_TRUE(noTemporaries());
}

// A disk full before the first write: no result at all rather than a 0-byte result.json (which
// readers took for a run that wrote nothing yet), and the error says why.
TEST_F(SmallDisk, FullDiskAtTheStartLeavesNoEmptyResult) {
  {
    std::ofstream filler(dir_ / "filler");
    const std::string block(1024, 'f');
    for (int i = 0; i < 64 && filler; ++i) filler << block << std::flush;
  }
  const std::string path = (dir_ / "result.json").string();
  json doc = big(4);
  doc["launcher"] = {{"pid", 1}, {"host", "h"}};
  try {
    writeFinalResult(path, doc);
    FAIL() << "a result was written to a full disk";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path)) << fs::file_size(path) << "-byte result.json left";
  EXPECT_TRUE(noTemporaries());
}

// A folder of the test's own, removed at the end.
class OutputFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("slowpipe-out-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "target") << "precious\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string target() const {
    std::ifstream in(dir_ / "target");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  fs::path dir_;
};

// Links planted where a run writes (as root, the run overwrote their targets): a temporary file's
// predictable name and a worker's log. The targets stay as they were.
TEST_F(OutputFolder, LinksPlantedWhereARunWritesAreNeverWrittenThrough) {
  fs::create_symlink(dir_ / "target", dir_ / "result.json.tmp");
  writeJsonAtomically((dir_ / "result.json").string(), {{"status", "ok"}});
  EXPECT_EQ(target(), "precious\n");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir_ / "result.json")));
  EXPECT_EQ(json::parse(std::ifstream(dir_ / "result.json"))["status"], "ok");
  fs::create_symlink(dir_ / "target", dir_ / "worker-0.log");
  try {
    close(createFileNoFollow((dir_ / "worker-0.log").string()));
    FAIL() << "a log was opened through a link";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
  EXPECT_EQ(target(), "precious\n");
}

// Two writers of one output folder (two sweeps pretrained into one --out for 114 s before one was
// refused): the second is refused at once, naming the first; the lock goes with its holder.
TEST_F(OutputFolder, ASecondWriterOfAFolderIsRefusedNamingTheFirst) {
  {
    const FolderLock first(dir_.string(), "sweep");
    try {
      const FolderLock second(dir_.string(), "run");
      FAIL() << "two writers held one folder";
    } catch (const FolderInUse& e) {
      EXPECT_NE(std::string(e.what()).find("slowpipe sweep (pid " + std::to_string(getpid())),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(FolderLock(dir_.string(), "run"));
}

// A document nested 100,000 deep (it crashed the CLI with SIGSEGV in a recursive copy) is refused
// while parsing, by name.
TEST_F(OutputFolder, JsonNestedBeyondTheLimitIsRefusedByName) {
  std::ofstream(dir_ / "deep.json") << std::string(100000, '[') << std::string(100000, ']');
  try {
    readJsonFile((dir_ / "deep.json").string(), "spec file");
    FAIL() << "a document nested 100,000 deep was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("deep.json' is nested more than 128"), std::string::npos)
        << e.what();
  }
  fs::create_directories(dir_ / "folder.json");
  try {
    readJsonFile((dir_ / "folder.json").string(), "the run's result");
    FAIL() << "a folder was read as JSON";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder, not a file"), std::string::npos) << e.what();
  }
}

json pipelineState(int ranks) {
  json s = json::object();
  for (int r = 0; r < ranks; ++r)
    s[std::to_string(r)] = {{"fwd_sender_digest", 7},
                            {"fwd_receiver_digest", 7},
                            {"bwd_sender_digest", 9},
                            {"bwd_receiver_digest", 9},
                            {"dp_digests", json::object()}};
  return s;
}

// The old check compared digests of whichever end reported one: a pair reported by one end only,
// or nothing at all, passed.
TEST(CodecStatesTest, EveryPairMustBeReportedByBothEndsWithEqualDigests) {
  json s = pipelineState(2);
  EXPECT_EQ(codecStatesProblem(s, 2, 1), "");
  s["1"].erase("fwd_receiver_digest");
  EXPECT_NE(codecStatesProblem(s, 2, 1).find("forward codec state was not reported by both ends"),
            std::string::npos);
  s = pipelineState(2);
  s["0"]["bwd_receiver_digest"] = 10;
  EXPECT_NE(codecStatesProblem(s, 2, 1).find("backward sender digest 9 != receiver digest 10"),
            std::string::npos);
  // Two replicas of one stage: ring all-gather pair ag/c0 sent by replica 0, decoded by both.
  s = json::object();
  s["0"] = {{"dp_digests", {{"ag/c0", {{"send", "5"}, {"recv", "5"}}}}}};
  s["1"] = {{"dp_digests", {{"ag/c0", {{"recv", "5"}}}}}};
  EXPECT_EQ(codecStatesProblem(s, 1, 2), "");
  s["1"]["dp_digests"]["ag/c0"]["recv"] = "6";
  EXPECT_NE(codecStatesProblem(s, 1, 2).find("the ends' digests differ"), std::string::npos);
  s["1"]["dp_digests"] = {{"rs/1->0", {{"send", "0"}}}};
  s["0"]["dp_digests"]["ag/c0"]["recv"] = "5";
  EXPECT_NE(codecStatesProblem(s, 1, 2).find("'rs/1->0': reported by its sender only"),
            std::string::npos);
  EXPECT_NE(
      codecStatesProblem(json::object(), 1, 2).find("no data-parallel codec state was reported"),
      std::string::npos);
}

TEST(SpecInputsTest, EveryLoadedFileIsListedWithItsContentDigest) {
  const fs::path dir = fs::temp_directory_path() / ("slowpipe-inputs-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "lib.so") << "one";
  std::ofstream(dir / "trace.txt") << "0 1Gbps\n";
  const json spec = {
      {"compression",
       {{"forward", "ef(plugin:path=" + (dir / "lib.so").string() + ",bits=4)"},
        {"backward", "acsgd:bits=2,backing=mmap,path=/tmp/not-an-input"}}},
      {"network",
       {{"links",
         {{"bandwidth", "1Gbps"},
          {"overrides", {{{"src", 0}, {"dst", 1}, {"trace", (dir / "trace.txt").string()}}}}}}}}};
  const json a = specInputs(spec);
  ASSERT_EQ(a.size(), 2u) << a.dump();
  EXPECT_EQ(a[0]["path"], (dir / "lib.so").string());
  EXPECT_EQ(a[0]["role"], "compression.forward (plugin)");
  EXPECT_EQ(a[1]["role"], "network.links.overrides[0].trace");
  std::ofstream(dir / "lib.so") << "two";  // rebuilt at the same path
  EXPECT_NE(specInputs(spec)[0]["digest"], a[0]["digest"]);
  EXPECT_EQ(specInputs(spec)[1]["digest"], a[1]["digest"]);
  fs::remove_all(dir);
}

// The commit and dirty flag are the build's, stamped at build time: nothing is read from the
// source tree (or run: no git on PATH) when a result is written.
TEST(ProvenanceTest, TheBinaryCarriesItsBuildsCommit) {
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  setenv("PATH", "/nonexistent", 1);
  const json env = environmentInfo("");
  setenv("PATH", path.c_str(), 1);
  EXPECT_EQ(env["git_commit"], SLOWPIPE_GIT_COMMIT);
  EXPECT_EQ(env["git_dirty"], SLOWPIPE_GIT_DIRTY != 0);
  if (std::string(SLOWPIPE_GIT_COMMIT) != "unknown")
    EXPECT_EQ(env["git_commit"].get<std::string>().size(), 40u);
}

TEST(StrictIntTest, OneParserRefusesWhatAnyOfTheThreeRefused) {
  using compression::parseStrictInt;
  EXPECT_EQ(parseStrictInt("42"), 42);
  EXPECT_EQ(parseStrictInt("-7"), -7);
  for (const char* bad : {"", " 4", "4 ", "4x", "+", "-", "0x10", "1e3", "99999999999999999999"})
    EXPECT_FALSE(parseStrictInt(bad).has_value()) << "'" << bad << "'";
  // std::stoll skipped leading spaces: all three copies took "qadam:bits= 4".
  DpSpec dp;
  dp.codec = "qadam:bits= 4";
  EXPECT_THROW(gradientCompressor(dp), std::invalid_argument);
  dp.codec = "powersgd:rank=\t2";
  EXPECT_THROW(gradientCompressor(dp), std::invalid_argument);
}

// A rank's step record survives its message whole; a missing or mistyped field is named; the step
// entry of 2 stages x 2 replicas, by hand: the slowest rank's time, means over the ranks, sums of
// bytes, the last stage's replicas' mean loss (null when one has none).
TEST(RecordsTest, StepRecordsRoundTripAndAggregateByHand) {
  RunSpec spec;
  spec.pipeline.microBatches = 2;
  spec.pipeline.microBatchSize = 3;
  spec.model.seqLen = 5;
  const RankLayout layout{2, 2, 1};
  std::vector<RankStepRecord> ranks(4);
  for (int r = 0; r < 4; ++r) {
    RankStepRecord& x = ranks[r];
    x.rank = r;
    x.step = 7;
    x.epoch = 1;
    x.timeS = 1.0 + r;
    x.computeS = 0.5;
    x.encodeS = 0.1 * r;
    x.waitS = 0.2;
    x.dpS = 0.4;
    x.fwdRaw = 100, x.fwdWire = 10, x.gradRaw = 1000, x.gradWire = 50;
    x.gradNorm = 2.5;
    x.lr = 1e-3;
  }
  ranks[2].loss = 3.0;  // rank 2: stage 1, replica 0
  ranks[3].loss = 5.0;
  ranks[3].recvDelay = {{"from_prev", {{"min", 0.01}, {"max", 0.02}, {"messages", 4}}}};
  ranks[1].cpuS = 0.25;  // measured by a worker; the simulator's records have none
  ranks[1].preempted = 12;
  for (const auto& r : ranks) EXPECT_EQ(toJson(rankStepFromJson(toJson(r))), toJson(r));
  EXPECT_EQ(rankStepFromJson(toJson(ranks[1])).preempted, 12);
  EXPECT_FALSE(rankStepFromJson(toJson(ranks[0])).cpuS.has_value());
  json broken = toJson(ranks[0]);
  broken.erase("wait_s");
  try {
    rankStepFromJson(broken);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'wait_s' is missing"), std::string::npos) << e.what();
  }
  broken = toJson(ranks[0]);
  broken["fwd_wire"] = "ten";
  EXPECT_THROW(rankStepFromJson(broken), std::invalid_argument);

  const json st = stepEntry(spec, layout, ranks);
  EXPECT_EQ(st["step"], 7);
  EXPECT_EQ(st["epoch"], 1);
  EXPECT_DOUBLE_EQ(st["time_s"].get<double>(), 4.0);
  EXPECT_EQ(st["tokens"], 2 * 3 * 5 * 2);
  EXPECT_DOUBLE_EQ(st["tokens_per_s"].get<double>(), 60 / 4.0);
  EXPECT_DOUBLE_EQ(st["loss"].get<double>(), 4.0);
  EXPECT_EQ(st["loss_per_replica"], json({3.0, 5.0}));
  EXPECT_EQ(st["bytes"]["forward"], json({{"raw", 400}, {"wire", 40}}));
  EXPECT_EQ(st["bytes"]["gradient"], json({{"raw", 4000}, {"wire", 200}}));
  EXPECT_DOUBLE_EQ(st["breakdown_s"]["encode"].get<double>(), 0.15);
  EXPECT_DOUBLE_EQ(st["breakdown_s"]["allreduce"].get<double>(), 0.4);
  ASSERT_EQ(st["breakdown_s_per_stage"].size(), 4u);
  EXPECT_EQ(st["breakdown_s_per_stage"][3]["stage"], 1);
  EXPECT_EQ(st["breakdown_s_per_stage"][3]["replica"], 1);
  EXPECT_EQ(st["breakdown_s_per_stage"][3]["recv_delay_s"], ranks[3].recvDelay);
  EXPECT_DOUBLE_EQ(st["breakdown_s_per_stage"][1]["cpu_s"].get<double>(), 0.25);
  EXPECT_EQ(st["breakdown_s_per_stage"][1]["preempted"], 12);
  EXPECT_FALSE(st["breakdown_s_per_stage"][0].contains("cpu_s"));
  EXPECT_DOUBLE_EQ(st["grad_norm"].get<double>(), 2.5);
  ranks[3].loss.reset();
  EXPECT_TRUE(stepEntry(spec, layout, ranks)["loss"].is_null());
  ranks.pop_back();
  EXPECT_THROW(stepEntry(spec, layout, ranks), std::logic_error);
}

// The stages' share of the machine over the steady steps (epoch 1 on), by hand: CPU seconds per
// stage and step, over the stages' step time (the share of one core), preemptions a second; none
// where no row measured it (the simulator).
TEST(RecordsTest, StageCpuIsSummarisedOverTheSteadyStepsByHand) {
  auto step = [](int k, int epoch, double time, std::vector<std::pair<double, int>> rows) {
    json st = {{"step", k},
               {"epoch", epoch},
               {"time_s", time},
               {"tokens", 10},
               {"loss", 1.0},
               {"bytes",
                {{"forward", {{"raw", 4}, {"wire", 4}}}, {"backward", {{"raw", 4}, {"wire", 4}}}}},
               {"breakdown_s", {{"compute", 0.1}, {"wait", 0.1}}},
               {"breakdown_s_per_stage", json::array()}};
    for (auto [cpu, preempted] : rows)
      st["breakdown_s_per_stage"].push_back(
          {{"time_s", time}, {"cpu_s", cpu}, {"preempted", preempted}});
    return st;
  };
  // Step 0 (epoch 0) is warm-up and left out: its 9 s of CPU must not count.
  const json steps = {step(0, 0, 3.0, {{9.0, 900}, {9.0, 900}}),
                      step(1, 1, 1.0, {{0.5, 10}, {0.3, 30}}),
                      step(2, 1, 2.0, {{0.4, 20}, {0.8, 40}})};
  const json s = summarizeSteps(steps, json::array());
  ASSERT_TRUE(s.contains("stage_cpu")) << s.dump();
  EXPECT_DOUBLE_EQ(s["stage_cpu"]["cpu_s_per_step"].get<double>(), (0.5 + 0.3 + 0.4 + 0.8) / 4);
  EXPECT_DOUBLE_EQ(s["stage_cpu"]["core_share"].get<double>(), 2.0 / (1.0 * 2 + 2.0 * 2));
  EXPECT_DOUBLE_EQ(s["stage_cpu"]["preemptions_per_s"].get<double>(), 100.0 / 6.0);
  json simulated = steps;
  for (json& st : simulated)
    for (json& row : st["breakdown_s_per_stage"]) row.erase("cpu_s");
  EXPECT_FALSE(summarizeSteps(simulated, json::array()).contains("stage_cpu"));
}

}  // namespace
}  // namespace slowpipe::runtime
