// `slowpipe profile SPEC --out P.json` (measured here with the worker's own code, or analytic for a
// named GPU) and `slowpipe simulate SPEC --profile P --out DIR`.
#include <torch/torch.h>

#include <sched.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <fstream>

#include "compression/codec.h"
#include "compression/frame.h"
#include "experiments/sweep.h"
#include "runtime/result.h"
#include "runtime/stage_runner.h"
#include "emulator/shaped_socket.h"
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
// Speed of a stage while n stages compute at once on this host (n = 1..stages), relative to
// computing alone: threads started together, thread i repeating stage (first + i) mod S's forward and
// backward of one micro-batch on a runner of its own, with the worker's thread count, counted over
// the same window. Captures what processor sharing alone does not: SMT siblings, shared caches and
// memory bandwidth, scheduler overhead. Each stage's rate alone is measured the same way;
// speed(n) = mean over the n threads of rate / rate alone.
std::vector<double> measureHostSpeed(const runtime::RunSpec& spec, double windowS) {
  const int S = spec.pipeline.stages, b = spec.pipeline.microBatchSize, T = spec.model.seqLen, C = spec.model.width;
  struct Unit {
    std::unique_ptr<runtime::StageRunner> runner;
    torch::Tensor in, tgt, grad;
    void run() {
      runner->forward(0, in, tgt);
      runner->backward(0, grad);
    }
  };
  auto makeUnit = [&](int s) {
    torch::manual_seed(s);
    auto u = std::make_unique<Unit>();
    u->runner = std::make_unique<runtime::StageRunner>(spec, s, 1000);
    u->in = u->runner->first() ? torch::randint(0, 256, {b, T}, torch::kLong) : torch::randn({b, T, C});
    u->tgt = torch::randint(0, 256, {b, T}, torch::kLong);
    if (!u->runner->last()) u->grad = torch::randn({b, T, C});
    u->run();  // warm-up
    return u;
  };
  // Units per second of each of n threads started together on stages first, first + 1, ...
  auto rates = [&](int n, int first) {
    std::vector<std::unique_ptr<Unit>> mine;
    for (int i = 0; i < n; ++i) mine.push_back(makeUnit((first + i) % S));
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<double> rate(n, 0.0);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        torch::set_num_threads(spec.runtime.threadsPerWorker);
        ++ready;
        while (!go) std::this_thread::yield();
        const double t0 = nowSeconds();
        int done = 0;
        while (nowSeconds() - t0 < windowS) {
          mine[i]->run();
          ++done;
        }
        rate[i] = done / (nowSeconds() - t0);
      });
    while (ready < n) std::this_thread::yield();
    go = true;
    for (auto& t : threads) t.join();
    return rate;
  };
  std::vector<double> alone(S);
  for (int s = 0; s < S; ++s) alone[s] = rates(1, s)[0];
  std::vector<double> speed = {1.0};
  for (int n = 2; n <= S; ++n) {
    const std::vector<double> r = rates(n, 0);
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += r[i] / alone[i % S];
    speed.push_back(sum / n);
  }
  return speed;
}

// Host CPU time of moving one message of `bytes` over the workers' transport (a ZeroMQ PUSH/PULL
// pair over TCP loopback through ShapedSender/ShapedReceiver, unpaced), all threads of this process
// included (the sender, the receiver and ZeroMQ's I/O threads): median over batches of 64 messages.
double transportCpuSeconds(size_t bytes) {
  zmq::context_t ctx(1);
  zmq::socket_t pull(ctx, zmq::socket_type::pull), push(ctx, zmq::socket_type::push);
  for (auto* s : {&pull, &push}) {
    s->set(zmq::sockopt::sndhwm, 0);
    s->set(zmq::sockopt::rcvhwm, 0);
  }
  pull.bind("tcp://127.0.0.1:*");
  push.connect(pull.get(zmq::sockopt::last_endpoint));
  emulator::ShapedSender tx(push, emulator::LinkSpec{}, false);
  emulator::ShapedReceiver rx(pull);
  const std::vector<uint8_t> buf(bytes, 1);
  auto cpuNow = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  constexpr int kBatch = 64;
  std::vector<double> perMessage;
  for (int rep = 0; rep < 8; ++rep) {
    const double c0 = cpuNow();
    std::thread sender([&] {
      for (int i = 0; i < kBatch; ++i) tx.send(buf.data(), bytes);
    });
    for (int i = 0; i < kBatch; ++i)
      if (!rx.recv(10000)) throw std::runtime_error("profile: the loopback transport lost a message");
    sender.join();
    if (rep) perMessage.push_back((cpuNow() - c0) / kBatch);  // rep 0 warms up
  }
  std::nth_element(perMessage.begin(), perMessage.begin() + perMessage.size() / 2, perMessage.end());
  return perMessage[perMessage.size() / 2];
}

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
                             "of one message at the run's shape (steady state), cost proportional to its bytes; host_speed: n "
                             "threads computing stages at once; transport: process CPU time per message over "
                             "ZeroMQ TCP loopback"}};
  p.stages = measureStages(spec, reps);
  const std::vector<int64_t> shape = {spec.pipeline.microBatchSize, spec.model.seqLen, spec.model.width};
  // The emulated workers are processes on this host: they share its cores (in units of one
  // worker's threads), at the speeds measured with n stages busy at once.
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  p.hostCores = std::max(1, cpus / std::max(1, spec.runtime.threadsPerWorker));
  p.hostSpeed = measureHostSpeed(spec, 0.6);
  // Transport CPU cost, fitted through a small and an activation-sized message.
  const size_t small = 64, large = static_cast<size_t>(4 * compression::numelOf(shape));
  const double cSmall = transportCpuSeconds(small), cLarge = transportCpuSeconds(large);
  const double slope = std::max(0.0, (cLarge - cSmall) / static_cast<double>(large - small));
  p.transport = {std::max(0.0, cSmall - slope * small), slope};
  p.device["cpus"] = cpus;
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
