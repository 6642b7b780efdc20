// RunSpec validation: every malformed spec names its problem; partitions balance.
#include "runtime/spec/spec.h"
#include "runtime/comm/link_table.h"

#include <gtest/gtest.h>

#include "runtime/model/data.h"
#include "runtime/model/model_size.h"
#include "runtime/model/plan.h"
#include "runtime/model/tokenizer.h"

#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace slowpipe::runtime {
namespace {

using nlohmann::json;

json valid() {
  return json::parse(
      R"({"name": "t", "model": {"layers": 4, "width": 32, "heads": 4, "seq_len": 16},
    "pipeline": {"stages": 2}, "compression": {"forward": "acsgd:bits=2", "backward": "quant:bits=4"},
    "network": {"links": {"bandwidth": "100Mbps", "latency": "5ms"}}})");
}

std::string errorOf(const json& j) {
  try {
    runSpecFromJson(j);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(SpecTest, ValidSpecParses) {
  const RunSpec s = runSpecFromJson(valid());
  EXPECT_EQ(s.pipeline.stages, 2);
  EXPECT_EQ(s.compression.forward, "acsgd:bits=2");
  EXPECT_EQ(runSpecFromJson(toJson(s)).compression.backward, "quant:bits=4");
}

// compression.threads: a count, or "auto" (the default, left out of the spec's JSON so that older
// specs keep their identity): the affinity mask's cores shared by the ranks, less torch's threads.
TEST(SpecTest, CodecThreadsAreACountOrAuto) {
  json j = valid();
  EXPECT_EQ(runSpecFromJson(j).compression.threads, 0);
  EXPECT_FALSE(toJson(runSpecFromJson(j))["compression"].contains("threads"));
  j["compression"]["threads"] = 3;
  const RunSpec three = runSpecFromJson(j);
  EXPECT_EQ(three.compression.threads, 3);
  EXPECT_EQ(codecThreadsFor(three, 8), 3);
  EXPECT_EQ(runSpecFromJson(toJson(three)).compression.threads, 3);
  j["compression"]["threads"] = "auto";
  const RunSpec automatic = runSpecFromJson(j);
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(codecThreadsFor(automatic, 1),
            std::max(1, CPU_COUNT(&set) - automatic.runtime.threadsPerWorker));
  EXPECT_EQ(codecThreadsFor(automatic, 1000), 1);
  for (const json& bad : {json(0), json(-1), json(300), json("many"), json(1.5)}) {
    j["compression"]["threads"] = bad;
    EXPECT_NE(errorOf(j).find("spec.compression.threads: " + bad.dump() +
                              ": expected a number of threads from 1 to 256"),
              std::string::npos)
        << errorOf(j);
  }
}

TEST(SpecTest, MalformedSpecsNameTheProblem) {
  json j = valid();
  j.erase("network");
  EXPECT_NE(errorOf(j).find("spec.network: missing"), std::string::npos) << errorOf(j);
  j = valid();
  j["pipeline"]["stages"] = "two";
  EXPECT_NE(errorOf(j).find("spec.pipeline.stages: wrong type"), std::string::npos) << errorOf(j);
  j = valid();
  j["compression"]["forward"] = "zip:bits=2";
  EXPECT_NE(errorOf(j).find("spec.compression.forward: unknown codec 'zip'"), std::string::npos)
      << errorOf(j);
  j = valid();
  j["pipeline"]["stages"] = 5;
  EXPECT_NE(errorOf(j).find("stages <= model.layers"), std::string::npos) << errorOf(j);
  j = valid();
  j["network"]["links"]["bandwidth"] = "100Mbs";
  EXPECT_NE(errorOf(j).find("spec.network.links.bandwidth: '100Mbs'"), std::string::npos)
      << errorOf(j);
  j = valid();
  j["pipeline"]["shedule"] = "gpipe";
  EXPECT_NE(errorOf(j).find("spec.pipeline.shedule: unknown field"), std::string::npos)
      << errorOf(j);
  j = valid();
  j["model"]["heads"] = 3;
  EXPECT_NE(errorOf(j).find("does not divide width"), std::string::npos) << errorOf(j);
  j = valid();
  j["pipeline"]["partition"] = json::parse("[[0, 1], [2, 4]]");
  EXPECT_NE(errorOf(j).find("must start at 1"), std::string::npos) << errorOf(j);
  j = valid();
  j["runtime"]["device"] = "gpu";
  EXPECT_NE(errorOf(j).find("spec.runtime.device: 'gpu' is not a device"), std::string::npos)
      << errorOf(j);
  j["runtime"]["device"] = "cuda:x";
  EXPECT_NE(errorOf(j).find("spec.runtime.device: 'cuda:x' is not a device"), std::string::npos)
      << errorOf(j);
  j["runtime"]["device"] = "cuda:1";
  EXPECT_EQ(errorOf(j), "") << errorOf(j);
  j["pipeline"]["replicas"] = 2;
  EXPECT_NE(errorOf(j).find("data parallelism runs on CPU stages only"), std::string::npos)
      << errorOf(j);
  j = valid();
  j["runtime"]["timeline"] = "every";
  EXPECT_NE(errorOf(j).find("spec.runtime.timeline: 'every'; expected \"last\" or \"all\""),
            std::string::npos)
      << errorOf(j);
  // Only a non-default timeline appears in the spec's JSON (the digests of other specs stay).
  j["runtime"]["timeline"] = "last";
  EXPECT_FALSE(toJson(runSpecFromJson(j, "spec"))["runtime"].contains("timeline"));
  j["runtime"]["timeline"] = "all";
  EXPECT_EQ(toJson(runSpecFromJson(j, "spec"))["runtime"]["timeline"], "all");
}

// runtime.slowdown: a constant speed or a trace over steps per rank; the lookup and the round
// trip through toJson; every malformed entry named with its field and what was expected.
TEST(SpecTest, SlowdownIsCheckedAndLooksUpByStep) {
  json j = valid();
  j["runtime"]["slowdown"] = json::parse(
      R"([{"rank": 1, "trace": [[0, 1.0], [10, 0.5], [20, 0.8]]}, {"rank": 0, "speed": 0.25}])");
  const RunSpec s = runSpecFromJson(j);
  EXPECT_EQ(s.runtime.slowdown.speedAt(1, 0), 1.0);
  EXPECT_EQ(s.runtime.slowdown.speedAt(1, 9), 1.0);
  EXPECT_EQ(s.runtime.slowdown.speedAt(1, 10), 0.5);
  EXPECT_EQ(s.runtime.slowdown.speedAt(1, 25), 0.8);
  EXPECT_EQ(s.runtime.slowdown.speedAt(0, 3), 0.25);
  const RunSpec back = runSpecFromJson(toJson(s));
  EXPECT_EQ(back.runtime.slowdown.speedAt(1, 15), 0.5);
  EXPECT_EQ(back.runtime.slowdown.speedAt(0, 0), 0.25);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"([{"rank": 2, "speed": 0.5}])",
       "spec.runtime.slowdown[0].rank: 2; expected a rank in 0..1 (stages x replicas)"},
      {R"([{"rank": 0, "speed": 0}])",
       "spec.runtime.slowdown[0].speed: 0 is not a speed; expected a number in (0, 1]"},
      {R"([{"rank": 0, "speed": 1.5}])", "spec.runtime.slowdown[0].speed: 1.5 is not a speed"},
      {R"([{"rank": 0}])", "spec.runtime.slowdown[0]: give either \"speed\" or \"trace\""},
      {R"([{"rank": 0, "trace": [[5, 0.5], [5, 0.7]]}])",
       "spec.runtime.slowdown[0].trace[1]: step 5 after step 5; expected increasing"},
      {R"([{"rank": 0, "trace": [[-1, 0.5]]}])",
       "spec.runtime.slowdown[0].trace[0]: [-1,0.5]; expected [first step"},
      {R"([{"rank": 0, "speed": 0.5}, {"rank": 0, "speed": 0.7}])",
       "spec.runtime.slowdown[1].rank: 0 is listed twice"},
      {R"([{"rank": 0, "speed": 0.5, "every": 3}])",
       "spec.runtime.slowdown[0].every: unknown field"},
      {R"({"rank": 0})", "spec.runtime.slowdown: expected an array"}};
  for (const auto& [value, message] : bad) {
    j["runtime"]["slowdown"] = json::parse(value);
    EXPECT_NE(errorOf(j).find(message), std::string::npos) << value << " -> " << errorOf(j);
  }
}

