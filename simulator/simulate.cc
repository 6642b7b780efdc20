// The discrete-event replay (see simulate.h).
#include "simulator/simulate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#include "compression/codec.h"
#include "compression/frame.h"
#include "emulator/link.h"
#include "emulator/link_model.h"
#include "emulator/shaped_socket.h"
#include "runtime/data.h"
#include "runtime/dp.h"
#include "runtime/executor.h"
#include "runtime/link_table.h"
#include "runtime/plan.h"
#include "runtime/protocol.h"
#include "runtime/ranks.h"
#include "runtime/records.h"
#include "runtime/result.h"
#include "runtime/schedule.h"
#include "simulator/packet_network.h"

namespace slowpipe::simulator {

using nlohmann::json;
using runtime::Action;

// The frame of a message of `shape` (examples 0..rows-1 when exampleIds) encoded by a codec that
// has sent the last `seenRows` rows before (acsgd: those a delta, the others in full): a fresh
// codec first encodes those rows alone, then the whole message is measured. Without example ids
// (a DP chunk) seenRows is 0 or all of it: the same values once before.
static int64_t frameBytesOf(const std::string& codecSpec, const std::vector<int64_t>& shape,
                            bool exampleIds, int64_t seenRows) {
  auto codec = compression::makeCodec(codecSpec);
  const int64_t n = compression::numelOf(shape);
  const int64_t rows = shape.empty() ? 0 : shape[0];
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    x[i] = static_cast<float>((i * 7919 % 1000) - 500) * 1e-3f;  // finite, varied
  compression::CodecContext ctx;
  ctx.epoch = seenRows > 0 ? 1 : 0;
  auto encode = [&](int64_t from) {  // rows from..rows-1
    compression::FrameHeader h;
    h.shape = shape;
    if (exampleIds) {
      h.shape[0] = rows - from;
      for (int64_t r = from; r < rows; ++r) h.exampleIds.push_back(r);
    }
    ctx.exampleIds = h.exampleIds;
    const int64_t at = exampleIds && rows > 0 ? from * (n / rows) : 0;
    return static_cast<int64_t>(compression::encodeFrame(*codec, x.data() + at, h, ctx).size());
  };
  if (seenRows > 0) encode(exampleIds ? rows - seenRows : 0);
  return encode(0);
}

int64_t steadyFrameBytes(const std::string& codecSpec, const std::vector<int64_t>& shape,
                         bool exampleIds) {
  return frameBytesOf(codecSpec, shape, exampleIds,
                      shape.empty() ? 1 : std::max<int64_t>(1, shape[0]));
}

int64_t firstFrameBytes(const std::string& codecSpec, const std::vector<int64_t>& shape) {
  return frameBytesOf(codecSpec, shape, true, 0);
}

int64_t mixedFrameBytes(const std::string& codecSpec, const std::vector<int64_t>& shape,
                        int64_t seenRows) {
  return frameBytesOf(codecSpec, shape, true, seenRows);
}

namespace {

struct Message {
  double sentAt = 0,
         arrival = -1;  // arrival < 0: unstamped, the receiver's part of the link model bills it
  int64_t bytes = 0;
  bool inFlight =
      false;  // network.model ns3: on its way through the packet network, arrival not yet known
};

// A message's key on its link (runtime/protocol.h: kind, step, micro-batch (a DP message: its
// shard), boundary chunk; DP messages add their round; -1 for a pipeline message).
struct MailKey {
  int from, to, step, microBatch, chunk, round;
  Action::Message message;
  bool operator==(const MailKey& o) const {
    return from == o.from && to == o.to && step == o.step && microBatch == o.microBatch &&
           chunk == o.chunk && round == o.round && message == o.message;
  }
};
struct MailKeyHash {
  size_t operator()(const MailKey& k) const {
    size_t h = 0;
    for (const int v :
         {k.from, k.to, k.step, k.microBatch, k.chunk, k.round, static_cast<int>(k.message)})
      h = (h ^ static_cast<size_t>(static_cast<unsigned>(v))) *
          0x100000001B3ull;  // FNV-1a over the fields
    return h;
  }
};

// A worker (rank = stage x R + replica) is ready for its next action, busy on the host (compute or
// codec work, `remaining` seconds of it at full speed), or waiting for a message (its arrival known
// or not yet). Its executor (runtime/executor.h) walks its list; this is what the virtual
// backend keeps of it besides.
struct RankState {
  enum class Mode { kReady, kBusy, kWaiting, kDone } mode = Mode::kReady;
  int step = 0;
  runtime::RankStepRecord
      record;            // of the step in hand (its times: compute, encode, decode, wait; bytes)
  double other = 0;      // DP packing, outer step: in the step's time, in no column
  int round = 0;         // the DP round in progress
  bool ownSent = false;  // this round's own chunk (ring) / shard average (ps) is encoded
  // busy: the task
  double remaining = 0, taskStart = 0;
  double* bucket = nullptr;
  bool postAfter = false;  // the action is a send: post the message when its encode ends
  MailKey postKey{};
  int64_t postBytes = 0;
  // waiting
  double waitStart = 0, arrival = -1;
  double waitedS =
      0;  // waited since its last compute event (StageCost::idle: the next one pays it)
  runtime::SlowdownMeter
      slowdown;  // runtime.slowdown: compute at full speed, and the straggler's extra
  int64_t recvBytes = 0;
  bool onTimeline = false;
  bool evaluating = false;  // replaying the evaluation after its step (evalSchedule)
  std::set<std::pair<int, std::string>> warmed;  // (virtual stage, kind) whose first event has run
  uint64_t generation = 0;  // of its pending event in the queue (older ones are stale)
};

// The virtual backend (runtime/executor.h) and its global discrete-event loop. Host work (forward,
// backward, step, encode, decode, DP packing) is shared among the busy workers when the profile
// describes a shared host: each of n busy workers runs at the profile's measured speed for n
// (host_speed), else at min(1, host_cores/n) (processor sharing); without either, every worker has
// its own device and runs at full speed.
class Replay : public runtime::Backend {
 public:
  Replay(const runtime::RunSpec& spec, const Profile& profile, int steps, const SimOptions& opt)
      : spec_(spec),
        profile_(profile),
        opt_(opt),
        S_(spec.pipeline.stages),
        R_(spec.pipeline.replicas),
        N_(S_ * R_),
        steps_(steps),
        layout_(runtime::rankLayout(spec)),
        topo_(emulator::topologyFromJson(spec.network.links, "network.links")),
        dp_(runtime::dpShape(spec)),
        ranks_(N_) {
    for (int i = 0; i < N_; ++i) execs_.emplace_back(layout_, i);
    const int virtualStages = S_ * layout_.chunks;  // the profile has one entry per virtual stage
    if (static_cast<int>(profile.stages.size()) != virtualStages)
      throw std::invalid_argument("profile has " + std::to_string(profile.stages.size()) +
                                  " stages, the spec " + std::to_string(virtualStages) +
                                  " (profile the same partition)");
    const std::vector<int64_t> act = {spec.pipeline.microBatchSize, spec.model.seqLen,
                                      spec.model.width};
    rawActBytes_ = 4 * compression::numelOf(act);
    fwdBytes_ = steadyFrameBytes(spec.compression.forward, act);
    bwdBytes_ = steadyFrameBytes(spec.compression.backward, act);
    fwdFirstBytes_ = firstFrameBytes(spec.compression.forward, act);
    bwdFirstBytes_ = firstFrameBytes(spec.compression.backward, act);
    ctlBytes_ = steadyFrameBytes("none", {runtime::protocol::kControlValues}, false);  // no ids
    freshRows();
    if (R_ > 1) {
      // The replicas' links: their own topology, always the pipelined model (as in the emulator).
      dpTopo_ = runtime::dpTopology(spec);
      for (int s = 0; s < S_; ++s) {
        dpValues_.emplace_back();
        for (int k = 0; k < dp_.rounds; ++k)
          dpValues_.back().push_back(runtime::dpRoundValues(spec, s, k));
        dpCosts_.push_back(profile.dpCost(spec, s));
      }
    }
    inbound_.resize(N_);
    // The timeline: every rank up to 64 workers, else replica 0 of every stage (a 2048-worker
    // timeline would be millions of events nobody plots).
    for (int i = 0; i < N_; ++i) ranks_[i].onTimeline = N_ <= kTimelineRanks || i % R_ == 0;
    sharedHost_ = !profile.hostSpeed.empty() || (profile.hostCores > 0 && profile.hostCores < N_);
  }

