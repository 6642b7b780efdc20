// The discrete-event replay (see simulate.h).
#include "simulator/simulate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>

#include "compression/codec.h"
#include "emulator/link.h"
#include "emulator/link_model.h"
#include "runtime/comm/link_table.h"
#include "runtime/dp/dp.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/protocol.h"
#include "runtime/exec/ranks.h"
#include "runtime/exec/schedule.h"
#include "runtime/model/data.h"
#include "runtime/model/plan.h"
#include "runtime/records/records.h"
#include "runtime/records/result.h"
#include "simulator/compute_bill.h"
#include "simulator/mailroom.h"
#include "simulator/message_bill.h"
#include "simulator/packet_network.h"
#include "simulator/replay_loop.h"
#include "simulator/replay_plan.h"
#include "simulator/replay_state.h"

namespace slowpipe::simulator {

using nlohmann::json;
using runtime::Action;

namespace {

// The timeline: every rank up to 64 workers, else replica 0 of every stage (a 2048-worker
// timeline would be millions of events nobody plots).
constexpr int kTimelineRanks = 64;

// What a replay records: each rank's step records, when each step and evaluation ended, the last
// step's timeline, the actions replayed (the simulator's events).
struct Records {
  std::vector<std::vector<runtime::RankStepRecord>> perRank;  // [step][rank]
  std::vector<double> evalTimes;  // by step: the evaluation after it (the slowest rank's)
  std::vector<double> evalEnds;   // by step: when that evaluation ended (virtual time)
  std::vector<double> stepEnds;   // by step: when its last rank ended it (virtual time)
  std::map<int, std::vector<runtime::TimelineEvent>> lastEvents;  // by rank
  int64_t actions = 0;
};

// The virtual backend (runtime/exec/executor.h): every action is host work of some seconds at full
// speed (a send: its encode, then its message leaves), or a wait for a message (then its decode).
// Host work (forward, backward, step, encode, decode, DP packing) is shared among the busy workers
// when the profile describes a shared host: each of n busy workers runs at the profile's measured
// speed for n (host_speed), else at min(1, host_cores/n) (processor sharing); without either,
// every worker has its own device and runs at full speed. Its parts: the event loops
// (replay_loop.h), what each message and host action costs (message_bill.h, compute_bill.h), the
// links between send and receipt (mailroom.h), and what the run does step by step (replay_plan.h).
class Replay : public ReplayLoop, public runtime::Backend {
 public:
  Replay(const runtime::RunSpec& spec, const Profile& profile, int steps, const SimOptions& opt)
      : ReplayLoop(spec.pipeline.stages * spec.pipeline.replicas),
        spec_(spec),
        profile_(profile),
        opt_(opt),
        R_(spec.pipeline.replicas),
        N_(spec.pipeline.stages * R_),
        steps_(steps),
        layout_(runtime::rankLayout(spec)),
        topo_(emulator::topologyFromJson(spec.network.links, "network.links")),
        plan_(spec_, opt_, layout_, steps),
        work_(spec_, profile, opt_, layout_, bill_),  // checks the profile first; bill_ later
        bill_(spec_, profile, opt_, layout_, plan_, steps),
        mail_(spec_, layout_, opt.recordMessages) {
    for (int i = 0; i < N_; ++i) execs_.emplace_back(layout_, i);
    for (int i = 0; i < N_; ++i)
      ranks_[i].onTimeline = N_ <= kTimelineRanks || layout_.id(i).replica == 0;
    if (R_ > 1) dpTopo_ = runtime::dpTopology(spec);
    sharedHost_ = !profile.hostSpeed.empty() || (profile.hostCores > 0 && profile.hostCores < N_);
  }

  json run() {
    rec_.perRank.assign(steps_, std::vector<runtime::RankStepRecord>(N_));
    rec_.evalTimes = rec_.evalEnds = rec_.stepEnds = std::vector<double>(steps_, 0.0);
    for (int i = 0; i < N_; ++i) startList(i, plan_.stepList(i, 0), false);
    if (spec_.network.model == "ns3") {
      if (sharedHost_)
        throw std::invalid_argument(
            "network.model ns3: the profile describes workers sharing a host's cores; the ns-3 "
            "tier replays workers with a device each (an analytic profile, or one without "
            "host_speed)");
      mail_.usePacketNetwork();
      loopPacket(*mail_.packetNetwork());
    } else if (sharedHost_) {
      loopShared(profile_);
    } else {
      loopDedicated();
    }
    mail_.writeDraws();  // SLOWPIPE_LINK_DRAWS
    return result();
  }

