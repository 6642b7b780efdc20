// bench_device_codecs: the device codecs (compression/cuda/device_codec.h) on a large activation
// tensor (default 256 MiB of fp32, shape [16, S, 1024]) against the device's own copy bandwidth,
// measured in the same run: a device-to-device cudaMemcpy of the tensor. Per codec: encode into
// device memory (what the kernels cost), encode with the payload copied to the host, decode from a
// host payload; medians of --rounds, GB/s counted in raw fp32 bytes, as bench codecs does on the
// CPU. Each codec's payload is compared byte for byte with the host codec's for the same message
// (matches_host). acsgd is timed on its delta messages (the first message of each example goes in
// full precision, untimed). Built with -DSLOWPIPE_CUDA=ON; needs a CUDA device.
//
//   bench_device_codecs [--size-mib N] [--rounds R] [--codec SPEC]... [--json]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compression/cuda/device_codec.h"

using json = nlohmann::json;
namespace cmp = slowpipe::compression;
namespace cu = slowpipe::compression::cuda;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "bench_device_codecs: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
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

}  // namespace

int main(int argc, char** argv) {
  int64_t sizeMib = 256;
  int rounds = 5;
  bool asJson = false;
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_device_codecs: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--size-mib") sizeMib = std::stoll(next());
    else if (a == "--rounds") rounds = std::stoi(next());
    else if (a == "--codec") specs.push_back(next());
    else if (a == "--json") asJson = true;
    else {
      std::fprintf(stderr, "bench_device_codecs: unknown argument '%s' (--size-mib N, --rounds R, --codec SPEC, --json)\n", a.c_str());
      return 2;
    }
  }
  if (sizeMib < 1 || rounds < 1) {
    std::fprintf(stderr, "bench_device_codecs: --size-mib and --rounds must be positive\n");
    return 2;
  }
  if (specs.empty())
    specs = {"none", "fp16", "bf16", "quant:bits=2", "quant:bits=4", "quant:bits=8", "quant:bits=4,scale=group,group=128",
             "quant:bits=2,round=stochastic", "quant:bits=2,levels=fixpoint", "acsgd:bits=2", "acsgd:bits=4",
             "acsgd:bits=2,levels=fixpoint", "acsgd:bits=2,levels=fixpoint,store=fp32", "topk:ratio=0.01",
             "randk:ratio=0.1,seed=1"};
  std::string why;
  if (!cu::deviceAvailable(&why)) {
    std::fprintf(stderr, "bench_device_codecs: %s\n", why.c_str());
    return 1;
  }
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, 0), "device properties");

  const int64_t rows = 16, channels = 1024, n = sizeMib * (int64_t{1} << 20) / 4;
  const cmp::Shape shape{rows, n / rows / channels, channels};
  const int64_t numel = cmp::numelOf(shape);
  const size_t bytes = 4 * static_cast<size_t>(numel);
  std::vector<float> x0(numel), x1(numel);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto& v : x0) v = d(rng);
  for (int64_t i = 0; i < numel; ++i) x1[i] = x0[i] + 0.05f * d(rng);  // the next epoch's activation
  float *dx0 = nullptr, *dx1 = nullptr, *dy = nullptr;
  ok(cudaMalloc(&dx0, bytes), "malloc");
  ok(cudaMalloc(&dx1, bytes), "malloc");
  ok(cudaMalloc(&dy, bytes), "malloc");
  ok(cudaMemcpy(dx0, x0.data(), bytes, cudaMemcpyHostToDevice), "upload");
  ok(cudaMemcpy(dx1, x1.data(), bytes, cudaMemcpyHostToDevice), "upload");
  const double copyS = median(std::max(rounds, 10), [&](int) { ok(cudaMemcpy(dy, dx0, bytes, cudaMemcpyDeviceToDevice), "copy"); });
  const double copyGBps = static_cast<double>(bytes) / copyS / 1e9;

  json results = json::array();
  cmp::CodecContext c0, c1;
  for (int64_t r = 0; r < rows; ++r) {
    c0.exampleIds.push_back(r);
    c1.exampleIds.push_back(r);
  }
  c1.epoch = 1;
  for (const std::string& spec : specs) {
    if (!asJson) std::fprintf(stderr, "bench %s ...\n", spec.c_str());
    auto enc = cu::DeviceCodec::make(spec), dec = cu::DeviceCodec::make(spec);
    auto host = cmp::makeCodec(spec);
    cmp::Bytes first, payload, want;
    // Message 0 (acsgd: full rows, primes both ends), then the timed message of epoch 1.
    enc->encode(dx0, shape, c0, first);
    dec->decode(first.data(), first.size(), shape, c0, dy);
    host->encode(x0.data(), shape, c0, want);
    want.clear();
    host->encode(x1.data(), shape, c1, want);
    enc->encode(dx1, shape, c1, payload);
    const bool matches = payload == want;
    // Stateful codecs advance with every call; the timed calls repeat epoch 1's message.
    const double encDevS = median(rounds, [&](int) { enc->encodeToDevice(dx1, shape, c1, nullptr); });
    const double encS = median(rounds, [&](int) {
      cmp::Bytes out;
      enc->encode(dx1, shape, c1, out);
    });
    const double decS = median(rounds, [&](int) { dec->decode(payload.data(), payload.size(), shape, c1, dy); });
    const double raw = static_cast<double>(bytes);
    results.push_back({{"codec", enc->spec()},
                       {"raw_bytes", bytes},
                       {"wire_bytes", payload.size()},
                       {"matches_host", matches},
                       {"encode_device_GBps", raw / encDevS / 1e9},
                       {"encode_device_vs_copy", copyS / encDevS},
                       {"encode_to_host_GBps", raw / encS / 1e9},
                       {"decode_from_host_GBps", raw / decS / 1e9},
                       {"decode_from_host_vs_copy", copyS / decS}});
  }
  const json doc = {{"benchmark", "device_codecs"},
                    {"device", prop.name},
                    {"shape", shape},
                    {"rounds", rounds},
                    {"copy_GBps", copyGBps},
                    {"unit", "GB/s of raw fp32 bytes; copy = device-to-device cudaMemcpy of the same tensor, same run"},
                    {"results", results}};
  if (asJson) {
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("%s, copy %.1f GB/s\n%-45s %10s %8s %8s %8s %8s %s\n", prop.name, copyGBps, "codec", "wire", "enc dev", "/copy",
                "enc+D2H", "H2D+dec", "host bytes");
    for (const auto& r : results)
      std::printf("%-45.45s %10zu %8.1f %8.2f %8.1f %8.1f %s\n", r["codec"].get<std::string>().c_str(),
                  r["wire_bytes"].get<size_t>(), r["encode_device_GBps"].get<double>(), r["encode_device_vs_copy"].get<double>(),
                  r["encode_to_host_GBps"].get<double>(), r["decode_from_host_GBps"].get<double>(),
                  r["matches_host"].get<bool>() ? "equal" : "DIFFER");
  }
  cudaFree(dx0);
  cudaFree(dx1);
  cudaFree(dy);
  for (const auto& r : results)
    if (!r["matches_host"].get<bool>()) return 1;
  return 0;
}