// network.nodes and pipeline.placement: the network is held inline, the placement resolved,
// and what cannot go with them is refused by name.
TEST(SpecTest, NodesAndPlacementAreCheckedAndNamed) {
  json j = valid();
  const json net = json::parse(
      R"({"nodes": [{"name": "a", "up": "10Mbps"}, {"name": "b", "up": "20Mbps", "down": "5Mbps"}]})");
  j["network"] = {{"nodes", net}};
  j["pipeline"]["placement"] = {"b", 0};
  const RunSpec s = runSpecFromJson(j);
  EXPECT_EQ(rankNodes(s, emulator::NodeNetwork::fromJson(s.network.nodes, "n")),
            (std::vector<int>{1, 0}));
  EXPECT_EQ(toJson(runSpecFromJson(toJson(s)))["network"]["nodes"], net);
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"pipeline", {{"placement", {"a", "c"}}}}},
       "pipeline.placement[1]: \"c\" is not a node of network 'inline'"},
      {{{"pipeline", {{"placement", {"a"}}}}},
       "pipeline.placement: expected one node per stage (2 entries)"},
      {{{"network", {{"backend", "tc-dev"}}}},
       "spec.network.nodes: access links are emulated in user space"},
      {{{"network", {{"model", "serial_fifo"}}}},
       "network.model serial_fifo bills at the receiver"},
      {{{"network",
         {{"links", {{"links", json::array({{{"src", 0}, {"dst", 1}, {"latency", "1ms"}}})}}}}}},
       "per-pair overrides"},
      {{{"network", {{"nodes", "/nonexistent.json"}}}},
       "spec.network.nodes: cannot read the network file '/nonexistent.json'"}};
  for (const auto& [patch, message] : bad) {
    json k = j;
    k.merge_patch(patch);
    EXPECT_NE(errorOf(k).find(message), std::string::npos) << patch.dump() << " -> " << errorOf(k);
  }
  j["network"].erase("nodes");
  EXPECT_NE(errorOf(j).find(
                "spec.pipeline.placement: places stages on nodes, but network.nodes is not set"),
            std::string::npos)
      << errorOf(j);
  j["pipeline"].erase("placement");
  j["network"]["model"] = "ns3";
  try {
    runSpecFromJson(j, "spec", /*simulation=*/true);
    FAIL() << "ns3 without network.nodes was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(
        std::string(e.what()).find("spec.network.model: ns3 builds its network from network.nodes"),
        std::string::npos)
        << e.what();
  }
  // A run (not a simulation) cannot emulate with ns3, nodes or not.
  EXPECT_NE(errorOf(j).find("spec.network.model: ns3 is one of the simulator's tiers"),
            std::string::npos)
      << errorOf(j);
}

