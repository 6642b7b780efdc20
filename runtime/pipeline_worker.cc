// The worker of one rank (see pipeline_worker.h).
#include "runtime/pipeline_worker.h"

#include <cmath>
#include <map>

#include "emulator/devshaper.h"
#include "emulator/netns.h"
#include "emulator/shaped_socket.h"
#include "runtime/dp.h"
#include "runtime/grad_sync.h"
#include "runtime/plan.h"
#include "runtime/protocol.h"
#include "runtime/ranks.h"
#include "runtime/rendezvous.h"
#include "runtime/result.h"
#include "runtime/schedule.h"
#include "runtime/security.h"
#include "runtime/stage_runner.h"
#include "runtime/transport.h"
#include "runtime/worker.h"

namespace slowpipe::runtime {
namespace {

using compression::MessageKind;
using nlohmann::json;

double now() { return emulator::monotonicNow(); }

// Mean loss per token; null when nothing was evaluated (no validation examples), never NaN.
json meanLoss(double lossSum, int64_t tokens) { return tokens > 0 ? json(lossSum / static_cast<double>(tokens)) : json(nullptr); }

// Tensor32 -> torch without a copy: the tensor takes ownership of the decoded values.
torch::Tensor fromTransport(Tensor32& t) {
  auto* values = new std::vector<float>(std::move(t.data));
  return torch::from_blob(values->data(), t.shape, [values](void*) { delete values; }, torch::kFloat32);
}

// A double as two floats (hi + lo) so the gradient-norm reduction keeps ~48 bits.
struct Scalar {
  explicit Scalar(double v) {
    parts[0] = static_cast<float>(v);
    parts[1] = static_cast<float>(v - static_cast<double>(parts[0]));
  }
  float parts[2];
};
double scalarOf(const Tensor32& t) { return static_cast<double>(t.data.at(0)) + static_cast<double>(t.data.at(1)); }

// (stage, replica) of a rank the run has (checked before any member is built for it).
RankId checkedId(const RankLayout& layout, int rank) {
  if (rank < 0 || rank >= layout.size())
    throw std::invalid_argument("rank " + std::to_string(rank) + " is outside the run's " + std::to_string(layout.size()) +
                                " ranks");
  return layout.id(rank);
}


class PipelineWorker {
 public:
  PipelineWorker(const RunSpec& spec, const Context& c, zmq::context_t& ctx)
      : spec_(spec), rank_(c.rank), S_(spec.pipeline.stages), layout_(rankLayout(spec)),
        id_(checkedId(layout_, c.rank)), plan_(spec, "finetune"),
        dpShape_(dpShape(spec)), control_(ctx, zmq::socket_type::push), gc_(parseGradientCompressor(spec.dp.codec)) {
    // One runner per model chunk: chunk v of stage s is virtual stage v S + s.
    for (int v = 0; v < layout_.chunks; ++v)
      runners_.push_back(std::make_unique<StageRunner>(spec, v * S_ + id_.stage, plan_.totalSteps));
    controlFrom_ = connectControl(ctx, control_, c);
    TransportOptions o;
    o.rank = rank_;
    o.stage = id_.stage;
    o.stages = S_;
    o.forwardCodec = spec.compression.forward;
    o.backwardCodec = spec.compression.backward;
    o.topology = emulator::topologyFromJson(spec.network.links, "network.links");
    o.kernelPacesRate = c.kernelPacesRate;
    o.serialFifo = spec.network.model == "serial_fifo";
    o.delays = c.delays;
    o.bindPrevHost = c.bindPrev;
    o.bindNextHost = c.bindNext;
    o.security = c.security;
    // Computed once (it builds the run's codecs): across hosts SocketSecurity already holds it.
    o.maxMessageBytes = c.security && c.security->maxMessageBytes > 0 ? c.security->maxMessageBytes : largestFrameBytes(spec);
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
      d.codec = gc_.messageCodec;
      d.topology = dpTopology(spec);
      d.recvTimeoutS = 2 * spec.runtime.stepTimeoutS;
      d.security = c.security;
      d.maxMessageBytes = o.maxMessageBytes;
      d.bindHost = c.bindDp;
      dp_ = std::make_unique<DpExchange>(ctx, d);
      sync_ = std::make_unique<GradientSync>(spec, *runners_[0], id_.stage);
    }
    json hello = {{"type", "hello"}, {"pipeline", transport_->endpoints()},
                  {"dp", dp_ ? dp_->endpoints() : json::object()}, {"pid", getpid()}, {"torch_version", TORCH_VERSION}};
    hello.update(c.hello);
    if (!controlFrom_.empty()) hello["control_from"] = controlFrom_;
    const json table = c.peerTable(ctx, [&] { report(hello); });
    if (!c.shapeDevice.empty()) shapeInterface(spec, c.shapeDevice, c.bindNext, table);
    transport_->connect(table.value("pipeline", json::object()));
    if (dp_) dp_->connect(table.value("dp_peers", json::object()));
    if (const auto origin = table.find("trace_origin_s"); origin != table.end() && origin->is_number()) {
      transport_->setTraceOrigin(origin->get<double>());
      if (dp_) dp_->setTraceOrigin(origin->get<double>());
    }
  }

