// The worker of one rank (see pipeline_worker.h).
#include "runtime/exec/pipeline_worker.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <thread>

#include "emulator/devshaper.h"
#include "emulator/netns.h"
#include "emulator/shaped_socket.h"
#include "runtime/comm/link_table.h"
#include "runtime/comm/transport.h"
#include "runtime/dp/dp.h"
#include "runtime/dp/grad_sync.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/protocol.h"
#include "runtime/exec/ranks.h"
#include "runtime/exec/schedule.h"
#include "runtime/exec/stage_compute.h"
#include "runtime/launch/listen_guard.h"
#include "runtime/launch/rendezvous.h"
#include "runtime/launch/security.h"
#include "runtime/launch/worker.h"
#include "runtime/model/plan.h"
#include "runtime/records/records.h"
#include "runtime/records/result.h"

namespace slowpipe::runtime {
namespace {

using compression::MessageKind;
using nlohmann::json;

// What this process has had of the machine so far, all its threads together: CPU time, and the
// times the scheduler took a CPU from one of them (getrusage's involuntary context switches).
struct ProcessUsage {
  double cpuS = 0;
  int64_t preempted = 0;
};
ProcessUsage processUsage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return {s(u.ru_utime) + s(u.ru_stime), static_cast<int64_t>(u.ru_nivcsw)};
}

// Tensor32 -> torch without a copy: the tensor takes ownership of the decoded values.
torch::Tensor fromTransport(Tensor32& t) {
  auto* values = new std::vector<float>(std::move(t.data));
  return torch::from_blob(
      values->data(), t.shape, [values](void*) { delete values; }, torch::kFloat32);
}

// A double as two floats (hi + lo) so the gradient-norm reduction keeps ~48 bits.
struct Scalar {
  explicit Scalar(double v) {
    parts[0] = static_cast<float>(v);
    parts[1] = static_cast<float>(v - static_cast<double>(parts[0]));
  }
  float parts[2];
};
double scalarOf(const Tensor32& t) {
  return static_cast<double>(t.data.at(0)) + static_cast<double>(t.data.at(1));
}

// (stage, replica) of a rank the run has (checked before any member is built for it).
RankId checkedId(const RankLayout& layout, int rank) {
  if (rank < 0 || rank >= layout.size())
    throw std::invalid_argument("rank " + std::to_string(rank) + " is outside the run's " +
                                std::to_string(layout.size()) + " ranks");
  return layout.id(rank);
}

// The real backend (runtime/exec/executor.h): StageCompute's runners and tensors, the stage's
// channels and the replicas' exchange.
class PipelineWorker : public Backend {
 public:
  PipelineWorker(const RunSpec& spec, const Context& c, zmq::context_t& ctx)
      : spec_(spec),
        rank_(c.rank),
        S_(spec.pipeline.stages),
        layout_(rankLayout(spec)),
        id_(checkedId(layout_, c.rank)),
        plan_(spec, "finetune"),
        compute_(spec, plan_, layout_, id_),
        dpShape_(dpShape(spec)),
        control_(ctx, zmq::socket_type::push),
        guard_(ctx),
        gc_(gradientCompressor(spec.dp)),
        exec_(layout_, c.rank) {
    controlFrom_ = connectControl(ctx, control_, c);
    TransportOptions o;
    o.rank = rank_;
    o.stage = id_.stage;
    o.stages = S_;
    o.forwardCodec = spec.compression.forward;
    o.backwardCodec = spec.compression.backward;
    o.bindPrevHost = c.bindPrev;
    o.bindNextHost = c.bindNext;
    o.security = c.security;
    o.guard = &guard_;
    // Computed once (it builds the run's codecs): across hosts SocketSecurity already holds it.
    o.maxMessageBytes = c.security && c.security->maxMessageBytes > 0 ? c.security->maxMessageBytes
                                                                      : largestFrameBytes(spec);
    o.prevRank = protocol::pipelinePeer(layout_, rank_, Action::Peer::kPrev);
    o.nextRank = protocol::pipelinePeer(layout_, rank_, Action::Peer::kNext);
    o.prevStage = protocol::neighbourStage(layout_, id_.stage, Action::Peer::kPrev);
    o.nextStage = protocol::neighbourStage(layout_, id_.stage, Action::Peer::kNext);
    // Twice the launcher's step timeout: a hung peer is diagnosed by the launcher (which names
    // the rank that stopped), not by its neighbours' receive timeouts.
    o.recvTimeoutS = 2 * spec.runtime.stepTimeoutS;
    transport_ = std::make_unique<StageTransport>(ctx, o);
    if (layout_.replicas > 1) {
      DpOptions d;
      d.rank = rank_;
      d.stage = id_.stage;
      d.replica = id_.replica;
      d.replicas = layout_.replicas;
      d.algorithm = spec.dp.algorithm;
      d.codec = gc_->messageCodec();
      d.recvTimeoutS = 2 * spec.runtime.stepTimeoutS;
      d.security = c.security;
      d.guard = &guard_;
      d.maxMessageBytes = o.maxMessageBytes;
      d.bindHost = c.bindDp;
      dp_ = std::make_unique<DpExchange>(ctx, d);
      sync_ = makeGradientSync(spec, compute_.runners(), id_.stage);
    }
    json hello = {
        {"type", "hello"},
        {"pipeline", transport_->endpoints()},
        {"dp", dp_ ? dp_->endpoints() : json::object()},
        {"pid", getpid()},
        {"torch_version", TORCH_VERSION},
        {"glibc_tunables", std::getenv("GLIBC_TUNABLES") ? std::getenv("GLIBC_TUNABLES") : ""},
        {"restarted_for_huge_pages", restartedForHugePages()}};
    hello.update(c.hello);
    if (!controlFrom_.empty()) hello["control_from"] = controlFrom_;
    const json table = c.peerTable(ctx, [&] { report(hello); });
    // This rank's links (runtime/comm/link_table.h): what paces, stamps and delays each of them.
    const RankLinks links(table.value("links", json::array()), rank_);
    if (!c.shapeDevice.empty()) shapeInterface(c.shapeDevice, c.bindNext, table, links);
    transport_->connect(table.value("pipeline", json::object()), links);
    if (dp_) dp_->connect(table.value("dp_peers", json::object()), links);
    if (const auto origin = table.find("trace_origin_s");
        origin != table.end() && origin->is_number()) {
      startAt_ = origin->get<double>();
      transport_->setTraceOrigin(startAt_);
      if (dp_) dp_->setTraceOrigin(startAt_);
    }
  }

