// Real sweeps through the CLI on a tiny corpus: outputs, resume (complete points skipped, failed
// ones re-run), and `slowpipe plot` producing non-empty PNG and SVG files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "emulator/command.h"
#include "emulator/nodes.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Every sweep of these tests caches its pretrained bases in a folder of its own (not the user's
// ~/.cache/slowpipe), removed at exit.
struct TestCache {
  fs::path dir = fs::temp_directory_path() / ("slowpipe-test-cache-" + std::to_string(getpid()));
  TestCache() { setenv("SLOWPIPE_CACHE_DIR", dir.c_str(), 1); }
  ~TestCache() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
} testCache;

// A tiny corpus in `root` and a 2x2 sweep over it (fp32 / AC-SGD at 200 Mbps / 1 Gbps).
json tinySweep(const fs::path& root) {
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
      {"base",
       {{"name", "tiny"},
        {"model", {{"seq_len", 16}, {"layers", 2}, {"width", 32}, {"heads", 4}}},
        {"data",
         {{"source", (root / "corpus").string()},
          {"finetune_files", {"ft.txt"}},
          {"cache_dir", (root / "cache").string()},
          {"max_train_examples", 32},
          {"max_val_examples", 8}}},
        {"pipeline", {{"stages", 2}, {"micro_batches", 2}, {"micro_batch_size", 4}}},
        {"training", {{"epochs", 2}, {"warmup_steps", 1}}},
        {"compression", {{"forward", "none"}, {"backward", "none"}}},
        {"network", {{"links", {{"bandwidth", "1Gbps"}}}}}}},
      {"pretrain", {{"max_steps", 4}}},
      {"baseline", "fp32"},
      {"axes",
       {{{"path", "network.links.bandwidth"}, {"values", {"200Mbps", "1Gbps"}}},
        {{"path", "compression"},
         {"values",
          {{{"label", "fp32"}, {"forward", "none"}, {"backward", "none"}},
           {{"label", "AC-SGD fw2/bw4"},
            {"forward", "acsgd:bits=2"},
            {"backward", "quant:bits=4"}}}}}}}};
  return sweep;
}

TEST(SweepRunTest, RunsResumesAndPlots) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-sweep-test-" + std::to_string(getpid()));
  const json sweep = tinySweep(root);
  std::ofstream(root / "sweep.json") << sweep.dump(2);
  const fs::path out = root / "out";
  auto r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(),
                                           "--out", out.string(), "--repeats", "2"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(out / "base.pt"));
  // Interleaved: repeat 0 of every point runs before any repeat 1.
  const size_t lastR0 = r.output.rfind(" r0"), firstR1 = r.output.find(" r1");
  ASSERT_NE(firstR1, std::string::npos) << r.output;
  EXPECT_LT(lastR0, firstR1) << r.output;
  const json summary = json::parse(std::ifstream(out / "summary.json"));
  ASSERT_EQ(summary["rows"].size(), 4u);
  EXPECT_EQ(summary["repeats"], 2);
  for (const auto& row : summary["rows"]) {
    EXPECT_EQ(row["status"], "ok") << row.dump();
    EXPECT_EQ(row["repeats"], 2) << row.dump();
    EXPECT_GT(row["throughput_tokens_per_s"].get<double>(), 0);
    EXPECT_LE(row["throughput_lo"].get<double>(), row["throughput_tokens_per_s"].get<double>());
    EXPECT_GE(row["throughput_hi"].get<double>(), row["throughput_tokens_per_s"].get<double>());
    ASSERT_TRUE(row["speedup"].is_number()) << row.dump();
    // The ideal bounds what was achieved in every round (it is the codec's fastest step over
    // the links), and names one of the sweep's links.
    EXPECT_LE(row["efficiency_hi"].get<double>(), 1.0 + 1e-9) << row.dump();
    EXPECT_TRUE(row["ideal_link_bps"] == 200e6 || row["ideal_link_bps"] == 1e9) << row.dump();
  }
  EXPECT_TRUE(fs::exists(out / "summary.csv"));
  // `summarize` rebuilds the same summary from the folder alone, running nothing.
  const std::string csv = [&] {
    std::ifstream in(out / "summary.csv");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  fs::remove(out / "summary.json");
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "summarize", out.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("4 point(s): 4 ok"), std::string::npos) << r.output;
  EXPECT_EQ(json::parse(std::ifstream(out / "summary.json")), summary);
  EXPECT_EQ(csv, [&] {
    std::ifstream in(out / "summary.csv");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }());
  r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "summarize", root.string()});  // a spec beside it, no runs
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("no runs/ folder"), std::string::npos) << r.output;
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "summarize", (root / "nowhere").string()});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find((root / "nowhere" / "sweep.json").string()), std::string::npos)
      << r.output;
  const std::string p0 = summary["rows"][0]["point"], victim = summary["rows"][1]["point"];
  for (int k = 0; k < 2; ++k)
    EXPECT_TRUE(fs::exists(out / "runs" / (p0 + ".r" + std::to_string(k) + ".json")));

  auto countOf = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
  };
  // Resume: one run marked failed, one left "running" by a launcher that is gone, one whose
  // recorded spec differs. Those three rerun, each with its reason; the other five are skipped.
  const fs::path failedFile = out / "runs" / (victim + ".r1.json");
  json v = json::parse(std::ifstream(failedFile));
  v["status"] = "failed";
  v["reason"] = "test";
  std::ofstream(failedFile) << v.dump();
  const fs::path staleFile = out / "runs" / (p0 + ".r1.json");
  json stale = json::parse(std::ifstream(staleFile));
  stale["status"] = "running";
  stale["launcher"]["pid"] = 999999999;  // no such process
  std::ofstream(staleFile) << stale.dump();
  const std::string p2 = summary["rows"][2]["point"];
  const fs::path changedFile = out / "runs" / (p2 + ".r0.json");
  json changed = json::parse(std::ifstream(changedFile));
  changed["sweep_identity"]["spec_digest"] = "0000000000000000";
  std::ofstream(changedFile) << changed.dump();
  const fs::path kept = out / "runs" / (p2 + ".r1.json");
  const auto keptTime = fs::last_write_time(kept);
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(),
                                      "--out", out.string(), "--repeats", "2"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(countOf(r.output, "same experiment complete, skipped"), 5u) << r.output;
  EXPECT_NE(r.output.find(victim + " r1: previous attempt failed: test"), std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find(
          p0 + " r1: previous attempt failed: its writer (pid 999999999 on this host) is gone"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(p2 + " r0: rerun: the point's resolved spec changed"), std::string::npos)
      << r.output;
  EXPECT_EQ(json::parse(std::ifstream(failedFile))["status"], "ok");
  EXPECT_EQ(json::parse(std::ifstream(staleFile))["status"], "ok");
  EXPECT_EQ(fs::last_write_time(kept), keptTime);

  // A new base checkpoint (pretrained for longer) is a different experiment, although every point
  // spec, which names the checkpoint by path, is unchanged: everything reruns and says why.
  json sweep2 = sweep;
  sweep2["pretrain"]["max_steps"] = 6;
  std::ofstream(root / "sweep2.json") << sweep2.dump(2);
  fs::remove(out / "base.pt");
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep2.json").string(),
                                      "--out", out.string(), "--repeats", "1"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(countOf(r.output, "rerun: the base checkpoint changed"), 4u) << r.output;
  EXPECT_EQ(countOf(r.output, "skipped"), 0u) << r.output;

  // `export`: one row per (point, repeat, step) and per evaluation, as CSV and as JSON lines,
  // with the runs' own values (the folder's sweep is sweep2, one repeat).
  size_t steps = 0, evals = 0;
  json firstRun;
  std::string firstPoint;
  const json exported = json::parse(std::ifstream(out / "summary.json"));
  for (const auto& row : exported["rows"]) {
    const json run =
        json::parse(std::ifstream(out / "runs" / (row["point"].get<std::string>() + ".r0.json")));
    steps += run["steps"].size();
    evals += run["evals"].size();
    if (firstRun.is_null()) {
      firstRun = run;
      firstPoint = row["point"];
    }
  }
  ASSERT_GT(evals, 0u);
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "export", out.string(), "--format", "jsonl",
                                      "--out", (root / "rows.jsonl").string()});
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream jl(root / "rows.jsonl");
  size_t stepRows = 0, evalRows = 0;
  bool matched = false;
  for (std::string line; std::getline(jl, line);) {
    const json row = json::parse(line);
    EXPECT_EQ(row["repeat"], 0) << line;
    EXPECT_TRUE(row.contains("axis:network.links.bandwidth") && row.contains("axis:compression"))
        << line;
    if (row["kind"] == "step") {
      ++stepRows;
      EXPECT_TRUE(row.contains("loss") && row.contains("forward_wire_bytes") &&
                  row.contains("wait_s"))
          << line;
      matched |= row["point"] == firstPoint && row["step"] == 0 &&
                 row["loss"] == firstRun["steps"][0]["loss"];
    } else {
      ++evalRows;
      EXPECT_EQ(row["kind"], "eval") << line;
      EXPECT_TRUE(row["val_loss"].is_number()) << line;
    }
  }
  EXPECT_EQ(stepRows, steps);
  EXPECT_EQ(evalRows, evals);
  EXPECT_TRUE(matched) << "no row carries " << firstPoint << "'s step-0 loss";
  r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "export", out.string(), "--out", (root / "rows.csv").string()});
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream rowsCsv(root / "rows.csv");
  std::string header;
  std::getline(rowsCsv, header);
  EXPECT_EQ(
      header.rfind("kind,point,label,axis:network.links.bandwidth,axis:compression,repeat,", 0), 0u)
      << header;
  size_t lines = 0;
  for (std::string line; std::getline(rowsCsv, line);) ++lines;
  EXPECT_EQ(lines, steps + evals);
  // A folder that is not a sweep's is named, and nothing is written.
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "export", (root / "corpus").string(),
                                      "--out", (root / "none.csv").string()});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find((root / "corpus" / "sweep.json").string()), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(root / "none.csv"));

  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "plot", out.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* name :
       {"speedup_vs_bandwidth", "throughput_vs_bandwidth", "loss_vs_step_slowest",
        "loss_vs_time_fastest", "time_breakdown", "quality_slowest", "val_loss_gap_vs_bandwidth"})
    for (const char* ext : {".png", ".svg"}) {
      const fs::path f = out / "figures" / (std::string(name) + ext);
      ASSERT_TRUE(fs::exists(f)) << f;
      EXPECT_GT(fs::file_size(f), 1000u) << f;
    }

  // `report`: one self-contained page, rendered by headless Chromium as a reader's browser would:
  // a table row per point, every figure inline, the claims, provenance and the sweep.
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "report", out.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("report: " + (out / "report.html").string()), std::string::npos)
      << r.output;
  const char* chromium = "/usr/bin/chromium";
  ASSERT_TRUE(fs::exists(chromium))
      << "Debian's chromium renders the report in this test (tools/test.sh installs it)";
  r = slowpipe::emulator::runCommand({chromium, "--headless", "--no-sandbox", "--disable-gpu",
                                      "--dump-dom", "file://" + (out / "report.html").string()});
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string dom = r.output;
  EXPECT_EQ(countOf(dom, "<tr class=\"point\""), 4u) << dom.substr(0, 2000);
  size_t svgs = 0;
  for (const auto& e : fs::directory_iterator(out / "figures"))
    svgs += e.path().extension() == ".svg";
  EXPECT_EQ(countOf(dom, "<figure class=\"figure\""), svgs);
  EXPECT_GE(countOf(dom, "<svg"), svgs);
  for (const char* part :
       {"id=\"claims\"", "id=\"provenance\"", "id=\"spec\"", "id=\"links\"", "fig-quality_slowest"})
    EXPECT_NE(dom.find(part), std::string::npos) << part;
  // Fewer than 5 repeats: the table and every figure say "range" with n, never "95% CI" (a
  // percentile bootstrap over so few numbers is their range).
  const std::string n =
      std::to_string(json::parse(std::ifstream(out / "summary.json"))["repeats"].get<int>());
  EXPECT_EQ(dom.find("95% CI"), std::string::npos);
  EXPECT_NE(dom.find("[range, n=" + n + "]"), std::string::npos)
      << dom.substr(dom.find("<thead>"), 300);
  EXPECT_NE(dom.find("median of n=" + n + ", bars: range (under 5 repeats, no CI)"),
            std::string::npos);
  fs::remove_all(root);
}

