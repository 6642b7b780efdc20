// prepareBase: one pretraining per base content, cached (base_model.h).
#include "experiments/base_model.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "compression/bytes.h"
#include "emulator/shaped_socket.h"
#include "runtime/launch/worker.h"
#include "runtime/model/data.h"
#include "runtime/records/progress.h"
#include "runtime/records/result.h"

namespace slowpipe::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kBaseFormat = 1;  // bump when pretraining itself changes what it makes

// The RunSpec JSON the base is pretrained with.
json pretrainSpecJson(const SweepSpec& spec) {
  const json& p = spec.pretrain;
  json base = spec.base;
  base["training"]["init_checkpoint"] = "";
  for (const char* k : {"epochs", "max_steps", "lr", "warmup_steps"})
    if (p.contains(k)) base["training"][k] = p[k];
  base["training"]["eval_each_epoch"] = true;
  if (p.contains("micro_batches")) base["pipeline"]["micro_batches"] = p["micro_batches"];
  base["data"]["max_train_examples"] =
      p.value("max_train_examples", 0);  // 0: the whole pretrain split
  return base;
}

// Digests of every regular file at or under `path`, by path relative to it.
json filesDigest(const fs::path& path) {
  json files = json::object();
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    files[path.filename().string()] = runtime::fileDigest(path.string());
  } else if (fs::is_directory(path, ec)) {
    std::vector<fs::path> all;
    for (auto it = fs::recursive_directory_iterator(path, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_regular_file()) all.push_back(it->path());
    std::sort(all.begin(), all.end());
    for (const auto& f : all)
      files[fs::relative(f, path).string()] = runtime::fileDigest(f.string());
  }
  return files;
}

// Content digest of the corpus: every regular file under data.source, by relative path, and
// those of data.pretrain and data.finetune (a "wordnet:" path's folder), in order.
json corpusDigest(const runtime::RunSpec& s) {
  json files = filesDigest(s.data.source);
  for (const auto& [key, paths] :
       {std::pair{"(pretrain)", &s.data.pretrain}, std::pair{"(finetune)", &s.data.finetune}})
    for (const auto& p : *paths)
      files[key].push_back(filesDigest(p.rfind("wordnet:", 0) == 0 ? p.substr(8) : p));
  return files;
}

void copyAtomically(const fs::path& from, const fs::path& to) {
  const fs::path tmp = to.string() + ".part" + std::to_string(getpid());
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing);
  fs::rename(tmp, to);
}

void pretrainInto(const SweepSpec& spec, const fs::path& ckpt, const fs::path& logFile) {
  runtime::RunSpec s = runtime::runSpecFromJson(pretrainSpecJson(spec), "sweep.pretrain");
  s.runtime.threadsPerWorker = spec.pretrain.value("threads", 2);
  runtime::prepareCorpus(s.data);
  json log = json::array();
  const double t0 = emulator::monotonicNow();
  const std::string tmp = ckpt.string() + ".tmp";  // a pretraining cut short leaves no base.pt
  runtime::ProgressLine line;
  runtime::runSingleProcess(
      s, "pretrain",
      [&](const json& r) {
        log.push_back(r);
        if (r["type"] != "step") return;
        const int64_t done = r["step"].get<int64_t>() + 1,
                      total = r.value("total_steps", int64_t{0});
        char text[96];
        std::snprintf(text, sizeof text, " loss %.4f", r["loss"].get<double>());
        line.milestone("pretraining the base: " +
                           runtime::progressText(done, total, emulator::monotonicNow() - t0) + text,
                       done, total);
      },
      tmp);
  fs::rename(tmp, ckpt);
  line.finish();
  runtime::writeJsonAtomically(logFile.string(), log);
}

}  // namespace

std::string baseCacheDir(const std::string& given) {
  std::string dir = given;
  if (dir.empty())
    if (const char* e = std::getenv("SLOWPIPE_CACHE_DIR")) dir = e;
  if (dir == "off") return "";
  if (dir.empty()) {
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
      dir = std::string(x) + "/slowpipe";
    else if (const char* h = std::getenv("HOME"); h && *h)
      dir = std::string(h) + "/.cache/slowpipe";
  }
  return dir;
}

json baseKeyContent(const SweepSpec& spec) {
  const json base = pretrainSpecJson(spec);
  const runtime::RunSpec s = runtime::runSpecFromJson(base, "sweep.pretrain");
  json data = base.value("data", json::object());
  data.erase("cache_dir");  // where prepared token files go, not what they hold
  return {{"format", kBaseFormat},
          {"model", base.value("model", json::object())},
          {"data", data},
          {"training", base.value("training", json::object())},
          {"micro_batches", s.pipeline.microBatches * s.pipeline.replicas},
          {"micro_batch_size", s.pipeline.microBatchSize},
          {"threads", spec.pretrain.value("threads", 2)},
          {"corpus", corpusDigest(s)}};
}

std::string baseKey(const json& content) {
  const std::string text = content.dump();
  return runtime::hex64(compression::fnv1a(text.data(), text.size(), compression::kFnvOffset));
}

std::string prepareBase(const SweepSpec& spec, const std::string& outDir,
                        const std::string& cacheDir) {
  fs::path ckpt = spec.pretrain.value("checkpoint", "base.pt");
  if (ckpt.is_relative()) ckpt = fs::path(outDir) / ckpt;
  if (fs::exists(ckpt)) return ckpt.string();
  const fs::path log = fs::path(outDir) / "pretrain_log.json";
  if (cacheDir.empty()) {
    pretrainInto(spec, ckpt, log);
    std::printf("base: pretrained into %s (base cache off)\n", ckpt.string().c_str());
    return ckpt.string();
  }
  const json content = baseKeyContent(spec);
  const std::string key = baseKey(content);
  const fs::path entry = fs::path(cacheDir) / "bases" / key;
  if (fs::exists(entry / "base.pt")) {
    copyAtomically(entry / "base.pt", ckpt);
    if (fs::exists(entry / "pretrain_log.json")) copyAtomically(entry / "pretrain_log.json", log);
    std::printf("base: %s from the cache (%s; no pretraining)\n", ckpt.string().c_str(),
                entry.string().c_str());
    return ckpt.string();
  }
  pretrainInto(spec, ckpt, log);
  // Stored whole or not at all: a folder filled beside the entry, then renamed into place (a
  // concurrent sweep that stored the same base first wins; the bytes are the same experiment's).
  const fs::path part = fs::path(cacheDir) / "bases" / (key + ".part" + std::to_string(getpid()));
  std::string failed;
  try {
    fs::create_directories(part);
    fs::copy_file(ckpt, part / "base.pt", fs::copy_options::overwrite_existing);
    fs::copy_file(log, part / "pretrain_log.json", fs::copy_options::overwrite_existing);
    runtime::writeJsonAtomically((part / "key.json").string(), content);
    std::error_code ec;
    fs::rename(part, entry, ec);
    if (ec && !fs::exists(entry / "base.pt")) failed = ec.message();
  } catch (const std::exception& e) {
    failed = e.what();
  }
  std::error_code ignored;
  fs::remove_all(part, ignored);
  if (!failed.empty())
    std::printf("base: pretrained into %s; not cached (%s)\n", ckpt.string().c_str(),
                failed.c_str());
  else
    std::printf("base: pretrained into %s, cached as %s\n", ckpt.string().c_str(),
                entry.string().c_str());
  return ckpt.string();
}

}  // namespace slowpipe::experiments
