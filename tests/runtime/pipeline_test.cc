// End-to-end pipeline tests with real worker processes over real ZeroMQ sockets, on a tiny corpus
// this test writes itself:
//  - equivalence: codec none, no shaping: S = 2 and 4, GPipe and 1F1B, per-step losses equal a
//    single-process run to 1e-5 relative over 20 steps;
//  - AC-SGD end to end: loss falls, forward wire bytes after the warm-up epoch <= 1/12 of fp32's;
//  - fault: kill -9 of a worker stops the run within 5 s with status failed and no orphans;
//  - malformed specs fail before any process starts.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>
#include <set>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <torch/cuda.h>

#include "compression/codec.h"
#include "compression/frame.h"
#include "emulator/command.h"
#include "emulator/shaped_socket.h"
#include "runtime/exec/stage_runner.h"
#include "runtime/launch/launcher.h"
#include "runtime/launch/worker.h"
#include "runtime/model/data.h"
#include "tests/runtime/impostor.h"
#include "tests/runtime/pipeline_fixture.h"

#include <sys/mount.h>

namespace slowpipe::runtime {
namespace {

class EquivalenceTest : public PipelineTest,
                        public ::testing::WithParamInterface<std::tuple<int, std::string>> {};

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
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values("gpipe", "1f1b", "zb_h1")),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "stages_" +
                                  std::get<1>(info.param);
                         });

// Hugging Face checkpoints fine-tune in a pipeline exactly as in one process: a Llama-family model
// with grouped-query attention (4 heads, 2 kv heads) at 3 uneven stages under 1F1B, and GPT-2 at 2
// stages under GPipe; random weights written by the independent reference (tools/hf_reference.py).
// training.save_checkpoint writes the fine-tuned model back; the reference reads it.
TEST_F(PipelineTest, HuggingFaceCheckpointsLossesEqualSingleProcess) {
  const std::string hf = (root_ / "hf").string();
  const auto made = emulator::runCommand(
      {"/usr/bin/python3", std::string(SLOWPIPE_SOURCE_DIR) + "/tools/hf_reference.py", "--out",
       hf});
  ASSERT_EQ(made.status, 0) << made.output;
  for (const auto& [family, stages, schedule] :
       {std::tuple{"llama", 3, "1f1b"}, std::tuple{"gpt2", 2, "gpipe"}}) {
    json spec = baseSpec(stages, schedule);
    spec["model"] = {{"checkpoint", hf + "/" + family + "-f32"}, {"seq_len", 16}};
    if (stages == 3) spec["pipeline"]["partition"] = {{0, 2}, {2, 3}, {3, 4}};
    const std::string saved = (root_ / (std::string("tuned-") + family)).string();
    spec["training"]["save_checkpoint"] = saved;
    const RunSpec rs = runSpecFromJson(spec);
    ASSERT_EQ(rs.model.family, family);
    std::vector<double> reference;
    prepareCorpus(rs.data);
    runSingleProcess(rs, "finetune", [&](const json& r) {
      if (r["type"] == "step") reference.push_back(r["loss"].get<double>());
    });
    ASSERT_EQ(reference.size(), 20u);
    const json result = launch(spec, std::string("hf-") + family);
    ASSERT_EQ(result["status"], "ok") << result.value("reason", "");
    ASSERT_EQ(result["steps"].size(), 20u);
    for (size_t i = 0; i < reference.size(); ++i)
      EXPECT_NEAR(result["steps"][i]["loss"].get<double>(), reference[i],
                  1e-6 * std::fabs(reference[i]))
          << family << " step " << i;
    EXPECT_LT(reference.back(), reference.front()) << family;
    // The fine-tuned model, written back by the stages as shards, reloads in the reference with
    // slowpipe's logits; and it is not the checkpoint it started from.
    const auto back = emulator::runCommand(
        {"/usr/bin/python3", std::string(SLOWPIPE_SOURCE_DIR) + "/tools/hf_reference.py",
         "--verify", saved, "--bin", SLOWPIPE_BINARY});
    EXPECT_EQ(back.status, 0) << back.output;
    EXPECT_TRUE(std::filesystem::exists(saved + "/model-0000" + std::to_string(stages) +
                                        "-of-0000" + std::to_string(stages) + ".safetensors"));
    const auto before = emulator::runCommand(
        {SLOWPIPE_BINARY, "model", "logits", hf + "/" + family + "-f32", "--tokens", "1,2,3"});
    const auto after =
        emulator::runCommand({SLOWPIPE_BINARY, "model", "logits", saved, "--tokens", "1,2,3"});
    EXPECT_NE(before.output, after.output);
  }
}

// A checkpoint folder with config.json alone (enough for `model info` and the simulator) fails a
// run in the launcher, before any worker starts, naming the folder and the files it lacks (a
// worker's "rank N:" reason before).
TEST_F(PipelineTest, ACheckpointWithoutWeightsFailsBeforeAnyWorkerStarts) {
  const fs::path dir = root_ / "config-only";
  fs::create_directories(dir);
  fs::copy_file(fs::path(SLOWPIPE_SOURCE_DIR) / "experiments/models/smollm-135m/config.json",
                dir / "config.json", fs::copy_options::overwrite_existing);
  json spec = baseSpec(2, "gpipe");
  spec["model"] = {{"checkpoint", dir.string()}, {"seq_len", 16}};
  const json result = launch(spec, "config-only", false);
  EXPECT_EQ(result["status"], "failed");
  const std::string reason = result.value("reason", "");
  EXPECT_EQ(reason.rfind("launcher: checkpoint '" + dir.string() +
                             "': neither model.safetensors nor model.safetensors.index.json",
                         0),
            0u)
      << reason;
}