// The simulator's user path: `slowpipe profile` on a sweep (stage costs, codecs, the host speed
// measured with real processes, the transport), then `sweep --simulate` over the same sweep and
// `plot`. A simulated point is a result document like an emulated one, marked simulated.
// Repeats on their own seeds, through the CLI: with "repeat_seeds": "per_repeat" repeat 1 trains
// with seed 2 (its result's spec says so) and ends at another validation loss than repeat 0, so
// the loss's interval has width and the quality gap is paired on the same seed; with the default
// every repeat trains alike (training here is deterministic: the same final loss).
// A sweep whose spec changed since its copies ran (epochs 1 -> 3): the summary counts none of the
// old copies as the new experiment (it summarized them as ok; the summary never checked
// sweep_identity). The committed quickstart sweep, moved here: its checkpoint is not on this
// machine, which alone does not make a copy another experiment. Its 5 repeats are reported with
// a named 95% CI (rendered by Chromium).
TEST(SweepRunTest, SummaryLeavesOutCopiesOfAnotherVersionOfTheSweep) {
  const fs::path root = fs::temp_directory_path() / ("slowpipe-stale-" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const fs::path src = fs::path(SLOWPIPE_SOURCE_DIR) / "results" / "quickstart";
  fs::copy(src / "sweep.json", root / "sweep.json");
  fs::copy(src / "runs", root / "runs", fs::copy_options::recursive);
  auto r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "summarize", root.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  const json before = json::parse(std::ifstream(root / "summary.json"));
  const size_t points = before["rows"].size();
  EXPECT_NE(r.output.find(std::to_string(points) + " point(s): " + std::to_string(points) + " ok"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(before["stale_copies"].empty()) << before["stale_copies"].dump();
  // Five repeats: the interval is named a 95% CI, with its method, in the rendered report.
  ASSERT_EQ(before["repeats"], 5);
  EXPECT_NE(before["interval"].get<std::string>().find(
                "95% percentile bootstrap interval of the median over 5 repeats"),
            std::string::npos)
      << before["interval"];
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "report", root.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  r = slowpipe::emulator::runCommand({"/usr/bin/chromium", "--headless", "--no-sandbox",
                                      "--disable-gpu", "--dump-dom",
                                      "file://" + (root / "report.html").string()});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[95% CI, n=5]"), std::string::npos);
  EXPECT_NE(r.output.find("median of n=5, 95% bootstrap CI"), std::string::npos);
  EXPECT_NE(r.output.find("95% percentile bootstrap interval of the median over 5 repeats"),
            std::string::npos);
  // Figures that show what went wrong: a target AC-SGD's repeats never all reached is marked "not
  // reached" (the point was left out), a point whose link calibration failed is drawn hollow with
  // a legend note (it was drawn like the others), the bandwidth axis reads Mbps/Gbps (10^8).
  const fs::path calibrated = root / "runs" / "bandwidth-1Gbps_compression-fp32.r0.json";
  json doc = json::parse(std::ifstream(calibrated));
  doc["link_ok"] = false;
  std::ofstream(calibrated) << doc.dump();
  r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "summarize", root.string(), "--target-loss", "2.877"});
  ASSERT_EQ(r.status, 0) << r.output;
  const json targeted = json::parse(std::ifstream(root / "summary.json"));
  size_t unreached = 0;
  for (const auto& row : targeted["rows"]) unreached += row["time_to_target_s"].is_null();
  ASSERT_GT(unreached, 0u) << "the committed runs all reach 2.877 now: pick a lower target";
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "report", root.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  r = slowpipe::emulator::runCommand({"/usr/bin/chromium", "--headless", "--no-sandbox",
                                      "--disable-gpu", "--dump-dom",
                                      "file://" + (root / "report.html").string()});
  ASSERT_EQ(r.status, 0) << r.output;
  size_t marked = 0;
  for (size_t at = r.output.find(">not reached</text>"); at != std::string::npos;
       at = r.output.find(">not reached</text>", at + 1))
    ++marked;
  EXPECT_EQ(marked, unreached);
  EXPECT_NE(r.output.find(">hollow: link calibration failed (link_ok false)</text>"),
            std::string::npos);
  for (const char* tick :
       {")\">100 Mbps</text>", ")\">1 Gbps</text>", ")\">10 Gbps</text>"})  // SVG tick labels
    EXPECT_NE(r.output.find(tick), std::string::npos) << tick;
  json sweep = json::parse(std::ifstream(root / "sweep.json"));
  sweep["base"]["training"]["epochs"] = sweep["base"]["training"].value("epochs", 1) + 2;
  std::ofstream(root / "sweep.json") << sweep.dump(2);
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "summarize", root.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  const json after = json::parse(std::ifstream(root / "summary.json"));
  for (const auto& row : after["rows"]) EXPECT_NE(row["status"], "ok") << row.dump();
  size_t copies = 0;
  for (const auto& e : fs::directory_iterator(root / "runs"))
    copies += e.path().extension() == ".json";
  EXPECT_EQ(after["stale_copies"].size(), copies);
  fs::remove_all(root);
}

// A spec nested 100,000 deep crashed the CLI (SIGSEGV in a recursive copy, no message): refused
// by name, exit status 2, no result.
TEST(SweepRunTest, ADeeplyNestedSpecIsRefusedByName) {
  const fs::path root = fs::temp_directory_path() / ("slowpipe-deep-" + std::to_string(getpid()));
  fs::create_directories(root);
  std::ofstream(root / "deep.json")
      << "{\"name\": " << std::string(100000, '[') << std::string(100000, ']') << "}";
  const auto r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "run", (root / "deep.json").string(), "--out", (root / "out").string()});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("deep.json' is nested more than 128"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(root / "out" / "result.json"));
  fs::remove_all(root);
}

// Two sweeps into one --out (both pretrained into base.pt.tmp for 114 s before one was refused):
// while one holds the folder, the second is refused at once, naming the holder.
TEST(SweepRunTest, ASecondSweepIntoOneFolderIsRefusedAtOnce) {
  const fs::path root = fs::temp_directory_path() / ("slowpipe-lock-" + std::to_string(getpid()));
  fs::remove_all(root);
  const json sweep = tinySweep(root);
  std::ofstream(root / "sweep.json") << sweep.dump(2);
  const fs::path out = root / "out";
  const std::vector<std::string> argv = {SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(),
                                         "--out", out.string()};
  const pid_t first = fork();
  if (first == 0) {
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execl(SLOWPIPE_BINARY, "slowpipe", "sweep", (root / "sweep.json").c_str(), "--out", out.c_str(),
          nullptr);
    _exit(127);
  }
  for (int i = 0; i < 100 && !fs::exists(out / ".slowpipe.lock"); ++i)
    usleep(50000);  // it holds the folder
  usleep(200000);
  const auto second = slowpipe::emulator::runCommand(argv);
  kill(first, SIGKILL);
  waitpid(first, nullptr, 0);
  EXPECT_NE(second.status, 0) << second.output;
  EXPECT_NE(second.output.find("is in use by slowpipe sweep (pid " + std::to_string(first)),
            std::string::npos)
      << second.output;
  EXPECT_EQ(second.output.find("pretrain"), std::string::npos)
      << "the second sweep pretrained: " << second.output;
  fs::remove_all(root);
}

