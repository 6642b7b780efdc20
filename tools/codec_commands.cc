// `slowpipe codec check SPEC...` (the conformance check, compression/conformance.h) and
// `slowpipe codec list`.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "compression/codec.h"
#include "compression/conformance.h"
#include "runtime/result.h"
#include "runtime/worker.h"
#include "tools/commands.h"

namespace slowpipe::tools {

using nlohmann::json;

namespace {

// Runs the check of one codec in a forked child, which sends its JSON back through a pipe: a codec
// (a plug-in above all) that crashes ends the child, not the check, and is reported by name.
json isolatedCheck(const std::string& spec, const compression::ConformanceOptions& o) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("codec check: pipe() failed");
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("codec check: fork() failed");
  if (pid == 0) {
    close(fds[0]);
    std::string text;
    try {
      text = compression::checkCodec([&] { return compression::makeCodec(spec); }, o).dump();
    } catch (const std::exception& e) {
      text = json{{"codec", spec}, {"error", e.what()}}.dump();
    }
    for (size_t at = 0; at < text.size();) {
      const ssize_t n = write(fds[1], text.data() + at, text.size() - at);
      if (n <= 0) _exit(3);
      at += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[65536];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::string how;
  if (WIFSIGNALED(status)) how = "crashed (signal " + std::to_string(WTERMSIG(status)) + ")";
  else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) how = "ended with exit status " + std::to_string(WEXITSTATUS(status));
  if (!how.empty() || text.empty())
    return {{"codec", spec}, {"error", "the check " + (how.empty() ? std::string("returned nothing") : how) +
                                           " while running codec '" + spec + "'"}};
  return json::parse(text);
}

}  // namespace

void addCodecCommands(CLI::App& app) {
  auto* codec = app.add_subcommand("codec", "codecs: conformance check, list");
  codec->require_subcommand(1);
  {
    auto specs = std::make_shared<std::vector<std::string>>();
    auto out = std::make_shared<std::string>();
    auto quick = std::make_shared<bool>(false);
    auto* cmd = codec->add_subcommand("check", "check a codec's contract: round trip, determinism, state, damage, error, speed");
    cmd->add_option("spec", *specs, "codec specs, e.g. acsgd:bits=2 'ef(quant:bits=4)'")->required();
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
        const json r = isolatedCheck(spec, o);
        std::printf("%s\n", r["codec"].get<std::string>().c_str());
        if (r.contains("error")) {
          std::printf("  FAIL %s\n", r["error"].get<std::string>().c_str());
          ok = false;
          all.push_back(r);
          continue;
        }
        for (const auto& c : r["checks"])
          std::printf("  %-4s %-58s %s\n", c["ok"].get<bool>() ? "ok" : "FAIL", c["name"].get<std::string>().c_str(),
                      c["detail"].get<std::string>().c_str());
        const json& e = r["figures"]["error"];
        const json& s = r["figures"]["speed"];
        std::printf("  error (outliers, steady state): max |err| %.4g, relative L2 %.4g, compression %.2fx\n",
                    e["max_abs"].get<double>(), e["rel_l2"].get<double>(), e["compression_ratio"].get<double>());
        std::printf("  speed (1 thread, %.0f MiB): encode %.2f GB/s (%.2fx memcpy), decode %.2f GB/s (%.2fx memcpy), "
                    "memcpy %.2f GB/s\n", s["bytes"].get<double>() / (1 << 20), s["encode_gbps"].get<double>(),
                    s["encode_vs_memcpy"].get<double>(), s["decode_gbps"].get<double>(), s["decode_vs_memcpy"].get<double>(),
                    s["memcpy_gbps"].get<double>());
        std::printf("  sustains 100 Mbps: %s, 1 Gbps: %s, 10 Gbps: %s\n", s["sustains_100Mbps"].get<bool>() ? "yes" : "no",
                    s["sustains_1Gbps"].get<bool>() ? "yes" : "no", s["sustains_10Gbps"].get<bool>() ? "yes" : "no");
        std::printf("  %s\n", r["ok"].get<bool>() ? "PASS" : "FAIL");
        ok = ok && r["ok"].get<bool>();
        all.push_back(r);
      }
      if (!out->empty()) runtime::writeJsonAtomically(*out, {{"schema", "slowpipe.codec_check/1"}, {"results", all}, {"ok", ok}});
      if (!ok) std::exit(1);
    });
  }
  codec->add_subcommand("list", "codec names makeCodec accepts")->callback([] {
    for (const auto& n : compression::codecNames()) std::printf("%s\n", n.c_str());
  });
}

}  // namespace slowpipe::tools