TEST(SpecTest, DataParallelFieldsAreCheckedAndNamed) {
  json j = valid();
  j["pipeline"]["replicas"] = 0;
  EXPECT_NE(errorOf(j).find("spec.pipeline.replicas: 0"), std::string::npos) << errorOf(j);
  j = valid();
  j["pipeline"]["replicas"] = 2;
  j["dp"] = {{"algorithm", "gossip"}};
  EXPECT_NE(
      errorOf(j).find(
          "spec.dp.algorithm: 'gossip' is not an algorithm; expected one of allreduce, sharded_ps"),
      std::string::npos)
      << errorOf(j);
  j["dp"] = {{"codec", "qadam:bits=3"}};
  EXPECT_NE(errorOf(j).find("spec.dp.codec: qadam: bits=3; expected 4 or 8"), std::string::npos)
      << errorOf(j);
  j["dp"] = {{"codec", "powersgd:rank=2,iters=3"}};
  EXPECT_NE(errorOf(j).find("spec.dp.codec: powersgd: unknown parameter 'iters'"),
            std::string::npos)
      << errorOf(j);
  j["dp"] = {{"codec", "zip"}};
  EXPECT_NE(errorOf(j).find("spec.dp.codec: unknown codec 'zip'"), std::string::npos) << errorOf(j);
  j["dp"] = {{"local_steps", 8}, {"codec", "powersgd:rank=2"}};
  EXPECT_NE(errorOf(j).find("spec.dp.codec: 'powersgd:rank=2' compresses every step's gradient; "
                            "with local_steps 8 (DiLoCo)"),
            std::string::npos)
      << errorOf(j);
  j["dp"] = {{"local_steps", 0}};
  EXPECT_NE(errorOf(j).find("spec.dp.local_steps"), std::string::npos) << errorOf(j);
  j["dp"] = {{"outer_momentum", 1.0}};
  EXPECT_NE(errorOf(j).find("spec.dp.outer_momentum: must be in [0, 1)"), std::string::npos)
      << errorOf(j);
  j["dp"] = json::object();
  j["network"]["dp_links"] = {{"bandwidth", "1Gbps"},
                              {"links", {{{"src", 0}, {"dst", 2}, {"bandwidth", "10Mbps"}}}}};
  EXPECT_NE(errorOf(j).find("spec.network.dp_links.links[0].dst: 2 names no replica"),
            std::string::npos)
      << errorOf(j);
  j["network"]["dp_links"] = {{"bandwidth", "1Gbs"}};
  EXPECT_NE(errorOf(j).find("spec.network.dp_links.bandwidth"), std::string::npos) << errorOf(j);
  j = valid();
  j["dp"] = {{"codec", "powersgd:rank=4"}};
  EXPECT_NE(errorOf(j).find("spec.dp: is set but pipeline.replicas is 1"), std::string::npos)
      << errorOf(j);
  j = valid();
  j["pipeline"]["replicas"] = 2;
  j["network"]["backend"] = "tc";
  EXPECT_NE(errorOf(j).find("spec.pipeline.replicas: 2 replicas need network.backend user"),
            std::string::npos)
      << errorOf(j);
  j = valid();
  j["pipeline"]["replicas"] = 2;
  j["network"]["dp_links"] = {{"bandwidth", "100Mbps"}};
  EXPECT_NO_THROW(runSpecFromJson(j));
  EXPECT_NO_THROW(runSpecFromJson(toJson(runSpecFromJson(j))));  // the recorded spec reads back
  EXPECT_NO_THROW(runSpecFromJson(toJson(runSpecFromJson(valid()))));
}