  // tc-dev: one HTB class per destination this worker sends to, on its host's interface, before
  // any message leaves. Both ends of a link must be on different addresses (else the traffic
  // takes the loopback interface, which nobody shapes).
  void shapeInterface(const RunSpec& spec, const std::string& device, const std::string& address, const json& table) {
    const std::string dev = device == "auto" ? emulator::interfaceWithAddress(address) : device;
    shaper_ = std::make_unique<emulator::DeviceShaper>(dev);
    const emulator::Topology topo = emulator::topologyFromJson(spec.network.links, "network.links");
    shaping_ = {{"dev", dev}, {"address", address}, {"mechanism", shaper_->mechanism()}, {"destinations", json::array()}};
    const json peers = table.value("pipeline", json::object());  // (items() of a temporary would dangle)
    for (const auto& [peer, endpoint] : peers.items()) {
      const std::string ep = endpoint.get<std::string>();
      const int peerStage = layout_.id(std::stoi(peer)).stage;
      const size_t host = ep.find("://") + 3, colon = ep.rfind(':');
      const std::string ip = ep.substr(host, colon - host);
      const int port = std::stoi(ep.substr(colon + 1));
      if (ip == address)
        throw std::invalid_argument("network.backend tc-dev: rank " + std::to_string(rank_) + " and its peer of stage " +
                                    std::to_string(peerStage) + " share address " + ip + ", so their traffic never crosses " + dev +
                                    "; tc-dev needs one worker per address (or use backend user)");
      const emulator::LinkSpec& link = topo.link(id_.stage, peerStage);
      shaper_->addDestination(ip, port, link);
      shaping_["destinations"].push_back({{"to", ip + ":" + std::to_string(port)}, {"stage", peerStage}, {"link", link.describe()}});
    }
  }

  void run() {
    int64_t g = 0;
    for (int epoch = 0; epoch < spec_.training.epochs && g < plan_.totalSteps; ++epoch) {
      for (int64_t s = 0; s < plan_.epochs.stepsPerEpoch() && g < plan_.totalSteps; ++s, ++g)
        runStep(makeSchedule(spec_.pipeline.schedule, S_, spec_.pipeline.microBatches, id_.stage, dpShape_, id_.replica, g,
                             layout_.chunks),
                epoch, s, g);
      // Replica 0 evaluates (with local steps: its own parameters, as they are at the epoch's end).
      if (spec_.training.evalEachEpoch && id_.replica == 0) evaluate(epoch, g);
    }
    // Digests of the stateful codecs' states (acsgd buffers, ef residuals; 0 if stateless): the
    // launcher checks each sender against its receiver in the neighbouring process.
    json timeline = json::array();
    const bool all = spec_.runtime.timeline == "all";
    for (const auto& e : events_) {
      timeline.push_back({{"what", protocol::eventName(e.action)}, {"mb", e.action.microBatch}, {"start_s", e.start}, {"end_s", e.end}});
      if (layout_.chunks > 1) timeline.back()["chunk"] = e.action.chunk;
      if (all) timeline.back()["step"] = e.step;
    }
    // The run's last record: the worker may exit only once it is on its way (it exited 0 with a
    // multi-megabyte "done" dropped after the 2 s linger when the launcher did not read for a
    // while). A launcher that died kills this process (PR_SET_PDEATHSIG; across hosts: the watchdog).
    control_.set(zmq::sockopt::linger, -1);
    report({{"type", "done"}, {"timeline", timeline}, {"fwd_sender_digest", transport_->codecDigest(true, true)},
            {"fwd_receiver_digest", transport_->codecDigest(true, false)},
            {"bwd_sender_digest", transport_->codecDigest(false, true)},
            {"bwd_receiver_digest", transport_->codecDigest(false, false)},
            {"dp_digests", dp_ ? dp_->digests() : json::object()}, {"shaping", shaping_}});
  }

