// Result summary, environment capture, atomic JSON writes.
#include "runtime/result.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "emulator/command.h"

#ifndef SLOWPIPE_SOURCE_DIR
#define SLOWPIPE_SOURCE_DIR "."
#endif

namespace slowpipe::runtime {

using nlohmann::json;

json summarizeSteps(const json& steps, const json& evals) {
  json s = {{"steps", steps.size()}};
  if (steps.empty()) return s;
  int maxEpoch = 0;
  for (const auto& st : steps) maxEpoch = std::max(maxEpoch, st.value("epoch", 0));
  std::vector<const json*> steady;
  for (size_t i = 0; i < steps.size(); ++i) {
    const int e = steps[i].value("epoch", 0);
    if (maxEpoch >= 1 ? e >= 1 : i >= 1) steady.push_back(&steps[i]);
  }
  if (steady.empty()) steady.push_back(&steps.back());
  double time = 0, tokens = 0, wait = 0, fwdWire = 0, bwdWire = 0, fwdRaw = 0, bwdRaw = 0, compute = 0, enc = 0, dec = 0;
  double gradWire = 0, gradRaw = 0, allreduce = 0;
  bool dp = false;
  for (const json* st : steady) {
    time += (*st)["time_s"].get<double>();
    tokens += (*st)["tokens"].get<double>();
    wait += (*st)["breakdown_s"].value("wait", 0.0);
    compute += (*st)["breakdown_s"].value("compute", 0.0);
    enc += (*st)["breakdown_s"].value("encode", 0.0);
    dec += (*st)["breakdown_s"].value("decode", 0.0);
    fwdWire += (*st)["bytes"]["forward"]["wire"].get<double>();
    bwdWire += (*st)["bytes"]["backward"]["wire"].get<double>();
    fwdRaw += (*st)["bytes"]["forward"]["raw"].get<double>();
    bwdRaw += (*st)["bytes"]["backward"]["raw"].get<double>();
    if ((*st)["bytes"].contains("gradient")) {  // data-parallel runs
      dp = true;
      gradWire += (*st)["bytes"]["gradient"]["wire"].get<double>();
      gradRaw += (*st)["bytes"]["gradient"]["raw"].get<double>();
      allreduce += (*st)["breakdown_s"].value("allreduce", 0.0);
    }
  }
  const double n = static_cast<double>(steady.size());
  s["steady_steps"] = steady.size();
  s["steady_from_step"] = (*steady.front())["step"];
  s["mean_step_time_s"] = time / n;
  s["throughput_tokens_per_s"] = tokens / time;
  s["wait_share"] = wait / time;
  s["breakdown_share"] = {{"compute", compute / time}, {"encode", enc / time}, {"decode", dec / time}, {"wait", wait / time}};
  // Every byte every rank sent: pipeline activations and gradients, and (data parallelism) the
  // replicas' exchange, also listed on its own.
  s["wire_bytes_per_step"] = (fwdWire + bwdWire + gradWire) / n;
  s["wire_bytes_per_step_forward"] = fwdWire / n;
  s["wire_bytes_per_step_backward"] = bwdWire / n;
  s["raw_bytes_per_step"] = (fwdRaw + bwdRaw + gradRaw) / n;
  const double wire = fwdWire + bwdWire + gradWire;
  s["compression_ratio"] = wire > 0 ? (fwdRaw + bwdRaw + gradRaw) / wire : 1.0;
  if (dp) {
    s["wire_bytes_per_step_gradient"] = gradWire / n;
    s["raw_bytes_per_step_gradient"] = gradRaw / n;
    s["breakdown_share"]["allreduce"] = allreduce / time;
  }
  s["final_train_loss"] = steps.back().value("loss", json());
  s["wall_time_s"] = steps.back().value("wall_s", 0.0);
  if (!evals.empty()) s["final_val_loss"] = evals.back()["val_loss"];
  return s;
}

json readJsonFile(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(what + " '" + path + "' cannot be read");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(what + " '" + path + "' is not valid JSON: " + e.what());
  }
}

std::string hostName() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return host;
}

json environmentInfo(const std::string& torchVersion) {
  json env = {{"host", hostName()}, {"cores", std::thread::hardware_concurrency()}, {"compiler", "g++ " __VERSION__},
              {"libtorch", torchVersion}};
  const auto commit = emulator::runCommand({"git", "-C", SLOWPIPE_SOURCE_DIR, "rev-parse", "HEAD"});
  env["git_commit"] = commit.status == 0 ? commit.output.substr(0, 40) : "unknown";
  // Dirty = tracked source changed; results/ is where runs write, so it does not count.
  const auto dirty = emulator::runCommand({"git", "-C", SLOWPIPE_SOURCE_DIR, "status", "--porcelain", "--untracked-files=no",
                                           "--", ".", ":(exclude)results"});
  env["git_dirty"] = dirty.status == 0 && !dirty.output.empty();
  return env;
}

void writeJsonAtomically(const std::string& path, const json& doc) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << doc.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "'");
}

}  // namespace slowpipe::runtime
