// Device codec benchmark (see device_bench.h).
#include "compression/cuda/device_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <stdexcept>

#include "compression/cuda/device_codec.h"

namespace slowpipe::compression::cuda {
namespace {

using nlohmann::json;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("bench_device_codecs: ") + what + ": " +
                             cudaGetErrorString(e));
}

template <typename Fn>
double median(int rounds, Fn&& fn) {
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    ok(cudaDeviceSynchronize(), "synchronize");
    const double t0 = now();
    fn(r);
    ok(cudaDeviceSynchronize(), "synchronize");
    t.push_back(now() - t0);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

// A device buffer freed on every way out.
struct DeviceFloats {
  explicit DeviceFloats(size_t bytes) { ok(cudaMalloc(&p, bytes), "malloc"); }
  ~DeviceFloats() { cudaFree(p); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* p = nullptr;
};

// One codec on the tensor: x0 primes both ends (acsgd's full rows), x1 is the timed message.
json measureCodec(const std::string& spec, const Shape& shape, const float* dx0, const float* dx1,
                  float* dy, const std::vector<float>& x0, const std::vector<float>& x1, int rounds,
                  double copyS) {
  CodecContext c0, c1;
  for (int64_t r = 0; r < shape[0]; ++r) {
    c0.exampleIds.push_back(r);
    c1.exampleIds.push_back(r);
  }
  c1.epoch = 1;
  auto enc = DeviceCodec::make(spec), dec = DeviceCodec::make(spec);
  auto host = makeCodec(spec);
  Bytes first, payload, want;
  enc->encode(dx0, shape, c0, first);
  dec->decode(first.data(), first.size(), shape, c0, dy);
  host->encode(x0.data(), shape, c0, want);
  want.clear();
  host->encode(x1.data(), shape, c1, want);
  enc->encode(dx1, shape, c1, payload);
  // Stateful codecs advance with every call; the timed calls repeat epoch 1's message.
  const double encDevS = median(rounds, [&](int) { enc->encodeToDevice(dx1, shape, c1, nullptr); });
  const double encS = median(rounds, [&](int) {
    Bytes out;
    enc->encode(dx1, shape, c1, out);
  });
  const double decS =
      median(rounds, [&](int) { dec->decode(payload.data(), payload.size(), shape, c1, dy); });
  const double raw = 4.0 * static_cast<double>(numelOf(shape));
  return {{"codec", enc->spec()},
          {"raw_bytes", static_cast<int64_t>(raw)},
          {"wire_bytes", payload.size()},
          {"matches_host", payload == want},
          {"encode_device_GBps", raw / encDevS / 1e9},
          {"encode_device_vs_copy", copyS / encDevS},
          {"encode_to_host_GBps", raw / encS / 1e9},
          {"decode_from_host_GBps", raw / decS / 1e9},
          {"decode_from_host_vs_copy", copyS / decS}};
}

}  // namespace

std::vector<std::string> defaultDeviceBenchCodecs() {
  return {"none",
          "fp16",
          "bf16",
          "quant:bits=2",
          "quant:bits=4",
          "quant:bits=8",
          "quant:bits=4,scale=group,group=128",
          "quant:bits=2,round=stochastic",
          "quant:bits=2,levels=fixpoint",
          "acsgd:bits=2",
          "acsgd:bits=4",
          "acsgd:bits=2,levels=fixpoint",
          "acsgd:bits=2,levels=fixpoint,store=fp32",
          "topk:ratio=0.01",
          "randk:ratio=0.1,seed=1"};
}

json benchDeviceCodecs(const DeviceBenchOptions& opt) {
  if (opt.sizeMib < 1 || opt.rounds < 1)
    throw std::invalid_argument("bench_device_codecs: --size-mib and --rounds must be positive");
  std::string why;
  if (!deviceAvailable(&why)) throw std::runtime_error("bench_device_codecs: " + why);
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, 0), "device properties");
  const int64_t rows = 16, channels = 1024, n = opt.sizeMib * (int64_t{1} << 20) / 4;
  const Shape shape{rows, n / rows / channels, channels};
  const int64_t numel = numelOf(shape);
  const size_t bytes = 4 * static_cast<size_t>(numel);
  std::vector<float> x0(numel), x1(numel);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto& v : x0) v = d(rng);
  for (int64_t i = 0; i < numel; ++i)
    x1[i] = x0[i] + 0.05f * d(rng);  // the next epoch's activation
  DeviceFloats dx0(bytes), dx1(bytes), dy(bytes);
  ok(cudaMemcpy(dx0.p, x0.data(), bytes, cudaMemcpyHostToDevice), "upload");
  ok(cudaMemcpy(dx1.p, x1.data(), bytes, cudaMemcpyHostToDevice), "upload");
  const double copyS = median(std::max(opt.rounds, 10), [&](int) {
    ok(cudaMemcpy(dy.p, dx0.p, bytes, cudaMemcpyDeviceToDevice), "copy");
  });
  json results = json::array();
  for (const std::string& spec : opt.specs.empty() ? defaultDeviceBenchCodecs() : opt.specs) {
    if (opt.onCodec) opt.onCodec(spec);
    results.push_back(measureCodec(spec, shape, dx0.p, dx1.p, dy.p, x0, x1, opt.rounds, copyS));
  }
  return {
      {"benchmark", "device_codecs"},
      {"device", prop.name},
      {"shape", shape},
      {"rounds", opt.rounds},
      {"copy_GBps", static_cast<double>(bytes) / copyS / 1e9},
      {"unit",
       "GB/s of raw fp32 bytes; copy = device-to-device cudaMemcpy of the same tensor, same run"},
      {"results", results}};
}

}  // namespace slowpipe::compression::cuda