// --set PATH=VALUE: JSON values where they parse, strings otherwise, objects merged; errors name
// the assignment.
TEST(SpecTest, SetAssignsFieldsFromTheCommandLine) {
  json j = valid();
  applySet(j, "compression.forward=quant:bits=3,scale=group,group=32");
  applySet(j, "pipeline.stages=4");
  applySet(j, "network.links.latency=0ms");
  applySet(j, "runtime={\"step_timeout_s\": 30}");
  applySet(j, "compression.label=\"x y\"");
  EXPECT_EQ(j["compression"]["forward"], "quant:bits=3,scale=group,group=32");
  EXPECT_EQ(j["pipeline"]["stages"], 4);
  EXPECT_EQ(j["network"]["links"]["bandwidth"], "100Mbps");
  EXPECT_EQ(j["network"]["links"]["latency"], "0ms");
  EXPECT_EQ(j["runtime"]["step_timeout_s"], 30);
  EXPECT_EQ(j["compression"]["label"], "x y");
  EXPECT_EQ(runSpecFromJson(j).pipeline.stages, 4);
  auto err = [&](const std::string& a) {
    json k = valid();
    try {
      applySet(k, a);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err("pipeline.stages").find("expected PATH=VALUE"), std::string::npos);
  EXPECT_NE(err("=4").find("expected PATH=VALUE"), std::string::npos);
  EXPECT_NE(err("pipeline.stages.x=4").find("'pipeline.stages' is 2, not an object"),
            std::string::npos)
      << err("pipeline.stages.x=4");
  EXPECT_NE(err("pipeline..stages=4").find("empty field name"), std::string::npos);
  // Validation still names the field: a typo is not silently a new field.
  json k = valid();
  applySet(k, "pipeline.stagez=4");
  EXPECT_NE(errorOf(k).find("stagez"), std::string::npos) << errorOf(k);
}

TEST(SpecTest, BalancedPartitionCoversAllLayers) {
  json j = valid();
  j["model"]["layers"] = 7;
  j["pipeline"]["stages"] = 3;
  const auto r = stageLayers(runSpecFromJson(j));
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], std::make_pair(0, 2));  // first and last stages also hold embeddings / head
  EXPECT_EQ(r[1], std::make_pair(2, 5));
  EXPECT_EQ(r[2], std::make_pair(5, 7));
}