  // tc-dev: one HTB class per destination this worker sends to, on its host's interface, before
  // any message leaves. Both ends of a link must be on different addresses (else the traffic
  // takes the loopback interface, which nobody shapes).
  void shapeInterface(const std::string& device, const std::string& address, const json& table,
                      const RankLinks& links) {
    const std::string dev = device == "auto" ? emulator::interfaceWithAddress(address) : device;
    shaper_ = std::make_unique<emulator::DeviceShaper>(dev);
    shaping_ = {{"dev", dev},
                {"address", address},
                {"mechanism", shaper_->mechanism()},
                {"destinations", json::array()}};
    const json peers =
        table.value("pipeline", json::object());  // (items() of a temporary would dangle)
    for (const auto& [peer, endpoint] : peers.items()) {
      const std::string ep = endpoint.get<std::string>();
      const int peerStage = layout_.id(std::stoi(peer)).stage;
      const size_t host = ep.find("://") + 3, colon = ep.rfind(':');
      const std::string ip = ep.substr(host, colon - host);
      const int port = std::stoi(ep.substr(colon + 1));
      if (ip == address)
        throw std::invalid_argument("network.backend tc-dev: rank " + std::to_string(rank_) +
                                    " and its peer of stage " + std::to_string(peerStage) +
                                    " share address " + ip + ", so their traffic never crosses " +
                                    dev +
                                    "; tc-dev needs one worker per address (or use backend user)");
      const emulator::LinkSpec& link = links.at(rank_, std::stoi(peer)).spec;
      shaper_->addDestination(ip, port, link);
      shaping_["destinations"].push_back({{"to", ip + ":" + std::to_string(port)},
                                          {"stage", peerStage},
                                          {"link", link.describe()}});
    }
  }