 private:
  // The same result document as the launcher's (runtime/records/records.h ResultBuilder), on
  // virtual time.
  json result() const {
    runtime::ResultBuilder result(spec_, layout_, "ok");
    for (int k = 0; k < steps_; ++k) result.addStep(rec_.perRank[k], rec_.stepEnds[k]);
    for (const runtime::EvalRecord& e : plan_.evals(rec_.evalTimes, rec_.evalEnds))
      result.addEval(e);
    std::map<int, json> events;
    for (int i = 0; i < N_; ++i) {
      if (!ranks_[i].onTimeline) continue;
      json& ev = events[i] = json::array();
      const auto last = rec_.lastEvents.find(i);
      if (last == rec_.lastEvents.end()) continue;
      for (const auto& e : last->second)
        ev.push_back(runtime::toJson(e, layout_.chunks > 1, false));  // the worker's form
    }
    result.setTimeline(events);
    result["simulated"] = true;
    result["network"] = {
        {"backend", "simulated"}, {"model", spec_.network.model}, {"links", topo_}};
    if (spec_.network.model == "tcp") {  // one figure where the kernel has two
      const json flagged = emulator::tcpBimodalLinks(
          topo_, emulator::tcpSettingsFromJson(spec_.network.tcp, "network.tcp").congestionControl);
      if (!flagged.empty()) result["network"]["tcp_bimodal"] = flagged;
    }
    if (R_ > 1) {  // the replicas' links: their own topology, always the pipelined model
      result["network"]["dp_links"] = dpTopo_;
      result["network"]["dp_model"] = "pipelined";
    }
    result["profile"] = {
        {"source", profile_.source},
        {"device", profile_.device},
        {"host_cores", profile_.hostCores},
        {"host_speed", profile_.hostSpeed},
        {"transport",
         {{"a_s", profile_.transport.aS}, {"b_s_per_byte", profile_.transport.bSPerByte}}}};
    result["message_bytes"] = bill_.record();
    if (!spec_.runtime.slowdown.empty())
      for (int r = 0; r < N_; ++r)
        result["slowdown"][std::to_string(r)] = {
            {"effective_speed", ranks_[r].slowdown.effectiveSpeed()},
            {"compute_s", ranks_[r].slowdown.computeS},
            {"stalled_s", ranks_[r].slowdown.stalledS},
            {"owed_s", ranks_[r].slowdown.owedS}};
    json doc = result.snapshot();
    if (!spec_.network.nodes.is_null()) doc["network"]["nodes"] = mail_.linkTable().nodesRecord();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    if (opt_.recordMessages) doc["messages"] = mail_.messages();
    const PacketNetwork* packet = mail_.packetNetwork();
    if (packet) doc["network"]["packet_network"] = packet->describe();
    doc["simulator"] = {
        {"events", rec_.actions},
        {"wall_s", wall},
        {"events_per_s", rec_.actions / std::max(wall, 1e-9)},
        {"loop", packet        ? "ns-3's scheduler"
                 : sharedHost_ ? "shared host (every event re-times all busy workers)"
                               : "event queue"},
        {"timeline_ranks", N_ <= kTimelineRanks ? "all" : "replica 0 of every stage"}};
    return doc;
  }

  std::runtime_error deadlock(int i) const override {
    const runtime::RankId id = layout_.id(i);
    return std::runtime_error("simulator: stage " + std::to_string(id.stage) + " replica " +
                              std::to_string(id.replica) + " is blocked at action " +
                              std::to_string(execs_[i].position()) + " of step " +
                              std::to_string(ranks_[i].step) + " (the schedules deadlock)");
  }

  bool act(int i) override {
    RankState& st = ranks_[i];
    if (st.mode == Mode::kWaiting) {
      if (st.arrival >= 0 || !collect(i)) return false;
      if (st.arrival <= now_) finishWait(i);
      return true;
    }
    if (st.mode != Mode::kReady) return false;
    if (execs_[i].run(*this)) listEnded(i);
    return true;
  }