TEST(SweepRunTest, RepeatSeedsTrainEachRepeatOnItsOwnSeed) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-seeds-test-" + std::to_string(getpid()));
  json sweep = tinySweep(root);
  sweep["axes"][0]["values"] = json::array({"1Gbps"});
  auto finalLosses = [&](const std::string& seeds) {
    sweep["repeat_seeds"] = seeds;
    std::ofstream(root / "sweep.json") << sweep.dump(2);
    const fs::path out = root / ("out-" + seeds);
    auto r =
        slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(),
                                        "--out", out.string(), "--repeats", "2", "--quiet"});
    EXPECT_EQ(r.status, 0) << r.output;
    const json summary = json::parse(std::ifstream(out / "summary.json"));
    EXPECT_EQ(summary["repeat_seeds"], seeds);
    std::vector<double> losses;
    for (int k = 0; k < 2; ++k) {
      const json run = json::parse(std::ifstream(
          out / "runs" / ("bandwidth-1Gbps_compression-fp32.r" + std::to_string(k) + ".json")));
      EXPECT_EQ(run["spec"]["training"]["seed"], seeds == "per_repeat" ? 1 + k : 1);
      losses.push_back(run["summary"]["final_val_loss"].get<double>());
    }
    for (const auto& row : summary["rows"])
      if (row["label"] == "fp32" && seeds == "per_repeat")
        EXPECT_LT(row["final_val_loss_lo"], row["final_val_loss_hi"]) << row.dump();
    return losses;
  };
  const auto per = finalLosses("per_repeat"), same = finalLosses("same");
  EXPECT_NE(per[0], per[1]);
  EXPECT_EQ(same[0], same[1]);
  EXPECT_EQ(same[0], per[0]);  // repeat 0 keeps the spec's seed
  fs::remove_all(root);
}

TEST(SweepRunTest, ProfileThenSimulateTheSameSweep) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-sim-test-" + std::to_string(getpid()));
  json sweep = tinySweep(root);
  sweep.erase("pretrain");
  std::ofstream(root / "sweep.json") << sweep.dump(2);
  const fs::path prof = root / "profile.json", out = root / "sim";
  auto r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "profile", (root / "sweep.json").string(), "--out", prof.string(), "--reps",
       "2", "--host-window", "0.2", "--host-reps", "1", "--host-from-run"});
  ASSERT_EQ(r.status, 0) << r.output;
  // No silent wait: in a log a line per 10% of the parts measured, the last one complete.
  size_t lines = 0;
  for (size_t at = r.output.find(" parts ("); at != std::string::npos;
       at = r.output.find(" parts (", at + 1))
    ++lines;
  EXPECT_GE(lines, 5u) << r.output;
  EXPECT_NE(r.output.find(" parts (100%)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", ETA "), std::string::npos) << r.output;
  const json p = json::parse(std::ifstream(prof));
  EXPECT_EQ(p["source"], "measured");
  ASSERT_EQ(p["stages"].size(), 2u);
  ASSERT_EQ(p["host_speed"].size(), 2u) << p.dump(2);
  EXPECT_GE(p["host_cores"].get<int>(), 1);
  // --host-from-run: the speeds come from a real 12-step pipelined run's every-step timeline, as
  // fitted (clamped to host_speed's range [0.05, 1.5]; a lone stage's speed is not divided out).
  ASSERT_TRUE(p["device"].contains("host_speed_fit")) << p["device"].dump(2);
  ASSERT_EQ(p["device"]["host_speed_fit"]["raw_speed"].size(), 2u) << p["device"].dump(2);
  for (size_t n = 0; n < 2; ++n) {
    const double raw = p["device"]["host_speed_fit"]["raw_speed"][n].get<double>();
    EXPECT_DOUBLE_EQ(p["host_speed"][n].get<double>(), std::min(1.5, std::max(0.05, raw)))
        << p["device"].dump(2);
  }
  // Two calibration runs (100 Gbps, and links as slow as the slowest forward), steps 2-11 of each.
  EXPECT_EQ(p["device"]["host_speed_fit"]["events"], 2 * 2 * 10 * (2 + 2 + 1))
      << p["device"].dump(2);
  // Each stage's factor in the pipeline, fitted with the speeds, and its compute after a wait.
  ASSERT_EQ(p["device"]["host_speed_fit"]["stage_factor"].size(), 2u) << p["device"].dump(2);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(p["stages"][s].value("run_factor", 1.0),
              p["device"]["host_speed_fit"]["stage_factor"][s].get<double>());
    EXPECT_EQ(p["stages"][s]["idle_extra_s"]["after_s"].size(), 5u) << p["stages"][s].dump();
    EXPECT_EQ(p["stages"][s]["idle_extra_s"]["forward"].size(), 5u) << p["stages"][s].dump();
  }
  ASSERT_EQ(p["device"]["host_speed_side_by_side"].size(), 2u);
  EXPECT_EQ(p["device"]["host_speed_side_by_side"][0], 1.0);  // relative to running alone
  EXPECT_GT(p["transport"]["b_s_per_byte"].get<double>() + p["transport"]["a_s"].get<double>(),
            0.0);
  // Every codec the sweep's compression axis names is profiled, by its canonical spec.
  bool acsgd = false;
  for (const auto& [k, v] : p["codecs"].items()) acsgd |= k.rfind("acsgd:", 0) == 0;
  EXPECT_TRUE(acsgd) << p["codecs"].dump();
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(),
                                      "--simulate", "--profile", prof.string(), "--out",
                                      out.string(), "--quiet"});
  ASSERT_EQ(r.status, 0) << r.output;
  const json summary = json::parse(std::ifstream(out / "summary.json"));
  ASSERT_EQ(summary["rows"].size(), 4u);
  for (const auto& row : summary["rows"]) {
    EXPECT_EQ(row["status"], "ok") << row.dump();
    const json run =
        json::parse(std::ifstream(out / "runs" / (row["point"].get<std::string>() + ".r0.json")));
    EXPECT_EQ(run["simulated"], true);
    EXPECT_EQ(run["profile"]["host_speed"], p["host_speed"]) << run["profile"].dump();
    ASSERT_EQ(run["timeline"].size(), 2u);
  }
  // A simulated folder is summarized again alike; one whose record predates the axes in it says so.
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "summarize", out.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(json::parse(std::ifstream(out / "summary.json")), summary);
  fs::create_directories(root / "old" / "runs");
  json old = json::parse(std::ifstream(out / "sweep.json"));
  old.erase("axes");
  std::ofstream(root / "old" / "sweep.json") << old.dump();
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "summarize", (root / "old").string()});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("records no axes"), std::string::npos) << r.output;
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "plot", out.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  // --set on the command line changes every point's base (here: 4 micro-batches); a field an axis
  // varies is refused, naming the axis.
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(),
                                      "--simulate", "--profile", prof.string(), "--out",
                                      (root / "sim4").string(), "--quiet", "--set",
                                      "pipeline.micro_batches=4"});
  ASSERT_EQ(r.status, 0) << r.output;
  for (const auto& e : fs::directory_iterator(root / "sim4" / "runs")) {
    if (e.path().extension() != ".json") continue;
    EXPECT_EQ(json::parse(std::ifstream(e.path()))["spec"]["pipeline"]["micro_batches"], 4)
        << e.path();
  }
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(),
                                      "--simulate", "--profile", prof.string(), "--out",
                                      (root / "sim5").string(), "--quiet", "--set",
                                      "compression.forward=fp16"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("axis 'compression'"), std::string::npos) << r.output;
  // A profile that is not one is named in the error, and nothing is written.
  std::ofstream(root / "bad.json")
      << R"({"schema": "slowpipe.profile/1", "stages": [{"forward_s": -1}]})";
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(),
                                      "--simulate", "--profile", (root / "bad.json").string(),
                                      "--out", (root / "sim2").string(), "--quiet"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("bad.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("forward_s"), std::string::npos) << r.output;
  // --dedicated (a processor per stage, as on a GPU per stage): host_speed is 1, not measured.
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "profile", (root / "sweep.json").string(),
                                      "--out", (root / "dedicated.json").string(), "--reps", "2",
                                      "--dedicated"});
  ASSERT_EQ(r.status, 0) << r.output;
  const json d = json::parse(std::ifstream(root / "dedicated.json"));
  EXPECT_EQ(d["host_speed"], json::array({1.0, 1.0})) << d.dump(2);
  EXPECT_EQ(d["host_cores"], 2);
  EXPECT_EQ(d["device"]["runtime_device"], "cpu");
  // A sweep that varies the schedule: --host-from-run fits a calibration run of each schedule
  // (host_speed_by_schedule; host_speed is the base's), and each simulated point uses its own.
  json bySchedule = sweep;
  bySchedule["axes"] = {
      {{"path", "pipeline.schedule"}, {"values", {"gpipe", "1f1b"}}},
      {{"path", "compression"},
       {"values", {{{"label", "fp32"}, {"forward", "none"}, {"backward", "none"}}}}}};
  std::ofstream(root / "schedules.json") << bySchedule.dump(2);
  r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "profile", (root / "schedules.json").string(), "--out",
       (root / "schedules_profile.json").string(), "--reps", "2", "--host-window", "0.2",
       "--host-reps", "1", "--host-from-run"});
  ASSERT_EQ(r.status, 0) << r.output;
  const json ps = json::parse(std::ifstream(root / "schedules_profile.json"));
  ASSERT_EQ(ps["host_speed_by_schedule"].size(), 2u) << ps.dump(2);
  EXPECT_EQ(ps["host_speed_by_schedule"]["gpipe"], ps["host_speed"]);
  EXPECT_EQ(ps["device"]["host_speed_fit"]["schedule"], "gpipe");
  const json fit1f1b = ps["device"]["host_speed_fit_by_schedule"]["1f1b"];
  EXPECT_EQ(fit1f1b["events"], 2 * 2 * 10 * (2 + 2 + 1)) << ps["device"].dump(2);
  for (size_t n = 0; n < 2; ++n)
    EXPECT_DOUBLE_EQ(ps["host_speed_by_schedule"]["1f1b"][n].get<double>(),
                     std::min(1.5, std::max(0.05, fit1f1b["raw_speed"][n].get<double>())));
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "schedules.json").string(),
                                      "--simulate", "--profile",
                                      (root / "schedules_profile.json").string(), "--out",
                                      (root / "sim_sched").string(), "--quiet"});
  ASSERT_EQ(r.status, 0) << r.output;
  int seen = 0;
  for (const auto& e : fs::directory_iterator(root / "sim_sched" / "runs")) {
    if (e.path().extension() != ".json") continue;
    const json run = json::parse(std::ifstream(e.path()));
    const std::string schedule = run["spec"]["pipeline"]["schedule"];
    EXPECT_EQ(run["profile"]["host_speed"], ps["host_speed_by_schedule"][schedule]) << e.path();
    ++seen;
  }
  EXPECT_EQ(seen, 2);
  fs::remove_all(root);
}