  static constexpr int kTimelineRanks = 64;

  json run() {
    perRank_.assign(steps_, std::vector<runtime::RankStepRecord>(N_));
    evalTimes_.assign(steps_, 0.0);
    evalEnds_.assign(steps_, 0.0);
    stepEnds_.assign(steps_, 0.0);
    for (int i = 0; i < N_; ++i) startList(i, planOf(i, 0), false);
    if (spec_.network.model == "ns3") {
      if (sharedHost_)
        throw std::invalid_argument(
            "network.model ns3: the profile describes workers sharing a host's cores; the ns-3 "
            "tier "
            "replays workers with a device each (an analytic profile, or one without host_speed)");
      packet_ = makeNs3Network(spec_, linkTable_);
      loopPacket();
    } else if (sharedHost_) {
      loopShared();
    } else {
      loopDedicated();
    }
    for (const auto& [k, l] : links_)  // SLOWPIPE_LINK_DRAWS: as the emulator's channels write them
      emulator::writeLinkDraws(static_cast<int>(k >> 32), static_cast<int>(k & 0xffffffffu),
                               l.clock);
    // The same result document as the launcher's (runtime/records.h ResultBuilder), on virtual
    // time.
    runtime::ResultBuilder result(spec_, layout_, "ok");
    for (int k = 0; k < steps_; ++k) result.addStep(perRank_[k], stepEnds_[k]);
    for (const runtime::EvalRecord& e : evals()) result.addEval(e);
    std::map<int, json> events;
    for (int i = 0; i < N_; ++i) {
      if (!ranks_[i].onTimeline) continue;
      json& ev = events[i] = json::array();
      for (const auto& e : lastEvents_[i])
        ev.push_back(runtime::toJson(e, layout_.chunks > 1, false));  // the worker's form
    }
    result.setTimeline(events);
    result["simulated"] = true;
    result["network"] = {
        {"backend", "simulated"}, {"model", spec_.network.model}, {"links", topo_}};
    if (spec_.network.model ==
        "tcp") {  // one figure where the kernel has two (emulator::tcpBimodality)
      const json flagged = emulator::tcpBimodalLinks(
          topo_, emulator::tcpSettingsFromJson(spec_.network.tcp, "network.tcp").congestionControl);
      if (!flagged.empty()) result["network"]["tcp_bimodal"] = flagged;
    }
    if (R_ > 1) {
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
    result["message_bytes"] = {{"forward", fwdBytes_},
                               {"backward", bwdBytes_},
                               {"control", ctlBytes_},
                               {"raw", rawActBytes_},
                               {"forward_first_epoch", fwdFirstBytes_},
                               {"backward_first_epoch", bwdFirstBytes_}};
    if (!spec_.runtime.slowdown.empty())
      for (int r = 0; r < N_; ++r)
        result["slowdown"][std::to_string(r)] = {
            {"effective_speed", ranks_[r].slowdown.effectiveSpeed()},
            {"compute_s", ranks_[r].slowdown.computeS},
            {"stalled_s", ranks_[r].slowdown.stalledS},
            {"owed_s", ranks_[r].slowdown.owedS}};
    json doc = result.snapshot();
    if (!spec_.network.nodes.is_null()) doc["network"]["nodes"] = linkTable_.nodesRecord();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    if (opt_.recordMessages) doc["messages"] = messages_;
    if (packet_) doc["network"]["packet_network"] = packet_->describe();
    doc["simulator"] = {
        {"events", actions_},
        {"wall_s", wall},
        {"events_per_s", actions_ / std::max(wall, 1e-9)},
        {"loop", packet_       ? "ns-3's scheduler"
                 : sharedHost_ ? "shared host (every event re-times all busy workers)"
                               : "event queue"},
        {"timeline_ranks", N_ <= kTimelineRanks ? "all" : "replica 0 of every stage"}};
    return doc;
  }

 private:
  using Mode = RankState::Mode;

  int rankOf(int stage, int replica) const { return stage * R_ + replica; }

  // The run's epoch of step k (without a data plan: 0, the first steps of any run).
  int epochOf(int64_t k) const {
    return opt_.stepsPerEpoch > 0 ? static_cast<int>(k / opt_.stepsPerEpoch) : 0;
  }
  // The quality curve's validation loss at the run's step k (after k steps), or none.
  std::optional<double> curveLossAt(int64_t k) const {
    const auto& c = opt_.quality;
    if (c.empty() || opt_.runSteps <= 0) return std::nullopt;
    // By progress: the curve's point at its step s of qualitySteps lands at s * runSteps /
    // qualitySteps.
    const double scale =
        opt_.qualitySteps > 0 ? static_cast<double>(opt_.runSteps) / opt_.qualitySteps : 1.0;
    const double x = static_cast<double>(k);
    if (x < c.front().first * scale - 1e-9) return std::nullopt;
    for (size_t j = 1; j < c.size(); ++j) {
      const double x0 = c[j - 1].first * scale, x1 = c[j].first * scale;
      if (x <= x1 + 1e-9)
        return x1 > x0 ? c[j - 1].second + (c[j].second - c[j - 1].second) * (x - x0) / (x1 - x0)
                       : c[j].second;
    }
    return x <= c.back().first * scale + 1e-9 ? std::optional<double>(c.back().second)
                                              : std::nullopt;
  }
  // Whether the run evaluates after step k (the end of an epoch; the run's last step when the
  // whole run is replayed); replica 0 of every stage evaluates, as in the runtime.
  bool evaluatesAfter(int k) const {
    if (opt_.evalRows.empty() || opt_.stepsPerEpoch <= 0) return false;
    return spec_.training.evaluatesAfter(
        k + 1, (k + 1) % opt_.stepsPerEpoch == 0 || (k + 1 == steps_ && steps_ == opt_.runSteps));
  }
  std::vector<runtime::EvalRecord> evals() const {
    std::vector<runtime::EvalRecord> out;
    for (int k = 0; k < steps_; ++k)
      if (evaluatesAfter(k)) {
        runtime::EvalRecord e;  // no loss (nothing is computed) unless a quality curve gives one
        e.epoch = static_cast<int>(k / opt_.stepsPerEpoch);
        e.valLoss = curveLossAt(k + 1);
        e.step = k + 1;
        e.timeS = evalTimes_[k];
        e.wallS = evalEnds_[k];
        out.push_back(e);
      }
    return out;
  }
  std::vector<Action> planOf(int i, int step) const {
    return runtime::makeSchedule(spec_.pipeline.schedule, S_, spec_.pipeline.microBatches, i / R_,
                                 dp_, i % R_, step, layout_.chunks);
  }

  // Every rank has a device of its own (speed 1 whatever the others do): an event queue, each
  // rank's next event (a task's end, a known arrival) in it; a rank waiting for a message not yet
  // sent is woken when it is posted. The same replay as loopShared at a cost per event of
  // O(log N) instead of O(N).
  void loopDedicated() {
    std::deque<int> ready;
    for (int i = 0; i < N_; ++i) ready.push_back(i);
    wake_ = &ready;
    while (true) {
      drain(ready);
      if (queue_.empty()) break;
      const auto [t, i, generation] = queue_.top();
      queue_.pop();
      if (generation != ranks_[i].generation) continue;  // superseded
      now_ = t;
      endOfEvent(i);
      ready.push_back(i);
    }
    wake_ = nullptr;
    for (int i = 0; i < N_; ++i)
      if (ranks_[i].mode != Mode::kDone) throw deadlock(i);
  }

  // Every ready rank acts until it is busy, waiting or done, and its next event is scheduled.
  void drain(std::deque<int>& ready) {
    while (!ready.empty()) {
      const int i = ready.front();
      ready.pop_front();
      while (act(i)) {
      }
      schedule(i);
    }
  }
  // Rank i's event at now_: its task ended, or the message it waits for arrived.
  void endOfEvent(int i) {
    RankState& st = ranks_[i];
    if (st.mode == Mode::kBusy) {
      st.remaining = 0;
      finishTask(i);
    } else if (st.mode == Mode::kWaiting) {
      finishWait(i);
    }
  }

  // network.model ns3: the same replay as loopDedicated on the packet network's scheduler; a
  // message's arrival is its delivery there (delivered), which wakes the rank waiting for it.
  void loopPacket() {
    std::deque<int> ready;
    for (int i = 0; i < N_; ++i) ready.push_back(i);
    wake_ = &ready;
    packet_->at(0, [this] {
      now_ = 0;
      drain(*wake_);
    });
    packet_->run();
    wake_ = nullptr;
    for (int i = 0; i < N_; ++i)
      if (ranks_[i].mode != Mode::kDone) throw deadlock(i);
  }
  void packetEvent(int i, uint64_t generation) {
    if (generation != ranks_[i].generation) return;  // superseded
    now_ = packet_->now();
    endOfEvent(i);
    wake_->push_back(i);
    drain(*wake_);
  }
  void logMessage(const MailKey& k, const Message& m, double arrival) {
    messages_.push_back({k.from, k.to, k.step, k.microBatch, k.chunk, k.round,
                         static_cast<int>(k.message), m.bytes, m.sentAt, arrival});
  }
  void delivered(const MailKey& k, double t) {
    now_ = t;
    auto it = mail_.find(k);
    it->second.inFlight = false;
    it->second.arrival = t;
    if (opt_.recordMessages) logMessage(k, it->second, t);
    const auto w = waiting_.find(k);
    if (w == waiting_.end()) return;  // nobody waits yet: the receiver finds it arrived
    const int i = w->second;
    waiting_.erase(w);
    if (!collect(i))
      throw std::logic_error("simulator: a delivered message was not found by its receiver");
    finishWait(i);
    wake_->push_back(i);
    drain(*wake_);
  }

  // Rank i's next event, if it has one: the end of its task, or its message's arrival.
  void schedule(int i) {
    RankState& st = ranks_[i];
    const double t = st.mode == Mode::kBusy      ? now_ + st.remaining
                     : st.mode == Mode::kWaiting ? st.arrival
                                                 : -1;
    if (t < 0) return;
    if (packet_)
      packet_->at(t, [this, i, g = ++st.generation] { packetEvent(i, g); });
    else
      queue_.push({t, i, ++st.generation});
  }

  std::runtime_error deadlock(int i) const {
    return std::runtime_error("simulator: stage " + std::to_string(i / R_) + " replica " +
                              std::to_string(i % R_) + " is blocked at action " +
                              std::to_string(execs_[i].position()) + " of step " +
                              std::to_string(ranks_[i].step) + " (the schedules deadlock)");
  }

  // Workers share the host's cores: every busy worker's speed depends on how many are busy, so
  // each event re-times all of them (O(N) per event; shared hosts have a few workers).
  void loopShared() {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    while (true) {
      // Every worker that can act at now_ does so until it is busy, waiting, or done.
      for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < N_; ++i) changed |= act(i);
      }
      int busy = 0;
      bool done = true;
      for (const auto& st : ranks_) {
        busy += st.mode == Mode::kBusy;
        done &= st.mode == Mode::kDone;
      }
      if (done) return;
      const double rate = profile_.speedWithBusy(busy);
      double next = kInf;
      for (const auto& st : ranks_) {
        if (st.mode == Mode::kBusy) next = std::min(next, now_ + st.remaining / rate);
        if (st.mode == Mode::kWaiting && st.arrival >= 0) next = std::min(next, st.arrival);
      }
      if (next == kInf)
        for (int i = 0; i < N_; ++i)
          if (ranks_[i].mode == Mode::kWaiting) throw deadlock(i);
      const double dt = next - now_;
      now_ = next;
      for (int i = 0; i < N_; ++i) {
        RankState& st = ranks_[i];
        if (st.mode == Mode::kBusy) {
          st.remaining -= dt * rate;
          if (st.remaining <= 1e-12 * std::max(1.0, now_)) finishTask(i);
        } else if (st.mode == Mode::kWaiting && st.arrival >= 0 && st.arrival <= now_) {
          finishWait(i);
        }
      }
    }
  }