  void sendTensor(bool toNext, MessageKind kind, int64_t g, int epoch, int mb, const torch::Tensor& t,
                  const std::vector<int64_t>& ids, int chunk = 0) {
    const torch::Tensor c = t.contiguous();
    transport_->send(toNext, kind, g, epoch, mb, c.data_ptr<float>(), compression::Shape(c.sizes().begin(), c.sizes().end()), ids,
                     chunk);
  }

  void sendScalar(bool toNext, int64_t g, int epoch, int tag, double v) {
    const Scalar s(v);
    transport_->send(toNext, MessageKind::kControl, g, epoch, tag, s.parts, {2}, {});
  }

  void report(json j) {
    j["rank"] = rank_;
    const std::string s = j.dump();
    if (!control_.send(zmq::buffer(s), zmq::send_flags::none))
      throw std::runtime_error("rank " + std::to_string(rank_) + ": the launcher took no record for 10 s");
  }

 private:
  // What one step holds between its actions: where it is in the data, the tensors in flight per
  // (model chunk, micro-batch), the squared gradient norm, the compute time.
  struct StepState {
    int epoch = 0;
    int64_t s = 0, g = 0;  // step within the epoch, global step
    double compute = 0, sq = 0;
    std::map<int, std::vector<int64_t>> ids;  // example ids per micro-batch
    std::map<std::pair<int, int>, torch::Tensor> activationIn, gradientIn, outbox;
  };

  // Executes one step's action list (runtime/schedule.h): every receive and send is an action.
  void runStep(const std::vector<Action>& schedule, int epoch, int64_t s, int64_t g) {
    const double t0 = now();
    StepState st;
    st.epoch = epoch;
    st.s = s;
    st.g = g;
    // This step's timeline; the last step's (runtime.timeline "all": every step's) goes out with "done".
    if (spec_.runtime.timeline != "all") events_.clear();
    for (const Action& a : schedule) {
      const double ta = now();
      execute(a, st);
      events_.push_back({a, ta, now(), g});
    }
    report(stepRecord(st, now() - t0));
  }

  void execute(const Action& a, StepState& st) {
    using K = Action::Kind;
    switch (a.kind) {
      case K::kDpBegin:
        sync_->pack(a.microBatch, st.g, dpBuf_);
        dp_->begin(dpBuf_.data(), static_cast<int64_t>(dpBuf_.size()), st.g, a.microBatch, sync_->exactRound(st.g));
        break;
      case K::kDpEnd:
        dp_->end();
        sync_->unpack(a.microBatch, st.g, dpBuf_);
        break;
      case K::kOuterStep: sync_->outerStep(st.g, dpBuf_); break;
      case K::kRecv: a.isDataParallel() ? dp_->execute(a) : receive(a, st); break;
      case K::kSend: a.isDataParallel() ? dp_->execute(a) : send(a, st); break;
      case K::kForward: forward(a, st); break;
      case K::kBackward:
      case K::kBackwardInput:
      case K::kBackwardWeight: backward(a, st); break;
      case K::kEvalForward: throw std::logic_error("an evaluation action in a training step's list");
      case K::kGradNorm:
        st.sq = 0;
        for (const auto& r : runners_) st.sq += r->localGradSquaredNorm();
        break;
      case K::kStep: step(st); break;
    }
  }

  void receive(const Action& a, StepState& st) {
    using Msg = Action::Message;
    const std::pair<int, int> at{a.chunk, a.microBatch};
    const int chunk = protocol::boundaryChunk(layout_, id_.stage, a);  // the message's key
    if (a.message == Msg::kActivation) {
      Tensor32 t = transport_->recv(true, MessageKind::kActivation, st.g, st.epoch, a.microBatch, chunk);
      st.ids[a.microBatch] = batchIds(st.epoch, st.s, a.microBatch);
      if (t.exampleIds != st.ids[a.microBatch])
        throw std::runtime_error("rank " + std::to_string(rank_) + ": example ids of micro-batch " + std::to_string(a.microBatch) +
                                 " differ from the data plan");
      st.activationIn[at] = fromTransport(t);
    } else if (a.message == Msg::kGradient) {
      Tensor32 t = transport_->recv(false, MessageKind::kGradient, st.g, st.epoch, a.microBatch, chunk);
      st.gradientIn[at] = fromTransport(t);
    } else {
      const bool fromPrev = a.peer == Action::Peer::kPrev;
      const double v = scalarOf(transport_->recv(fromPrev, MessageKind::kControl, st.g, st.epoch, normTag(a.message)));
      st.sq = a.message == Msg::kNormPartial ? st.sq + v : v;
    }
  }

