// Typed records and the step entry (see records.h).
#include "runtime/records/records.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/exec/protocol.h"
#include "runtime/records/result.h"

namespace slowpipe::runtime {

using nlohmann::json;

namespace {

json optional(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

template <typename T>
T field(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number())
    throw std::invalid_argument(std::string("record: field '") + key + "' " +
                                (it == j.end() ? "is missing" : "is not a number"));
  return it->get<T>();
}

std::optional<double> optionalField(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number())
    throw std::invalid_argument(std::string("record: field '") + key + "' is not a number");
  return it->get<double>();
}

}  // namespace

json toJson(const RankStepRecord& r) {
  json j = {{"type", "step"},        {"rank", r.rank},         {"step", r.step},
            {"epoch", r.epoch},      {"time_s", r.timeS},      {"compute_s", r.computeS},
            {"encode_s", r.encodeS}, {"decode_s", r.decodeS},  {"wait_s", r.waitS},
            {"dp_s", r.dpS},         {"stall_s", r.stallS},    {"fwd_raw", r.fwdRaw},
            {"fwd_wire", r.fwdWire}, {"bwd_raw", r.bwdRaw},    {"bwd_wire", r.bwdWire},
            {"grad_raw", r.gradRaw}, {"grad_wire", r.gradWire}};
  if (r.loss) j["loss"] = *r.loss;
  if (r.gradNorm) j["grad_norm"] = *r.gradNorm;
  if (r.lr) j["lr"] = *r.lr;
  if (!r.recvDelay.is_null()) j["recv_delay_s"] = r.recvDelay;
  if (r.cpuS) j["cpu_s"] = *r.cpuS;
  if (r.preempted) j["preempted"] = *r.preempted;
  return j;
}

RankStepRecord rankStepFromJson(const json& j) {
  RankStepRecord r;
  r.rank = field<int>(j, "rank");
  r.step = field<int64_t>(j, "step");
  r.epoch = field<int>(j, "epoch");
  r.timeS = field<double>(j, "time_s");
  r.computeS = field<double>(j, "compute_s");
  r.encodeS = field<double>(j, "encode_s");
  r.decodeS = field<double>(j, "decode_s");
  r.waitS = field<double>(j, "wait_s");
  r.dpS = field<double>(j, "dp_s");
  r.stallS = optionalField(j, "stall_s").value_or(0.0);
  r.fwdRaw = field<int64_t>(j, "fwd_raw");
  r.fwdWire = field<int64_t>(j, "fwd_wire");
  r.bwdRaw = field<int64_t>(j, "bwd_raw");
  r.bwdWire = field<int64_t>(j, "bwd_wire");
  r.gradRaw = field<int64_t>(j, "grad_raw");
  r.gradWire = field<int64_t>(j, "grad_wire");
  r.loss = optionalField(j, "loss");
  r.gradNorm = optionalField(j, "grad_norm");
  r.lr = optionalField(j, "lr");
  r.recvDelay = j.value("recv_delay_s", json());
  r.cpuS = optionalField(j, "cpu_s");
  if (j.contains("preempted")) r.preempted = field<int64_t>(j, "preempted");
  return r;
}

json toJson(const EvalRecord& e) {
  json j = {
      {"epoch", e.epoch}, {"step", e.step}, {"time_s", e.timeS}, {"val_loss", optional(e.valLoss)}};
  if (e.wallS) j["wall_s"] = *e.wallS;
  return j;
}

EvalRecord evalRecordFromJson(const json& j) {
  EvalRecord e;
  e.epoch = field<int>(j, "epoch");
  e.step = field<int64_t>(j, "step");
  e.timeS = field<double>(j, "time_s");
  e.valLoss = optionalField(j, "val_loss");
  e.wallS = optionalField(j, "wall_s");
  return e;
}

json toJson(const TimelineEvent& e, bool withChunk, bool withStep) {
  json j = {{"what", protocol::eventName(e.action)},
            {"mb", e.action.microBatch},
            {"start_s", e.start},
            {"end_s", e.end}};
  if (e.action.shard >= 0) j["shard"] = e.action.shard;
  if (e.action.round >= 0) j["round"] = e.action.round;
  if (withChunk) j["chunk"] = e.action.chunk;
  if (withStep) j["step"] = e.step;
  return j;
}

