// Real sweeps through the CLI on a tiny corpus: outputs, resume (complete points skipped, failed
// ones re-run), and `slowpipe plot` producing non-empty PNG and SVG files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "emulator/command.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(SweepRunTest, RunsResumesAndPlots) {
  const fs::path root = fs::temp_directory_path() / ("slowpipe-sweep-test-" + std::to_string(getpid()));
  fs::create_directories(root / "corpus");
  {
    std::ofstream pre(root / "corpus" / "pre.txt"), ft(root / "corpus" / "ft.txt");
    for (int i = 0; i < 200; ++i) {
      pre << "The river runs past the mill number " << i % 13 << ".\n";
      ft << "A lantern glows in window " << i % 11 << " of the quiet house.\n";
    }
  }
  const json sweep = {
      {"name", "tiny"},
      {"base", {{"name", "tiny"},
                {"model", {{"seq_len", 16}, {"layers", 2}, {"width", 32}, {"heads", 4}}},
                {"data", {{"source", (root / "corpus").string()}, {"finetune_files", {"ft.txt"}},
                          {"cache_dir", (root / "cache").string()}, {"max_train_examples", 32}, {"max_val_examples", 8}}},
                {"pipeline", {{"stages", 2}, {"micro_batches", 2}, {"micro_batch_size", 4}}},
                {"training", {{"epochs", 2}, {"warmup_steps", 1}}},
                {"compression", {{"forward", "none"}, {"backward", "none"}}},
                {"network", {{"links", {{"bandwidth", "1Gbps"}}}}}}},
      {"pretrain", {{"max_steps", 4}}},
      {"baseline", "fp32"},
      {"axes", {{{"path", "network.links.bandwidth"}, {"values", {"200Mbps", "1Gbps"}}},
                {{"path", "compression"}, {"values", {{{"label", "fp32"}, {"forward", "none"}, {"backward", "none"}},
                                                      {{"label", "AC-SGD fw2/bw4"}, {"forward", "acsgd:bits=2"}, {"backward", "quant:bits=4"}}}}}}}};
  std::ofstream(root / "sweep.json") << sweep.dump(2);
  const fs::path out = root / "out";
  auto r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(), "--out", out.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(out / "base.pt"));
  const json summary = json::parse(std::ifstream(out / "summary.json"));
  ASSERT_EQ(summary["rows"].size(), 4u);
  for (const auto& row : summary["rows"]) {
    EXPECT_EQ(row["status"], "ok") << row.dump();
    EXPECT_GT(row["throughput_tokens_per_s"].get<double>(), 0);
    EXPECT_TRUE(row["speedup"].is_number());
  }
  EXPECT_TRUE(fs::exists(out / "summary.csv"));

  // Resume: mark one point failed; the rerun must re-run it and skip the other three.
  const std::string victim = summary["rows"][1]["point"];
  const fs::path victimFile = out / "runs" / (victim + ".json");
  json v = json::parse(std::ifstream(victimFile));
  v["status"] = "failed";
  std::ofstream(victimFile) << v.dump();
  const auto keptTime = fs::last_write_time(out / "runs" / (summary["rows"][0]["point"].get<std::string>() + ".json"));
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(), "--out", out.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  size_t skipped = 0;
  for (size_t p = r.output.find("complete, skipped"); p != std::string::npos; p = r.output.find("complete, skipped", p + 1)) ++skipped;
  EXPECT_EQ(skipped, 3u) << r.output;
  EXPECT_EQ(json::parse(std::ifstream(victimFile))["status"], "ok");
  EXPECT_EQ(fs::last_write_time(out / "runs" / (summary["rows"][0]["point"].get<std::string>() + ".json")), keptTime);

  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "plot", out.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* name : {"speedup_vs_bandwidth", "throughput_vs_bandwidth", "loss_vs_step_slowest", "loss_vs_time_fastest", "time_breakdown"})
    for (const char* ext : {".png", ".svg"}) {
      const fs::path f = out / "figures" / (std::string(name) + ext);
      ASSERT_TRUE(fs::exists(f)) << f;
      EXPECT_GT(fs::file_size(f), 1000u) << f;
    }
  fs::remove_all(root);
}

}  // namespace
