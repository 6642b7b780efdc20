// `slowpipe bench kernels`: parses flags, runs compression::benchKernels (bench_kernels.h says what
// is measured) and prints its table or JSON document.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "compression/bench_kernels.h"
#include "tools/commands.h"

namespace slowpipe::tools {
namespace {

using nlohmann::json;

void printKernelTable(const json& doc) {
  std::printf("memcpy: %.2f GB/s (median of %d rounds); Highway: %s\n",
              doc["memcpy_GBps"].get<double>(), doc["rounds"].get<int>(),
              doc["highway"].get<bool>() ? doc["highway_targets"].dump().c_str()
                                         : "not built (install libhwy-dev and rebuild)");
  std::printf("%-23s %4s %-8s %-10s %8s %15s %7s %7s %5s\n", "kernel", "bits", "impl", "target",
              "GB/s", "range", "vs mc", "vs hand", "same");
  for (const auto& r : doc["results"]) {
    const std::string bits = r["bits"].is_null() ? "-" : std::to_string(r["bits"].get<int>());
    std::printf("%-23s %4s %-8s %-10s %8.2f %7.2f-%-7.2f %7.2f %7.2f %5s\n",
                r["kernel"].get<std::string>().c_str(), bits.c_str(),
                r["impl"].get<std::string>().c_str(), r["target"].get<std::string>().c_str(),
                r["GBps"].get<double>(), r["GBps_range"][0].get<double>(),
                r["GBps_range"][1].get<double>(), r["vs_memcpy"].get<double>(),
                r["vs_hand"].get<double>(), r["same_output"].get<bool>() ? "yes" : "NO");
  }
}

}  // namespace

void addBenchKernels(CLI::App& bench) {
  auto opts = std::make_shared<compression::KernelBenchOptions>();
  auto asJson = std::make_shared<bool>(false);
  auto* cmd = bench.add_subcommand(
      "kernels",
      "the channel quantizer's and AC-SGD's kernels, hand-written vs Google Highway on each "
      "target, vs memcpy");
  cmd->add_flag("--json", *asJson, "print one JSON document instead of a table");
  cmd->add_option("--size-kib", opts->sizeKiB, "buffer size in KiB of fp32")
      ->capture_default_str()
      ->check(positiveNumber());
  cmd->add_option("--cols", opts->cols, "channels per row (a multiple of 16)")
      ->capture_default_str();
  cmd->add_option("--rounds", opts->rounds, "measure everything this many times, in turn")
      ->capture_default_str()
      ->check(positiveNumber());
  cmd->callback([opts, asJson] {
    if (!*asJson)
      opts->onRound = [](int round) {
        std::fprintf(stderr, "bench kernels: round %d...\n", round);
      };
    const json doc = compression::benchKernels(*opts);
    if (*asJson)
      std::cout << doc.dump(2) << "\n";
    else
      printKernelTable(doc);
  });
}

}  // namespace slowpipe::tools