// A split backward computes what the whole one does: per stage (first, middle, last of an uneven
// 3-stage partition), BackwardInput of two micro-batches then their BackwardWeights give the input
// gradients and every parameter gradient of two whole backwards, to rounding.
TEST_F(PipelineTest, SplitBackwardComputesTheWholeBackwardsGradients) {
  json j = baseSpec(3, "zb_h1");
  j["model"]["layers"] = 5;
  j["pipeline"]["partition"] = {{0, 1}, {1, 4}, {4, 5}};
  const RunSpec split = runSpecFromJson(j);
  j["pipeline"]["schedule"] = "1f1b";
  const RunSpec whole = runSpecFromJson(j);
  for (int s = 0; s < 3; ++s) {
    StageRunner a(whole, s, 10), b(split, s, 10);
    ASSERT_FALSE(a.splitBackward());
    ASSERT_TRUE(b.splitBackward());
    torch::manual_seed(s);
    std::vector<torch::Tensor> in, tgt, grad;
    for (int m = 0; m < 2; ++m) {
      in.push_back(s == 0 ? torch::randint(0, 64, {2, 16}, torch::kLong)
                          : torch::randn({2, 16, 32}));
      tgt.push_back(torch::randint(0, 64, {2, 16}, torch::kLong));
      grad.push_back(s == 2 ? torch::Tensor() : torch::randn({2, 16, 32}));
      const torch::Tensor ya = a.forward(m, in[m], tgt[m]), yb = b.forward(m, in[m], tgt[m]);
      ASSERT_TRUE(torch::equal(ya, yb)) << "stage " << s;  // the forward is the same computation
    }
    for (int m = 0; m < 2; ++m) {
      const torch::Tensor ga = a.backward(m, grad[m]), gb = b.backwardInput(m, grad[m]);
      ASSERT_EQ(ga.defined(), gb.defined());
      if (ga.defined()) {
        EXPECT_LE((ga - gb).abs().max().item<double>(), 1e-6 * ga.abs().max().item<double>()) << s;
      }
    }
    // Before BackwardWeight the linear layers have no gradient yet; after it, all are there.
    const auto pa = a.model()->named_parameters(), pb = b.model()->named_parameters();
    EXPECT_FALSE(pb["block" +
                    std::to_string(s == 0   ? 0
                                   : s == 1 ? 1
                                            : 4) +
                    ".fc.weight"]
                     .grad()
                     .defined())
        << s;
    for (int m = 0; m < 2; ++m) b.backwardWeight(m);
    EXPECT_THROW(b.backwardWeight(0), std::logic_error);  // its weight gradients were taken
    for (const auto& p : pa) {
      const torch::Tensor ga = p.value().grad(), gb = pb[p.key()].grad();
      ASSERT_TRUE(gb.defined()) << p.key();
      EXPECT_LE((ga - gb).abs().max().item<double>(),
                1e-6 * std::max(1e-12, ga.abs().max().item<double>()))
          << p.key();
    }
  }
}

// zb_h1 reorders and splits 1F1B's compute and moves the same messages: its per-step losses equal
// 1F1B's within 1e-6 (4 stages, uneven partition, and with fp16 messages).
TEST_F(PipelineTest, ZbH1LossesEqualOneFOneB) {
  for (const char* codec : {"none", "fp16"}) {
    json j = baseSpec(4, "1f1b");
    j["model"]["layers"] = 6;
    j["pipeline"]["partition"] = {{0, 2}, {2, 3}, {3, 5}, {5, 6}};
    j["training"]["max_steps"] = 10;
    j["compression"] = {{"forward", codec}, {"backward", codec}};
    const json ref = launch(j, std::string("zbref-") + codec);
    j["pipeline"]["schedule"] = "zb_h1";
    const json zb = launch(j, std::string("zb-") + codec);
    ASSERT_EQ(zb["status"], "ok") << zb.value("reason", "");
    ASSERT_EQ(zb["steps"].size(), ref["steps"].size());
    for (size_t i = 0; i < ref["steps"].size(); ++i)
      EXPECT_NEAR(zb["steps"][i]["loss"].get<double>(), ref["steps"][i]["loss"].get<double>(), 1e-6)
          << codec << " step " << i;
    // The last stage's timeline: the schedule's own events, split backward included.
    std::string got;
    for (const auto& e : zb["timeline"][3]["events"])
      if (e["what"] == "backward_weight") got += "W" + e["mb"].dump() + " ";
    EXPECT_EQ(got, "W0 W1 W2 W3 ") << codec;
  }
}

// Interleaved 1F1B with two model chunks per stage, uneven virtual stages: per-step losses equal
// 1F1B's over the same S x V virtual stages (the same boundaries, so the same fp16 roundings)
// within 1e-6, and with codec none a single process's too. The ring closes through stage S-1 -> 0
// (with two stages both directions of the pair share one channel); codec states match per link.
TEST_F(PipelineTest, InterleavedLossesEqualOneFOneBOverTheVirtualStages) {
  for (const int S : {2, 4})
    for (const char* codec : {"none", "fp16"}) {
      json j = baseSpec(S * 2, "1f1b");
      j["model"]["layers"] = S == 2 ? 6 : 10;
      j["pipeline"]["partition"] =
          S == 2 ? json{{0, 2}, {2, 3}, {3, 5}, {5, 6}}
                 : json{{0, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 8}, {8, 9}, {9, 10}};
      j["training"]["max_steps"] = 8;
      j["training"]["eval_each_epoch"] = true;  // evaluation crosses the ring too
      j["compression"] = {{"forward", codec}, {"backward", codec}};
      const std::string tag = std::to_string(S) + codec;
      const json ref = launch(j, "ilref-" + tag);
      j["pipeline"]["stages"] = S;
      j["pipeline"]["virtual_stages"] = 2;
      j["pipeline"]["schedule"] = "interleaved_1f1b";
      const json il = launch(j, "il-" + tag);
      ASSERT_EQ(il["status"], "ok") << il.value("reason", "");
      EXPECT_TRUE(il["codec_states_match"].get<bool>()) << tag;
      ASSERT_EQ(il["steps"].size(), ref["steps"].size());
      for (size_t i = 0; i < ref["steps"].size(); ++i)
        EXPECT_NEAR(il["steps"][i]["loss"].get<double>(), ref["steps"][i]["loss"].get<double>(),
                    1e-6)
            << tag << " step " << i;
      ASSERT_FALSE(il["evals"].empty()) << tag;
      ASSERT_EQ(il["evals"].size(), ref["evals"].size());
      for (size_t i = 0; i < ref["evals"].size(); ++i)
        EXPECT_NEAR(il["evals"][i]["val_loss"].get<double>(),
                    ref["evals"][i]["val_loss"].get<double>(), 1e-6)
            << tag;
      // Every virtual boundary carries each micro-batch once per direction: as many activation
      // bytes as the S x V-stage 1F1B run.
      EXPECT_EQ(il["steps"][2]["bytes"]["forward"]["raw"],
                ref["steps"][2]["bytes"]["forward"]["raw"])
          << tag;
      // The timeline names each event's model chunk: both chunks of every stage computed.
      ASSERT_EQ(il["timeline"].size(), static_cast<size_t>(S)) << tag;
      for (const auto& row : il["timeline"]) {
        std::set<int> chunks;
        for (const auto& e : row["events"])
          if (e["what"] == "forward") chunks.insert(e.at("chunk").get<int>());
        EXPECT_EQ(chunks, (std::set<int>{0, 1})) << tag << " stage " << row["stage"];
      }
      if (std::string(codec) != "none") continue;
      std::vector<double> single;
      runSingleProcess(runSpecFromJson(j), "finetune", [&](const json& r) {
        if (r["type"] == "step") single.push_back(r["loss"].get<double>());
      });
      ASSERT_EQ(single.size(), il["steps"].size());
      for (size_t i = 0; i < single.size(); ++i)
        EXPECT_NEAR(il["steps"][i]["loss"].get<double>(), single[i], 1e-6) << tag << " step " << i;
    }
}

