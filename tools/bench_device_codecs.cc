// bench_device_codecs: the device codecs against the device's copy bandwidth, same run
// (compression/cuda/device_bench.h says what is measured). Built with -DSLOWPIPE_CUDA=ON; needs a
// CUDA device. Exit 1 when a codec's payload differs from the host codec's.
//
//   bench_device_codecs [--size-mib N] [--rounds R] [--codec SPEC]... [--json]
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "compression/cuda/device_bench.h"

namespace cu = slowpipe::compression::cuda;

int main(int argc, char** argv) {
  CLI::App app{"device codecs against the device's copy bandwidth (same run)"};
  cu::DeviceBenchOptions opt;
  bool asJson = false;
  app.add_option("--size-mib", opt.sizeMib, "tensor size in MiB of fp32")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--rounds", opt.rounds, "timed repetitions per measurement (median)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--codec", opt.specs, "codec spec (repeatable; default: the built-in list)");
  app.add_flag("--json", asJson, "print the JSON document");
  CLI11_PARSE(app, argc, argv);
  if (!asJson)
    opt.onCodec = [](const std::string& spec) {
      std::fprintf(stderr, "bench %s ...\n", spec.c_str());
    };
  nlohmann::json doc;
  try {
    doc = cu::benchDeviceCodecs(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  if (asJson) {
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("%s, copy %.1f GB/s\n%-45s %10s %8s %8s %8s %8s %s\n",
                doc["device"].get<std::string>().c_str(), doc["copy_GBps"].get<double>(), "codec",
                "wire", "enc dev", "/copy", "enc+D2H", "H2D+dec", "host bytes");
    for (const auto& r : doc["results"])
      std::printf("%-45.45s %10zu %8.1f %8.2f %8.1f %8.1f %s\n",
                  r["codec"].get<std::string>().c_str(), r["wire_bytes"].get<size_t>(),
                  r["encode_device_GBps"].get<double>(), r["encode_device_vs_copy"].get<double>(),
                  r["encode_to_host_GBps"].get<double>(), r["decode_from_host_GBps"].get<double>(),
                  r["matches_host"].get<bool>() ? "equal" : "DIFFER");
  }
  for (const auto& r : doc["results"])
    if (!r["matches_host"].get<bool>()) return 1;
  return 0;
}