  double now() override { return now_; }
  runtime::Progress compute(const Action& a, const runtime::ActionContext& c) override {
    if (a.kind == Action::Kind::kGradNorm) return runtime::Progress::kDone;
    RankState& st = ranks_[c.rank];
    return startTask(c.rank, work_.compute(a, c, st), &st.record.computeS);
  }
  runtime::Progress step(const Action& a, const runtime::ActionContext& c) override {
    RankState& st = ranks_[c.rank];
    return startTask(c.rank, work_.step(a, c, st), &st.record.computeS);
  }
  runtime::Progress dpBegin(const Action& a, const runtime::ActionContext& c) override {
    RankState& st = ranks_[c.rank];
    st.round = a.round;
    st.ownSent = false;
    return startTask(c.rank, work_.dpBegin(c.rank, st.round), &st.other);
  }
  runtime::Progress dpEnd(const Action&, const runtime::ActionContext& c) override {
    RankState& st = ranks_[c.rank];
    return startTask(c.rank, work_.dpEnd(c.rank, st.round), &st.other);
  }
  runtime::Progress outerStep(const Action&, const runtime::ActionContext& c) override {
    return startTask(c.rank, work_.outerStep(c.rank), &ranks_[c.rank].other);
  }
  runtime::Progress send(const Action& a, const runtime::ActionContext& c) override {
    const int i = c.rank;
    RankState& st = ranks_[i];
    st.postKey = MailKey::of(i, c.peer, a, st.step, st.round, c.chunk);
    double seconds = 0;
    st.postBytes = bill_.send(i, a, st, &seconds);
    st.postAfter = true;
    if (startTask(i, seconds, &st.record.encodeS) == runtime::Progress::kPending)
      return runtime::Progress::kPending;
    post(i);
    return runtime::Progress::kDone;
  }
  runtime::Progress recv(const Action&, const runtime::ActionContext& c) override {
    RankState& st = ranks_[c.rank];
    st.mode = Mode::kWaiting;
    st.waitStart = now_;
    st.arrival = -1;
    if (!collect(c.rank) || st.arrival > now_) return runtime::Progress::kPending;
    return endWait(c.rank);
  }

  // A waiting rank looks for its message (the executor's peer and chunk); once it is there its
  // arrival is known.
  bool collect(int i) {
    RankState& st = ranks_[i];
    const runtime::ActionContext& c = execs_[i].context();
    const MailKey k = MailKey::of(c.peer, i, execs_[i].current(), st.step, st.round, c.chunk);
    const Mailroom::Found found = mail_.take(k, &st.arrival, &st.recvBytes);
    // Not sent yet: woken when it is posted; in the packet network: when it is delivered.
    if (found == Mailroom::Found::kInFlight || (found == Mailroom::Found::kNotYet && waking()))
      mail_.await(k, i);
    return found == Mailroom::Found::kHere;
  }
  // network.model ns3: message k reached its receiver at t; whoever waits for it goes on.
  void delivered(const MailKey& k, double t) {
    now_ = t;
    mail_.arrived(k, t);
    const std::optional<int> w = mail_.waiter(k);
    if (!w) return;  // nobody waits yet: the receiver finds it arrived
    if (!collect(*w))
      throw std::logic_error("simulator: a delivered message was not found by its receiver");
    finishWait(*w);
    wakeAndDrain(*w);
  }