// A codec that is not part of slowpipe, swept from the command line: a C plug-in on both
// directions through --set, every point a real multi-process run whose ends keep equal state.
TEST(SweepRunTest, PluginCodecSweptWithSet) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-plugin-sweep-" + std::to_string(getpid()));
  json sweep = tinySweep(root);
  sweep.erase("pretrain");
  sweep["axes"] =
      json::array({{{"path", "network.links.bandwidth"}, {"values", {"200Mbps", "1Gbps"}}}});
  std::ofstream(root / "sweep.json") << sweep.dump(2);
  const std::string plugin = std::string("plugin:path=") + GOOD_PLUGIN;
  const auto r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(), "--out", (root / "out").string(),
       "--quiet", "--set", "compression.forward=" + plugin + ",clip=16", "--set",
       "compression.backward=" + plugin, "--set", "compression.label=int8 plug-in"});
  ASSERT_EQ(r.status, 0) << r.output;
  const json summary = json::parse(std::ifstream(root / "out" / "summary.json"));
  ASSERT_EQ(summary["rows"].size(), 2u);
  for (const auto& row : summary["rows"]) {
    EXPECT_EQ(row["status"], "ok") << row.dump();
    const json run = json::parse(
        std::ifstream(root / "out" / "runs" / (row["point"].get<std::string>() + ".r0.json")));
    EXPECT_EQ(run["spec"]["compression"]["forward"], plugin + ",clip=16");
    EXPECT_EQ(run["codec_states_match"], true) << run["codec_state"].dump();
    EXPECT_GT(run["summary"]["compression_ratio"].get<double>(), 3.0) << run["summary"].dump();
  }
  fs::remove_all(root);
}

// At 10 Gbps a codec slower than the link is named: a plug-in that spends ~100 ns a value is
// codec_bound (its encode + decode take longer than its raw bytes on the wire), the paper's
// built-in codecs are not, and the sweep says which points were.
TEST(SweepRunTest, ASlowCodecIsCodecBoundAtTenGbps) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-codec-bound-" + std::to_string(getpid()));
  json sweep = tinySweep(root);
  sweep.erase("pretrain");
  // Messages of 512 KiB (a smaller model's messages cost more in framing than in coding) and a
  // second epoch (AC-SGD's deltas). Measured here: fp32 0.45 ms, AC-SGD 0.51 ms, the plug-in 52 ms
  // of coding a step per rank against 0.84 ms of raw bytes at 10 Gbps.
  sweep["base"]["model"] = {{"seq_len", 64}, {"layers", 2}, {"width", 512}, {"heads", 4}};
  sweep["axes"][0]["values"] = {"10Gbps"};
  const std::string slow = std::string("plugin:path=") + SLOW_PLUGIN;
  sweep["axes"][1]["values"].push_back(
      {{"label", "slow plug-in"}, {"forward", slow}, {"backward", slow}});
  std::ofstream(root / "sweep.json") << sweep.dump(2);
  const auto r =
      slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(),
                                      "--out", (root / "out").string(), "--quiet"});
  ASSERT_EQ(r.status, 0) << r.output;
  const json summary = json::parse(std::ifstream(root / "out" / "summary.json"));
  ASSERT_EQ(summary["rows"].size(), 3u);
  for (const auto& row : summary["rows"]) {
    ASSERT_EQ(row["status"], "ok") << row.dump();
    const bool slowOne = row["label"] == "slow plug-in";
    EXPECT_EQ(row["codec_bound"], slowOne) << row.dump();
    if (slowOne)
      EXPECT_NE(r.output.find("codec-bound: " + row["point"].get<std::string>()), std::string::npos)
          << r.output;
  }
  EXPECT_EQ(r.output.find("codec-bound: bandwidth-10Gbps_compression-AC"), std::string::npos)
      << r.output;
  fs::remove_all(root);
}

// `slowpipe bench codecs` as a user runs it: ratios against memcpy from the same run, the frame
// checksum's rate, a row per codec with its rounds' median, the 2-thread rerun, the libtorch-ops
// baseline on quant rows (bytes matching ours), the traffic floor on the quant and acsgd rows (not
// on acsgd in its warm-up), and the slow plug-in, not a built-in, flagged at 10 Gbps.
TEST(SweepRunTest, BenchCodecsMeasuresAgainstMemcpyAndFlagsASlowPlugin) {
  const std::string slow = std::string("plugin:path=") + SLOW_PLUGIN;
  const auto r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY,
                                                 "bench",
                                                 "codecs",
                                                 "--size-kib",
                                                 "64",
                                                 "--rounds",
                                                 "2",
                                                 "--threads",
                                                 "2",
                                                 "--codec",
                                                 "none",
                                                 "--codec",
                                                 "quant:bits=4",
                                                 "--codec",
                                                 "acsgd:bits=2",
                                                 "--codec",
                                                 "acsgd:bits=2,warmup_epochs=5",
                                                 "--codec",
                                                 slow,
                                                 "--link-gbps",
                                                 "10",
                                                 "--json"});
  ASSERT_EQ(r.status, 0) << r.output;
  const json d = json::parse(r.output);
  EXPECT_EQ(d["threads"], 2);
  EXPECT_GT(d["memcpy_GBps"].get<double>(), 0.0);
  // the frame checksum's rate for the size, on one thread and on the two
  EXPECT_GT(d["checksum_GBps_by_bytes"]["65536"].get<double>(), 0.0) << r.output;
  EXPECT_GT(d["checksum_GBps_threads_by_bytes"]["65536"].get<double>(), 0.0) << r.output;
  ASSERT_EQ(d["results"].size(), 5u) << r.output;
  for (const auto& row : d["results"]) {
    EXPECT_EQ(row["rounds"], 2) << row.dump();
    EXPECT_EQ(row["encode_vs_memcpy_range"].size(), 2u) << row.dump();
    for (const char* k : {"encode_thread_speedup", "decode_thread_speedup", "read_thread_speedup",
                          "memcpy_thread_speedup", "encode_GBps_threads", "memcpy_GBps_threads"})
      EXPECT_GT(row[k].get<double>(), 0.0) << k << ": " << row.dump();
    const bool plugin = row["codec"].get<std::string>().rfind("plugin:", 0) == 0;
    EXPECT_EQ(row["codec_bound"], plugin) << row.dump();
    // the traffic floor on the quantizing codecs (quant, acsgd) alone, not on acsgd still in its
    // warm-up at the bench's epoch (every row sent in full)
    const std::string codec = row["codec"].get<std::string>();
    const bool quant = codec.rfind("quant:", 0) == 0;
    const bool floor = quant || (codec.rfind("acsgd:", 0) == 0 &&
                                 codec.find("warmup_epochs=5") == std::string::npos);
    for (const char* k : {"floor_encode_GBps", "floor_vs_memcpy", "encode_vs_floor"}) {
      EXPECT_EQ(row.contains(k), floor) << k << ": " << row.dump();
      if (floor) EXPECT_GT(row[k].get<double>(), 0.0) << k << ": " << row.dump();
    }
    EXPECT_EQ(row["torch_ops_encode_GBps"].is_number(), quant) << row.dump();
    if (quant) {
      EXPECT_EQ(row["matches_torch_ops"], true) << row.dump();
    }
  }
}

// The CLI starts with glibc's malloc asking for transparent huge pages (tools/main.cc): a 64 MiB
// frame, mapped afresh for every message, faults a page per 2 MiB, not per 4 KiB, in `codec
// check`'s frame path as in a worker's. SLOWPIPE_MALLOC_HUGEPAGES=0 keeps glibc's default (a fault
// per 4 KiB, unless the kernel gives every mapping huge pages). Skipped where the kernel has no
// THP.
TEST(SweepRunTest, LargeFramesFaultPerHugePageNotPerPage) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  const std::string mode((std::istreambuf_iterator<char>(thp)), std::istreambuf_iterator<char>());
  if (mode.empty() || mode.find("[never]") != std::string::npos)
    GTEST_SKIP() << "no transparent huge pages here: " << mode;
  const fs::path dir = fs::temp_directory_path() / ("slowpipe-faults-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto faults = [&](const std::string& hugePages) {
    const std::string out = (dir / ("check-" + hugePages + ".json")).string();
    const auto r =
        slowpipe::emulator::runCommand({"/usr/bin/env", "SLOWPIPE_MALLOC_HUGEPAGES=" + hugePages,
                                        SLOWPIPE_BINARY, "codec", "check", "none", "--json", out});
    EXPECT_EQ(r.status, 0) << r.output;
    std::ifstream f(out);
    const json d = json::parse(f);
    return d["results"][0]["figures"]["speed"]["page_faults_per_message"].get<double>();
  };
  const double pages = 64.0 * 1024 * 1024 / sysconf(_SC_PAGESIZE);  // 4 KiB pages of one frame
  EXPECT_LT(faults("1"), pages / 8);
  if (mode.find("[always]") == std::string::npos) EXPECT_GT(faults("0"), pages / 2);
  fs::remove_all(dir);
}