  void run() {
    // Every rank starts its first step at trace time 0, as the simulator's ranks do at its time 0
    // (the launcher sets it a moment after the tables go out, for the ranks to connect first).
    emulator::sleepUntil(startAt_);
    int64_t g = 0;
    for (int epoch = 0; epoch < spec_.training.epochs && g < plan_.totalSteps; ++epoch) {
      for (int64_t s = 0; s < plan_.epochs.stepsPerEpoch() && g < plan_.totalSteps; ++s) {
        runList(makeSchedule(spec_.pipeline.schedule, S_, spec_.pipeline.microBatches, id_.stage,
                             dpShape_, id_.replica, g, layout_.chunks),
                epoch, s, g, false);
        ++g;
        if (protocol::evaluatingReplica(id_.replica) &&
            protocol::evaluatesAfter(spec_.training, g, plan_.epochs.stepsPerEpoch(),
                                     plan_.totalSteps))
          runList(evalSchedule(S_, compute_.evalBatchCount(), id_.stage, layout_.chunks), epoch, 0,
                  g, true);
      }
    }
    if (!spec_.training.saveCheckpoint.empty() && id_.replica == 0) saveStages();
    // Digests of the stateful codecs' states (acsgd buffers, ef residuals; 0 if stateless): the
    // launcher checks each sender against its receiver in the neighbouring process.
    json timeline = json::array();
    const bool all = spec_.runtime.timeline == "all";
    for (const TimelineEvent& e : events_) timeline.push_back(toJson(e, layout_.chunks > 1, all));
    // The run's last record: the worker may exit only once it is on its way (it exited 0 with a
    // multi-megabyte "done" dropped after the 2 s linger when the launcher did not read for a
    // while). A launcher that died kills this process (PR_SET_PDEATHSIG; across hosts: the
    // watchdog).
    control_.set(zmq::sockopt::linger, -1);
    report({{"type", "done"},
            {"timeline", timeline},
            {"fwd_sender_digest", transport_->codecDigest(true, true)},
            {"fwd_receiver_digest", transport_->codecDigest(true, false)},
            {"bwd_sender_digest", transport_->codecDigest(false, true)},
            {"bwd_receiver_digest", transport_->codecDigest(false, false)},
            {"dp_digests", dp_ ? dp_->digests() : json::object()},
            {"shaping", shaping_},
            {"refused_connections", guard_.report()},
            {"slowdown",
             {{"effective_speed", meter_.effectiveSpeed()},
              {"compute_s", meter_.computeS},
              {"stalled_s", meter_.stalledS},
              {"owed_s", meter_.owedS}}}});
  }

  // training.save_checkpoint: every model chunk of this stage, as its virtual stage's shard.
  void saveStages() {
    const auto ranges = stageLayers(spec_);
    for (int c = 0; c < layout_.chunks; ++c) {
      const int v = layout_.virtualStage(c, id_.stage);  // the chunk's virtual stage
      saveHfStage(*compute_.runner(c).model(), spec_.model, spec_.training.saveCheckpoint, v,
                  ranges);
    }
  }

  void report(json j) {
    j["rank"] = rank_;
    const std::string s = j.dump();
    if (!control_.send(zmq::buffer(s), zmq::send_flags::none))
      throw std::runtime_error("rank " + std::to_string(rank_) +
                               ": the launcher took no record for 10 s");
  }

  // Backend
  double now() override { return emulator::monotonicNow(); }
  Progress compute(const Action& a, const ActionContext& c) override {
    const double t0 = now();
    compute_.compute(a, c);
    straggle(t0, a.kind == Action::Kind::kEvalForward ? c.step - 1 : c.step);
    return Progress::kDone;
  }
  // runtime.slowdown: a rank at speed s owes t x (1/s - 1) off the CPU after a compute action of
  // t seconds, so its compute really takes t / s. It sleeps what it owes in all: a sleep that
  // overran (a loaded host wakes it late) is paid back by the next, so the duty cycle holds over
  // the run, not only per action.
  void straggle(double t0, int64_t step) {
    const double speed = spec_.runtime.slowdown.speedAt(rank_, std::max<int64_t>(step, 0));
    const double t = now() - t0;
    meter_.computeS += t;
    if (speed >= 1) return;
    meter_.owedS += t * (1 / speed - 1);
    const double owe = meter_.owedS - meter_.stalledS;
    if (owe <= 0) return;
    const double s0 = now();
    std::this_thread::sleep_for(std::chrono::duration<double>(owe));
    const double stalled = now() - s0;
    meter_.stalledS += stalled;
    stepStallS_ += stalled;  // the step record's compute: the rank computed this much slower
  }
  Progress dpBegin(const Action& a, const ActionContext& c) override {
    sync_->pack(a.round, c.step, dpBuf_);
    dp_->begin(dpBuf_.data(), static_cast<int64_t>(dpBuf_.size()), c.step, a.round,
               gc_->exactRound(c.step));
    return Progress::kDone;
  }
  Progress dpEnd(const Action& a, const ActionContext& c) override {
    dp_->end();
    sync_->unpack(a.round, c.step, dpBuf_);
    return Progress::kDone;
  }
  Progress outerStep(const Action&, const ActionContext& c) override {
    sync_->outerStep(c.step, dpBuf_);
    return Progress::kDone;
  }
  Progress step(const Action&, const ActionContext& c) override {
    // qadam after its warm-up: clipping and momentum only, OuterStep updates.
    const bool replaced = sync_ && sync_->replacesStep(c.step);
    const double t0 = now();
    compute_.step(c, !replaced);
    if (replaced) sync_->clipAndMomentum(compute_.norm());
    straggle(t0, c.step);
    return Progress::kDone;
  }