  // The awaited message has arrived: the wait ends, decoding starts.
  runtime::Progress endWait(int i) {
    RankState& st = ranks_[i];
    st.record.waitS += now_ - st.waitStart;
    st.waitedS += now_ - st.waitStart;
    st.mode = Mode::kReady;
    return startTask(i, bill_.receive(i, execs_[i].current(), st, st.recvBytes),
                     &st.record.decodeS);
  }
  // ... as the loop finds it (the executor's action is pending).
  void finishWait(int i) override {
    if (endWait(i) == runtime::Progress::kDone) complete(i);
  }
  // Host work of `seconds` at full speed; a free one is done at once.
  runtime::Progress startTask(int i, double seconds, double* bucket) {
    if (seconds <= 0) return runtime::Progress::kDone;
    RankState& st = ranks_[i];
    st.mode = Mode::kBusy;
    st.remaining = seconds;
    st.taskStart = now_;
    st.bucket = bucket;
    return runtime::Progress::kPending;
  }
  void finishTask(int i) override {
    RankState& st = ranks_[i];
    *st.bucket += now_ - st.taskStart;
    st.mode = Mode::kReady;
    complete(i);
  }
  // The pending action is done at now_ (a send's message leaves: its encode has ended).
  void complete(int i) {
    if (ranks_[i].postAfter) post(i);
    execs_[i].finish(*this);
  }
  // The send in hand posts its message at now_; a rank waiting for it can go on.
  void post(int i) {
    RankState& st = ranks_[i];
    const bool stamped = mail_.post(st.postKey, st.postBytes, now_,
                                    [this](const MailKey& k, double t) { delivered(k, t); });
    if (stamped && waking())
      if (const std::optional<int> w = mail_.waiter(st.postKey)) wake(*w);
    st.postAfter = false;
  }

  void startList(int i, std::vector<Action> list, bool evaluation) {
    runtime::ActionContext where;
    where.step = ranks_[i].step;
    ranks_[i].evaluating = evaluation;
    execs_[i].start(std::move(list), where, now_, ranks_[i].onTimeline && !evaluation);
  }
  // Rank i's list has ended at now_: record its step (or its evaluation), start what follows.
  void listEnded(int i) {
    RankState& st = ranks_[i];
    runtime::StepExecutor& ex = execs_[i];
    rec_.actions += static_cast<int64_t>(ex.list().size());
    if (st.evaluating) {  // the evaluation after st.step is done: the next step starts now
      rec_.evalTimes[st.step] = std::max(rec_.evalTimes[st.step], now_ - ex.started());
      rec_.evalEnds[st.step] = std::max(rec_.evalEnds[st.step], now_);
      // Its waits, encodes and decodes are the evaluation's, not the next step's (they were billed
      // to it: a step's wait longer than the step, "wait share 1.644").
      st.record = runtime::RankStepRecord{};
      return nextStep(i);
    }
    runtime::RankStepRecord& r = st.record;
    r.rank = i;
    r.step = st.step;
    r.epoch = plan_.epochOf(st.step);
    r.timeS = now_ - ex.started();
    r.dpS = ex.dpSeconds();
    rec_.stepEnds[st.step] = std::max(rec_.stepEnds[st.step], now_);
    rec_.perRank[st.step][i] = std::move(r);
    r = runtime::RankStepRecord{};
    st.other = 0;
    if (st.step == steps_ - 1 && st.onTimeline) rec_.lastEvents[i] = ex.events();
    if (plan_.evaluatesAfter(st.step) &&
        runtime::protocol::evaluatingReplica(layout_.id(i).replica))
      return startList(i, plan_.evalList(i), true);
    nextStep(i);
  }
  void nextStep(int i) {
    RankState& st = ranks_[i];
    if (i == 0 && opt_.progress) opt_.progress(st.step + 1, steps_);  // rank 0's steps done
    if (++st.step == steps_)
      st.mode = Mode::kDone;
    else
      startList(i, plan_.stepList(i, st.step), false);
  }