// `bench kernels` through the CLI: the hand-written kernels and, where the build has Highway, its
// forms on each target this CPU runs, every row measured each round against memcpy and giving the
// hand-written kernel's bytes; a bad --cols or --rounds is refused naming the flag.
TEST(SweepRunTest, BenchKernelsComparesHighwayWithTheHandWrittenKernels) {
  auto r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "bench", "kernels", "--size-kib", "64", "--rounds", "2", "--json"});
  ASSERT_EQ(r.status, 0) << r.output;
  const json d = json::parse(r.output);
  EXPECT_EQ(d["rounds"], 2);
  EXPECT_EQ(d["size_bytes"], 65536);
  EXPECT_GT(d["memcpy_GBps"].get<double>(), 0.0);
  std::map<std::string, int> impls;
  for (const auto& row : d["results"]) {
    impls[row["impl"].get<std::string>()]++;
    EXPECT_EQ(row["same_output"], true) << row.dump();
    EXPECT_GT(row["GBps"].get<double>(), 0.0) << row.dump();
    EXPECT_EQ(row["vs_memcpy_range"].size(), 2u) << row.dump();
    if (row["impl"] == "hand") {
      EXPECT_DOUBLE_EQ(row["vs_hand"].get<double>(), 1.0) << row.dump();
    }
  }
  // absMaxAccum, quantVecPacked at 1, 2, 4, 8 bits and, but in the baseline build, AC-SGD's
  // deltaAbsMaxH and deltaQuantUpdateHPacked at 1, 2, 4, 8 bits
  EXPECT_EQ(impls["hand"], d["cpu_path"] == "baseline" ? 5 : 10) << r.output;
  std::map<std::string, int> highwayTargets;  // rows per Highway target
  for (const auto& row : d["results"])
    if (row["impl"] == "highway") highwayTargets[row["target"].get<std::string>()]++;
  for (const auto& [target, rows] : highwayTargets)  // AVX2 and AVX-512 do every kernel
    if (target.rfind("AVX", 0) == 0) EXPECT_EQ(rows, impls["hand"]) << target << ": " << r.output;
  EXPECT_EQ(impls.count("highway") > 0, d["highway"].get<bool>()) << r.output;
  r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "bench", "kernels", "--size-kib", "64", "--cols", "24"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--cols 24"), std::string::npos) << r.output;
  // A count of 0 is refused saying what is expected (CLI11's own check read "Value 0 not in range
  // 0.000000 to 1797693134862315708...").
  r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "bench", "kernels", "--rounds", "0"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--rounds: expected a number > 0, got 0"), std::string::npos) << r.output;
}

// Numeric options refused at parse time saying what was expected, in the unit the user typed:
// `--trace-ms` is handed on in seconds, and its check once reported "-0.003000" for "-3" and a bare
// "stod" for a word.
TEST(SweepRunTest, NumericOptionsAreRefusedSayingWhatIsExpected) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"emulator", "tcp-messages", "--rate", "1Gbps", "--delay", "1ms", "--bytes", "1000",
        "--idle", "0", "--trace-ms", "-3"},
       "--trace-ms: expected a number >= 0, got -3"},
      {{"emulator", "tcp-messages", "--rate", "1Gbps", "--delay", "1ms", "--bytes", "1000",
        "--idle", "0", "--trace-ms", "x"},
       "--trace-ms: expected a number >= 0, got 'x'"},
      {{"simulate", "experiments/smoke.json", "--profile", "analytic:A100", "--out", "unused",
        "--target-loss", "0"},
       "--target-loss: expected a number > 0, got 0"},
      {{"bench", "codecs", "--rounds", "0"}, "--rounds: expected a number > 0, got 0"}};
  for (const auto& [args, message] : cases) {
    std::vector<std::string> argv = {SLOWPIPE_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = slowpipe::emulator::runCommand(argv);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  }
}

// The question a codec's author has, through the CLI: is my plug-in faster than AC-SGD, and does it
// lose quality against it? A 3-codec sweep (fp32, AC-SGD, a C plug-in), `report --vs`: the paired
// speed ratio and loss gap, checked against values computed here from the run files, shown in the
// page Chromium renders; a claim the spec declares judged there.
TEST(SweepRunTest, ReportComparesAPluginWithAcsgd) {
  const fs::path root = fs::temp_directory_path() / ("slowpipe-vs-" + std::to_string(getpid()));
  json sweep = tinySweep(root);
  const std::string plugin = std::string("plugin:path=") + GOOD_PLUGIN;
  sweep["axes"][1]["values"].push_back(
      {{"label", "int8 plug-in"}, {"forward", plugin + ",clip=16"}, {"backward", plugin}});
  sweep["claims"] = json::array({{{"label", "int8 plug-in"},
                                  {"vs", "AC-SGD fw2/bw4"},
                                  {"at", "200Mbps"},
                                  {"speedup_at_least", 1000}}});
  std::ofstream(root / "sweep.json") << sweep.dump(2);
  const fs::path out = root / "out";
  auto r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(),
                                           "--out", out.string(), "--repeats", "2", "--quiet"});
  ASSERT_EQ(r.status, 0) << r.output;
  r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "report", out.string(), "--vs", "int8 plug-in", "AC-SGD fw2/bw4"});
  ASSERT_EQ(r.status, 0) << r.output;
  const json summary = json::parse(std::ifstream(out / "summary.json"));
  auto stat = [&](const std::string& point, int k, const char* key) {
    return json::parse(std::ifstream(out / "runs" /
                                     (point + ".r" + std::to_string(k) + ".json")))["summary"][key]
        .get<double>();
  };
  size_t checked = 0;
  for (const auto& c : summary["comparisons"]) {
    if (c["label"] != "int8 plug-in" || c["vs"] != "AC-SGD fw2/bw4") continue;
    ++checked;
    double ratio[2], gap[2];
    for (int k = 0; k < 2; ++k) {
      ratio[k] = stat(c["point"], k, "throughput_tokens_per_s") /
                 stat(c["vs_point"], k, "throughput_tokens_per_s");
      gap[k] = stat(c["point"], k, "final_val_loss") / stat(c["vs_point"], k, "final_val_loss") - 1;
    }
    // Two pairs: the median is their mean, the interval their range.
    EXPECT_NEAR(c["speed_ratio"].get<double>(), (ratio[0] + ratio[1]) / 2, 1e-12);
    EXPECT_NEAR(c["speed_ratio_lo"].get<double>(), std::min(ratio[0], ratio[1]), 1e-12);
    EXPECT_NEAR(c["speed_ratio_hi"].get<double>(), std::max(ratio[0], ratio[1]), 1e-12);
    EXPECT_NEAR(c["val_loss_gap"].get<double>(), (gap[0] + gap[1]) / 2, 1e-12);
    EXPECT_NEAR(c["val_loss_gap_hi"].get<double>(), std::max(gap[0], gap[1]), 1e-12);
    // The CLI printed the same line.
    char expect[160];
    std::snprintf(expect, sizeof expect,
                  "int8 plug-in vs AC-SGD fw2/bw4 @ %s (range, n=2 paired repeats): speed ratio "
                  "%.3f [%.3f, %.3f]",
                  c["setting"].get<std::string>().c_str(), c["speed_ratio"].get<double>(),
                  c["speed_ratio_lo"].get<double>(), c["speed_ratio_hi"].get<double>());
    EXPECT_NE(r.output.find(expect), std::string::npos) << expect << "\n" << r.output;
  }
  EXPECT_EQ(checked, 2u);  // 200Mbps and 1Gbps
  ASSERT_EQ(summary["claims"].size(), 1u);
  EXPECT_EQ(summary["claims"][0]["pass"], false);  // 1000x at the lower bound: no
  r = slowpipe::emulator::runCommand({"/usr/bin/chromium", "--headless", "--no-sandbox",
                                      "--disable-gpu", "--dump-dom",
                                      "file://" + (out / "report.html").string()});
  ASSERT_EQ(r.status, 0) << r.output;
  size_t rows = 0;
  for (size_t at = r.output.find("<tr class=\"comparison\">"); at != std::string::npos;
       at = r.output.find("<tr class=\"comparison\">", at + 1))
    ++rows;
  EXPECT_EQ(rows, 2u);  // the claim's pair is the --vs pair: once, at 2 settings
  EXPECT_NE(r.output.find("<b>FAIL</b>: int8 plug-in vs AC-SGD fw2/bw4 @ 200Mbps"),
            std::string::npos)
      << r.output.substr(0, 3000);
  EXPECT_NE(r.output.find("fig-quality_vs_bytes"), std::string::npos);
  EXPECT_EQ(r.output.find("95% CI"), std::string::npos);
  fs::remove_all(root);
}

// One base model, pretrained once: a second sweep with the same base settings (another folder,
// other fine-tuning settings) takes it from the cache and pretrains nothing; a changed pretraining
// setting is another base; `--base` fine-tunes a given checkpoint; `--cache-dir off` pretrains.
TEST(SweepRunTest, BaseModelIsPretrainedOncePerContent) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-base-cache-" + std::to_string(getpid()));
  const fs::path cache = root / "cache";
  json sweep = tinySweep(root);
  sweep["axes"] = json::array({{{"path", "network.links.bandwidth"}, {"values", {"1Gbps"}}}});
  std::ofstream(root / "a.json") << sweep.dump(2);
  sweep["base"]["data"]["max_train_examples"] =
      16;  // what the fine-tuning reads: not what the base is made of
  sweep["base"]["compression"] = {{"forward", "fp16"}, {"backward", "fp16"}};
  std::ofstream(root / "b.json") << sweep.dump(2);
  sweep["pretrain"]["max_steps"] = 5;  // another base
  std::ofstream(root / "c.json") << sweep.dump(2);
  size_t pretrainings = 0;
  auto sweepOnce = [&](const std::string& spec, const std::string& out,
                       std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {SLOWPIPE_BINARY,        "sweep",
                                     (root / spec).string(), "--out",
                                     (root / out).string(),  "--quiet"};
    if (std::find(extra.begin(), extra.end(), "--cache-dir") == extra.end())
      extra.insert(extra.begin(), {"--cache-dir", cache.string()});
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = slowpipe::emulator::runCommand(argv);
    EXPECT_EQ(r.status, 0) << r.output;
    for (size_t at = r.output.find("pretraining the base: "); at != std::string::npos;
         at = r.output.find("pretraining the base: ", at + 1))
      if (r.output.compare(at, 30, "pretraining the base: 1/4 step") == 0 ||
          r.output.compare(at, 30, "pretraining the base: 1/5 step") == 0)
        ++pretrainings;  // the first step of a pretraining
    return r.output;
  };
  std::string out = sweepOnce("a.json", "a");
  EXPECT_EQ(pretrainings, 1u) << out;
  EXPECT_NE(out.find("ETA"), std::string::npos) << out;  // progress says how long is left
  EXPECT_NE(out.find("cached as " + (cache / "bases").string()), std::string::npos) << out;
  out = sweepOnce("b.json", "b");
  EXPECT_EQ(pretrainings, 1u) << out;
  EXPECT_NE(out.find("from the cache"), std::string::npos) << out;
  EXPECT_EQ(slowpipe::emulator::runCommand(
                {"cmp", (root / "a" / "base.pt").string(), (root / "b" / "base.pt").string()})
                .status,
            0);
  EXPECT_TRUE(fs::exists(root / "b" / "pretrain_log.json"));
  out = sweepOnce("c.json", "c");
  EXPECT_EQ(pretrainings, 2u) << out;
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(cache / "bases"))
    entries += fs::exists(e.path() / "base.pt") && fs::exists(e.path() / "key.json");
  EXPECT_EQ(entries, 2u);
  // --base: that checkpoint, no pretraining; the run says it started from it.
  out = sweepOnce("c.json", "given", {"--base", (root / "a" / "base.pt").string()});
  EXPECT_EQ(pretrainings, 2u) << out;
  EXPECT_NE(out.find("(given; no pretraining)"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root / "given" / "base.pt"));
  const json run = json::parse(std::ifstream(root / "given" / "runs" / "bandwidth-1Gbps.r0.json"));
  EXPECT_EQ(run["spec"]["training"]["init_checkpoint"], (root / "a" / "base.pt").string());
  auto r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "c.json").string(),
                                           "--out", (root / "none").string(), "--base",
                                           (root / "nothing.pt").string()});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(
      r.output.find("--base '" + (root / "nothing.pt").string() + "': no such checkpoint file"),
      std::string::npos)
      << r.output;
  // No cache: pretrained again.
  out = sweepOnce("a.json", "uncached", {"--cache-dir", "off"});
  EXPECT_EQ(pretrainings, 3u) << out;
  EXPECT_NE(out.find("(base cache off)"), std::string::npos) << out;
  fs::remove_all(root);
}

