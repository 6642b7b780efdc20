// The discrete-event replay (see simulate.h).
#include "simulator/simulate.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>

#include "compression/codec.h"
#include "compression/frame.h"
#include "emulator/link.h"
#include "emulator/shaped_socket.h"
#include "runtime/result.h"
#include "runtime/schedule.h"

namespace slowpipe::simulator {

using nlohmann::json;
using runtime::Action;

int64_t steadyFrameBytes(const std::string& codecSpec, const std::vector<int64_t>& shape) {
  auto codec = compression::makeCodec(codecSpec);
  const int64_t n = compression::numelOf(shape);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 7919 % 1000) - 500) * 1e-3f;  // finite, varied
  compression::FrameHeader h;
  h.shape = shape;
  for (int64_t r = 0; r < (shape.empty() ? 0 : shape[0]); ++r) h.exampleIds.push_back(r);
  compression::CodecContext ctx;
  ctx.exampleIds = h.exampleIds;
  ctx.epoch = 1;
  compression::encodeFrame(*codec, x.data(), h, ctx);  // first sighting (acsgd: full precision)
  return static_cast<int64_t>(compression::encodeFrame(*codec, x.data(), h, ctx).size());
}

namespace {

struct Message {
  double sentAt = 0, arrival = -1;  // arrival < 0: not billed yet (serial_fifo bills at retrieval)
  int64_t bytes = 0;
};

struct Event {
  std::string what;
  int mb;
  double start, end;
};

// A stage is ready for its next action, busy on the host (compute or codec work, `remaining`
// seconds of it at full speed), or waiting for a message (its arrival known or not yet).
struct StageState {
  enum class Mode { kReady, kBusy, kWaiting, kDone } mode = Mode::kReady;
  size_t pc = 0;
  int step = 0;
  double stepStart = 0;
  double compute = 0, encode = 0, decode = 0, wait = 0;
  // busy: the task
  double remaining = 0, taskStart = 0;
  const char* taskWhat = "";
  int taskMb = -1;
  double* bucket = nullptr;
  bool postAfter = false;  // the action is a send: post the message when its encode ends
  std::string postKey;
  int64_t postBytes = 0;
  int postPeer = 0;
  // waiting
  double waitStart = 0, arrival = -1;
  std::vector<Event> events;  // of the current step
};

// Global discrete-event loop. Host work (forward, backward, step, encode, decode) is shared among
// the busy stages when the profile describes a shared host: each of n busy stages runs at the
// profile's measured speed for n (host_speed), else at min(1, host_cores/n) (processor sharing);
// without either, every stage has its own device and runs at full speed.
class Replay {
 public:
  Replay(const runtime::RunSpec& spec, const Profile& profile, int steps)
      : spec_(spec), profile_(profile), S_(spec.pipeline.stages), steps_(steps),
        topo_(emulator::topologyFromJson(spec.network.links, "network.links")), stages_(S_) {
    if (spec.pipeline.replicas > 1)
      throw std::invalid_argument("simulator: pipeline.replicas " + std::to_string(spec.pipeline.replicas) +
                                  ": data-parallel rounds are not replayed yet (emulate with slowpipe run)");
    if (static_cast<int>(profile.stages.size()) != S_)
      throw std::invalid_argument("profile has " + std::to_string(profile.stages.size()) + " stages, the spec " +
                                  std::to_string(S_) + " (profile the same partition)");
    for (int s = 0; s < S_; ++s) plans_.push_back(runtime::makeSchedule(spec.pipeline.schedule, S_, spec.pipeline.microBatches, s));
    const std::vector<int64_t> act = {spec.pipeline.microBatchSize, spec.model.seqLen, spec.model.width};
    rawActBytes_ = 4 * compression::numelOf(act);
    fwdBytes_ = steadyFrameBytes(spec.compression.forward, act);
    bwdBytes_ = steadyFrameBytes(spec.compression.backward, act);
    ctlBytes_ = steadyFrameBytes("none", {2});
    serial_ = spec.network.model == "serial_fifo";
    for (int s = 0; s + 1 < S_; ++s)
      for (auto [a, b] : {std::pair{s, s + 1}, std::pair{s + 1, s}})
        clocks_.emplace(std::pair{a, b}, emulator::LinkClock(topo_.link(a, b), 0.0, 1000 * a + b));
    fifo_.resize(S_);
  }