  void send(const Action& a, StepState& st) {
    using Msg = Action::Message;
    const bool toNext = a.peer == Action::Peer::kNext;
    const std::pair<int, int> at{a.chunk, a.microBatch};
    if (a.message == Msg::kActivation || a.message == Msg::kGradient) {
      const MessageKind kind = a.message == Msg::kActivation ? MessageKind::kActivation : MessageKind::kGradient;
      sendTensor(toNext, kind, st.g, st.epoch, a.microBatch, st.outbox.at(at), st.ids[a.microBatch],
                 protocol::boundaryChunk(layout_, id_.stage, a));
      st.outbox.erase(at);
    } else {
      sendScalar(toNext, st.g, st.epoch, normTag(a.message), st.sq);
    }
  }

  void forward(const Action& a, StepState& st) {
    const std::pair<int, int> at{a.chunk, a.microBatch};
    StageRunner& runner = *runners_.at(a.chunk);
    torch::Tensor inputs, tgt;
    std::vector<int64_t> mbIds;
    makeBatch(plan_.train, plan_.epochs.microBatch(st.epoch, st.s, globalMb(a.microBatch)), spec_.model.seqLen, &inputs, &tgt, &mbIds);
    st.ids[a.microBatch] = mbIds;
    const torch::Tensor in = runner.first() ? inputs : st.activationIn.at(at);
    st.activationIn.erase(at);
    const double tc = now();
    torch::Tensor out = runner.forward(a.microBatch, in, tgt);
    st.compute += now() - tc;
    if (!runner.last()) st.outbox[at] = out;
  }

  // Backward, or its input-gradient or weight-gradient part (split backwards).
  void backward(const Action& a, StepState& st) {
    const std::pair<int, int> at{a.chunk, a.microBatch};
    StageRunner& runner = *runners_.at(a.chunk);
    const double tc = now();
    if (a.kind == Action::Kind::kBackwardWeight) {
      runner.backwardWeight(a.microBatch);
      st.compute += now() - tc;
      return;
    }
    torch::Tensor grad;
    if (!runner.last()) {
      grad = st.gradientIn.at(at);
      st.gradientIn.erase(at);
    }
    torch::Tensor gin = a.kind == Action::Kind::kBackward ? runner.backward(a.microBatch, grad) : runner.backwardInput(a.microBatch, grad);
    st.compute += now() - tc;
    if (!runner.first()) st.outbox[at] = gin;
  }

  void step(StepState& st) {
    const double tc = now();
    lastLoss_ = 0;
    if (lastRunner().last())
      for (int m = 0; m < spec_.pipeline.microBatches; ++m) lastLoss_ += lastRunner().lossValue(m) / spec_.pipeline.microBatches;
    norm_ = std::sqrt(st.sq);
    if (sync_ && sync_->replacesStep(st.g)) {
      sync_->clipAndMomentum(norm_);  // qadam: OuterStep updates
    } else {
      for (auto& r : runners_) r->step(st.g, norm_);
    }
    st.compute += now() - tc;
  }

  json stepRecord(const StepState& s, double seconds) {
    const TransportStats st = transport_->takeStats();
    const DpStats dst = dp_ ? dp_->takeStats() : DpStats{};
    json r = {{"type", "step"}, {"step", s.g}, {"epoch", s.epoch}, {"time_s", seconds}, {"compute_s", s.compute},
              {"encode_s", st.encodeS + dst.encodeS}, {"decode_s", st.decodeS + dst.decodeS},
              {"wait_s", st.waitS + dst.waitS}, {"fwd_raw", st.fwdRaw}, {"fwd_wire", st.fwdWire},
              {"bwd_raw", st.bwdRaw}, {"bwd_wire", st.bwdWire}, {"grad_raw", dst.raw}, {"grad_wire", dst.wire},
              {"grad_norm", norm_}, {"lr", runners_[0]->learningRate(s.g)}};
    if (dp_) {  // what the data-parallel exchange alone took (its share of the breakdown)
      double dpS = 0;
      for (const auto& e : events_)
        if (e.action.partOfDataParallelism()) dpS += e.end - e.start;
      r["dp_s"] = dpS;
    }
    // One-way times this stage observed on its inbound links (delivery - send stamp).
    for (const auto& [name, d] : {std::pair{"from_prev", st.fromPrev}, std::pair{"from_next", st.fromNext}})
      if (d.messages > 0) r["recv_delay_s"][name] = {{"min", d.minS}, {"max", d.maxS}, {"messages", d.messages}};
    if (lastRunner().last()) r["loss"] = lastLoss_;
    return r;
  }

