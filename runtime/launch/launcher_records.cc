// Launcher: records into the result: steps, evaluations, timelines, progress (see
// launcher_internal.h).
#include "runtime/launch/launcher_internal.h"

#include "emulator/tcp_settings.h"

namespace slowpipe::runtime::detail {

// One record from a worker. Returns false on an error record (error_ says what).
bool Launcher::handle(const json& rec) {
  const std::string type = rec.value("type", "");
  const int r = rec.value("rank", -1);
  if (r < 0 || r >= N_) return true;
  lastProgress_ = now();
  cpuSampled_ = false;
  if (type == "hello") {
    hellos_[r] = rec;
    json& env = result_["environment"];
    env["libtorch"] = rec.value("torch_version", "");
    // Whether every worker's malloc asks for huge pages (runtime::hugePageTunables).
    const bool huge =
        rec.value("glibc_tunables", "").find("glibc.malloc.hugetlb=1") != std::string::npos;
    env["malloc_huge_pages"] = env.value("malloc_huge_pages", true) && huge;
    // Whether any worker had to start a second time for it (runtime::restartedForHugePages): the
    // launcher hands the tunable to its workers, so none should.
    env["workers_restarted_for_huge_pages"] =
        env.value("workers_restarted_for_huge_pages", false) ||
        rec.value("restarted_for_huge_pages", false);
  } else if (type == "step") {
    onStep(rec);
  } else if (type == "eval") {
    onEval(rec);
  } else if (type == "done") {
    if (!workers_[r].done) ++doneCount_;
    workers_[r].done = true;
    json state = rec;
    state.erase("timeline");
    if (rec.contains("shaping") && !rec["shaping"].is_null())
      result_["shaping"][std::to_string(r)] = rec["shaping"];
    state.erase("shaping");
    // runtime.slowdown: what each rank's compute really ran at (its compute time at full speed
    // over the time with its stalls).
    if (!spec_.runtime.slowdown.empty() && rec.contains("slowdown"))
      result_["slowdown"][std::to_string(r)] = rec["slowdown"];
    state.erase("slowdown");
    // What this rank's sockets refused (runtime/launch/listen_guard.h): summed into the result's
    // refused_connections by refusalsReport().
    if (rec.contains("refused_connections") && rec["refused_connections"].is_object())
      rankRefusals_[std::to_string(r)] = rec["refused_connections"];
    state.erase("refused_connections");
    result_["codec_state"][std::to_string(r)] = state;
    timelines_[r] = rec.value("timeline", json::array());
    if (doneCount_ == N_) recordTimeline();
  } else if (type == "error") {
    // The worker's message names its rank already where it says "rank N: ...": not twice.
    const std::string prefix = "rank " + std::to_string(r) + ": ",
                      message = rec.value("message", "error");
    error_ = message.rfind(prefix, 0) == 0 ? message : prefix + message;
    return false;
  }
  return true;
}

// The last step's (runtime.timeline "all": every step's) events of every rank, on one time axis
// (all workers share the host's monotonic clock; across hosts, the coordinator's).
void Launcher::recordTimeline() { result_.setTimeline(timelines_); }

void Launcher::onStep(const json& rec) {
  const RankStepRecord r = rankStepFromJson(rec);
  workers_[r.rank].lastStep = r.step;
  auto& parts = pending_[r.step];
  parts[r.rank] = r;
  if (static_cast<int>(parts.size()) < N_) return;
  std::vector<RankStepRecord> ranks;
  for (const auto& [rank, p] : parts) ranks.push_back(p);
  const json& st = result_.addStep(ranks, now() - start_);
  pending_.erase(r.step);
  progress(st);
  // The kernel's view of every connection (TCP_INFO, `ss -tin`) per stage namespace (tc), sampled
  // when the second-to-last and the last step are done: a worker may close its connections right
  // after its last step, so the latest sample that found them is kept (its counters cover all
  // but at most the last step).
  if ((fabric_ || nodeLine_) && r.step + 2 >= totalSteps()) {
    json& info = result_["network"]["tcp_info"];
    if (!info.is_array()) info = json::array();
    for (int s = 0; s < S_; ++s) {
      json connections = emulator::tcpInfo(fabric_ ? fabric_->nsName(s)
                                                   : nodeLine_->nsName(links().rankNodes().at(s)));
      if (static_cast<int>(info.size()) <= s)
        info.push_back({{"stage", s}, {"connections", json::array()}});
      if (connections.is_array() && !connections.empty())
        info[s] = {{"stage", s}, {"after_step", r.step}, {"connections", std::move(connections)}};
    }
  }
  // The partial result is rewritten at most once a second: serialising a growing document after
  // every step would cost the workers CPU (the launcher shares the cores) while they are timed.
  if (now() - lastWrite_ >= 1.0) {
    writeJsonAtomically(resultPath_, finalDoc());
    lastWrite_ = now();
  }
}

void Launcher::onEval(const json& rec) {
  if (rec["rank"] != layout_.rank({S_ - 1, 0}))
    return;  // replica 0 evaluates; its last stage has the loss
  EvalRecord e = evalRecordFromJson(rec);
  e.wallS = now() - start_;
  result_.addEval(e);
}

void Launcher::progress(const json& st) {
  if (!opt_.progress) return;
  const int64_t total = totalSteps();
  const double elapsed = now() - start_;
  const double eta =
      elapsed / (st["step"].get<int64_t>() + 1) * (total - st["step"].get<int64_t>() - 1);
  char text[256];
  std::snprintf(text, sizeof text, "[%s] step %lld/%lld  loss %.4f  %.0f tok/s  ETA %.0fs",
                spec_.name.c_str(), static_cast<long long>(st["step"].get<int64_t>() + 1),
                static_cast<long long>(total),
                st["loss"].is_number() ? st["loss"].get<double>() : NAN,
                st["tokens_per_s"].get<double>(), eta);
  progressLine_.update(text, st["step"].get<int64_t>() + 1 >= total);
}

}  // namespace slowpipe::runtime::detail
