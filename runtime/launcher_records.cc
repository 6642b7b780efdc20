// Launcher: records into the result: steps, evaluations, timelines, progress (see launcher_internal.h).
#include "runtime/launcher_internal.h"

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
    doc_["environment"]["libtorch"] = rec.value("torch_version", "");
  } else if (type == "step") {
    onStep(rec);
  } else if (type == "eval") {
    onEval(rec);
  } else if (type == "done") {
    if (!workers_[r].done) ++doneCount_;
    workers_[r].done = true;
    json state = rec;
    state.erase("timeline");
    if (rec.contains("shaping") && !rec["shaping"].is_null()) doc_["shaping"][std::to_string(r)] = rec["shaping"];
    state.erase("shaping");
    doc_["codec_state"][std::to_string(r)] = state;
    timelines_[r] = rec.value("timeline", json::array());
    if (doneCount_ == N_) recordTimeline();
  } else if (type == "error") {
    error_ = "rank " + std::to_string(r) + ": " + rec.value("message", "error");
    return false;
  }
  return true;
}

// The last step's (runtime.timeline "all": every step's) events of every stage, on one time axis (all workers share the host's
// monotonic clock), in the simulator's timeline schema.
void Launcher::recordTimeline() {
  double t0 = 1e300;
  for (const auto& [r, ev] : timelines_)
    for (const auto& e : ev) t0 = std::min(t0, e["start_s"].get<double>());
  json tl = json::array();
  for (const auto& [r, ev] : timelines_) {
    json out = json::array();
    for (const auto& e : ev) {
      out.push_back({{"what", e["what"]}, {"mb", e["mb"]}, {"start_s", e["start_s"].get<double>() - t0},
                     {"end_s", e["end_s"].get<double>() - t0}});
      if (e.contains("step")) out.back()["step"] = e["step"];
    }
    const RankId id = layout_.id(r);
    tl.push_back({{"stage", id.stage}, {"replica", id.replica}, {"rank", r}, {"events", out}});
  }
  doc_["timeline"] = tl;
}

void Launcher::onStep(const json& rec) {
  const int r = rec["rank"];
  const int64_t step = rec["step"];
  workers_[r].lastStep = step;
  pending_[step][r] = rec;
  if (static_cast<int>(pending_[step].size()) < N_) return;
  const auto& parts = pending_[step];
  json st = {{"step", step}, {"epoch", parts.at(0)["epoch"]}};
  double time = 0;
  json fwd = {{"raw", 0}, {"wire", 0}}, bwd = {{"raw", 0}, {"wire", 0}}, grad = {{"raw", 0}, {"wire", 0}};
  json perStage = json::array(), breakdown = {{"compute", 0.0}, {"encode", 0.0}, {"decode", 0.0}, {"wait", 0.0}};
  if (layout_.replicas > 1) breakdown["allreduce"] = 0.0;
  for (int r2 = 0; r2 < N_; ++r2) {
    const json& p = parts.at(r2);
    time = std::max(time, p["time_s"].get<double>());
    for (auto& [j, k] : {std::pair{&fwd, "fwd"}, std::pair{&bwd, "bwd"}, std::pair{&grad, "grad"}}) {
      (*j)["raw"] = (*j)["raw"].get<int64_t>() + p[std::string(k) + "_raw"].get<int64_t>();
      (*j)["wire"] = (*j)["wire"].get<int64_t>() + p[std::string(k) + "_wire"].get<int64_t>();
    }
    for (const char* k : {"compute", "encode", "decode", "wait"})
      breakdown[k] = breakdown[k].get<double>() + p[std::string(k) + "_s"].get<double>() / N_;
    // The data-parallel exchange's wall time (its encode/decode/wait are also in the columns
    // above: it is a share of the step, not an extra part of it).
    if (p.contains("dp_s")) breakdown["allreduce"] = breakdown["allreduce"].get<double>() + p["dp_s"].get<double>() / N_;
    const RankId id = layout_.id(r2);
    json stage = {{"compute", p["compute_s"]}, {"encode", p["encode_s"]}, {"decode", p["decode_s"]}, {"wait", p["wait_s"]}};
    if (layout_.replicas > 1) {
      stage["stage"] = id.stage;
      stage["replica"] = id.replica;
      stage["allreduce"] = p.value("dp_s", 0.0);
    }
    if (p.contains("recv_delay_s")) stage["recv_delay_s"] = p["recv_delay_s"];
    perStage.push_back(stage);
  }
  // Tokens of the global batch; the loss is the replicas' mean (each the mean over its micro-batches).
  const int64_t tokens = int64_t{spec_.pipeline.microBatches} * spec_.pipeline.microBatchSize * spec_.model.seqLen *
                         layout_.replicas;
  double loss = 0;
  bool haveLoss = true;
  for (int q = 0; q < layout_.replicas; ++q) {
    const json& l = parts.at(layout_.rank({S_ - 1, q}))["loss"];
    haveLoss = haveLoss && l.is_number();
    if (l.is_number()) loss += l.get<double>() / layout_.replicas;
  }
  st["loss"] = haveLoss ? json(loss) : json();
  if (layout_.replicas > 1) {
    json per = json::array();
    for (int q = 0; q < layout_.replicas; ++q) per.push_back(parts.at(layout_.rank({S_ - 1, q}))["loss"]);
    st["loss_per_replica"] = per;
  }
  st["time_s"] = time;
  st["wall_s"] = now() - start_;
  st["tokens"] = tokens;
  st["tokens_per_s"] = tokens / time;
  st["bytes"] = {{"forward", fwd}, {"backward", bwd}};
  if (layout_.replicas > 1) st["bytes"]["gradient"] = grad;
  st["breakdown_s"] = breakdown;
  st["breakdown_s_per_stage"] = perStage;
  st["grad_norm"] = parts.at(0)["grad_norm"];
  st["lr"] = parts.at(0)["lr"];
  doc_["steps"].push_back(st);
  pending_.erase(step);
  progress(st);
  // The partial result is rewritten at most once a second: serialising a growing document after
  // every step would cost the workers CPU (the launcher shares the cores) while they are timed.
  if (now() - lastWrite_ >= 1.0) {
    writeJsonAtomically(resultPath_, finalDoc());
    lastWrite_ = now();
  }
}

void Launcher::onEval(const json& rec) {
  if (rec["rank"] != layout_.rank({S_ - 1, 0})) return;  // replica 0 evaluates
  doc_["evals"].push_back({{"epoch", rec["epoch"]}, {"step", rec["step"]}, {"val_loss", rec["val_loss"]},
                           {"wall_s", now() - start_}});
}

void Launcher::progress(const json& st) {
  if (!opt_.progress) return;
  const int64_t total = totalSteps();
  const double elapsed = now() - start_;
  const double eta = elapsed / (st["step"].get<int64_t>() + 1) * (total - st["step"].get<int64_t>() - 1);
  char text[256];
  std::snprintf(text, sizeof text, "[%s] step %lld/%lld  loss %.4f  %.0f tok/s  ETA %.0fs", spec_.name.c_str(),
                static_cast<long long>(st["step"].get<int64_t>() + 1), static_cast<long long>(total),
                st["loss"].is_number() ? st["loss"].get<double>() : NAN, st["tokens_per_s"].get<double>(), eta);
  progressLine_.update(text, st["step"].get<int64_t>() + 1 >= total);
}

}  // namespace slowpipe::runtime::detail