// training.eval_every_steps: the pipeline evaluates after every 3rd step besides each epoch's end
// (4 steps per epoch, 7 steps: after steps 3, 4, 6 and 7, the last ending the run), with the same
// validation losses as a single process evaluating at the same steps; a negative value is named.
TEST_F(PipelineTest, EvaluationsEveryNStepsMatchASingleProcess) {
  json j = baseSpec(2, "1f1b");
  j["data"]["max_train_examples"] = 32;  // 4 steps of 4 x 2 examples per epoch
  j["training"]["max_steps"] = 7;
  j["training"]["eval_each_epoch"] = true;
  j["training"]["eval_every_steps"] = 3;
  const json r = launch(j, "every3");
  ASSERT_EQ(r["status"], "ok") << r.value("reason", "");
  std::vector<int64_t> steps, epochs;
  for (const auto& e : r["evals"]) {
    steps.push_back(e["step"].get<int64_t>());
    epochs.push_back(e["epoch"].get<int64_t>());
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{3, 4, 6, 7}));
  EXPECT_EQ(epochs, (std::vector<int64_t>{0, 0, 1, 1}));
  std::vector<json> single;
  runSingleProcess(runSpecFromJson(j), "finetune", [&](const json& rec) {
    if (rec["type"] == "eval") single.push_back(rec);
  });
  ASSERT_EQ(single.size(), r["evals"].size());
  for (size_t i = 0; i < single.size(); ++i) {
    EXPECT_EQ(single[i]["step"], r["evals"][i]["step"]);
    EXPECT_NEAR(single[i]["val_loss"].get<double>(), r["evals"][i]["val_loss"].get<double>(), 1e-6)
        << i;
  }
  j["training"]["eval_every_steps"] = -1;
  try {
    runSpecFromJson(j);
    ADD_FAILURE() << "a negative eval_every_steps was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("training.eval_every_steps"), std::string::npos)
        << e.what();
  }
}

// Interleaving needs what it needs, each refused by name before a process starts.
TEST_F(PipelineTest, VirtualStagesAreCheckedByName) {
  auto errorOf = [&](json j) {
    try {
      runSpecFromJson(j);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  json j = baseSpec(2, "1f1b");
  j["pipeline"]["virtual_stages"] = 2;
  EXPECT_NE(errorOf(j).find("need a schedule that interleaves them"), std::string::npos)
      << errorOf(j);
  j["pipeline"]["schedule"] = "interleaved_1f1b";
  EXPECT_EQ(errorOf(j), "");
  j["pipeline"]["micro_batches"] = 3;
  EXPECT_NE(errorOf(j).find("not a multiple of 2"), std::string::npos) << errorOf(j);
  j["pipeline"]["micro_batches"] = 4;
  j["pipeline"]["virtual_stages"] = 3;
  EXPECT_NE(errorOf(j).find("stages x virtual_stages <= model.layers"), std::string::npos)
      << errorOf(j);
  j["pipeline"]["virtual_stages"] = 2;
  j["pipeline"]["replicas"] = 2;
  EXPECT_EQ(errorOf(j), "");  // replicas synchronise every model chunk
  j["dp"] = {{"codec", "qadam:bits=8"}};
  EXPECT_NE(errorOf(j).find("qadam with 2 model chunks"), std::string::npos) << errorOf(j);
  j["network"]["backend"] = "tc";
  j["dp"] = json::object();
  EXPECT_NE(errorOf(j).find("builds one namespace chain"), std::string::npos) << errorOf(j);
  j["pipeline"]["replicas"] = 1;
  EXPECT_EQ(errorOf(j), "");  // the ring of model chunks runs on tc (its own veth pair S-1 <-> 0)
}

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
  EXPECT_EQ(a["codec_state"]["0"]["fwd_sender_digest"],
            a["codec_state"]["1"]["fwd_receiver_digest"]);
  // The last step's timeline, per stage, in the order of that stage's action list.
  ASSERT_EQ(a["timeline"].size(), 2u);
  std::string got;
  for (const auto& e : a["timeline"][1]["events"])
    got += e["what"].get<std::string>().substr(0, 1) +
           (e["mb"].get<int>() >= 0 ? std::to_string(e["mb"].get<int>()) : "") + " ";
  EXPECT_EQ(got, "r0 f0 r1 f1 r2 f2 r3 f3 b3 s3 b2 s2 b1 s1 b0 s0 g s r s ") << got;
  EXPECT_NE(a["codec_state"]["0"]["fwd_sender_digest"], f["codec_state"]["0"]["fwd_sender_digest"]);
  const auto& steps = a["steps"];
  EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>() - 0.3);
  EXPECT_LT(a["evals"].back()["val_loss"].get<double>(),
            a["evals"].front()["val_loss"].get<double>());
  const double fp32Wire = f["steps"][10]["bytes"]["forward"]["wire"].get<double>();
  RecordProperty("fp32_forward_wire_per_step", std::to_string(fp32Wire));
  RecordProperty("acsgd_forward_wire_per_step", steps.back()["bytes"]["forward"]["wire"].dump());
  for (const auto& st : steps) {
    if (st["epoch"].get<int>() == 0) continue;  // first sighting of every example: full precision
    EXPECT_LE(st["bytes"]["forward"]["wire"].get<double>() * 12, fp32Wire) << "step " << st["step"];
  }
  EXPECT_LT(steps[0]["bytes"]["forward"]["wire"].get<double>() * 12,
            fp32Wire * 13);  // epoch 0 is ~ fp32
}