TEST(EpochPlanTest, EachEpochIsAPermutationAndSeedStable) {
  EpochPlan p(50, 2, 4, 7), q(50, 2, 4, 7);
  EXPECT_EQ(p.stepsPerEpoch(), 6);
  std::vector<int> seen(50, 0);
  for (int64_t s = 0; s < 6; ++s)
    for (int m = 0; m < 2; ++m) {
      const auto a = p.microBatch(1, s, m);
      EXPECT_EQ(a, q.microBatch(1, s, m));
      for (auto i : a) seen[i]++;
    }
  for (int c : seen) EXPECT_LE(c, 1);
  EXPECT_NE(p.microBatch(0, 0, 0), p.microBatch(1, 0, 0));  // reshuffled per epoch
}

// Out-of-range sizes are refused before any process starts (model.layers = 100000000 passed and
// the workers allocated without bound); the simulator still takes any size it can replay.
TEST(SpecTest, ModelSizeIsBoundedByLayersAndThisMachinesMemory) {
  json j = valid();
  j["model"]["layers"] = 100000000;
  EXPECT_NE(errorOf(j).find("spec.model.layers: 100000000 is beyond 4096"), std::string::npos)
      << errorOf(j);
  j = valid();
  j["model"]["layers"] = 4000;
  j["model"]["width"] = 16384;
  j["model"]["heads"] = 128;
  EXPECT_NE(errorOf(j).find("for weights, gradients and AdamW state"), std::string::npos)
      << errorOf(j);
  EXPECT_NO_THROW(runSpecFromJson(j, "spec", true));
}

// serial_fifo ignored jitter, loss and traces without a word: refused now, naming the field.
TEST(SpecTest, SerialFifoRefusesWhatItDoesNotModel) {
  json j = valid();
  j["network"]["model"] = "serial_fifo";
  EXPECT_EQ(errorOf(j), "");
  j["network"]["links"]["jitter"] = "2ms";
  EXPECT_NE(errorOf(j).find("spec.network.links.jitter: \"2ms\" with network.model serial_fifo"),
            std::string::npos)
      << errorOf(j);
  j["network"]["links"].erase("jitter");
  j["network"]["links"]["links"] = json::parse(R"([{"src": 0, "dst": 1, "loss": 0.01}])");
  EXPECT_NE(
      errorOf(j).find("spec.network.links.links[0].loss: 0.01 with network.model serial_fifo"),
      std::string::npos)
      << errorOf(j);
  j["network"]["links"]["links"][0]["loss"] = 0;
  EXPECT_EQ(errorOf(j), "");
}

// network.moderation_us: microseconds or "auto", tc only, round-tripped through toJson (what
// result.json's spec holds); anything else named.
TEST(SpecTest, ModerationIsCheckedAndNamed) {
  json j = valid();
  EXPECT_EQ(runSpecFromJson(j).network.moderationUs, 0);
  j["network"]["backend"] = "tc";
  j["network"]["moderation_us"] = 100;
  EXPECT_EQ(runSpecFromJson(j).network.moderationUs, 100);
  EXPECT_EQ(runSpecFromJson(toJson(runSpecFromJson(j))).network.moderationUs, 100);
  j["network"]["moderation_us"] = "auto";
  EXPECT_EQ(runSpecFromJson(j).network.moderationUs, -1);
  EXPECT_EQ(toJson(runSpecFromJson(j))["network"]["moderation_us"], "auto");
  for (const json& bad : {json(-5), json(20000), json("fast"), json(true)}) {
    j["network"]["moderation_us"] = bad;
    EXPECT_NE(errorOf(j).find("spec.network.moderation_us: " + bad.dump() +
                              " is not a moderation; expected microseconds"),
              std::string::npos)
        << errorOf(j);
  }
  j["network"]["backend"] = "user";
  j["network"]["moderation_us"] = 50;
  EXPECT_NE(
      errorOf(j).find(
          "spec.network.moderation_us: moderates the tc backend's delay lines; backend 'user'"),
      std::string::npos)
      << errorOf(j);
  j["network"]["moderation_us"] = 0;
  EXPECT_EQ(errorOf(j), "");
}