// A plug-in rebuilt at the same path is another experiment: resume printed "same experiment
// complete, skipped" (the identity held the spec, checkpoint and commit only). The content digest
// of every file a spec loads is in the identity and in result.json. A point whose spec cannot be
// built fails alone, with its reason; the sweep goes on (it aborted the sweep).
TEST(SweepRunTest, RebuiltPluginRerunsAndABadPointFailsAlone) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-plugin-resume-" + std::to_string(getpid()));
  json sweep = tinySweep(root);
  sweep.erase("pretrain");
  sweep["axes"] =
      json::array({{{"path", "network.links.bandwidth"}, {"values", {"200Mbps", "1Gbps"}}}});
  std::ofstream(root / "sweep.json") << sweep.dump(2);
  const fs::path lib = root / "libmine.so";
  fs::copy_file(GOOD_PLUGIN, lib);
  const std::string plugin = "compression.forward=plugin:path=" + lib.string();
  auto sweepOnce = [&] {
    return slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(),
                                           "--out", (root / "out").string(), "--set", plugin});
  };
  auto r = sweepOnce();
  ASSERT_EQ(r.status, 0) << r.output;
  const json first = json::parse(std::ifstream(root / "out" / "runs" / "bandwidth-1Gbps.r0.json"));
  ASSERT_EQ(first["inputs"].size(), 1u) << first["inputs"].dump();
  EXPECT_EQ(first["inputs"][0]["path"], lib.string());
  r = sweepOnce();
  EXPECT_NE(r.output.find("same experiment complete, skipped"), std::string::npos) << r.output;
  std::ofstream(lib, std::ios::app) << "rebuilt";  // the same path, other bytes
  r = sweepOnce();
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("same experiment complete, skipped"), std::string::npos) << r.output;
  EXPECT_NE(
      r.output.find("rerun: a file the spec loads (plug-in, TorchScript module, trace) changed"),
      std::string::npos)
      << r.output;

  // One point's setup fails (its run folder's spec.json cannot be written: a folder is there).
  fs::create_directories(root / "bad" / "runs" / "bandwidth-200Mbps" / "r0" / "spec.json" /
                         "in-the-way");
  r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(), "--out", (root / "bad").string()});
  EXPECT_NE(r.status, 0);
  const json bad = json::parse(std::ifstream(root / "bad" / "runs" / "bandwidth-200Mbps.r0.json"));
  EXPECT_EQ(bad["status"], "failed");
  EXPECT_NE(bad.value("reason", "").find("spec.json"), std::string::npos) << bad.dump();
  EXPECT_EQ(json::parse(std::ifstream(root / "bad" / "runs" / "bandwidth-1Gbps.r0.json"))["status"],
            "ok");
  fs::remove_all(root);
}

// The pids of `parent`'s children whose command line contains `what`.
std::vector<pid_t> childrenRunning(pid_t parent, const std::string& what) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(e.path() / "status"), cmd(e.path() / "cmdline");
    std::string line,
        cmdline((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    pid_t ppid = -1;
    while (std::getline(status, line))
      if (line.rfind("PPid:", 0) == 0) ppid = std::stoi(line.substr(5));
    if (ppid == parent && cmdline.find(what) != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

// `slowpipe profile` measures host speed with child processes it writes to: one that died made
// the write raise SIGPIPE, which killed the CLI with no message. Now it is an error naming the
// stage, and the other children are reaped.
TEST(SweepRunTest, ProfileSurvivesAHostSpeedChildThatDies) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-profile-child-" + std::to_string(getpid()));
  json sweep = tinySweep(root);
  std::ofstream(root / "spec.json") << sweep["base"].dump(2);
  const fs::path log = root / "profile.log";
  const pid_t cli = fork();
  if (cli == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(SLOWPIPE_BINARY, "slowpipe", "profile", (root / "spec.json").c_str(), "--out",
          (root / "p.json").c_str(), "--reps", "1", "--host-window", "2", "--host-reps", "1",
          nullptr);
    _exit(127);
  }
  bool killed = false;
  for (int i = 0; i < 3000 && !killed; ++i) {
    for (pid_t c : childrenRunning(cli, "profile-unit")) killed = kill(c, SIGKILL) == 0 || killed;
    usleep(5000);
  }
  ASSERT_TRUE(killed) << "no profile-unit child appeared";
  int status = 0;
  ASSERT_EQ(waitpid(cli, &status, 0), cli);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(WIFSIGNALED(status)) << "the CLI was killed by signal " << WTERMSIG(status) << "\n"
                                    << text;
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(text.find("the host-speed process for stage"), std::string::npos) << text;
  EXPECT_TRUE(childrenRunning(cli, "profile-unit").empty());
  fs::remove_all(root);
}

// `slowpipe simulate` as a user runs it under an analytic profile, with a codec that has no device
// path: it says the codec is costed on the host, and writes the result (the line that says so
// once read a temporary's items() after it was gone).
TEST(SweepRunTest, SimulateCliSaysWhereACodecRuns) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-simulate-cli-" + std::to_string(getpid()));
  json spec = tinySweep(root)["base"];
  spec["compression"] = {{"forward", "hadamard(quant:bits=4)"}, {"backward", "quant:bits=8"}};
  std::ofstream(root / "spec.json") << spec.dump(2);
  const auto r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "simulate", (root / "spec.json").string(), "--profile", "analytic:A100",
       "--out", (root / "sim").string()});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("has no device path: costed on this host's CPU"), std::string::npos)
      << r.output;
  const json result = json::parse(std::ifstream(root / "sim" / "result.json"));
  int host = 0;
  for (const auto& [codec, place] : result["profile"]["device"]["codecs"].items())
    host += place["runs_on"] == "host";
  EXPECT_EQ(host, 1) << result["profile"]["device"].dump(2);
  fs::remove_all(root);
}

// `sweep --simulate --sim-steps`: a number >= 2 or "all"; anything else is refused naming what it
// expected, before any point runs; "all" and a number replay (every point simulated).
TEST(SweepRunTest, SimStepsTakesANumberOrAll) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-sim-steps-" + std::to_string(getpid()));
  const json spec = tinySweep(root);
  std::ofstream(root / "sweep.json") << spec.dump(2);
  auto sweep = [&](const std::string& steps, const std::string& out) {
    return slowpipe::emulator::runCommand(
        {SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(), "--simulate", "--profile",
         "analytic:A100", "--sim-steps", steps, "--out", (root / out).string(), "--quiet"});
  };
  for (const std::string bad : {"1", "abc", "-1"}) {
    const auto r = sweep(bad, "bad");
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_NE(r.output.find("--sim-steps: '" + bad + "'; expected a number >= 2 or 'all'"),
              std::string::npos)
        << r.output;
    EXPECT_FALSE(fs::exists(root / "bad" / "summary.json")) << bad;
  }
  for (const std::string good : {"3", "all"}) {
    const auto r = sweep(good, "good-" + good);
    ASSERT_EQ(r.status, 0) << good << ": " << r.output;
    EXPECT_TRUE(fs::exists(root / ("good-" + good) / "summary.json")) << good;
  }
  fs::remove_all(root);
}

// Both tiers bill AC-SGD's state alike: a 3-epoch run sends epoch 0's activations in full (every
// example's first sighting) and later epochs' as deltas; the simulator, replaying the whole run
// its data plan describes, bills every step the bytes the emulated run sent. A one-epoch run of
// AC-SGD and of a stateless codec too (a one-epoch projection billed deltas: it flattered AC-SGD).
TEST(SweepRunTest, SimulatedStepBytesEqualTheEmulatedRunsInEveryEpoch) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-sim-bytes-" + std::to_string(getpid()));
  json spec = tinySweep(root)["base"];
  spec["training"]["warmup_steps"] = 0;
  for (const auto& [epochs, forward] :
       {std::pair{3, "acsgd:bits=2"}, std::pair{1, "acsgd:bits=2"}, std::pair{1, "quant:bits=2"}}) {
    spec["training"]["epochs"] = epochs;
    spec["compression"] = {{"forward", forward}, {"backward", "quant:bits=4"}};
    const std::string tag = std::to_string(epochs) + "-" + std::string(forward).substr(0, 5);
    std::ofstream(root / (tag + ".json")) << spec.dump(2);
    auto r =
        slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "run", (root / (tag + ".json")).string(),
                                        "--out", (root / tag / "run").string()});
    ASSERT_EQ(r.status, 0) << r.output;
    r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "simulate",
                                        (root / (tag + ".json")).string(), "--profile",
                                        "analytic:A100", "--out", (root / tag / "sim").string()});
    ASSERT_EQ(r.status, 0) << r.output;
    const json run = json::parse(std::ifstream(root / tag / "run" / "result.json"));
    const json sim = json::parse(std::ifstream(root / tag / "sim" / "result.json"));
    ASSERT_EQ(run["steps"].size(), sim["steps"].size()) << tag;  // the whole run, every epoch
    ASSERT_EQ(run["evals"].size(), sim["evals"].size()) << tag;
    std::set<int64_t> forwardSizes;
    for (size_t k = 0; k < run["steps"].size(); ++k) {
      EXPECT_EQ(sim["steps"][k]["epoch"], run["steps"][k]["epoch"]) << tag << " step " << k;
      for (const char* dir : {"forward", "backward"})
        EXPECT_EQ(sim["steps"][k]["bytes"][dir]["wire"], run["steps"][k]["bytes"][dir]["wire"])
            << tag << " step " << k << " " << dir;
      forwardSizes.insert(run["steps"][k]["bytes"]["forward"]["wire"].get<int64_t>());
    }
    // AC-SGD over 3 epochs has two sizes (first sightings, deltas); one epoch or a stateless codec
    // one.
    EXPECT_EQ(forwardSizes.size(), epochs == 3 ? 2u : 1u) << tag;
    if (epochs == 3) {
      EXPECT_GT(run["steps"][0]["bytes"]["forward"]["wire"].get<int64_t>(),
                4 * run["steps"].back()["bytes"]["forward"]["wire"].get<int64_t>());
    }
  }
  fs::remove_all(root);
}