// A straggler in emulation: rank 1 at half speed from step 6 of 12 (runtime.slowdown). The worker
// owes t x (1/0.5 - 1) = t off the CPU after each compute action of t seconds in steps 6-11 and
// sleeps what it owes: the result says what it owed and stalled (stalled >= owed, by no more than
// one sleep's overrun). Per step, the stall is in the step's compute and said apart: none before
// step 6, then in every step; what it owed is what it computed in steps 6-11 (speed 0.5: the
// stall equals the compute it follows). Only relations
// between what one process measured: on a loaded host a before/after comparison of compute times
// measures the load (a sleeping rank frees a core for the others), not the straggler.
TEST_F(PipelineTest, StragglerComputesAtItsSpeed) {
  json spec = baseSpec(2, "gpipe");
  spec["model"]["width"] = 128;
  spec["pipeline"]["micro_batch_size"] = 8;
  spec["training"]["max_steps"] = 12;
  spec["runtime"]["slowdown"] = json::parse(R"([{"rank": 1, "trace": [[6, 0.5]]}])");
  const json r = launch(spec, "straggler");
  ASSERT_EQ(r["steps"].size(), 12u);
  const json& m = r["slowdown"]["1"];
  const double owed = m["owed_s"].get<double>(), stalled = m["stalled_s"].get<double>(),
               compute = m["compute_s"].get<double>();
  EXPECT_GE(stalled, owed) << m.dump();
  EXPECT_LT(stalled - owed, 0.05) << m.dump();
  EXPECT_DOUBLE_EQ(m["effective_speed"].get<double>(), compute / (compute + stalled)) << m.dump();
  EXPECT_EQ(r["slowdown"]["0"]["effective_speed"].get<double>(), 1.0);
  EXPECT_EQ(r["slowdown"]["0"]["owed_s"].get<double>(), 0.0);
  double stallSum = 0,
         computeSlowed = 0;  // rank 1 in steps 6-11: its stalls, its compute without them
  double cpuSlowed = 0;      // and the CPU its process had then
  for (int k = 0; k < 12; ++k) {
    const json& row = r["steps"][k]["breakdown_s_per_stage"][1];
    const double s = row["stalled"].get<double>();
    for (const json& stage :
         r["steps"][k]["breakdown_s_per_stage"]) {  // every worker measures its process
      EXPECT_GT(stage["cpu_s"].get<double>(), 0.0) << "step " << k;
      EXPECT_GE(stage["preempted"].get<int64_t>(), 0) << "step " << k;
    }
    EXPECT_EQ(r["steps"][k]["breakdown_s_per_stage"][0]["stalled"].get<double>(), 0.0)
        << "step " << k;
    if (k < 6) {
      EXPECT_EQ(s, 0.0) << "step " << k;
      continue;
    }
    EXPECT_GT(s, 0.0) << "step " << k;
    EXPECT_GE(row["compute"].get<double>(), s) << "step " << k;
    stallSum += s;
    computeSlowed += row["compute"].get<double>() - s;
    cpuSlowed += row["cpu_s"].get<double>();
  }
  // A stall sleeps: the straggler's CPU is its work, not its work and stalls (as wall time would
  // be).
  EXPECT_LT(cpuSlowed, computeSlowed + 0.5 * stallSum)
      << cpuSlowed << " CPU-s for " << computeSlowed << " s of compute and " << stallSum
      << " s of stalls";
  EXPECT_NEAR(stallSum, stalled, 1e-9);  // no evaluation in this run: every stall is in a step
  // What it owed is what it computed in those steps (t x (1/0.5 - 1) = t per action), measured
  // around the same calls; what it slept is that plus at most the last sleep's overrun.
  EXPECT_NEAR(owed / computeSlowed, 1.0, 0.1)
      << owed << " s owed for " << computeSlowed << " s of compute";
  EXPECT_EQ(r["spec"]["runtime"]["slowdown"][0]["rank"], 1);
}

// network.nodes across processes: two replicas of stage 0 on one node share its 4 Mbps uplink
// (four worker processes booking one calendar in shared memory), so every step's forward traffic
// takes twice as long as with the replicas on two nodes alike. dp.local_steps beyond the run: no
// data-parallel exchange, the two placements differ only in the shared uplink. Each message is
// about 32 KiB: 66 ms at 4 Mbps, 4 a step and replica: 262 ms alone, 524 ms shared. (At 8 Mbps a
// slow, loaded host's compute, 0.1-0.2 s a step, hid enough of the difference to fail the ratio.)
TEST_F(PipelineTest, ReplicasOnOneNodeShareItsUplink) {
  json spec = baseSpec(2, "gpipe");
  spec["model"]["width"] = 64;
  spec["pipeline"]["micro_batch_size"] = 8;
  spec["pipeline"]["replicas"] = 2;
  spec["dp"] = {{"local_steps", 100}};
  spec["training"]["max_steps"] = 6;
  spec["network"] = {{"nodes", json::parse(R"({"nodes": [
      {"name": "x", "up": "4Mbps", "down": "1Gbps"}, {"name": "w", "up": "4Mbps", "down": "1Gbps"},
      {"name": "y", "up": "1Gbps", "down": "1Gbps"}, {"name": "z", "up": "1Gbps", "down": "1Gbps"}],
      "core": {"default": {"latency": "1ms"}}})")}};
  auto medianStep = [](const json& r) {
    std::vector<double> t;
    for (size_t k = 1; k < r["steps"].size(); ++k)
      t.push_back(r["steps"][k]["time_s"].get<double>());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  spec["pipeline"]["placement"] = json::parse(R"([["x", "w"], ["y", "z"]])");
  const json apart = launch(spec, "nodes-apart");
  spec["pipeline"]["placement"] = json::parse(R"([["x", "x"], ["y", "z"]])");
  const json shared = launch(spec, "nodes-shared");
  ASSERT_EQ(shared["steps"].size(), 6u);
  EXPECT_EQ(shared["network"]["nodes"]["rank_nodes"], json::parse(R"(["x", "x", "y", "z"])"));
  const double a = medianStep(apart), s = medianStep(shared);
  EXPECT_GT(a, 0.262) << "the uplink's 4 messages alone";
  EXPECT_GT(s, 0.524) << "8 messages on one uplink";
  EXPECT_GT(s / a, 1.35) << "apart " << a << " s, shared " << s << " s";
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
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 2.0 + 5.0) << "timeout 2 s, then at most 5 s to stop everything";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  r = json::parse(std::ifstream(out / "result.json"));
  EXPECT_EQ(r["status"], "failed");
  EXPECT_NE(r["reason"].get<std::string>().find("rank 1 made no progress"), std::string::npos)
      << r["reason"];
  EXPECT_TRUE(kill(hung, 0) != 0 && errno == ESRCH) << "the hung worker survived";
  EXPECT_TRUE(kill(other, 0) != 0 && errno == ESRCH) << "worker 0 survived";
}