// A bandwidth, latency or jitter without a unit (what `--set network.links.bandwidth=50` makes)
// was taken as bit/s or seconds: the run sat silent for 10 minutes. Refused as the strings are.
TEST(SpecTest, UnitlessLinkNumbersAreRefused) {
  for (const char* key : {"bandwidth", "latency", "jitter"}) {
    json j = valid();
    j["network"]["links"][key] = 50;
    EXPECT_NE(errorOf(j).find(std::string("spec.network.links.") + key + ": 50 has no unit"),
              std::string::npos)
        << errorOf(j);
  }
  json j = valid();
  j["network"]["links"].erase("bandwidth");
  j["network"]["links"]["bandwidth_bps"] = 5e7;  // a number where the key names its unit
  EXPECT_EQ(errorOf(j), "");
}

// Your own data through a BPE tokenizer: a tokenizer.json whose vocabulary is GPT-2's 256 byte
// characters plus two merges ("t h" -> 256, "th e" -> 257), a .txt and a .jsonl file. Ids by hand;
// the token files are int32; re-reading the files gives the same examples (stable ids); a model
// vocabulary the ids do not fit is refused naming both.
TEST(DataTest, OwnFilesThroughABpeTokenizer) {
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("slowpipe-owndata-" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "tok");
  // GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest for 256 + n.
  json vocab = json::object();
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    const uint32_t cp = printable ? b : 256 + extra++;
    std::string ch;
    if (cp < 0x80)
      ch += static_cast<char>(cp);
    else {
      ch += static_cast<char>(0xC0 | (cp >> 6));
      ch += static_cast<char>(0x80 | (cp & 0x3f));
    }
    vocab[ch] = b;
  }
  vocab["th"] = 256;
  vocab["the"] = 257;
  std::ofstream(root / "tok" / "tokenizer.json")
      << json{{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"t h", "th e"}}}}}.dump();
  const auto tok = loadTokenizer((root / "tok").string());
  // "the" -> 257; " the" -> "Ġ" "the": the space's byte 32 maps to id 32 here (its byte), then 257.
  EXPECT_EQ(tok->encode("the them"), (std::vector<int32_t>{257, 32, 257, 'm'}));
  EXPECT_EQ(tok->decode(tok->encode("the them, thy")), "the them, thy");
  std::ofstream(root / "a.txt") << std::string(200, 'x') << "\nthe end\n";
  std::ofstream(root / "b.jsonl") << R"({"text": "the other the"})"
                                  << "\n\n"
                                  << R"({"text": "then", "id": 3})"
                                  << "\n";
  json j = valid();
  j["model"]["vocab"] = 258;
  j["model"]["seq_len"] = 8;
  j["data"] = {{"finetune", {(root / "a.txt").string(), (root / "b.jsonl").string()}},
               {"tokenizer", (root / "tok").string()},
               {"cache_dir", (root / "cache").string()},
               {"source", ""},
               {"val_fraction", 0.2}};
  const RunSpec s = runSpecFromJson(j);
  const CorpusInfo info = prepareCorpus(s.data);
  const std::vector<int32_t> all =
      tok->encode(std::string(200, 'x') + "\nthe end\nthe other the\nthen\n");
  EXPECT_EQ(info.finetuneTokens, static_cast<int64_t>(all.size()));
  EXPECT_EQ(std::filesystem::file_size(root / "cache" / "finetune.bin"), 4 * all.size());
  const ExampleSet train(s.data, "finetune", "train", 8);
  std::vector<int64_t> in(8), out(8);
  train.example(1, in.data(), out.data());
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(in[t], all[8 + t]);
    EXPECT_EQ(out[t], all[9 + t]);
  }
  prepareCorpus(s.data, /*force=*/true);  // re-read: the same examples under the same ids
  const ExampleSet again(s.data, "finetune", "train", 8);
  std::vector<int64_t> in2(8), out2(8);
  again.example(1, in2.data(), out2.data());
  EXPECT_EQ(in, in2);
  EXPECT_EQ(again.id(1), train.id(1));
  j["model"]["vocab"] = 257;  // id 257 does not fit
  j["pipeline"]["micro_batches"] = 1;
  j["pipeline"]["micro_batch_size"] = 1;
  try {
    Plan plan(runSpecFromJson(j), "finetune");
    ADD_FAILURE() << "a vocabulary too small for the tokenizer's ids was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token id 257 is beyond the model's vocabulary (257)"),
              std::string::npos)
        << e.what();
  }
  std::ofstream(root / "b.jsonl") << R"({"body": "x"})"
                                  << "\n";
  j["model"]["vocab"] = 258;
  try {
    prepareCorpus(runSpecFromJson(j).data, true);
    ADD_FAILURE() << "a record without the text field was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("b.jsonl' line 1: no string field 'text'"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(root);
}