// The same link seed in every tier: with replicas, jitter and loss on the pipeline's and the
// replicas' links, every directed link draws the same delay for every message in the simulator as
// in emulation, and carries the same bytes (SLOWPIPE_LINK_DRAWS logs both tiers' draws; a run of
// 1F1B with AC-SGD over two epochs, a compressed DP exchange, Gilbert-Elliott loss on one link and
// evaluations, so that every kind of message is on some link).
TEST(SweepRunTest, ReplicasDrawTheSameLinkDelaysInEveryTier) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-link-draws-" + std::to_string(getpid()));
  json spec = tinySweep(root)["base"];
  spec["pipeline"] = {{"stages", 2},
                      {"replicas", 2},
                      {"schedule", "1f1b"},
                      {"micro_batches", 2},
                      {"micro_batch_size", 4}};
  spec["training"] = {{"epochs", 2}, {"warmup_steps", 0}, {"eval_every_steps", 3}};
  spec["compression"] = {{"forward", "acsgd:bits=2"}, {"backward", "quant:bits=4"}};
  spec["dp"] = {{"algorithm", "allreduce"}, {"codec", "quant:bits=8"}};
  spec["network"] = {
      {"links",
       {{"bandwidth", "1Gbps"},
        {"latency", "2ms"},
        {"jitter", "1ms"},
        {"loss", 0.1},
        {"links",
         {{{"src", 1}, {"dst", 0}, {"loss", {{"p", 0.2}, {"r", 0.5}, {"loss_bad", 0.5}}}}}}}},
      {"dp_links",
       {{"bandwidth", "500Mbps"}, {"latency", "1ms"}, {"jitter", "0.5ms"}, {"loss", 0.1}}}};
  std::ofstream(root / "spec.json") << spec.dump(2);
  const std::string bin = SLOWPIPE_BINARY, file = (root / "spec.json").string();
  for (const char* tier : {"run", "sim"}) {
    fs::create_directories(root / tier / "draws");
    const std::string cmd = std::string(tier) == "run"
                                ? " run '" + file + "'"
                                : " simulate '" + file + "' --profile analytic:A100";
    const auto r = slowpipe::emulator::runCommand(
        {"/bin/sh", "-c",
         "SLOWPIPE_LINK_DRAWS='" + (root / tier / "draws").string() + "' '" + bin + "'" + cmd +
             " --out '" + (root / tier / "out").string() + "' 2>&1"});
    ASSERT_EQ(r.status, 0) << tier << ": " << r.output;
  }
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(root / "run" / "draws"))
    names.insert(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(root / "sim" / "draws"))
    EXPECT_TRUE(names.count(e.path().filename().string())) << e.path() << " only simulated";
  // Every directed link of 2 stages x 2 replicas: 4 pipeline links, 4 replica links.
  ASSERT_EQ(names.size(), 8u);
  size_t lost = 0, messages = 0;
  for (const std::string& name : names) {
    ASSERT_TRUE(fs::exists(root / "sim" / "draws" / name)) << name << " not simulated";
    const json run = json::parse(std::ifstream(root / "run" / "draws" / name));
    const json sim = json::parse(std::ifstream(root / "sim" / "draws" / name));
    ASSERT_EQ(run["bytes"].size(), sim["bytes"].size()) << name;
    for (size_t k = 0; k < run["bytes"].size(); ++k) {
      EXPECT_EQ(run["bytes"][k], sim["bytes"][k]) << name << " message " << k;
      EXPECT_EQ(run["delay_s"][k].get<double>(), sim["delay_s"][k].get<double>())
          << name << " message " << k;
      lost += run["delay_s"][k].get<double>() > 0.1;  // a retransmission (0.2 s) in it
    }
    messages += run["bytes"].size();
    if (name == "link-0-2.json") {  // stage 0 -> 1 of replica 0
      // AC-SGD frames in full, as deltas and mixed (an epoch's permutation moves examples between
      // replicas: some of a micro-batch's rows this pipeline met before, some not), control
      // scalars, evaluation batches.
      const std::set<int64_t> sizes(run["bytes"].begin(), run["bytes"].end());
      EXPECT_GE(sizes.size(), 5u) << run["bytes"].dump();
    }
  }
  EXPECT_GT(messages, 60u);
  EXPECT_GT(lost, 3u) << "of " << messages;  // the draws include losses, not jitter alone
  fs::remove_all(root);
}