  json run() {
    perStage_.assign(steps_, {});
    loop();
    json steps = json::array();
    const int64_t tokens = int64_t{spec_.pipeline.microBatches} * spec_.pipeline.microBatchSize * spec_.model.seqLen;
    for (int k = 0; k < steps_; ++k) {
      double time = 0;
      json breakdown = {{"compute", 0.0}, {"encode", 0.0}, {"decode", 0.0}, {"wait", 0.0}}, per = json::array();
      for (const json& st : perStage_[k]) {
        time = std::max(time, st["time_s"].get<double>());
        for (const char* key : {"compute", "encode", "decode", "wait"})
          breakdown[key] = breakdown[key].get<double>() + st[key].get<double>() / S_;
        per.push_back(st);
      }
      const int64_t msgs = spec_.pipeline.microBatches * int64_t{S_ - 1};
      steps.push_back({{"step", k}, {"epoch", k == 0 ? 0 : 1}, {"time_s", time}, {"tokens", tokens},
                       {"tokens_per_s", tokens / time}, {"loss", nullptr},
                       {"bytes", {{"forward", {{"raw", msgs * rawActBytes_}, {"wire", msgs * fwdBytes_}}},
                                  {"backward", {{"raw", msgs * rawActBytes_}, {"wire", msgs * bwdBytes_}}}}},
                       {"breakdown_s", breakdown}, {"breakdown_s_per_stage", per}});
    }
    json timeline = json::array();
    for (int s = 0; s < S_; ++s) {
      json ev = json::array();
      for (const auto& e : lastEvents_[s]) ev.push_back({{"what", e.what}, {"mb", e.mb}, {"start_s", e.start}, {"end_s", e.end}});
      timeline.push_back({{"stage", s}, {"events", ev}});
    }
    json doc = {{"schema", runtime::kResultSchema}, {"simulated", true}, {"status", "ok"}, {"spec", runtime::toJson(spec_)},
                {"steps", steps}, {"evals", json::array()}, {"timeline", timeline},
                {"network", {{"backend", "simulated"}, {"model", spec_.network.model}, {"links", topo_}}},
                {"profile", {{"source", profile_.source}, {"device", profile_.device}, {"host_cores", profile_.hostCores},
                             {"host_speed", profile_.hostSpeed}, {"transport", {{"a_s", profile_.transport.aS},
                                                                               {"b_s_per_byte", profile_.transport.bSPerByte}}}}},
                {"message_bytes", {{"forward", fwdBytes_}, {"backward", bwdBytes_}, {"control", ctlBytes_}, {"raw", rawActBytes_}}}};
    doc["summary"] = runtime::summarizeSteps(doc["steps"], doc["evals"]);
    return doc;
  }

 private:
  using Mode = StageState::Mode;

  void loop() {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    while (true) {
      // Every stage that can act at now_ does so until it is busy, waiting, or done.
      for (bool changed = true; changed;) {
        changed = false;
        for (int s = 0; s < S_; ++s) changed |= act(s);
      }
      int busy = 0;
      bool done = true;
      for (const auto& st : stages_) {
        busy += st.mode == Mode::kBusy;
        done &= st.mode == Mode::kDone;
      }
      if (done) return;
      const double rate = profile_.speedWithBusy(busy);
      double next = kInf;
      for (const auto& st : stages_) {
        if (st.mode == Mode::kBusy) next = std::min(next, now_ + st.remaining / rate);
        if (st.mode == Mode::kWaiting && st.arrival >= 0) next = std::min(next, st.arrival);
      }
      if (next == kInf)
        for (int s = 0; s < S_; ++s)
          if (stages_[s].mode == Mode::kWaiting)
            throw std::runtime_error("simulator: stage " + std::to_string(s) + " is blocked at action " +
                                     std::to_string(stages_[s].pc) + " of step " + std::to_string(stages_[s].step) +
                                     " (the schedules deadlock)");
      const double dt = next - now_;
      now_ = next;
      for (int s = 0; s < S_; ++s) {
        StageState& st = stages_[s];
        if (st.mode == Mode::kBusy) {
          st.remaining -= dt * rate;
          if (st.remaining <= 1e-12 * std::max(1.0, now_)) finishTask(s);
        } else if (st.mode == Mode::kWaiting && st.arrival >= 0 && st.arrival <= now_) {
          finishWait(s);
        }
      }
    }
  }