  const runtime::RunSpec& spec_;
  const Profile& profile_;
  SimOptions opt_;
  int R_, N_, steps_;
  runtime::RankLayout layout_;
  emulator::Topology topo_, dpTopo_;  // the pipeline's links, the replicas' (R > 1)
  ReplayPlan plan_;
  ComputeBill work_;
  MessageBill bill_;
  Mailroom mail_;
  std::vector<runtime::StepExecutor> execs_;  // by rank
  bool sharedHost_ = false;
  Records rec_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace

bool dataPlanOf(const runtime::RunSpec& spec, SimOptions* opt, std::string* why) {
  try {
    runtime::prepareCorpus(spec.data);
    const runtime::Plan plan(spec, "finetune");  // the workers' own data plan
    if (plan.epochs.stepsPerEpoch() <= 0)
      throw std::runtime_error("fewer training examples than one step takes");
    opt->stepsPerEpoch = plan.epochs.stepsPerEpoch();
    opt->epochs = plan.epochs;
    opt->runSteps = plan.totalSteps;
    opt->evalRows.clear();
    for (const auto& batch : runtime::evalBatches(plan.val.size(), spec.pipeline.microBatchSize))
      opt->evalRows.push_back(static_cast<int>(batch.size()));
    return true;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
}

void declareStepsPerEpoch(const runtime::RunSpec& spec, int64_t n, SimOptions* opt) {
  const int perStep = spec.pipeline.microBatches * spec.pipeline.replicas;
  opt->stepsPerEpoch = n;
  opt->runSteps = n * spec.training.epochs;
  if (spec.training.maxSteps > 0) opt->runSteps = std::min(opt->runSteps, spec.training.maxSteps);
  opt->epochs.emplace(n * perStep * spec.pipeline.microBatchSize, perStep,
                      spec.pipeline.microBatchSize, spec.training.seed);
}

void qualityCurveOf(const std::string& path, SimOptions* opt) {
  const json j = runtime::readJsonFile(path, "quality curve");
  std::vector<std::pair<double, double>> curve;
  double steps = 0;
  auto point = [&](const json& step, const json& loss, const std::string& where) {
    if (!step.is_number() || step.get<double>() < 0)
      throw std::invalid_argument("quality curve '" + path + "': " + where + ": step " +
                                  step.dump() + " is not a step count >= 0");
    if (loss.is_null()) return;  // an evaluation without a loss (a simulated run's)
    if (!loss.is_number() || !std::isfinite(loss.get<double>()))
      throw std::invalid_argument("quality curve '" + path + "': " + where + ": validation loss " +
                                  loss.dump() + " is not a number");
    if (!curve.empty() && step.get<double>() <= curve.back().first)
      throw std::invalid_argument("quality curve '" + path + "': " + where +
                                  ": steps must increase (" + step.dump() + " after " +
                                  std::to_string(curve.back().first) + ")");
    curve.push_back({step.get<double>(), loss.get<double>()});
  };
  if (j.is_object() && j.contains("evals") && j["evals"].is_array()) {
    for (size_t k = 0; k < j["evals"].size(); ++k) {
      const json& e = j["evals"][k];
      const std::string where = "evals[" + std::to_string(k) + "]";
      if (!e.is_object())
        throw std::invalid_argument("quality curve '" + path + "': " + where +
                                    ": expected an object");
      point(e.value("step", json()), e.value("val_loss", json()), where);
    }
    steps = j.contains("steps") && j["steps"].is_array() && !j["steps"].empty()
                ? static_cast<double>(j["steps"].size())
                : (curve.empty() ? 0 : curve.back().first);
  } else if (j.is_array()) {
    for (size_t k = 0; k < j.size(); ++k) {
      const std::string where = "[" + std::to_string(k) + "]";
      if (!j[k].is_array() || j[k].size() != 2)
        throw std::invalid_argument("quality curve '" + path + "': " + where +
                                    ": expected [step, val_loss]");
      point(j[k][0], j[k][1], where);
    }
    steps = curve.empty() ? 0 : curve.back().first;
  } else {
    throw std::invalid_argument(
        "quality curve '" + path +
        "': expected a result.json (with \"evals\") or an array of [step, val_loss]");
  }
  if (curve.empty() || steps <= 0)
    throw std::invalid_argument("quality curve '" + path +
                                "': no evaluation with a validation loss after step 0");
  opt->quality = std::move(curve);
  opt->qualitySteps = steps;
  opt->qualitySource = path;
}

std::string projectionText(const json& doc, double targetLoss) {
  const json& steps = doc["steps"];
  if (steps.empty()) return "";
  double total = 0, first = 0, later = 0;
  int64_t nFirst = 0, nLater = 0;
  int maxEpoch = 0;
  for (const auto& st : steps) {
    const double t = st["time_s"].get<double>();
    const int e = st.value("epoch", 0);
    maxEpoch = std::max(maxEpoch, e);
    (e == 0 ? first : later) += t;
    (e == 0 ? nFirst : nLater) += 1;
  }
  total = doc["summary"].value("wall_time_s", 0.0);
  for (const auto& e : doc.value("evals", json::array()))
    if (e.value("wall_s", json()).is_number()) total = std::max(total, e["wall_s"].get<double>());
  char b[512];
  std::snprintf(
      b, sizeof b,
      "projected run: %zu steps, %d epoch(s), total %.1f s (%.2f h); epoch 0 step %.4f s (n=%lld)",
      steps.size(), maxEpoch + 1, total, total / 3600, nFirst ? first / nFirst : 0.0,
      static_cast<long long>(nFirst));
  std::string out = b;
  if (nLater) {
    std::snprintf(b, sizeof b, ", later epochs %.4f s (n=%lld)", later / nLater,
                  static_cast<long long>(nLater));
    out += b;
  }
  out += "\n";
  if (targetLoss > 0) {
    for (const auto& e : doc.value("evals", json::array()))
      if (e.value("val_loss", json()).is_number() && e["val_loss"].get<double>() <= targetLoss) {
        std::snprintf(b, sizeof b,
                      "time to target (validation loss <= %g): %.1f s (%.2f h), at the evaluation "
                      "after step %lld "
                      "(projected loss %.4f)\n",
                      targetLoss, e["wall_s"].get<double>(), e["wall_s"].get<double>() / 3600,
                      static_cast<long long>(e["step"].get<int64_t>()),
                      e["val_loss"].get<double>());
        return out + b;
      }
    std::snprintf(b, sizeof b,
                  "time to target (validation loss <= %g): not reached in the projected run\n",
                  targetLoss);
    out += b;
  }
  return out;
}

int defaultSteps(const runtime::RunSpec& spec, const SimOptions& opt) {
  // A bandwidth that follows a trace: the run's every step, so the trace's phases line up.
  auto traced = [](const emulator::Topology& t) {
    bool any = !t.defaultLink.trace.empty();
    for (const auto& [pair, link] : t.overrides) any |= !link.trace.empty();
    return any;
  };
  // A straggler whose speed changes during the run (runtime.slowdown trace) likewise.
  bool slowdownChanges = false;
  for (const auto& r : spec.runtime.slowdown.ranks)
    slowdownChanges |= r.trace.size() > 1 || r.trace.at(0).first > 0;
  const bool varies = traced(emulator::topologyFromJson(spec.network.links, "network.links")) ||
                      (spec.pipeline.replicas > 1 && traced(runtime::dpTopology(spec))) ||
                      slowdownChanges;
  (void)varies;
  // The run the spec describes, every epoch and evaluation, when its data plan is known.
  if (opt.runSteps >= 2) return static_cast<int>(std::min<int64_t>(opt.runSteps, 100000));
  if (spec.pipeline.replicas == 1) return 4;
  // The run's steps (max_steps, or fewer when the data plan ends first: it replayed 6 of a 2-step
  // run).
  if (spec.training.maxSteps > 0)
    return static_cast<int>(
        std::min<int64_t>(opt.runSteps >= 2 ? opt.runSteps : spec.training.maxSteps, 100000));
  const int64_t warmup = runtime::gradientCompressor(spec.dp)->warmupSteps();
  return static_cast<int>(std::min<int64_t>(warmup + 4 * spec.dp.localSteps, 100000));
}

json simulateRun(const runtime::RunSpec& spec, const Profile& profile, const SimOptions& opt) {
  const int steps = opt.steps > 0 ? opt.steps : defaultSteps(spec, opt);
  if (steps < 2)
    throw std::invalid_argument("simulator: at least 2 steps (the first fills the pipeline)");
  const Profile mine =
      profile.forSchedule(spec.pipeline.schedule);  // the speeds fitted to this schedule, if any
  json doc = Replay(spec, mine, steps, opt).run();
  doc["simulator"]["data_plan"] =
      opt.stepsPerEpoch > 0 ? json{{"steps_per_epoch", opt.stepsPerEpoch},
                                   {"run_steps", opt.runSteps},
                                   {"eval_batches", opt.evalRows.size()}}
                            : json(
                                  "unknown (no corpus): the run's first steps, epoch 0 (AC-SGD "
                                  "sends them in full), no evaluation");
  if (!opt.quality.empty())
    doc["simulator"]["quality_curve"] = {{"source", opt.qualitySource},
                                         {"points", opt.quality.size()},
                                         {"curve_steps", opt.qualitySteps},
                                         {"mapped", "by progress"}};
  return doc;
}

}  // namespace slowpipe::simulator