// Relative input paths are the spec's: a spec in another folder names its network file, trace,
// tokenizer, own data and plug-in next to itself, and loads from any current folder; a path not
// found next to the spec is left for the current folder; outputs (cache_dir) are not touched.
TEST(SpecTest, RelativePathsAreTheSpecsOwn) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("slowpipe-relpaths-" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "exp" / "nets");
  fs::create_directories(root / "exp" / "tok");
  std::ofstream(root / "exp" / "nets" / "two.json")
      << R"({"nodes": [{"name": "a"}, {"name": "b"}]})";
  std::ofstream(root / "exp" / "trace.txt") << "0 100Mbps\n";
  std::ofstream(root / "exp" / "notes.txt") << "text";
  std::ofstream(root / "exp" / "codec.so") << "";
  json j = valid();
  j["network"]["nodes"] = "nets/two.json";
  j["network"]["links"]["trace"] = "trace.txt";
  j["data"] = {{"finetune", {"notes.txt", "elsewhere.txt"}},
               {"pretrain", {"wordnet:nets"}},
               {"tokenizer", "tok"},
               {"cache_dir", "data/x"}};
  j["compression"]["forward"] = "ef(plugin:path=codec.so,bits=2;store=bf16)";
  resolveSpecPaths(j, (root / "exp").string());
  const std::string exp = (root / "exp").string();
  EXPECT_EQ(j["network"]["nodes"], exp + "/nets/two.json");
  EXPECT_EQ(j["network"]["links"]["trace"], exp + "/trace.txt");
  EXPECT_EQ(
      j["data"]["finetune"],
      (json{exp + "/notes.txt", "elsewhere.txt"}));  // not next to the spec: the current folder's
  EXPECT_EQ(j["data"]["pretrain"], (json{"wordnet:" + exp + "/nets"}));
  EXPECT_EQ(j["data"]["tokenizer"], exp + "/tok");
  EXPECT_EQ(j["data"]["cache_dir"], "data/x");  // an output
  EXPECT_EQ(j["compression"]["forward"], "ef(plugin:path=" + exp + "/codec.so,bits=2;store=bf16)");
  // Read from its file, from whatever folder this test runs in.
  json spec = valid();
  spec["data"] = {{"finetune", {"notes.txt"}}};
  std::ofstream(root / "exp" / "run.json") << spec.dump();
  EXPECT_EQ(loadRunSpec((root / "exp" / "run.json").string()).data.finetune,
            std::vector<std::string>{exp + "/notes.txt"});
  fs::remove_all(root);
}