  // Executes what stage s can do at now_; true if its state changed.
  bool act(int s) {
    StageState& st = stages_[s];
    if (st.mode == Mode::kWaiting) return st.arrival < 0 && collect(s);
    if (st.mode != Mode::kReady) return false;
    const Action& a = plans_[s][st.pc];
    const StageCost& cost = profile_.stages[s];
    switch (a.kind) {
      case Action::Kind::kForward: startTask(s, "forward", a.microBatch, cost.forwardS, &st.compute); break;
      case Action::Kind::kBackward: startTask(s, "backward", a.microBatch, cost.backwardS, &st.compute); break;
      case Action::Kind::kStep: startTask(s, "step", -1, cost.stepS, &st.compute); break;
      case Action::Kind::kGradNorm: advancePc(s); break;
      case Action::Kind::kDpBegin:
      case Action::Kind::kDpEnd:
      case Action::Kind::kOuterStep: throw std::logic_error("simulator: data-parallel action in a single-replica plan");
      case Action::Kind::kSend:
        st.postAfter = true;
        st.postKey = key(s, peerOf(s, a), a, st.step);
        st.postBytes = bytesOf(a);
        st.postPeer = peerOf(s, a);
        startTask(s, "encode", a.microBatch, encodeCost(a), &st.encode);
        break;
      case Action::Kind::kRecv:
        st.mode = Mode::kWaiting;
        st.waitStart = now_;
        st.arrival = -1;
        collect(s);
        break;
    }
    return true;
  }

  static int peerOf(int s, const Action& a) { return a.peer == Action::Peer::kPrev ? s - 1 : s + 1; }

  // A waiting stage looks for its message; once it is there its arrival is known (serial_fifo:
  // billed now, in this receiver's retrieval order, on its one inbound FIFO).
  bool collect(int s) {
    StageState& st = stages_[s];
    const Action& a = plans_[s][st.pc];
    const int peer = peerOf(s, a);
    const auto it = mail_.find(key(peer, s, a, st.step));
    if (it == mail_.end()) return false;
    Message m = it->second;
    mail_.erase(it);
    if (serial_) {
      const emulator::LinkSpec& l = topo_.link(peer, s);
      m.arrival = fifo_[s].bill(m.sentAt, static_cast<uint64_t>(m.bytes), l.bandwidthBps, l.latencyS);
    }
    st.arrival = m.arrival;
    if (st.arrival <= now_) finishWait(s);
    return true;
  }

  // The awaited message has arrived: the wait ends, decoding starts.
  void finishWait(int s) {
    StageState& st = stages_[s];
    const Action& a = plans_[s][st.pc];
    if (now_ > st.waitStart) {
      st.events.push_back({"wait", a.microBatch, st.waitStart, now_});
      st.wait += now_ - st.waitStart;
    }
    st.mode = Mode::kReady;
    startTask(s, "decode", a.microBatch, decodeCost(a), &st.decode);
  }

  // Host work of `seconds` at full speed; a free one completes the action at once.
  void startTask(int s, const char* what, int mb, double seconds, double* bucket) {
    StageState& st = stages_[s];
    if (seconds <= 0) return complete(s);
    st.mode = Mode::kBusy;
    st.remaining = seconds;
    st.taskStart = now_;
    st.taskWhat = what;
    st.taskMb = mb;
    st.bucket = bucket;
  }