TEST_F(PipelineTest, MalformedSpecFailsBeforeAnyProcessStarts) {
  for (const auto& [mutate, expect] :
       std::vector<std::pair<std::function<void(json&)>, std::string>>{
           {[](json& j) { j.erase("model"); }, "spec.model: missing"},
           {[](json& j) { j["pipeline"]["micro_batches"] = "4"; },
            "pipeline.micro_batches: wrong type"},
           {[](json& j) { j["compression"]["backward"] = "quant:bits=12"; },
            "compression.backward"},
           {[](json& j) { j["pipeline"]["stages"] = 8; }, "stages <= model.layers"},
           // An override naming a stage that does not exist was silently ignored.
           {[](json& j) {
              j["network"]["links"]["links"] = {{{"src", 1}, {"dst", 7}, {"latency", "5ms"}}};
            },
            "network.links.links[0].dst: 7 names no stage; the pipeline has stages 0..1"},
           {[](json& j) {
              j["network"]["links"]["links"] = {{{"src", 0}, {"dst", 0}, {"latency", "5ms"}}};
            },
            "are not neighbouring stages"},
           {[](json& j) { j["network"]["links"]["bandwidth"] = "2000Gbps"; },
            "network.links.bandwidth: \"2000Gbps\" is beyond 1 Tbps"},
           {[](json& j) { j["network"]["links"]["latency"] = "7200s"; },
            "network.links.latency: \"7200s\" is beyond 1 h"},
           {[](json& j) { j["model"]["seq_len"] = 3000000000LL; },
            "model.seq_len: 3000000000 is out of range"},
           {[](json& j) { j["model"]["seq_len"] = 2000000; },
            "model.seq_len: 2000000 is beyond 2^20"}}) {
    json spec = baseSpec(2, "gpipe");
    mutate(spec);
    const fs::path file = root_ / "bad.json", out = root_ / "bad-out";
    std::ofstream(file) << spec.dump();
    const auto r =
        emulator::runCommand({SLOWPIPE_BINARY, "run", file.string(), "--out", out.string()});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.output.find(expect), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out)) << "something ran for a bad spec";
  }
}

// ef(...) failed every run at the end ("codec state of a sender and its receiver differ"): the
// digest compared the sender's residuals with a receiver that has none.
TEST_F(PipelineTest, ErrorFeedbackForwardTopkBackwardRunEndsOk) {
  json spec = baseSpec(2, "gpipe");
  spec["compression"] = {{"forward", "ef(quant:bits=4)"}, {"backward", "topk:ratio=0.05"}};
  const json r = launch(spec, "ef-topk");
  ASSERT_EQ(r["status"], "ok") << r.value("reason", "");
  EXPECT_TRUE(r["codec_states_match"].get<bool>());
  EXPECT_EQ(r["steps"].size(), 20u);
  EXPECT_LT(r["steps"][19]["loss"].get<double>(), r["steps"][0]["loss"].get<double>());
  EXPECT_LT(r["steps"][5]["bytes"]["backward"]["wire"].get<double>(),
            r["steps"][5]["bytes"]["backward"]["raw"].get<double>() / 5);
}

// backing=mmap,path=F made the sender and the receiver open the same file, so they updated one
// buffer and the losses left the RAM run's from step 16 on. Each end now has its own file.
TEST_F(PipelineTest, AcsgdMmapWithPathEqualsRamStepByStep) {
  json spec = baseSpec(2, "gpipe");
  spec["training"]["epochs"] = 4;
  spec["training"]["max_steps"] = 0;
  spec["data"]["max_train_examples"] = 48;  // 6 steps per epoch: 3 epochs of deltas
  const fs::path file = root_ / "acsgd-store";
  json ram = spec, mmap = spec;
  ram["compression"] = {{"forward", "acsgd:bits=2"}, {"backward", "quant:bits=4"}};
  mmap["compression"] = {{"forward", "acsgd:bits=2,backing=mmap,path=" + file.string()},
                         {"backward", "quant:bits=4"}};
  const json a = launch(ram, "acsgd-ram"), b = launch(mmap, "acsgd-mmap");
  ASSERT_EQ(a["status"], "ok");
  ASSERT_EQ(b["status"], "ok") << b.value("reason", "");
  ASSERT_EQ(a["steps"].size(), b["steps"].size());
  for (size_t i = 0; i < a["steps"].size(); ++i)
    EXPECT_EQ(a["steps"][i]["loss"].get<double>(), b["steps"][i]["loss"].get<double>())
        << "step " << i;
  EXPECT_EQ(a["codec_state"]["1"]["fwd_receiver_digest"],
            b["codec_state"]["1"]["fwd_receiver_digest"]);
  for (const auto& e : fs::directory_iterator(root_))
    EXPECT_EQ(e.path().filename().string().rfind("acsgd-store", 0), std::string::npos)
        << e.path() << " was left behind";
}

// A non-finite activation stops the run with a message naming step, stage and micro-batch, and the
// worker's message reaches result.json (the old drain kept only step records).
TEST_F(PipelineTest, NonFiniteActivationStopsTheRunNamingIt) {
  json spec = baseSpec(2, "gpipe");
  spec["training"]["lr"] = 1e30;  // the first update blows every weight up
  spec["training"]["warmup_steps"] = 0;
  spec["training"]["clip_norm"] = 1e30;
  const json r = launch(spec, "nonfinite", /*expectOk=*/false);
  ASSERT_EQ(r["status"], "failed");
  const std::string reason = r["reason"];
  EXPECT_NE(reason.find("non-finite"), std::string::npos) << reason;
  EXPECT_NE(reason.find("at step"), std::string::npos) << reason;
  EXPECT_NE(reason.find(", stage "), std::string::npos) << reason;
  EXPECT_NE(reason.find(", micro-batch "), std::string::npos) << reason;
}

// Setup errors used to escape before result.json existed; now the run records them as failed.
TEST_F(PipelineTest, FailedSetupLeavesAFailedResult) {
  json spec = baseSpec(2, "gpipe");
  spec["training"]["init_checkpoint"] = (root_ / "no-such-base.pt").string();
  const json r = launch(spec, "bad-setup", /*expectOk=*/false);
  EXPECT_EQ(r["status"], "failed");
  EXPECT_NE(r["reason"].get<std::string>().find("training.init_checkpoint"), std::string::npos)
      << r["reason"];
  EXPECT_TRUE(r["environment"].contains("git_commit"));  // captured once, before anything ran
}

// runtime.device = cuda where libtorch has no CUDA (Debian's): the run fails, saying what to do.
TEST_F(PipelineTest, CudaStagesWithoutCudaLibtorchFailNamingTheField) {
  if (torch::cuda::is_available())
    GTEST_SKIP() << "this libtorch has CUDA: the stages would run there";
  json spec = baseSpec(2, "gpipe");
  spec["runtime"]["device"] = "cuda";
  const json r = launch(spec, "cuda-on-cpu", /*expectOk=*/false);
  EXPECT_EQ(r["status"], "failed");
  EXPECT_NE(r["reason"].get<std::string>().find(
                "runtime.device = 'cuda': this libtorch sees no CUDA device"),
            std::string::npos)
      << r["reason"];
}