  // The example ids of a micro-batch, from the data plan (the receiver checks the frame's against them).
  std::vector<int64_t> batchIds(int epoch, int64_t s, int mb) const {
    std::vector<int64_t> out;
    for (int64_t i : plan_.epochs.microBatch(epoch, s, globalMb(mb))) out.push_back(plan_.train.id(i));
    return out;
  }
  int globalMb(int mb) const { return id_.replica * spec_.pipeline.microBatches + mb; }

  // Control frame tags of the two norm messages (micro-batch field; negative, never a micro-batch).
  static int normTag(Action::Message m) { return m == Action::Message::kNormPartial ? -1 : -2; }

  // Evaluation, as its action list (runtime/schedule.h evalSchedule): batch k crosses the virtual
  // stages in order (with model chunks, around the ring V times), then the barrier: the last stage
  // finishes evaluating last, every stage waits for it, so the next step's timer starts on all
  // stages together instead of charging the evaluation to that step.
  void evaluate(int epoch, int64_t g) {
    using K = Action::Kind;
    const auto batches = evalBatches(plan_.val.size(), spec_.pipeline.microBatchSize);
    double lossSum = 0;
    int64_t tokens = 0;
    const double t0 = now();
    std::map<std::pair<int, int>, torch::Tensor> in, out;  // by (chunk, batch)
    std::map<int, std::pair<torch::Tensor, std::vector<int64_t>>> targets;  // by batch: targets, ids
    for (const Action& a : evalSchedule(S_, static_cast<int>(batches.size()), id_.stage, layout_.chunks)) {
      const std::pair<int, int> at{a.chunk, a.microBatch};
      const int chunk = protocol::boundaryChunk(layout_, id_.stage, a);
      if (a.kind == K::kRecv && a.message == Action::Message::kEval) {
        Tensor32 t = transport_->recv(true, MessageKind::kEval, g, epoch, a.microBatch, chunk);
        in[at] = fromTransport(t);
      } else if (a.kind == K::kEvalForward) {
        StageRunner& runner = *runners_.at(a.chunk);
        torch::Tensor x, tgt;
        std::vector<int64_t> ids;
        makeBatch(plan_.val, batches.at(a.microBatch), spec_.model.seqLen, &x, &tgt, &ids);
        if (!runner.first()) {
          x = in.at(at);
          in.erase(at);
        }
        torch::Tensor y = runner.evalForward(x, tgt, &lossSum);
        if (runner.last()) tokens += tgt.numel();
        else out[at] = y;
        targets[a.microBatch] = {tgt, ids};
      } else if (a.kind == K::kSend && a.message == Action::Message::kEval) {
        sendTensor(true, MessageKind::kEval, g, epoch, a.microBatch, out.at(at), targets.at(a.microBatch).second, chunk);
        out.erase(at);
      } else if (a.kind == K::kRecv) {  // the barrier
        transport_->recv(false, MessageKind::kControl, g, epoch, kBarrierTag);
      } else if (a.kind == K::kSend) {
        sendScalar(false, g, epoch, kBarrierTag, 0.0);
      }
    }
    transport_->takeStats();  // evaluation traffic is not training traffic
    json r = {{"type", "eval"}, {"epoch", epoch}, {"step", g}, {"time_s", now() - t0}};
    if (lastRunner().last()) r["val_loss"] = meanLoss(lossSum, tokens);
    report(r);
  }
  static constexpr int kBarrierTag = -3;  // the barrier's control frame (micro-batch field)

  StageRunner& lastRunner() { return *runners_.back(); }

  const RunSpec& spec_;
  int rank_, S_;
  RankLayout layout_;
  RankId id_;
  Plan plan_;
  std::vector<std::unique_ptr<StageRunner>> runners_;  // by model chunk
  DpShape dpShape_;
  zmq::socket_t control_;
  std::string controlFrom_;  // across hosts: this end of the control connection
  std::unique_ptr<emulator::DeviceShaper> shaper_;  // tc-dev: this host's interface, removed with the worker
  json shaping_;                                     // what it installed
  std::unique_ptr<StageTransport> transport_;
  GradientCompressor gc_;
  std::unique_ptr<DpExchange> dp_;     // replicas > 1
  std::unique_ptr<GradientSync> sync_;  // what the rounds carry (runtime/grad_sync.h)
  std::vector<float> dpBuf_;           // the round's flat buffer
  double norm_ = 0, lastLoss_ = 0;
  struct Event {
    Action action;
    double start, end;  // host monotonic clock
    int64_t step;
  };
  std::vector<Event> events_;  // of the current step (runtime.timeline "all": of every step)
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