// No silent wait at a run's start: the tc backend calibrates each distinct link (seconds each)
// and says which, how many and how long (issue 48: calibrations show progress).
TEST(SweepRunTest, KernelLinkCalibrationSaysHowFarItIs) {
  if (geteuid() != 0) GTEST_SKIP() << "the tc backend needs root";
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-calibration-" + std::to_string(getpid()));
  json spec = tinySweep(root)["base"];
  spec["training"]["max_steps"] = 2;
  spec["network"] = {{"backend", "tc"},
                     {"links",
                      {{"bandwidth", "500Mbps"},
                       {"links", {{{"src", 1}, {"dst", 0}, {"bandwidth", "200Mbps"}}}}}}};
  std::ofstream(root / "spec.json") << spec.dump(2);
  const auto r = slowpipe::emulator::runCommand({"/bin/sh", "-c",
                                                 std::string("'") + SLOWPIPE_BINARY + "' run '" +
                                                     (root / "spec.json").string() + "' --out '" +
                                                     (root / "out").string() + "' 2>&1"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("calibrating 1/2: link 0->1 (500Mbps"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("calibrating 2/2: link 1->0 (200Mbps"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("calibrated 2/2 links (100%)"), std::string::npos) << r.output;
  fs::remove_all(root);
}

// No silent wait on a long replay: past 2 s (here 0 s: SLOWPIPE_PROGRESS_AFTER_S, so that a fast
// machine shows it too) `simulate` says how far it is, a line per 10% in a log, up to 100%.
TEST(SweepRunTest, LongSimulationsShowProgress) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-long-sim-" + std::to_string(getpid()));
  fs::create_directories(root);
  json spec = json::parse(
      std::ifstream(fs::path(SLOWPIPE_SOURCE_DIR) / "experiments" / "paper_scale.json"))["base"];
  spec["training"]["epochs"] = 10;
  std::ofstream(root / "spec.json") << spec.dump(2);
  const auto r = slowpipe::emulator::runCommand(
      {"/bin/sh", "-c",
       std::string("SLOWPIPE_PROGRESS_AFTER_S=0 '") + SLOWPIPE_BINARY + "' simulate '" +
           (root / "spec.json").string() +
           "' --profile analytic:A100 --steps-per-epoch 1000 --out '" + (root / "sim").string() +
           "' 2>&1"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("simulate: 10000/10000 steps (100%)"), std::string::npos) << r.output;
  size_t lines = 0;
  for (size_t at = 0; (at = r.output.find("simulate: ", at)) != std::string::npos; ++at) ++lines;
  EXPECT_GE(lines, 9u) << r.output;  // about one a 10%
  EXPECT_LE(lines, 12u) << r.output;
  EXPECT_NE(r.output.find("ETA"), std::string::npos) << r.output;
  fs::remove_all(root);
}

// A shipped spec whose network file is spec-relative ("networks/...") runs from another folder, and
// `place` says how far its search is (a line per 10% in a log, with an ETA), ending at 100%.
TEST(SweepRunTest, SpecRelativePathsRunFromAnyFolderAndPlaceShowsProgress) {
  const fs::path elsewhere =
      fs::temp_directory_path() / ("slowpipe-elsewhere-" + std::to_string(getpid()));
  fs::create_directories(elsewhere);
  const std::string spec = std::string(SLOWPIPE_SOURCE_DIR) + "/experiments/networks_paper.json";
  const auto r = slowpipe::emulator::runCommand(
      {"/bin/sh", "-c",
       "cd '" + elsewhere.string() + "' && '" + SLOWPIPE_BINARY + "' place '" + spec +
           "' --profile analytic:A100 --method local --budget 20 --steps 2 2>&1"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("on yuan2022_worldwide_8: local search"), std::string::npos) << r.output;
  size_t lines = 0;
  for (size_t at = 0; (at = r.output.find("\nplace: ", at)) != std::string::npos; ++at) ++lines;
  EXPECT_GE(lines, 8u) << r.output;  // about one a 10%
  EXPECT_NE(r.output.find("place: 26/26 replays (100%)"), std::string::npos)
      << r.output;  // 20 searched + top 5 + rank order
  EXPECT_NE(r.output.find("ETA"), std::string::npos) << r.output;
  fs::remove_all(elsewhere);
}

// `slowpipe doctor --json`: a line for each piece, agreeing with what this test sees itself (root,
// the TUN device, the cores this process may use).
TEST(SweepRunTest, DoctorSaysWhatThisMachineOffers) {
  const auto r = slowpipe::emulator::runCommand({SLOWPIPE_BINARY, "doctor", "--json"});
  ASSERT_EQ(r.status, 0) << r.output;
  const json d = json::parse(r.output);
  for (const char* k : {"root", "TUN", "HTB qdisc", "netem qdisc", "cores", "BLAS", "CUDA", "ns-3",
                        "ip", "tc", "mpirun", "matplotlib"})
    ASSERT_TRUE(d.contains(k) && d[k].contains("ok") && d[k].contains("detail"))
        << k << ": " << r.output;
  EXPECT_EQ(d["root"]["ok"], geteuid() == 0);
  EXPECT_EQ(d["TUN"]["ok"], access("/dev/net/tun", F_OK) == 0);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(
      d["cores"]["detail"].get<std::string>().rfind(std::to_string(CPU_COUNT(&set)) + " usable", 0),
      0u)
      << d["cores"].dump();
  EXPECT_FALSE(d["CUDA"]["ok"].get<bool>() &&
               d["CUDA"]["detail"].get<std::string>().find("device") == std::string::npos);
}

// A projection of the paper-scale spec's whole run: 10 epochs of 1,000 steps (declared: the spec's
// corpus is not the one it would train on), every step replayed, AC-SGD's first epoch in full,
// every epoch's evaluation with the loss of the committed emulated AC-SGD run's curve, the total
// time and the time to a target printed.
TEST(SweepRunTest, PaperScaleProjectionOfTheWholeRun) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-projection-" + std::to_string(getpid()));
  fs::create_directories(root);
  const fs::path src = SLOWPIPE_SOURCE_DIR;
  json spec = json::parse(std::ifstream(src / "experiments" / "paper_scale.json"))["base"];
  spec["compression"] = {{"forward", "acsgd:bits=2,levels=fixpoint"},
                         {"backward", "quant:bits=4,levels=fixpoint"},
                         {"label", "AC-SGD"}};
  spec["training"]["epochs"] = 10;
  std::ofstream(root / "spec.json") << spec.dump(2);
  const std::string curve =
      (src / "results" / "paper" / "runs" / "bandwidth-100Mbps_compression-AC-SGD-fw2-bw4.r0.json")
          .string();
  const auto r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "simulate", (root / "spec.json").string(), "--profile", "analytic:A100",
       "--out", (root / "sim").string(), "--steps-per-epoch", "1000", "--quality", curve,
       "--target-loss", "2.61"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("projected run: 10000 steps, 10 epoch(s), total "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("time to target (validation loss <= 2.61): "), std::string::npos)
      << r.output;
  const json sim = json::parse(std::ifstream(root / "sim" / "result.json"));
  ASSERT_EQ(sim["steps"].size(), 10000u);
  EXPECT_EQ(sim["evals"].size(), 10u);
  EXPECT_EQ(sim["steps"][999]["bytes"]["forward"]["wire"],
            7 * 32 * sim["message_bytes"]["forward_first_epoch"].get<int64_t>());
  EXPECT_EQ(sim["steps"][1000]["bytes"]["forward"]["wire"],
            7 * 32 * sim["message_bytes"]["forward"].get<int64_t>());
  const double share = sim["summary"]["wait_share"].get<double>();
  EXPECT_TRUE(share >= 0 && share <= 1) << share;
  fs::remove_all(root);
}

// The main job writes into an ignored folder and runs every point: the first version wrote into
// the committed results/quickstart/, found the committed runs complete and skipped them all.
TEST(SweepRunTest, QuickstartScriptRunsEveryPointIntoAnIgnoredFolder) {
  const std::string src = SLOWPIPE_SOURCE_DIR;
  using slowpipe::emulator::runCommand;
  const auto dry = runCommand({"bash", src + "/tools/quickstart.sh", "--dry-run", "--no-setup"});
  ASSERT_EQ(dry.status, 0) << dry.output;
  EXPECT_NE(dry.output.find("sweep experiments/quickstart.json --out out/quickstart"),
            std::string::npos)
      << dry.output;
  // The main job builds the CLI only (the tests are the test command's).
  const auto withSetup = runCommand({"bash", src + "/tools/quickstart.sh", "--dry-run"});
  EXPECT_NE(
      withSetup.output.find("tools/setup.sh --build-dir build --main-job --target slowpipe\n"),
      std::string::npos)
      << withSetup.output;
  EXPECT_EQ(
      runCommand({"git", "-C", src, "check-ignore", "-q", "out/quickstart/runs/x.r0.json"}).status,
      0)
      << "out/quickstart is not ignored by git";
  EXPECT_EQ(runCommand({"git", "-C", src, "ls-files", "out"}).output, "")
      << "files under out/ are tracked: a fresh clone would find 'complete' runs there";

  // The real script (setup skipped) on a tiny sweep, into a folder under out/ of the source tree.
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-quickstart-test-" + std::to_string(getpid()));
  const json sweep = tinySweep(root);
  std::ofstream(root / "sweep.json") << sweep.dump(2);
  const std::string out = "out/quickstart-test-" + std::to_string(getpid());
  const auto before = runCommand({"git", "-C", src, "status", "--porcelain"});
  const auto r = runCommand({"env", std::string("SLOWPIPE_BIN=") + SLOWPIPE_BINARY, "bash",
                             src + "/tools/quickstart.sh", "--no-setup", "--spec",
                             (root / "sweep.json").string(), "--out", out});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("skipped"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[4/4]"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(fs::path(src) / out / "figures" / "speedup_vs_bandwidth.png"));
  // It ends with the report and says where it is.
  EXPECT_TRUE(fs::exists(fs::path(src) / out / "report.html"));
  EXPECT_NE(r.output.find("the report: " + out + "/report.html"), std::string::npos) << r.output;
  EXPECT_EQ(runCommand({"git", "-C", src, "status", "--porcelain"}).output, before.output)
      << "the main job changed the tree";
  fs::remove_all(fs::path(src) / out);
  fs::remove_all(root);
}

}  // namespace

// The network library (experiments/networks/*.json): every file loads, names its source, and the
// transcriptions hold at the figures the issue and the sources name.
namespace {

TEST(NetworkLibraryTest, FilesLoadAndTranscribeTheirSources) {
  const fs::path dir = fs::path(SLOWPIPE_SOURCE_DIR) / "experiments" / "networks";
  int files = 0;
  for (const auto& f : fs::directory_iterator(dir)) {
    if (f.path().extension() != ".json") continue;
    ++files;
    const auto net = slowpipe::emulator::NodeNetwork::fromJson(json(f.path().string()),
                                                               f.path().filename().string());
    EXPECT_FALSE(net.document().value("source", "").empty()) << f.path();
    EXPECT_GE(net.size(), 8) << f.path();
  }
  EXPECT_GE(files, 8);
  auto load = [&](const char* name) {
    return slowpipe::emulator::NodeNetwork::fromJson(json((dir / name).string()), name);
  };
  const auto w8 = load("yuan2022_worldwide_8.json");
  auto node = [](const slowpipe::emulator::NodeNetwork& n, const char* name) {
    return n.index(json(name), "test");
  };
  const auto ov = w8.path(node(w8, "Oregon"), node(w8, "Virginia")),
             sl = w8.path(node(w8, "London"), node(w8, "Seoul"));
  EXPECT_DOUBLE_EQ(ov.latencyS, 0.067);
  EXPECT_DOUBLE_EQ(ov.bandwidthBps, 790e6);
  EXPECT_DOUBLE_EQ(sl.latencyS, 0.238);
  EXPECT_DOUBLE_EQ(sl.bandwidthBps, 342e6);
  const auto w64 = load("yuan2022_worldwide.json");
  ASSERT_EQ(w64.size(), 64);
  const auto city = w64.path(node(w64, "Tokyo-0"), node(w64, "Tokyo-7"));
  EXPECT_DOUBLE_EQ(city.latencyS, 0.005);
  EXPECT_DOUBLE_EQ(city.bandwidthBps, 2e9);
  const auto gc = load("erben2024_gc_multicontinent.json");
  const auto useu = gc.path(node(gc, "US-0"), node(gc, "EU-1"));
  EXPECT_NEAR(useu.latencyS, 0.10310 / 2, 1e-9);
  EXPECT_DOUBLE_EQ(useu.bandwidthBps, 210e6);
  const auto home = load("consumer_500_110.json");
  EXPECT_DOUBLE_EQ(home.node(0).upBps, 110e6);
  EXPECT_DOUBLE_EQ(home.node(0).downBps, 500e6);
}

// A sweep axis may name network files: one point per file, each run on its network.
TEST(NetworkLibraryTest, SweepAxisNamesNetworkFiles) {
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-netaxis-test-" + std::to_string(getpid()));
  json sweep = tinySweep(root);
  sweep.erase("pretrain");
  const std::string a =
      (fs::path(SLOWPIPE_SOURCE_DIR) / "experiments/networks/consumer_500_110.json").string();
  const std::string b =
      (fs::path(SLOWPIPE_SOURCE_DIR) / "experiments/networks/yuan2022_worldwide_8.json").string();
  sweep["base"]["network"] = {{"model", "tcp"}};
  sweep["axes"][0] = {{"path", "network.nodes"}, {"values", {a, b}}};
  std::ofstream(root / "sweep.json") << sweep.dump(2);
  const fs::path out = root / "out";
  const auto r = slowpipe::emulator::runCommand(
      {SLOWPIPE_BINARY, "sweep", (root / "sweep.json").string(), "--simulate", "--profile",
       "analytic:A100", "--out", out.string(), "--quiet"});
  ASSERT_EQ(r.status, 0) << r.output;
  const json summary = json::parse(std::ifstream(out / "summary.json"));
  ASSERT_EQ(summary["rows"].size(), 4u);
  std::set<std::string> networks;
  for (const auto& row : summary["rows"]) {
    const json run =
        json::parse(std::ifstream(out / "runs" / (row["point"].get<std::string>() + ".r0.json")));
    networks.insert(run["network"]["nodes"]["network"].get<std::string>());
    EXPECT_EQ(run["spec"]["network"]["nodes"]["file"], row["axes"][0]) << row.dump();
  }
  EXPECT_EQ(networks, (std::set<std::string>{"consumer_500_110", "yuan2022_worldwide_8"}));
  fs::remove_all(root);
}

}  // namespace
