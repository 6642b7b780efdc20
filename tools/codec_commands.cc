// `slowpipe codec check SPEC...` (the conformance check, compression/conformance.h) and
// `slowpipe codec list`.

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "compression/codec.h"
#include "compression/codec_template.h"
#include "compression/conformance.h"
#include "runtime/launch/worker.h"
#include "runtime/records/result.h"
#include "tools/commands.h"

namespace slowpipe::tools {

using nlohmann::json;

namespace {

// One codec's check as `codec check` prints it: each check, the error and speed figures.
void printCheck(const json& r) {
  for (const auto& c : r["checks"])
    std::printf("  %-4s %-58s %s\n", c["ok"].get<bool>() ? "ok" : "FAIL",
                c["name"].get<std::string>().c_str(), c["detail"].get<std::string>().c_str());
  const json& e = r["figures"]["error"];
  const json& s = r["figures"]["speed"];
  std::printf(
      "  error (outliers, steady state): max |err| %.4g, relative L2 %.4g, compression "
      "%.2fx\n",
      e["max_abs"].get<double>(), e["rel_l2"].get<double>(), e["compression_ratio"].get<double>());
  std::printf(
      "  speed (1 thread, %.0f MiB): encode %.2f GB/s (%.2fx memcpy), decode %.2f GB/s "
      "(%.2fx memcpy), "
      "memcpy %.2f GB/s; %.0f page faults a message\n",
      s["bytes"].get<double>() / (1 << 20), s["encode_gbps"].get<double>(),
      s["encode_vs_memcpy"].get<double>(), s["decode_gbps"].get<double>(),
      s["decode_vs_memcpy"].get<double>(), s["memcpy_gbps"].get<double>(),
      s["page_faults_per_message"].get<double>());
  std::printf("  sustains 100 Mbps: %s, 1 Gbps: %s, 10 Gbps: %s\n",
              s["sustains_100Mbps"].get<bool>() ? "yes" : "no",
              s["sustains_1Gbps"].get<bool>() ? "yes" : "no",
              s["sustains_10Gbps"].get<bool>() ? "yes" : "no");
}

// `codec new`: the skeleton, then the commands that build it against this CLI's SDK.
void newCodec(const std::string& name, const std::string& lang, const std::string& dir) {
  for (const auto& f : compression::writeCodecSkeleton(name, lang, dir))
    std::printf("wrote %s\n", f.c_str());
  // The SDK this CLI belongs to: its build folder (slowpipeConfig.cmake beside it) or its
  // install prefix (lib/cmake/slowpipe under bin/..); the commands name both absolutely.
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec),
                              bin = exe.parent_path();
  std::string prefix;
  if (!ec && std::filesystem::exists(bin / "slowpipeConfig.cmake"))
    prefix = bin.string();
  else if (!ec && std::filesystem::exists(bin.parent_path() / "lib" / "cmake" / "slowpipe" /
                                          "slowpipeConfig.cmake"))
    prefix = bin.parent_path().string();
  const std::string folder =
      std::filesystem::absolute(std::filesystem::path(dir) / name).lexically_normal().string();
  std::printf("next:\n%s", compression::codecSkeletonNextSteps(name, lang, folder, prefix,
                                                               ec ? "slowpipe" : exe.string())
                               .c_str());
}

}  // namespace

void addCodecCommands(CLI::App& app) {
  auto* codec = app.add_subcommand("codec", "codecs: conformance check, list");
  codec->require_subcommand(1);
  {
    auto specs = std::make_shared<std::vector<std::string>>();
    auto out = std::make_shared<std::string>();
    auto quick = std::make_shared<bool>(false);
    auto* cmd = codec->add_subcommand(
        "check", "check a codec's contract: round trip, determinism, state, damage, error, speed");
    cmd->add_option("spec", *specs, "codec specs, e.g. acsgd:bits=2 'ef(quant:bits=4)'")
        ->required();
    cmd->add_option("--json", *out, "also write the results as JSON to this file");
    cmd->add_flag("--quick", *quick, "speed on a 4 MiB message instead of 64 MiB");
    cmd->callback([=] {
      runtime::tuneAllocator();  // frames allocated as in a worker: the speed is what a run pays
      compression::ConformanceOptions o;
      if (*quick) {
        o.speedElements = int64_t{1} << 20;
        o.speedSeconds = 0.05;
      }
      json all = json::array();
      bool ok = true;
      for (const auto& spec : *specs) {
        compression::makeCodec(spec);  // a bad spec is an error naming it, before anything runs
        const json r = compression::checkCodecIsolated(spec, o);
        std::printf("%s\n", r["codec"].get<std::string>().c_str());
        if (r.contains("error")) {
          std::printf("  FAIL %s\n", r["error"].get<std::string>().c_str());
          ok = false;
          all.push_back(r);
          continue;
        }
        printCheck(r);
        std::printf("  %s\n", r["ok"].get<bool>() ? "PASS" : "FAIL");
        ok = ok && r["ok"].get<bool>();
        all.push_back(r);
      }
      if (!out->empty())
        runtime::writeJsonAtomically(
            *out, {{"schema", "slowpipe.codec_check/1"}, {"results", all}, {"ok", ok}});
      if (!ok) std::exit(1);
    });
  }
  {
    auto name = std::make_shared<std::string>(), lang = std::make_shared<std::string>(),
         dir = std::make_shared<std::string>(".");
    auto* cmd = codec->add_subcommand(
        "new", "write a codec skeleton that builds and passes `codec check` as generated");
    cmd->add_option("name", *name, "the codec's name: a lower-case C identifier")->required();
    cmd->add_option("--lang", *lang,
                    "c, cpp (a plug-in against the installed package) or torchscript (Python)")
        ->required()
        ->check(CLI::IsMember({"c", "cpp", "torchscript"}));
    cmd->add_option("--dir", *dir, "where the folder NAME/ goes (default: here)");
    cmd->callback([=] { newCodec(*name, *lang, *dir); });
  }
  codec->add_subcommand("list", "codec names makeCodec accepts")->callback([] {
    for (const auto& n : compression::codecNames()) std::printf("%s\n", n.c_str());
  });
}

}  // namespace slowpipe::tools