  void finishTask(int s) {
    StageState& st = stages_[s];
    st.events.push_back({st.taskWhat, st.taskMb, st.taskStart, now_});
    *st.bucket += now_ - st.taskStart;
    st.mode = Mode::kReady;
    complete(s);
  }

  // The current action is done at now_: a send's message leaves (its encode has ended).
  void complete(int s) {
    StageState& st = stages_[s];
    if (st.postAfter) {
      Message m{now_, -1, st.postBytes};
      if (!serial_) m.arrival = clocks_.at({s, st.postPeer}).send(now_, static_cast<uint64_t>(st.postBytes));
      mail_[st.postKey] = m;
      st.postAfter = false;
    }
    advancePc(s);
  }

  void advancePc(int s) {
    StageState& st = stages_[s];
    if (++st.pc < plans_[s].size()) return;
    // Step done: record it, start the next one right away.
    perStage_[st.step].push_back({{"time_s", now_ - st.stepStart}, {"compute", st.compute}, {"encode", st.encode},
                                  {"decode", st.decode}, {"wait", st.wait}});
    if (st.step == steps_ - 1) lastEvents_[s] = st.events;
    st.events.clear();
    st.compute = st.encode = st.decode = st.wait = 0;
    st.stepStart = now_;
    st.pc = 0;
    if (++st.step == steps_) st.mode = Mode::kDone;
  }

  bool tensorMessage(const Action& a) const {
    return a.message == Action::Message::kActivation || a.message == Action::Message::kGradient;
  }
  const std::string& codecOf(const Action& a) const {
    static const std::string kNone = "none";
    if (!tensorMessage(a)) return kNone;
    return a.message == Action::Message::kActivation ? spec_.compression.forward : spec_.compression.backward;
  }
  int64_t bytesOf(const Action& a) const {
    if (!tensorMessage(a)) return ctlBytes_;
    return a.message == Action::Message::kActivation ? fwdBytes_ : bwdBytes_;
  }
  double encodeCost(const Action& a) const {
    return (tensorMessage(a) ? profile_.codec(codecOf(a)).encode.at(static_cast<double>(rawActBytes_)) : 0.0) +
           0.5 * profile_.transport.at(static_cast<double>(bytesOf(a)));
  }
  double decodeCost(const Action& a) const {
    return (tensorMessage(a) ? profile_.codec(codecOf(a)).decode.at(static_cast<double>(rawActBytes_)) : 0.0) +
           0.5 * profile_.transport.at(static_cast<double>(bytesOf(a)));
  }
  static std::string key(int from, int to, const Action& a, int step) {
    return std::to_string(from) + ">" + std::to_string(to) + ":" + std::to_string(static_cast<int>(a.message)) + ":" +
           std::to_string(a.microBatch) + "@" + std::to_string(step);
  }

  const runtime::RunSpec& spec_;
  const Profile& profile_;
  int S_, steps_;
  emulator::Topology topo_;
  std::vector<std::vector<Action>> plans_;
  std::vector<StageState> stages_;
  std::map<int, std::vector<Event>> lastEvents_;
  std::map<std::pair<int, int>, emulator::LinkClock> clocks_;
  std::vector<emulator::SerialFifo> fifo_;  // serial_fifo: the emulator's own inbound wire, per rank
  std::map<std::string, Message> mail_;
  std::vector<std::vector<json>> perStage_;
  double now_ = 0;
  int64_t rawActBytes_ = 0, fwdBytes_ = 0, bwdBytes_ = 0, ctlBytes_ = 0;
  bool serial_ = false;
};

}  // namespace

json simulateRun(const runtime::RunSpec& spec, const Profile& profile, const SimOptions& opt) {
  if (opt.steps < 2) throw std::invalid_argument("simulator: at least 2 steps (the first fills the pipeline)");
  return Replay(spec, profile, opt.steps).run();
}

}  // namespace slowpipe::simulator