  // Runs what rank i can do at now_; true if its state changed.
  bool act(int i) {
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

  // Backend: every action is host work of some seconds at full speed (a send: its encode, then
  // its message leaves), or a wait for a message (then its decode).
  double now() override { return now_; }
  runtime::Progress compute(const Action& a, const runtime::ActionContext& c) override {
    RankState& st = ranks_[c.rank];
    const StageCost& cost = profile_.stages[c.virtualStage];
    if (a.kind == Action::Kind::kGradNorm) return runtime::Progress::kDone;
    if (a.kind ==
        Action::Kind::kEvalForward)  // a forward of the batch's rows (no autograd: billed as one)
      return startTask(c.rank,
                       slowed(st,
                              cost.runFactor * cost.forwardS * opt_.evalRows.at(a.microBatch) /
                                      spec_.pipeline.microBatchSize +
                                  afterIdle(st, cost, "forward"),
                              c.rank, c.step - 1),
                       &st.record.computeS);
    return startTask(c.rank,
                     slowed(st,
                            cost.runFactor * cost.of(a) + warmup(c, c.virtualStage, a) +
                                afterIdle(st, cost, runtime::protocol::eventName(a)),
                            c.rank, c.step),
                     &st.record.computeS);
  }
  // runtime.slowdown: a straggler's compute takes its cost / its speed at that step.
  double slowed(RankState& st, double seconds, int rank, int64_t step) const {
    const double speed = spec_.runtime.slowdown.speedAt(rank, std::max<int64_t>(step, 0));
    st.slowdown.computeS += seconds;
    st.slowdown.stalledS += seconds / speed - seconds;
    st.slowdown.owedS += seconds / speed - seconds;
    return seconds / speed;
  }
  runtime::Progress step(const Action& a,
                         const runtime::ActionContext& c) override {  // every model chunk's
    RankState& st = ranks_[c.rank];
    const size_t stage = static_cast<size_t>(c.rank / R_);
    return startTask(
        c.rank,
        slowed(st,
               profile_.stages[stage].runFactor * stepSeconds(profile_.stages, stage, S_) +
                   warmup(c, c.rank / R_, a) + afterIdle(st, profile_.stages[stage], "step"),
               c.rank, c.step),
        &st.record.computeS);
  }
  // What the wait since the rank's last compute event adds to this one (StageCost::idle).
  static double afterIdle(RankState& st, const StageCost& cost, const char* what) {
    const double extra = cost.idle.at(what, st.waitedS);
    st.waitedS = 0;
    return extra;
  }
  // The first step's extra (StageCost::warmupS) on the first event of its kind of virtual stage v.
  double warmup(const runtime::ActionContext& c, int v, const Action& a) {
    const auto& extra = profile_.stages[static_cast<size_t>(v)].warmupS;
    if (c.step != 0 || extra.empty()) return 0;
    const char* what = runtime::protocol::eventName(a);
    const auto it = extra.find(what);
    if (it == extra.end() || !ranks_[c.rank].warmed.insert({v, what}).second) return 0;
    return it->second;
  }
  runtime::Progress dpBegin(const Action& a, const runtime::ActionContext& c) override {
    RankState& st = ranks_[c.rank];
    st.round = a.round;
    st.ownSent = false;
    return startTask(c.rank, perRound(dpCosts_[c.rank / R_].beginS, st.round), &st.other);
  }
  runtime::Progress dpEnd(const Action&, const runtime::ActionContext& c) override {
    return startTask(c.rank, perRound(dpCosts_[c.rank / R_].endS, ranks_[c.rank].round),
                     &ranks_[c.rank].other);
  }
  runtime::Progress outerStep(const Action&, const runtime::ActionContext& c) override {
    return startTask(c.rank, dpCosts_[c.rank / R_].outerStepS, &ranks_[c.rank].other);
  }
  runtime::Progress send(const Action& a, const runtime::ActionContext& c) override {
    const int i = c.rank;
    RankState& st = ranks_[i];
    st.postKey = key(i, c.peer, a, st.step, st.round, c.chunk);
    double seconds = 0;
    st.postBytes = sendBytesAndCost(i, a, &seconds);
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

  static double perRound(const std::vector<double>& v, int round) {
    return round < static_cast<int>(v.size()) ? v[round] : 0.0;
  }

  // A waiting rank looks for its message; once it is there its arrival is known (one the sender
  // left unstamped is billed now, in this receiver's retrieval order, by its part of the link
  // model: serial_fifo's one inbound wire).
  bool collect(int i) {
    RankState& st = ranks_[i];
    const runtime::ActionContext& c = execs_[i].context();  // the executor's peer and chunk
    const int peer = c.peer;
    const MailKey k = key(peer, i, execs_[i].current(), st.step, st.round, c.chunk);
    const auto it = mail_.find(k);
    if (it == mail_.end()) {
      if (wake_) waiting_[k] = i;  // woken when it is posted
      return false;
    }
    if (it->second.inFlight) {  // posted, still in the packet network
      waiting_[k] = i;
      return false;
    }
    Message m = it->second;
    mail_.erase(it);
    if (m.arrival < 0) {  // the sender's part left it to the receiving rank's (serial_fifo)
      const Link& l = link(peer, i);
      if (!inbound_[i]) inbound_[i] = emulator::linkModel(l.entry.model).make();
      m.arrival = inbound_[i]->bill(l.entry.spec, m.sentAt, static_cast<uint64_t>(m.bytes));
      if (opt_.recordMessages) logMessage(k, m, m.arrival);  // billed only now
    }
    st.arrival = m.arrival;
    st.recvBytes = m.bytes;
    return true;
  }

  // The awaited message has arrived: the wait ends, decoding starts.
  runtime::Progress endWait(int i) {
    RankState& st = ranks_[i];
    st.record.waitS += now_ - st.waitStart;
    st.waitedS += now_ - st.waitStart;
    st.mode = Mode::kReady;
    return startTask(i, recvCost(i, execs_[i].current(), st.recvBytes), &st.record.decodeS);
  }
  // ... as the loop finds it (the executor's action is pending).
  void finishWait(int i) {
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

  void finishTask(int i) {
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

  // The send in hand posts its message at now_.
  void post(int i) {
    RankState& st = ranks_[i];
    Message m{now_, -1, st.postBytes};
    if (packet_) {  // the packet network delivers it; whoever waits for it wakes then (delivered)
      m.inFlight = true;
      mail_[st.postKey] = m;
      packet_->send(i, execs_[i].context().peer, static_cast<uint64_t>(st.postBytes),
                    [this, k = st.postKey](double t) { delivered(k, t); });
      st.postAfter = false;
      return;
    }
    Link& l = link(i, execs_[i].context().peer);
    m.arrival = l.sender->stamp(l.clock, now_, static_cast<uint64_t>(st.postBytes));
    if (l.entry.access.active() &&
        m.arrival >= 0)  // network.nodes: the path's access links, shared by the nodes' connections
      m.arrival = std::max(m.arrival,
                           access_.send(l.entry.access, now_, static_cast<uint64_t>(st.postBytes)));
    mail_[st.postKey] = m;
    if (opt_.recordMessages && m.arrival >= 0) logMessage(st.postKey, m, m.arrival);
    if (wake_) {
      const auto w = waiting_.find(st.postKey);
      if (w != waiting_.end()) {
        wake_->push_back(w->second);
        waiting_.erase(w);
      }
    }
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
    actions_ += static_cast<int64_t>(ex.list().size());
    if (st.evaluating) {  // the evaluation after st.step is done: the next step starts now
      evalTimes_[st.step] = std::max(evalTimes_[st.step], now_ - ex.started());
      evalEnds_[st.step] = std::max(evalEnds_[st.step], now_);
      // Its waits, encodes and decodes are the evaluation's, not the next step's (they were billed
      // to it: a step's wait longer than the step, "wait share 1.644").
      st.record = runtime::RankStepRecord{};
      return nextStep(i);
    }
    runtime::RankStepRecord& r = st.record;
    r.rank = i;
    r.step = st.step;
    r.epoch = epochOf(st.step);
    r.timeS = now_ - ex.started();
    r.dpS = ex.dpSeconds();
    stepEnds_[st.step] = std::max(stepEnds_[st.step], now_);
    perRank_[st.step][i] = std::move(r);
    r = runtime::RankStepRecord{};
    st.other = 0;
    if (st.step == steps_ - 1 && st.onTimeline) lastEvents_[i] = ex.events();
    if (evaluatesAfter(st.step) && i % R_ == 0)
      return startList(
          i,
          runtime::evalSchedule(S_, static_cast<int>(opt_.evalRows.size()), i / R_, layout_.chunks),
          true);
    nextStep(i);
  }
  void nextStep(int i) {
    RankState& st = ranks_[i];
    if (i == 0 && opt_.progress) opt_.progress(st.step + 1, steps_);  // rank 0's steps done
    if (++st.step == steps_)
      st.mode = Mode::kDone;
    else
      startList(i, planOf(i, st.step), false);
  }

  double evalRawBytes(int batch) const {
    return 4.0 * opt_.evalRows.at(batch) * spec_.model.seqLen * spec_.model.width;
  }
  int64_t evalFrameBytes(int batch) {
    const int rows = opt_.evalRows.at(batch);
    auto it = evalFrames_.find(rows);
    if (it == evalFrames_.end())
      it = evalFrames_
               .emplace(rows,
                        steadyFrameBytes("none", {rows, spec_.model.seqLen, spec_.model.width}))
               .first;
    return it->second;
  }
  // The examples of each replayed step's micro-batches that their replica's pipeline meets for the
  // first time: the run's epoch order (SimOptions::epochs), each replica's micro-batch mb of step
  // k being the plan's micro-batch replica x M + mb (runtime/plan.h).
  void freshRows() {
    if (!opt_.epochs || opt_.stepsPerEpoch <= 0 ||
        opt_.epochs->stepsPerEpoch() != opt_.stepsPerEpoch)
      return;  // no plan, or one that is not this run's: epoch 0 in full, deltas after
    const int M = spec_.pipeline.microBatches;
    std::vector<std::set<int64_t>> seen(R_);
    fresh_.assign(steps_, std::vector<int>(static_cast<size_t>(R_) * M, 0));
    for (int k = 0; k < steps_; ++k)
      for (int r = 0; r < R_; ++r)
        for (int mb = 0; mb < M; ++mb)
          for (int64_t e : opt_.epochs->microBatch(epochOf(k), k % opt_.stepsPerEpoch, r * M + mb))
            fresh_[k][r * M + mb] += seen[r].insert(e).second;
  }
  // Rows of replica r's micro-batch mb at step k met for the first time (no plan: all in epoch 0).
  int fresh(int k, int r, int mb) const {
    if (fresh_.empty()) return epochOf(k) == 0 ? spec_.pipeline.microBatchSize : 0;
    return fresh_.at(k).at(r * spec_.pipeline.microBatches + mb);
  }
  int64_t tensorFrameBytes(bool forward, int newRows) {
    const int rows = spec_.pipeline.microBatchSize;
    if (newRows >= rows) return forward ? fwdFirstBytes_ : bwdFirstBytes_;
    if (newRows <= 0) return forward ? fwdBytes_ : bwdBytes_;
    auto it = mixedBytes_.find({forward, newRows});
    if (it == mixedBytes_.end()) {
      const std::string& codec = forward ? spec_.compression.forward : spec_.compression.backward;
      it = mixedBytes_
               .emplace(std::pair{forward, newRows},
                        mixedFrameBytes(codec, {rows, spec_.model.seqLen, spec_.model.width},
                                        rows - newRows))
               .first;
    }
    return it->second;
  }
  bool tensorMessage(const Action& a) const {
    return a.message == Action::Message::kActivation || a.message == Action::Message::kGradient;
  }
  const CodecCost& codecCost(const std::string& spec) {
    auto it = codecCosts_.find(spec);
    if (it == codecCosts_.end()) it = codecCosts_.emplace(spec, &profile_.codec(spec)).first;
    return *it->second;
  }
  int64_t frameBytes(const std::string& codec, int64_t values) {
    auto key = std::pair{codec, values};
    auto it = frameBytes_.find(key);
    if (it == frameBytes_.end())
      it = frameBytes_.emplace(key, steadyFrameBytes(codec, {values}, /*exampleIds=*/false)).first;
    return it->second;
  }
  // The codec of a step's DP messages, parsed once per step (not per message).
  const std::string& dpCodec(int step) {
    auto it = dpCodecs_.find(step);
    if (it == dpCodecs_.end())
      it = dpCodecs_.emplace(step, runtime::dpRoundCodec(spec_, step)).first;
    return it->second;
  }
  // A DP message's chunk: its values (chunk c of the round's buffer, as runtime/dp.h splits it).
  int64_t chunkValues(int i, int chunk) const {
    return runtime::protocol::dpChunkValues(dpValues_[i / R_][ranks_[i].round], chunk, R_);
  }

  // Wire bytes of the send action `a` of rank i, and its host seconds (encode + transport share).
  // DP: a ring all-gather relays the frame it received (no encode), and the owner of a chunk (a
  // PS server of a shard) encodes it once per round and decodes its own frame too.
  int64_t sendBytesAndCost(int i, const Action& a, double* seconds) {
    RankState& st = ranks_[i];
    int64_t bytes = ctlBytes_;
    *seconds = 0;
    if (tensorMessage(a)) {
      const bool forward = a.message == Action::Message::kActivation;
      const std::string& codec = forward ? spec_.compression.forward : spec_.compression.backward;
      // Every message is billed as the run has it: examples the replica's pipeline has not seen
      // before go in full (acsgd), the others as deltas (freshRows). Without a data plan every
      // replayed step is one of the run's first steps (epoch 0), so it is billed in full.
      bytes = tensorFrameBytes(forward, fresh(st.step, layout_.id(i).replica, a.microBatch));
      *seconds = codecCost(codec).encode.at(static_cast<double>(rawActBytes_));
      (forward ? st.record.fwdRaw : st.record.bwdRaw) += rawActBytes_;
      (forward ? st.record.fwdWire : st.record.bwdWire) += bytes;
    } else if (a.message == Action::Message::kEval) {  // uncompressed, the batch's rows
      bytes = evalFrameBytes(a.microBatch);
      *seconds = codecCost("none").encode.at(evalRawBytes(a.microBatch));
    } else if (a.isDataParallel()) {
      const std::string& codec = dpCodec(st.step);
      const int64_t values = chunkValues(i, a.shard);
      const double raw = 4.0 * static_cast<double>(values);
      bytes = frameBytes(codec, values);
      const CodecCost& c = codecCost(codec);
      const bool owned = runtime::protocol::dpSendsOwnFrame(a, i % R_, R_);
      if (a.message == Action::Message::kDpReduce || a.message == Action::Message::kDpPush) {
        *seconds = c.encode.at(raw);
      } else if (owned && !st.ownSent) {
        *seconds = c.encode.at(raw) + c.decode.at(raw);
        st.ownSent = true;
      }
      st.record.gradRaw += 4 * values;
      st.record.gradWire += bytes;
    }
    *seconds += 0.5 * profile_.transport.at(static_cast<double>(bytes));
    return bytes;
  }
  double recvCost(int i, const Action& a, int64_t bytes) {
    double seconds = 0.5 * profile_.transport.at(static_cast<double>(bytes));
    if (tensorMessage(a)) {
      const std::string& codec = a.message == Action::Message::kActivation
                                     ? spec_.compression.forward
                                     : spec_.compression.backward;
      seconds += codecCost(codec).decode.at(static_cast<double>(rawActBytes_));
    } else if (a.message == Action::Message::kEval) {
      seconds += codecCost("none").decode.at(evalRawBytes(a.microBatch));
    } else if (a.isDataParallel()) {
      seconds += codecCost(dpCodec(ranks_[i].step))
                     .decode.at(4.0 * static_cast<double>(chunkValues(i, a.shard)));
    }
    return seconds;
  }
  // The message key (runtime/protocol.h: kind, step, micro-batch, boundary chunk) on a link.
  static MailKey key(int from, int to, const Action& a, int step, int round, int chunk) {
    return {from,     to,
            step,     a.isDataParallel() ? a.shard : a.microBatch,
            chunk,    a.isDataParallel() ? round : -1,
            a.message};
  }

  // The directed link from -> to as the run's link table has it (runtime/link_table.h: the
  // pipeline's links under network.model, the replicas' under pipelined), its clock and the
  // sender's part of its model, made at its first message (seeded per link as the emulator does:
  // runtime/ranks.h).
  struct Link {
    runtime::LinkEntry entry;
    emulator::LinkClock clock;
    std::unique_ptr<emulator::LinkModel> sender;
  };
  Link& link(int from, int to) {
    const uint64_t k = static_cast<uint64_t>(from) << 32 | static_cast<uint32_t>(to);
    auto it = links_.find(k);
    if (it == links_.end()) {
      runtime::LinkEntry e = linkTable_.at(from, to);
      const uint64_t seed =
          e.dataParallel ? runtime::dpLinkSeed(from, to % R_) : runtime::pipelineLinkSeed(from, to);
      emulator::LinkClock c(e.spec, 0.0, seed);
      auto sender = emulator::linkModel(e.model).make();
      it = links_.emplace(k, Link{std::move(e), std::move(c), std::move(sender)}).first;
    }
    return it->second;
  }

  const runtime::RunSpec& spec_;
  const Profile& profile_;
  SimOptions opt_;
  int S_, R_, N_, steps_;
  runtime::RankLayout layout_;
  emulator::Topology topo_, dpTopo_;
  runtime::DpShape dp_;
  std::vector<RankState> ranks_;
  std::vector<std::vector<int64_t>> dpValues_;  // [stage][round]: values of the round's buffer
  std::vector<DpCost> dpCosts_;                 // [stage]
  std::vector<runtime::StepExecutor> execs_;    // by rank
  std::map<int, std::vector<runtime::TimelineEvent>> lastEvents_;
  runtime::LinkTable linkTable_{spec_,
                                {}};  // every link paced and billed in user (here: virtual) time
  emulator::AccessLinks access_{linkTable_.accessCalendars()};  // network.nodes' access links
  std::unique_ptr<PacketNetwork> packet_;                       // network.model ns3
  json messages_ = json::array();                               // SimOptions::recordMessages
  std::unordered_map<uint64_t, Link> links_;                    // by (from rank, to rank)
  std::vector<std::unique_ptr<emulator::LinkModel>>
      inbound_;  // the receiver's part of the model, per rank (made at its first bill)
  std::unordered_map<MailKey, Message, MailKeyHash> mail_;
  std::unordered_map<MailKey, int, MailKeyHash>
      waiting_;                      // loopDedicated: who waits for a message not yet sent
  std::deque<int>* wake_ = nullptr;  // loopDedicated: ranks to act on
  std::priority_queue<std::tuple<double, int, uint64_t>,
                      std::vector<std::tuple<double, int, uint64_t>>,
                      std::greater<>>
      queue_;  // loopDedicated: (time, rank, generation)
  bool sharedHost_ = false;
  int64_t actions_ = 0;  // actions replayed (the simulator's events)
  std::map<std::string, const CodecCost*> codecCosts_;
  std::map<int, std::string> dpCodecs_;
  std::map<std::pair<std::string, int64_t>, int64_t> frameBytes_;
  std::vector<std::vector<runtime::RankStepRecord>> perRank_;  // [step][rank]
  std::vector<double> evalTimes_;      // by step: the evaluation after it (the slowest rank's)
  std::vector<double> evalEnds_;       // by step: when that evaluation ended (virtual time)
  std::vector<double> stepEnds_;       // by step: when its last rank ended it (virtual time)
  std::map<int, int64_t> evalFrames_;  // frame bytes of an evaluation message, by rows
  double now_ = 0;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  int64_t rawActBytes_ = 0, fwdBytes_ = 0, bwdBytes_ = 0, ctlBytes_ = 0;
  int64_t fwdFirstBytes_ = 0, bwdFirstBytes_ = 0;       // the first epoch's (first sightings)
  std::vector<std::vector<int>> fresh_;                 // [step][replica x M + mb]: freshRows
  std::map<std::pair<bool, int>, int64_t> mixedBytes_;  // (forward, fresh rows): frame bytes
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
