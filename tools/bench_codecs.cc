// `slowpipe bench codecs`: parses flags, runs compression::benchCodecs (compression/bench.h says
// what is measured) and prints its table or JSON document.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "compression/bench.h"
#include "tools/commands.h"

namespace slowpipe::tools {
namespace {

using nlohmann::json;

void printTable(const json& doc) {
  const int threads = doc["threads"].get<int>();
  std::printf(
      "memcpy: %s GB/s; codecs marked * encode or decode below twice the byte rate of a %g Gbps "
      "link\n",
      doc["memcpy_GBps"].dump().c_str(), doc["link_bps"].get<double>() / 1e9);
  // The frame checksum, per message size: framing's cost on each side, per wire byte.
  for (const auto& [bytes, gbps] : doc["checksum_GBps_by_bytes"].items()) {
    std::printf("frame checksum (CRC-32C, sender and receiver each) over %s bytes: %.2f GB/s",
                bytes.c_str(), gbps.get<double>());
    if (doc.contains("checksum_GBps_threads_by_bytes"))
      std::printf(", %.2f on %d threads",
                  doc["checksum_GBps_threads_by_bytes"][bytes].get<double>(), threads);
    std::printf("\n");
  }
  std::printf("%-44s %10s %11s %7s %8s %8s %6s %6s %8s %8s", "codec", "raw", "wire", "ratio",
              "enc GB/s", "dec GB/s", "enc/mc", "dec/mc", "enc/torch", "dec/torch");
  std::printf(" %6s %6s %6s", "read", "fl/mc", "enc/fl");
  if (threads > 1)
    std::printf(" %7s %7s %7s %7s", ("enc x" + std::to_string(threads)).c_str(),
                ("dec x" + std::to_string(threads)).c_str(),
                ("read x" + std::to_string(threads)).c_str(),
                ("mc x" + std::to_string(threads)).c_str());
  std::printf("\n");
  for (const auto& r : doc["results"]) {
    auto opt = [&](const char* k) {
      return r.contains(k) && !r[k].is_null() ? std::to_string(r[k].get<double>()).substr(0, 6)
                                              : "-";
    };
    const std::string name =
        (r["codec_bound"].get<bool>() ? "*" : "") + r["codec"].get<std::string>();
    std::printf("%-44s %10lld %11lld %7.2f %8.2f %8.2f %6.2f %6.2f %8s %8s",
                name.substr(0, 44).c_str(), static_cast<long long>(r["raw_bytes"].get<int64_t>()),
                static_cast<long long>(r["wire_bytes"].get<int64_t>()),
                r["compression_ratio"].get<double>(), r["encode_GBps"].get<double>(),
                r["decode_GBps"].get<double>(), r["encode_vs_memcpy"].get<double>(),
                r["decode_vs_memcpy"].get<double>(), opt("encode_vs_torch_ops").c_str(),
                opt("decode_vs_torch_ops").c_str());
    std::printf(" %6.2f %6s %6s", r["read_GBps"].get<double>(),
                opt("floor_vs_memcpy").substr(0, 4).c_str(),
                opt("encode_vs_floor").substr(0, 4).c_str());
    if (threads > 1)
      std::printf(" %7.2f %7.2f %7.2f %7.2f", r["encode_thread_speedup"].get<double>(),
                  r["decode_thread_speedup"].get<double>(), r["read_thread_speedup"].get<double>(),
                  r["memcpy_thread_speedup"].get<double>());
    std::printf("\n");
  }
}

}  // namespace

void addBenchCodecs(CLI::App& bench) {
  auto opts = std::make_shared<compression::CodecBenchOptions>();
  auto asJson = std::make_shared<bool>(false);
  auto* cmd = bench.add_subcommand(
      "codecs", "codec throughput vs memcpy and libtorch ops (one thread; --threads N adds N)");
  cmd->add_flag("--json", *asJson, "print one JSON document instead of a table");
  cmd->add_option("--codec", opts->codecs, "codec spec(s) to measure (repeatable)")
      ->capture_default_str();
  cmd->add_option("--rounds", opts->rounds,
                  "measure every codec this many times, in turn; report medians")
      ->check(positiveNumber());
  cmd->add_option("--size-kib", opts->sizesKiB, "tensor sizes in KiB of fp32 (repeatable)")
      ->capture_default_str()
      ->check(positiveNumber());
  cmd->add_option("--threads", opts->threads,
                  "also measure every codec on this many threads (compression.threads) and report "
                  "the speed-up")
      ->check(positiveNumber());
  auto linkGbps = std::make_shared<double>(10.0);
  cmd->add_option("--link-gbps", *linkGbps,
                  "the fastest link of your sweep: codecs below twice its byte rate are flagged *")
      ->capture_default_str()
      ->check(positiveNumber());
  cmd->callback([opts, asJson, linkGbps] {
    opts->linkBps = *linkGbps * 1e9;
    if (!*asJson)
      opts->onCodec = [](const std::string& codec, const compression::Shape& shape, int round) {
        std::fprintf(stderr, "bench %s on %s (round %d)...\n", codec.c_str(),
                     compression::shapeString(shape).c_str(), round + 1);
      };
    const json doc = compression::benchCodecs(*opts);
    if (*asJson)
      std::cout << doc.dump(2) << std::endl;
    else
      printTable(doc);
  });
}

}  // namespace slowpipe::tools
