// `slowpipe profile SPEC --out P.json` (measured here with the worker's own code, or analytic for a
// named GPU) and `slowpipe simulate SPEC --profile P --out DIR`.
#include <torch/torch.h>

#include <sched.h>

#include <filesystem>
#include <fstream>

#include "compression/codec.h"
#include "compression/frame.h"
#include "experiments/sweep.h"
#include "runtime/result.h"
#include "runtime/stage_runner.h"
#include "simulator/simulate.h"
#include "tools/bench_util.h"
#include "tools/commands.h"

namespace slowpipe::tools {
namespace {

using nlohmann::json;

// Forward/backward of one micro-batch and the optimizer step of every stage, timed with the code a
// worker runs (StageRunner), one stage at a time with the worker's thread count. Median of `reps`.
std::vector<simulator::StageCost> measureStages(const runtime::RunSpec& spec, int reps) {
  torch::set_num_threads(spec.runtime.threadsPerWorker);
  torch::manual_seed(0);
  const int M = spec.pipeline.microBatches, b = spec.pipeline.microBatchSize, T = spec.model.seqLen, C = spec.model.width;
  std::vector<simulator::StageCost> out;
  for (int s = 0; s < spec.pipeline.stages; ++s) {
    runtime::StageRunner runner(spec, s, 1000);
    std::vector<double> fwd, bwd, step;
    for (int rep = 0; rep < reps + 1; ++rep) {  // rep 0 warms up
      for (int m = 0; m < M; ++m) {
        const torch::Tensor in = runner.first() ? torch::randint(0, 256, {b, T}, torch::kLong) : torch::randn({b, T, C});
        const torch::Tensor tgt = torch::randint(0, 256, {b, T}, torch::kLong);
        const double t0 = nowSeconds();
        runner.forward(m, in, tgt);
        if (rep) fwd.push_back(nowSeconds() - t0);
      }
      for (int m = M - 1; m >= 0; --m) {
        const torch::Tensor g = runner.last() ? torch::Tensor() : torch::randn({b, T, C});
        const double t0 = nowSeconds();
        runner.backward(m, g);
        if (rep) bwd.push_back(nowSeconds() - t0);
      }
      const double t0 = nowSeconds();
      runner.step(rep, std::sqrt(runner.localGradSquaredNorm()));
      if (rep) step.push_back(nowSeconds() - t0);
    }
    auto med = [](std::vector<double> v) {
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      return v[v.size() / 2];
    };
    out.push_back({med(fwd), med(bwd), med(step)});
  }
  return out;
}

// Encode/decode seconds per raw byte of a codec at the run's message shape, in steady state
// (acsgd: deltas of examples seen before), as the transport calls it (frames included).
simulator::CodecCost measureCodec(const std::string& spec, const std::vector<int64_t>& shape) {
  auto tx = compression::makeCodec(spec), rx = compression::makeCodec(spec);
  const int64_t n = compression::numelOf(shape);
  std::vector<float> x(n), y;
  const torch::Tensor r = torch::randn({n});
  std::memcpy(x.data(), r.data_ptr<float>(), 4 * n);
  compression::FrameHeader h;
  h.shape = shape;
  for (int64_t i = 0; i < shape[0]; ++i) h.exampleIds.push_back(i);
  compression::CodecContext ctx;
  ctx.exampleIds = h.exampleIds;
  // Both ends see the same history: the first sighting (acsgd: full precision), then a delta.
  compression::Bytes frame = compression::encodeFrame(*tx, x.data(), h, ctx);
  compression::decodeFrame(*rx, frame.data(), frame.size(), ctx, y);
  frame = compression::encodeFrame(*tx, x.data(), h, ctx);
  compression::decodeFrame(*rx, frame.data(), frame.size(), ctx, y);
  // Steady state from here: every encode is a delta, and decoding a delta again is as costly.
  const double enc = medianSeconds([&] { compression::encodeFrame(*tx, x.data(), h, ctx); });
  const double dec = medianSeconds([&] { compression::decodeFrame(*rx, frame.data(), frame.size(), ctx, y); });
  const double bytes = 4.0 * static_cast<double>(n);
  return {{0.0, enc / bytes}, {0.0, dec / bytes}};
}

simulator::Profile measuredProfile(const runtime::RunSpec& spec, int reps, const std::vector<std::string>& extraCodecs) {
  simulator::Profile p;
  p.source = "measured";
  p.device = {{"host", "this machine"}, {"threads_per_stage", spec.runtime.threadsPerWorker},
              {"method", "StageRunner forward/backward/step per stage, one stage at a time, median of " +
                             std::to_string(reps) + " steps after one warm-up; codecs: median encode/decode "
                             "of one message at the run's shape (steady state), cost proportional to its bytes"}};
  p.stages = measureStages(spec, reps);
  // The emulated workers are processes on this host: they share its cores (in units of one
  // worker's threads).
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  p.hostCores = std::max(1, cpus / std::max(1, spec.runtime.threadsPerWorker));
  p.device["cpus"] = cpus;
  const std::vector<int64_t> shape = {spec.pipeline.microBatchSize, spec.model.seqLen, spec.model.width};
  std::vector<std::string> codecs = {spec.compression.forward, spec.compression.backward, "none"};
  codecs.insert(codecs.end(), extraCodecs.begin(), extraCodecs.end());
  for (const auto& c : codecs) p.codecs[compression::makeCodec(c)->spec()] = measureCodec(c, shape);
  return p;
}

}  // namespace

void addSimCommands(CLI::App& app) {
  {
    auto spec = std::make_shared<std::string>(), out = std::make_shared<std::string>();
    auto device = std::make_shared<std::string>(), dtype = std::make_shared<std::string>("bf16");
    auto mfu = std::make_shared<double>(0.4);
    auto reps = std::make_shared<int>(5);
    auto codecs = std::make_shared<std::vector<std::string>>();
    auto* cmd = app.add_subcommand("profile", "cost profile for the simulator: measured here, or analytic for a GPU");
    cmd->add_option("spec", *spec, "experiment spec, or a sweep (its base, with every codec of its compression axis)")->required();
    cmd->add_option("--out", *out, "profile JSON")->required();
    cmd->add_option("--analytic", *device, "analytic profile of a GPU: V100, A100, H100, H200");
    cmd->add_option("--dtype", *dtype, "analytic: fp32, fp16 or bf16")->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
    cmd->add_option("--mfu", *mfu, "analytic: model-FLOPs utilisation in (0, 1]");
    cmd->add_option("--reps", *reps, "measured: steps timed per stage")->check(CLI::Range(1, 1000));
    cmd->add_option("--codec", *codecs, "measured: also time this codec (repeatable; e.g. every codec of a sweep)");
    cmd->callback([=] {
      const json j = runtime::readJsonFile(*spec, "spec file");
      // A sweep profiles its base run with every codec its compression axis names.
      std::vector<std::string> all = *codecs;
      json runJson = j;
      if (j.contains("axes")) {
        const auto sweep = experiments::sweepSpecFromJson(j, "sweep", !device->empty());
        runJson = sweep.base;
        for (const auto& [path, values] : sweep.axes)
          if (path == "compression")
            for (const auto& v : values)
              for (const char* k : {"forward", "backward"})
                if (v.contains(k)) all.push_back(v[k]);
      }
      const runtime::RunSpec s = runtime::runSpecFromJson(runJson, "spec", /*simulation=*/!device->empty());
      const simulator::Profile p = device->empty() ? measuredProfile(s, *reps, all) : simulator::analyticProfile(s, *device, *dtype, *mfu);
      runtime::writeJsonAtomically(*out, simulator::toJson(p));
      for (size_t i = 0; i < p.stages.size(); ++i)
        std::printf("stage %zu: forward %.6f s, backward %.6f s per micro-batch, step %.6f s\n", i, p.stages[i].forwardS,
                    p.stages[i].backwardS, p.stages[i].stepS);
      std::printf("profile -> %s\n", out->c_str());
    });
  }
  {
    auto spec = std::make_shared<std::string>(), out = std::make_shared<std::string>(), profile = std::make_shared<std::string>();
    auto steps = std::make_shared<int>(4);
    auto* cmd = app.add_subcommand("simulate", "replay a run's schedules over its link model in virtual time");
    cmd->add_option("spec", *spec, "experiment spec (JSON)")->required();
    cmd->add_option("--profile", *profile, "profile JSON (slowpipe profile), or analytic:DEVICE[,dtype=bf16,mfu=0.4]")->required();
    cmd->add_option("--out", *out, "output folder (result.json)")->required();
    cmd->add_option("--steps", *steps, "steps replayed back to back")->check(CLI::Range(2, 10000));
    cmd->callback([=] {
      const runtime::RunSpec s = runtime::runSpecFromJson(runtime::readJsonFile(*spec, "spec file"), "spec", /*simulation=*/true);
      const simulator::Profile p = simulator::profileFor(*profile, s);
      const json doc = simulator::simulateRun(s, p, {*steps});
      std::filesystem::create_directories(*out);
      runtime::writeJsonAtomically(*out + "/result.json", doc);
      const auto& sum = doc["summary"];
      std::printf("%s (simulated, %s): step %.6f s, %.0f tokens/s, wait share %.3f -> %s/result.json\n", s.name.c_str(),
                  s.network.model.c_str(), sum["mean_step_time_s"].get<double>(), sum["throughput_tokens_per_s"].get<double>(),
                  sum["wait_share"].get<double>(), out->c_str());
    });
  }
}

}  // namespace slowpipe::tools