// data.pretrain: the pretrain split from a WordNet folder's glosses (the license header's lines,
// which start with spaces, left out) and a text file, byte-level; the fine-tune split stays the
// source's finetune_files. A folder without WordNet's data files is refused naming the package.
TEST(DataTest, PretrainFromWordnetGlosses) {
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("slowpipe-wordnet-" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "wn");
  std::filesystem::create_directories(root / "src");
  std::ofstream(root / "wn" / "data.noun")
      << "  1 This software and database is being provided\n"
         "00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 | that which is perceived to exist  \n"
         "00002137 03 n 02 abstraction 0 | a general concept\n";
  std::ofstream(root / "wn" / "data.verb")
      << "01 29 v 01 breathe 0 | draw air into the lungs; \"breathe deeply\"\n";
  std::ofstream(root / "wn" / "data.adj") << "";
  std::ofstream(root / "wn" / "data.adv") << "00001 02 r 01 barely 0 | only just\n";
  std::ofstream(root / "extra.txt") << "more";
  std::ofstream(root / "src" / "tales") << "once upon a time\n%\nthe end\n";
  std::ofstream(root / "src" / "other") << "not read: data.pretrain gives the pretrain split\n";
  json j = valid();
  j["data"] = {{"source", (root / "src").string()},
               {"finetune_files", {"tales"}},
               {"cache_dir", (root / "cache").string()},
               {"pretrain", {"wordnet:" + (root / "wn").string(), (root / "extra.txt").string()}}};
  const CorpusInfo info = prepareCorpus(runSpecFromJson(j).data);
  std::ifstream pre(root / "cache" / "pretrain.bin");
  const std::string text((std::istreambuf_iterator<char>(pre)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text,
            "that which is perceived to exist\na general concept\ndraw air into the lungs; "
            "\"breathe deeply\"\nonly just\nmore\n");
  EXPECT_EQ(info.pretrainTokens, static_cast<int64_t>(text.size()));
  EXPECT_EQ(info.finetuneTokens,
            static_cast<int64_t>(std::string("once upon a time\n\nthe end\n").size()));
  std::filesystem::remove(root / "wn" / "data.adv");
  try {
    prepareCorpus(runSpecFromJson(j).data, true);
    ADD_FAILURE() << "a WordNet folder without data.adv was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(
        std::string(e.what()).find("has no data.adv (install the Debian package 'wordnet-base'"),
        std::string::npos)
        << e.what();
  }
  j["data"]["pretrain"] = {"wordnet:" + (root / "none").string()};
  EXPECT_NE(
      errorOf(j).find("spec.data.pretrain: '" + (root / "none").string() + "' does not exist"),
      std::string::npos)
      << errorOf(j);
  std::filesystem::remove_all(root);
}

// runtime/model/model_size.h's counts against the sizes these models are published with (their
// model cards: GPT-2 124,439,808; TinyLlama 1.1B 1,100,048,384; Llama-2-7B 6,738,415,616;
// Qwen2-0.5B 494,032,768), read from the configs in experiments/models. A tied head is counted once
// there and twice here (it trains as two copies, the first stage's embedding and the last stage's
// head).
TEST(ModelSizeTest, CountsAreThePublishedSizes) {
  struct Case {
    const char* dir;
    double published, blockMatrixEntries;  // the second: a block's linear layers, by hand
  };
  for (const Case& c :
       {Case{"gpt2", 124439808, 12.0 * 768 * 768},
        Case{"tinyllama-1.1b", 1100048384,
             2.0 * 2048 * 2048 + 2.0 * 2048 * 256 + 3.0 * 2048 * 5632},
        Case{"llama-2-7b", 6738415616, 4.0 * 4096 * 4096 + 3.0 * 4096 * 11008},
        Case{"qwen2-0.5b", 494032768, 2.0 * 896 * 896 + 2.0 * 896 * 128 + 3.0 * 896 * 4864}}) {
    const ModelSpec m = modelFromHfConfig(
        std::string(SLOWPIPE_SOURCE_DIR) + "/experiments/models/" + c.dir, ModelSpec{});
    const double tiedCopy = m.tiedHead ? static_cast<double>(m.vocab) * m.width : 0.0;
    EXPECT_EQ(stageParameters(m, m.layers, true, true) - tiedCopy, c.published) << c.dir;
    // Cut in three stages, the same parameters.
    const int a = m.layers / 3, b = 2 * m.layers / 3;
    EXPECT_EQ(stageParameters(m, a, true, false) + stageParameters(m, b - a, false, false) +
                  stageParameters(m, m.layers - b, false, true),
              stageParameters(m, m.layers, true, true))
        << c.dir;
    EXPECT_EQ(blockMatrixEntries(m), c.blockMatrixEntries) << c.dir;
  }
  // The builtin block with its 4 x width MLP: 24 b s d^2 + 4 b s^2 d.
  ModelSpec builtin;
  builtin.width = 1600;
  builtin.heads = 25;
  EXPECT_DOUBLE_EQ(blockForwardFlops(builtin, 1, 1024),
                   24.0 * 1024 * 1600 * 1600 + 4.0 * 1024 * 1024 * 1600);
}
}  // namespace
}  // namespace slowpipe::runtime