// A worker whose launcher is gone exits at once: its parent is no longer the pid it was given.
// (The old check, getppid() == 1, misfires where the launcher itself is pid 1.)
TEST_F(PipelineTest, WorkerWithoutItsLauncherExits) {
  const auto r =
      emulator::runCommand({SLOWPIPE_BINARY, "worker", "--spec", "/nonexistent.json", "--rank", "0",
                            "--control", "ipc:///tmp/none", "--peers", "ipc:///tmp/none2",
                            "--launcher-pid", std::to_string(getpid() + 100000)});
  EXPECT_EQ(r.status, 4) << r.output;
}

// The environment (git commit and dirty flag) is captured once per run, before any step: the first
// version ran `git rev-parse` and `git status` after every step, forking inside the timed part.
// A `git` earlier on PATH counts the calls.
TEST_F(PipelineTest, GitNeverRunsDuringARun) {
  const fs::path bin = root_ / "fake-bin", log = root_ / "git-calls.log";
  fs::create_directories(bin);
  {
    std::ofstream f(bin / "git");
    f << "#!/bin/sh\necho \"$@\" >> " << log.string() << "\nexec /usr/bin/git \"$@\"\n";
  }
  fs::permissions(bin / "git", fs::perms::owner_all);
  const std::string oldPath = std::getenv("PATH");
  setenv("PATH", (bin.string() + ":" + oldPath).c_str(), 1);
  json spec = baseSpec(2, "gpipe");  // 20 steps
  const json r = launch(spec, "git-count");
  setenv("PATH", oldPath.c_str(), 1);
  ASSERT_EQ(r["status"], "ok");
  ASSERT_EQ(r["steps"].size(), 20u);
  std::ifstream in(log);
  int calls = 0;
  for (std::string line; std::getline(in, line);) ++calls;
  EXPECT_EQ(calls, 0) << "the commit and dirty flag are stamped into the binary at build time";
  EXPECT_TRUE(r["environment"].contains("git_commit"));
}

// The workers a run starts have glibc's malloc ask for huge pages (runtime::hugePageTunables: the
// launcher puts the tunable in their environment, so none starts a second time for it), and
// result.json says so; with SLOWPIPE_MALLOC_HUGEPAGES=0 they keep glibc's default.
TEST_F(PipelineTest, WorkersStartWithHugePageMalloc) {
  json spec = baseSpec(2, "gpipe");
  spec["training"]["max_steps"] = 2;
  const json r = launch(spec, "huge-pages");
  ASSERT_EQ(r["status"], "ok") << r.value("reason", "");
  EXPECT_EQ(r["environment"]["malloc_huge_pages"], true) << r["environment"].dump();
  // ... from the launcher's environment, not by starting a second time (tools/main.cc)
  EXPECT_EQ(r["environment"]["workers_restarted_for_huge_pages"], false) << r["environment"].dump();
  const char* own = std::getenv("GLIBC_TUNABLES");
  if (own && std::string(own).find("glibc.malloc.hugetlb") != std::string::npos) return;
  setenv("SLOWPIPE_MALLOC_HUGEPAGES", "0", 1);
  const json off = launch(spec, "huge-pages-off");
  unsetenv("SLOWPIPE_MALLOC_HUGEPAGES");
  ASSERT_EQ(off["status"], "ok") << off.value("reason", "");
  EXPECT_EQ(off["environment"]["malloc_huge_pages"], false) << off["environment"].dump();
  EXPECT_EQ(off["environment"]["workers_restarted_for_huge_pages"], false)
      << off["environment"].dump();
}

// runtime.pin_cores: each worker runs on its own CPU when there are enough, and the result says
// where.
TEST_F(PipelineTest, PinCoresRecordsThePlacement) {
  json spec = baseSpec(2, "gpipe");
  spec["training"]["max_steps"] = 3;
  spec["runtime"]["pin_cores"] = true;
  const json r = launch(spec, "pinned");
  ASSERT_EQ(r["status"], "ok") << r.value("reason", "");
  const auto cpus = r["placement"]["cpus_available"].size();
  if (cpus >= 2) {
    EXPECT_TRUE(r["placement"]["pinned"].get<bool>());
    EXPECT_NE(r["workers"][0]["cpu"], r["workers"][1]["cpu"]);
    EXPECT_TRUE(r["workers"][0]["cpu"].is_number());
  } else {
    EXPECT_FALSE(r["placement"]["pinned"].get<bool>());
    EXPECT_TRUE(r["placement"].contains("reason"));
  }
  spec["pipeline"]["stages"] = 4;  // more workers than this machine's 2 cores (if it has 2)
  const json r4 = launch(spec, "pinned4");
  ASSERT_EQ(r4["status"], "ok");
  EXPECT_EQ(r4["placement"]["pinned"].get<bool>(), r4["placement"]["cpus_available"].size() >= 4u);
}

// A launcher that did not read its workers' records before they exited (kill -STOP while they
// finish): a worker that sent "done" and exited 0 was reported failed before its "done" was read.
TEST_F(PipelineTest, WorkersThatFinishedWhileTheLauncherWasStoppedEndOk) {
  json spec = baseSpec(2, "gpipe");
  spec["training"]["max_steps"] = 300;
  spec["runtime"]["timeline"] =
      "all";  // a "done" record of megabytes: still arriving when the exit is seen
  json partial;
  const pid_t launcher = startRun(spec, "stopped-launcher", &partial);
  ASSERT_GE(partial["steps"].size(), 3u);
  kill(launcher, SIGSTOP);
  sleep(8);  // the workers finish, send "done" and exit meanwhile
  kill(launcher, SIGCONT);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  const json r = json::parse(std::ifstream(root_ / "stopped-launcher" / "result.json"));
  EXPECT_EQ(r["status"], "ok") << r.value("reason", "");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// SIGTERM / SIGINT / SIGHUP to `slowpipe run`: the reason names the signal (it said "launcher:
// Interrupted system call": zmq::poll threw on EINTR before the signal was checked; SIGHUP, an ssh
// session closing, killed the launcher at once and left "running").
TEST_F(PipelineTest, SignalToTheLauncherIsTheReason) {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    json spec = baseSpec(2, "gpipe");
    spec["training"]["max_steps"] = 0;
    json partial;
    const std::string tag = "signal-" + std::to_string(sig);
    const pid_t launcher = startRun(spec, tag, &partial);
    ASSERT_GE(partial["steps"].size(), 3u);
    kill(launcher, sig);
    waitpid(launcher, nullptr, 0);
    const json r = json::parse(std::ifstream(root_ / tag / "result.json"));
    EXPECT_EQ(r["status"], "failed");
    EXPECT_EQ(r.value("reason", ""), "launcher interrupted by signal " + std::to_string(sig))
        << r.value("reason", "");
  }
}