json stepEntry(const RunSpec& spec, const RankLayout& layout,
               const std::vector<RankStepRecord>& ranks) {
  const int N = layout.size(), R = layout.replicas;
  if (static_cast<int>(ranks.size()) != N)
    throw std::logic_error("step entry: " + std::to_string(ranks.size()) + " records for " +
                           std::to_string(N) + " ranks");
  double time = 0;
  int64_t fwd[2] = {0, 0}, bwd[2] = {0, 0}, grad[2] = {0, 0};
  json perStage = json::array(),
       breakdown = {{"compute", 0.0}, {"encode", 0.0}, {"decode", 0.0}, {"wait", 0.0}};
  if (R > 1) breakdown["allreduce"] = 0.0;
  for (int r = 0; r < N; ++r) {
    const RankStepRecord& p = ranks[r];
    time = std::max(time, p.timeS);
    fwd[0] += p.fwdRaw, fwd[1] += p.fwdWire, bwd[0] += p.bwdRaw, bwd[1] += p.bwdWire,
        grad[0] += p.gradRaw, grad[1] += p.gradWire;
    for (const auto& [k, v] : {std::pair{"compute", p.computeS}, std::pair{"encode", p.encodeS},
                               std::pair{"decode", p.decodeS}, std::pair{"wait", p.waitS},
                               std::pair{"allreduce", p.dpS}})
      if (breakdown.contains(k)) breakdown[k] = breakdown[k].get<double>() + v / N;
    json row = {{"time_s", p.timeS},
                {"compute", p.computeS},
                {"encode", p.encodeS},
                {"decode", p.decodeS},
                {"wait", p.waitS}};
    if (!spec.runtime.slowdown.empty())
      row["stalled"] = p.stallS;  // the straggler's share of "compute"
    if (R > 1) {
      const RankId id = layout.id(r);
      row["stage"] = id.stage;
      row["replica"] = id.replica;
      row["allreduce"] = p.dpS;
    }
    if (!p.recvDelay.is_null()) row["recv_delay_s"] = p.recvDelay;
    if (p.cpuS) row["cpu_s"] = *p.cpuS;
    if (p.preempted) row["preempted"] = *p.preempted;
    perStage.push_back(std::move(row));
  }
  // Tokens of the global batch; the loss is the replicas' mean (each the mean over its
  // micro-batches).
  const int64_t tokens =
      int64_t{spec.pipeline.microBatches} * spec.pipeline.microBatchSize * spec.model.seqLen * R;
  json perReplica = json::array();
  std::optional<double> loss = 0.0;
  for (int q = 0; q < R; ++q) {
    const std::optional<double>& l = ranks[layout.rank({layout.stages - 1, q})].loss;
    perReplica.push_back(optional(l));
    const double share = l ? *l / R : 0.0;  // not a rank: the mean over replicas
    loss = loss && l ? std::optional<double>(*loss + share) : std::nullopt;
  }
  json st = {{"step", ranks[0].step},
             {"epoch", ranks[0].epoch},
             {"time_s", time},
             {"tokens", tokens},
             {"tokens_per_s", tokens / time},
             {"loss", optional(loss)},
             {"bytes",
              {{"forward", {{"raw", fwd[0]}, {"wire", fwd[1]}}},
               {"backward", {{"raw", bwd[0]}, {"wire", bwd[1]}}}}},
             {"breakdown_s", breakdown},
             {"breakdown_s_per_stage", perStage}};
  if (R > 1) {
    st["loss_per_replica"] = perReplica;
    st["bytes"]["gradient"] = {{"raw", grad[0]}, {"wire", grad[1]}};
  }
  if (ranks[0].gradNorm) st["grad_norm"] = *ranks[0].gradNorm;
  if (ranks[0].lr) st["lr"] = *ranks[0].lr;
  return st;
}

ResultBuilder::ResultBuilder(const RunSpec& spec, const RankLayout& layout,
                             const std::string& status)
    : spec_(&spec),
      layout_(layout),
      doc_({{"schema", kResultSchema},
            {"status", status},
            {"spec", toJson(spec)},
            {"steps", json::array()},
            {"evals", json::array()}}) {}

const json& ResultBuilder::addStep(const std::vector<RankStepRecord>& ranks, double wallS) {
  json st = stepEntry(*spec_, layout_, ranks);
  st["wall_s"] = wallS;
  doc_["steps"].push_back(std::move(st));
  return doc_["steps"].back();
}

void ResultBuilder::addEval(const EvalRecord& e) { doc_["evals"].push_back(toJson(e)); }

void ResultBuilder::setTimeline(const std::map<int, json>& eventsByRank) {
  double t0 = 1e300;
  for (const auto& [r, ev] : eventsByRank)
    for (const auto& e : ev) t0 = std::min(t0, e.at("start_s").get<double>());
  json rows = json::array();
  for (const auto& [r, ev] : eventsByRank) {
    json out = json::array();
    for (json e : ev) {
      e["start_s"] = e["start_s"].get<double>() - t0;
      e["end_s"] = e["end_s"].get<double>() - t0;
      out.push_back(std::move(e));
    }
    const RankId id = layout_.id(r);
    rows.push_back(
        {{"stage", id.stage}, {"replica", id.replica}, {"rank", r}, {"events", std::move(out)}});
  }
  doc_["timeline"] = std::move(rows);
}

void ResultBuilder::fail(const std::string& reason) {
  if (failed()) return;
  doc_["status"] = "failed";
  doc_["reason"] = reason;
}

void ResultBuilder::ok() {
  if (!failed()) doc_["status"] = "ok";
}

json ResultBuilder::snapshot() const {
  json d = doc_;
  d["summary"] = summarizeSteps(d["steps"], d["evals"]);
  return d;
}

}  // namespace slowpipe::runtime