  Progress recv(const Action& a, const ActionContext& c) override {
    using Msg = Action::Message;
    if (a.isDataParallel()) {
      dp_->execute(a);
      return Progress::kDone;
    }
    const bool fromPrev = a.peer == Action::Peer::kPrev;
    if (protocol::carriesTensor(a.message)) {
      Tensor32 t = transport_->recv(fromPrev, protocol::frameKind(a.message), c.step, c.epoch,
                                    a.microBatch, c.chunk);
      if (a.message == Msg::kActivation && t.exampleIds != compute_.planIds(c, a.microBatch))
        throw std::runtime_error("rank " + std::to_string(rank_) + ": example ids of micro-batch " +
                                 std::to_string(a.microBatch) + " differ from the data plan");
      // A frame that passed every check of its own but does not fit this stage (a payload of
      // another shape) is the sender's error, said so, not libtorch's.
      const compression::Shape shape = t.shape;
      const std::string what = "rank " + std::to_string(rank_) + ": the " +
                               (a.message == Msg::kGradient ? "gradient" : "activation") +
                               " of micro-batch " + std::to_string(a.microBatch) + " from rank " +
                               std::to_string(protocol::pipelinePeer(layout_, rank_, a.peer)) +
                               " (shape " + compression::shapeString(shape) +
                               ") does not fit this stage: ";
      // Every message between stages is hidden states [rows <= micro_batch_size, seq_len, width].
      const int64_t mb = spec_.pipeline.microBatchSize;
      if (shape.size() != 3 || shape[0] < 1 || shape[0] > mb || shape[1] != spec_.model.seqLen ||
          shape[2] != spec_.model.width)
        throw std::runtime_error(what + "expected [1.." + std::to_string(mb) + ", " +
                                 std::to_string(spec_.model.seqLen) + ", " +
                                 std::to_string(spec_.model.width) +
                                 "] (pipeline.micro_batch_size, model.seq_len, model.width)");
      try {
        compute_.input(a, fromTransport(t));
      } catch (const std::exception& e) {
        throw std::runtime_error(what + errorText(e));
      }
    } else {
      const Tensor32 t = transport_->recv(fromPrev, MessageKind::kControl, c.step, c.epoch,
                                          protocol::controlTag(a.message));
      const double v = scalarOf(t);
      if (a.message == Msg::kNormPartial) compute_.squaredNorm() += v;
      if (a.message == Msg::kNormTotal) compute_.squaredNorm() = v;
    }
    return Progress::kDone;
  }

  Progress send(const Action& a, const ActionContext& c) override {
    using Msg = Action::Message;
    if (a.isDataParallel()) {
      dp_->execute(a);
      return Progress::kDone;
    }
    const bool toNext = a.peer == Action::Peer::kNext;
    if (protocol::carriesTensor(a.message)) {
      const torch::Tensor t = compute_.output(a).contiguous();
      transport_->send(toNext, protocol::frameKind(a.message), c.step, c.epoch, a.microBatch,
                       t.data_ptr<float>(), compression::Shape(t.sizes().begin(), t.sizes().end()),
                       compute_.ids(a.microBatch), c.chunk);
    } else {
      const Scalar v(a.message == Msg::kBarrier ? 0.0 : compute_.squaredNorm());
      transport_->send(toNext, MessageKind::kControl, c.step, c.epoch,
                       protocol::controlTag(a.message), v.parts, {protocol::kControlValues}, {});
    }
    return Progress::kDone;
  }