// --out on a 16 KiB tmpfs: the run fails with the errno, result.json says failed (not "running"),
// no .tmp is left, no worker outlives it.
TEST_F(PipelineTest, FullDiskFailsTheRunWithTheErrnoAndLeavesNothingBehind) {
  const fs::path disk = root_ / "small-disk";
  fs::create_directories(disk);
  if (mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=16k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs (not root?)";
  json spec = baseSpec(2, "gpipe");
  spec["runtime"]["timeline"] = "all";  // a result that outgrows the disk
  const RunSpec rs = runSpecFromJson(spec);
  LaunchOptions o;
  o.outDir = (disk / "run").string();
  o.exe = SLOWPIPE_BINARY;
  o.progress = false;
  o.calibrate = false;
  EXPECT_NE(launchRun(rs, o), 0);
  const json r = json::parse(std::ifstream(disk / "run" / "result.json"));
  EXPECT_EQ(r["status"], "failed");
  EXPECT_NE(r.value("reason", "").find("No space left on device"), std::string::npos)
      << r.value("reason", "");
  for (const auto& e : fs::directory_iterator(disk / "run"))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  for (const auto& w : r.value("workers", json::array()))
    EXPECT_NE(kill(w["pid"].get<int>(), 0), 0) << "worker left running";
  umount(disk.c_str());
}

// A failure before the workers start (spec.json cannot be written: a folder is in its place)
// leaves a failed result.json with the reason; it threw out of launchRun before.
TEST_F(PipelineTest, SetupFailureBeforeAnyProcessIsAFailedResult) {
  const fs::path out = root_ / "setup-fails";
  fs::create_directories(out / "spec.json" / "in-the-way");
  const RunSpec rs = runSpecFromJson(baseSpec(2, "gpipe"));
  LaunchOptions o;
  o.outDir = out.string();
  o.exe = SLOWPIPE_BINARY;
  o.progress = false;
  int rc = 0;
  EXPECT_NO_THROW(rc = launchRun(rs, o));
  EXPECT_NE(rc, 0);
  const json r = json::parse(std::ifstream(out / "result.json"));
  EXPECT_EQ(r["status"], "failed");
  EXPECT_NE(r.value("reason", "").find("spec.json"), std::string::npos) << r.value("reason", "");
}

// A result.json that is a folder: no result could be written there, so the run is refused before
// anything starts, naming it (it ended in a JSON parse error).
TEST_F(PipelineTest, AResultThatIsAFolderIsRefusedByName) {
  const fs::path out = root_ / "result-folder";
  fs::create_directories(out / "result.json");
  LaunchOptions o;
  o.outDir = out.string();
  o.exe = SLOWPIPE_BINARY;
  o.progress = false;
  try {
    launchRun(runSpecFromJson(baseSpec(2, "gpipe")), o);
    FAIL() << "a run started with a folder for its result";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("result.json' is a folder, not a file"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::is_empty(out / "result.json"));
}

// Fewer validation examples than micro_batch_size: evaluated as one partial batch (it was 0/0).
TEST_F(PipelineTest, ValidationSetSmallerThanAMicroBatchIsEvaluated) {
  json spec = baseSpec(2, "gpipe");
  spec["data"]["max_val_examples"] = 1;
  spec["training"]["eval_each_epoch"] = true;
  spec["training"]["max_steps"] = 4;
  const json r = launch(spec, "tiny-val");
  ASSERT_FALSE(r["evals"].empty());
  for (const auto& e : r["evals"]) EXPECT_TRUE(e["val_loss"].is_number()) << e.dump();
}

// A link whose calibration would take days (50 bit/s) fails at once, naming the link.
TEST_F(PipelineTest, CalibrationHasATimeLimitAndNamesTheLink) {
  json spec = baseSpec(2, "gpipe");
  spec["network"]["links"] = {{"bandwidth", "50bps"}, {"latency", "1ms"}};
  const json r = launch(spec, "slow-calibration", false, true);
  EXPECT_EQ(r["status"], "failed");
  EXPECT_NE(r.value("reason", "").find("calibrating link 0->1 (50bps, 1ms)"), std::string::npos)
      << r.value("reason", "");
  EXPECT_NE(r.value("reason", "").find("is the bandwidth's unit right?"), std::string::npos)
      << r.value("reason", "");
}

// A plug-in whose mirrored state folds in its whole context, on both pipeline directions: the
// receiver saw direction 0 and no key where the sender saw 1 and "bwd/mbN", so the digests differ.
TEST_F(PipelineTest, PluginSeesTheSameContextAtBothEnds) {
  json spec = baseSpec(3, "1f1b");
  spec["training"]["max_steps"] = 4;
  spec["compression"] = {{"forward", std::string("plugin:path=") + GOOD_PLUGIN},
                         {"backward", std::string("plugin:path=") + GOOD_PLUGIN}};
  const json r = launch(spec, "plugin-context");
  EXPECT_EQ(r["status"], "ok") << r.value("reason", "");
  EXPECT_EQ(r["codec_states_match"], true);
  EXPECT_NE(r["codec_state"]["1"]["bwd_sender_digest"], 0);
}

// A plug-in that crashes (its decode dereferences NULL) in rank 1: the reason names the signal,
// the plug-in and the entry point it crashed in (it named the signal only).
TEST_F(PipelineTest, PluginCrashIsNamedInTheReason) {
  json spec = baseSpec(2, "gpipe");
  spec["training"]["max_steps"] = 4;
  spec["compression"]["forward"] = std::string("plugin:path=") + CRASH_PLUGIN;
  const json r = launch(spec, "plugin-crash", false);
  EXPECT_EQ(r["status"], "failed");
  const std::string why = r.value("reason", "");
  EXPECT_NE(why.find("rank 1"), std::string::npos) << why;
  EXPECT_NE(why.find(std::string("inside codec plugin '") + CRASH_PLUGIN + "'"), std::string::npos)
      << why;
  EXPECT_NE(why.find("in its decode"), std::string::npos) << why;
}

// A local process that sends rank 0 a gradient for a step ahead (stashed until its turn), as
// rank 1's socket would: a genuine frame with its shape rewritten to `shape`. Returns the seconds
// from the send to the launcher's exit and rank 0's peak-memory growth (VmHWM, MiB) meanwhile.
std::pair<double, double> injectGradient(pid_t launcher, const json& partial,
                                         const compression::Shape& shape) {
  const pid_t rank0 = childWith(launcher, std::string("--rank") + '\0' + "0");
  const std::vector<int> ports = rank0 > 0 ? listeningPorts(rank0) : std::vector<int>{};
  if (ports.size() != 1) return {-1, -1};
  auto peakKiB = [rank0] {
    std::ifstream in("/proc/" + std::to_string(rank0) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    return -1L;
  };
  const long before = peakKiB();
  zmq::context_t ctx(1);
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 1000);
  push.connect("tcp://127.0.0.1:" + std::to_string(ports[0]));
  const auto codec = compression::makeCodec("none");
  compression::FrameHeader h;
  h.kind = compression::MessageKind::kGradient;
  h.step = partial["steps"].size() + 5;  // ahead of rank 0: stashed until its turn
  h.src = 1;
  h.shape = {2, 3, 5};
  const std::vector<float> x(30, 0.5f);
  const compression::Bytes f =
      withShape(compression::encodeFrame(*codec, x.data(), h, {}), shape, 0);
  const double t0 = emulator::monotonicNow();
  sendShaped(push, f.data(), f.size());
  long peak = before;
  int status = 0;
  for (int i = 0; i < 3000 && waitpid(launcher, &status, WNOHANG) == 0; ++i) {
    peak = std::max(peak, peakKiB());
    usleep(20000);
  }
  return {emulator::monotonicNow() - t0, (peak - before) / 1024.0};
}

// Runs into which a local process injects a frame for rank 0: a 2-stage run (20 Mbps), after 3
// steps a gradient of `shape` (injectGradient); the result once the launcher has exited.
// *seconds: from the frame to then, *grewMiB: rank 0's peak memory growth (-1: no data socket).
class ImpostorRunTest : public PipelineTest {
 protected:
  json runWithInjectedGradient(const std::string& tag, const compression::Shape& shape,
                               double* seconds, double* grewMiB) const {
    json spec = baseSpec(2, "gpipe");
    spec["training"]["max_steps"] = 0;
    spec["network"]["links"] = {{"bandwidth", "20Mbps"}, {"latency", "1ms"}};
    json partial;
    const pid_t launcher = startRun(spec, tag, &partial);
    EXPECT_GE(partial["steps"].size(), 3u);
    std::tie(*seconds, *grewMiB) = injectGradient(launcher, partial, shape);
    EXPECT_GE(*seconds, 0) << "rank 0's data socket not found";
    if (*seconds < 0) {
      kill(launcher, SIGKILL);
      waitpid(launcher, nullptr, 0);
    }
    return json::parse(std::ifstream(root_ / tag / "result.json"));
  }
};

// A frame that passes every check of its own but does not fit the stage (a gradient of another
// shape, sent to rank 0's data socket by a local process): the run fails naming the message, the
// sender's rank and the shape, and no libtorch backtrace (25 frames of it were the reason).
TEST_F(ImpostorRunTest, AFrameOfAnotherShapeFailsTheRunWithoutABacktrace) {
  double seconds = 0, grewMiB = 0;
  const json r = runWithInjectedGradient("wrong-shape", {2, 3, 5}, &seconds, &grewMiB);
  EXPECT_EQ(r["status"], "failed");
  const std::string why = r.value("reason", "");
  EXPECT_NE(
      why.find(
          "the gradient of micro-batch 0 from rank 1 (shape [2, 3, 5]) does not fit this stage"),
      std::string::npos)
      << why;
  EXPECT_EQ(why.find("frame #"), std::string::npos) << why;
  EXPECT_LT(why.size(), 1200u) << why;
}

// The impostor's frame of issue 43: a header announcing 1 G elements over a 120-byte payload
// (rank 0 allocated 4.33 GB before it checked the payload's length). The run fails within 5 s,
// naming the sender and the shape; rank 0's peak memory grows by less than 64 MiB.
TEST_F(ImpostorRunTest, AHeaderAnnouncingMoreThanAnyFrameFailsTheRunWithoutTheMemory) {
  double seconds = 0, grewMiB = 0;
  const json r = runWithInjectedGradient("huge-shape", {2, 128, 4194304}, &seconds, &grewMiB);
  std::printf("failed %.2f s after the frame, rank 0's peak memory +%.1f MiB: %s\n", seconds,
              grewMiB, r.value("reason", "").c_str());
  EXPECT_EQ(r["status"], "failed");
  const std::string why = r.value("reason", "");
  EXPECT_NE(why.find("from rank 1 was refused: frame: shape [2, 128, 4194304]"), std::string::npos)
      << why;
  EXPECT_LT(seconds, 5.0);
  EXPECT_LT(grewMiB, 64.0);
}

// When stderr is a log, progress comes as whole lines (it was one '\r'-separated giant line).
TEST_F(PipelineTest, ProgressInALogIsWholeLines) {
  const fs::path specFile = root_ / "progress.json", log = root_ / "progress.log";
  std::ofstream(specFile) << baseSpec(2, "gpipe").dump();
  const std::string cmd = std::string(SLOWPIPE_BINARY) + " run " + specFile.string() + " --out " +
                          (root_ / "progress").string() + " > " + log.string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_NE(text.find("[t] step 20/20"), std::string::npos) << text;
}

// System calls whose failures went unchecked: made to fail (LD_PRELOAD), each ends the run with
// a reason that names it. sched_setaffinity in the launcher's child before exec (pin_cores),
// prctl(PR_SET_PDEATHSIG) in the worker.
TEST_F(PipelineTest, FailedSystemCallsAreNamedInTheReason) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < 2)
    GTEST_SKIP() << "pin_cores needs 2 CPUs";
  for (const auto& [var, expect] :
       {std::pair{"SLOWPIPE_FAIL_SETAFFINITY", "could not be pinned to its CPU"},
        std::pair{"SLOWPIPE_FAIL_PRCTL", "prctl(PR_SET_PDEATHSIG) failed: Invalid argument"}}) {
    json spec = baseSpec(2, "gpipe");
    spec["runtime"]["pin_cores"] = true;
    const std::string tag = std::string("syscall-") + var;
    const fs::path specFile = root_ / (tag + ".json");
    std::ofstream(specFile) << spec.dump();
    const std::string cmd = std::string("LD_PRELOAD=") + FAIL_SYSCALLS + " " + var + "=1 " +
                            SLOWPIPE_BINARY + " run " + specFile.string() + " --out " +
                            (root_ / tag).string() + " > /dev/null 2>&1";
    EXPECT_NE(std::system(cmd.c_str()), 0);
    const json r = json::parse(std::ifstream(root_ / tag / "result.json"));
    EXPECT_EQ(r["status"], "failed");
    EXPECT_NE(r.value("reason", "").find(expect), std::string::npos)
        << var << ": " << r.value("reason", "");
  }
}

}  // namespace
}  // namespace slowpipe::runtime