 private:
  // Runs one list (a training step's, or an evaluation's: after an epoch's last step, its barrier
  // from the last stage back lets every stage start the next step together instead of charging
  // the evaluation to that step) and reports its record.
  void runList(std::vector<Action> list, int epoch, int64_t s, int64_t g, bool evaluation) {
    ActionContext where;
    where.step = g;
    where.epoch = epoch;
    where.stepInEpoch = s;
    compute_.beginList();
    stepStallS_ = 0;
    const ProcessUsage before = processUsage();
    exec_.start(std::move(list), where, now(), /*recordEvents=*/!evaluation);
    if (!exec_.run(*this)) throw std::logic_error("the real backend left an action pending");
    const double seconds = now() - exec_.started();
    const ProcessUsage after = processUsage();
    if (evaluation) {
      transport_->takeStats();  // evaluation traffic is not training traffic
      EvalRecord e;
      e.epoch = epoch;
      e.step = g;
      e.timeS = seconds;
      e.valLoss = compute_.evalLoss();
      json r = toJson(e);
      r["type"] = "eval";
      return report(r);
    }
    // This step's timeline; the last step's (runtime.timeline "all": every step's) goes out with
    // "done".
    if (spec_.runtime.timeline != "all") events_.clear();
    events_.insert(events_.end(), exec_.events().begin(), exec_.events().end());
    report(stepRecord(g, epoch, seconds,
                      {after.cpuS - before.cpuS, after.preempted - before.preempted}));
  }

  json stepRecord(int64_t g, int epoch, double seconds, const ProcessUsage& used) {
    const TransportStats st = transport_->takeStats();
    const DpStats dst = dp_ ? dp_->takeStats() : DpStats{};
    RankStepRecord r;
    r.rank = rank_;
    r.step = g;
    r.epoch = epoch;
    r.timeS = seconds;
    r.computeS = compute_.computeSeconds() + stepStallS_;
    r.stallS = stepStallS_;
    r.encodeS = st.encodeS + dst.encodeS;
    r.decodeS = st.decodeS + dst.decodeS;
    r.waitS = st.waitS + dst.waitS;
    r.dpS = exec_.dpSeconds();  // what the data-parallel exchange alone took (its share of the
                                // breakdown)
    r.cpuS = used.cpuS;
    r.preempted = used.preempted;
    r.fwdRaw = st.fwdRaw, r.fwdWire = st.fwdWire, r.bwdRaw = st.bwdRaw, r.bwdWire = st.bwdWire;
    r.gradRaw = dst.raw, r.gradWire = dst.wire;
    r.gradNorm = compute_.norm();
    r.lr = compute_.runner(0).learningRate(g);
    if (compute_.holdsLastStage()) r.loss = compute_.loss();
    // One-way times this stage observed on its inbound links (delivery - send stamp).
    for (const auto& [name, d] :
         {std::pair{"from_prev", st.fromPrev}, std::pair{"from_next", st.fromNext}})
      if (d.messages > 0)
        r.recvDelay[name] = {{"min", d.minS}, {"max", d.maxS}, {"messages", d.messages}};
    return toJson(r);
  }

  const RunSpec& spec_;
  int rank_, S_;
  RankLayout layout_;
  RankId id_;
  Plan plan_;
  StageCompute compute_;
  DpShape dpShape_;
  zmq::socket_t control_;
  ListenGuard guard_;  // every socket this rank binds (before the transports: it outlives them)
  std::string controlFrom_;  // across hosts: this end of the control connection
  std::unique_ptr<emulator::DeviceShaper>
      shaper_;             // tc-dev: this host's interface, removed with the worker
  json shaping_;           // what it installed
  SlowdownMeter meter_;    // runtime.slowdown: compute and stalls
  double stepStallS_ = 0;  // the stalls of the step in hand
  std::unique_ptr<StageTransport> transport_;
  std::unique_ptr<GradientCompressor>
      gc_;                          // dp.codec / dp.local_steps (runtime/dp/gradient_compressor.h)
  std::unique_ptr<DpExchange> dp_;  // replicas > 1
  std::unique_ptr<GradientSync> sync_;  // what the rounds carry (runtime/dp/grad_sync.h)
  std::vector<float> dpBuf_;            // the round's flat buffer
  StepExecutor exec_;
  double startAt_ = 0;                 // the run's first step (host monotonic clock; 0: at once)
  std::vector<TimelineEvent> events_;  // of the last step (runtime.timeline "all": of every step)
};

}  // namespace

std::string connectControl(zmq::context_t& ctx, zmq::socket_t& s, const Context& c) {
  s.set(zmq::sockopt::linger, 2000);
  s.set(zmq::sockopt::sndtimeo, 10000);  // the launcher is gone if it takes records no more
  if (!c.security) {
    s.connect(c.control);
    return "";
  }
  makeCurveClient(s, c.security->own, c.coordinatorKey);
  return connectedFrom(ctx, s, c.control);
}

void runPipelineWorker(const RunSpec& spec, const Context& c, zmq::context_t& ctx) {
  PipelineWorker w(spec, c, ctx);
  w.run();
}

}  // namespace slowpipe::runtime
