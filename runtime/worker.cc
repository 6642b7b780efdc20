// Worker process and single-process trainer.
#include "runtime/worker.h"

#include <malloc.h>
#include <sys/prctl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <future>
#include <thread>
#include <zmq.hpp>

#include "emulator/devshaper.h"
#include "emulator/netns.h"
#include "emulator/shaped_socket.h"
#include "runtime/dp.h"
#include "runtime/bootstrap.h"
#include "runtime/context.h"
#include "runtime/grad_sync.h"
#include "runtime/launcher.h"
#include "runtime/protocol.h"
#include "runtime/ranks.h"
#include "runtime/rendezvous.h"
#include "runtime/security.h"
#include "runtime/schedule.h"
#include "runtime/stage_runner.h"
#include "runtime/result.h"
#include "runtime/transport.h"

namespace slowpipe::runtime {
namespace {

// The validation set in micro-batches of at most `b` examples, the last one partial: a set
// smaller than one micro-batch is still evaluated (it was skipped, and 0/0 reported).
std::vector<std::vector<int64_t>> evalBatches(int64_t n, int b) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t at = 0; at < n; at += b) {
    out.emplace_back();
    for (int64_t i = at; i < std::min<int64_t>(n, at + b); ++i) out.back().push_back(i);
  }
  return out;
}

// Mean loss per token; null when nothing was evaluated (no validation examples), never NaN.
nlohmann::json meanLoss(double lossSum, int64_t tokens) {
  return tokens > 0 ? nlohmann::json(lossSum / static_cast<double>(tokens)) : nlohmann::json(nullptr);
}

using compression::MessageKind;
using nlohmann::json;

double now() { return emulator::monotonicNow(); }

// The data plan of a step is the global batch of every replica: R x M micro-batches (see
// PipelineSpec::replicas); replica r's micro-batch mb is the plan's micro-batch r*M + mb.
struct Plan {
  ExampleSet train, val;
  EpochPlan epochs;
  int64_t totalSteps;
  Plan(const RunSpec& s, const std::string& split)
      : train(s.data, split, "train", s.model.seqLen),
        val(s.data, split, "val", s.model.seqLen),
        epochs(train.size(), s.pipeline.microBatches * s.pipeline.replicas, s.pipeline.microBatchSize, s.training.seed) {
    totalSteps = epochs.stepsPerEpoch() * s.training.epochs;
    if (s.training.maxSteps > 0) totalSteps = std::min(totalSteps, s.training.maxSteps);
  }
};

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

// The control socket to the launcher / coordinator. Returns, across hosts, this end's
// "address:port" of the TCP connection (the coordinator maps a dropped connection back to its
// rank with it); "" on one host.
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
    o.prevLatencyS = c.prevLatencyS;
    o.prevJitterS = c.prevJitterS;
    o.nextLatencyS = c.nextLatencyS;
    o.nextJitterS = c.nextJitterS;
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
  // Executes one step's action list (runtime/schedule.h): every receive and send is an action.
  void runStep(const std::vector<Action>& schedule, int epoch, int64_t s, int64_t g) {
    using K = Action::Kind;
    using Msg = Action::Message;
    const double t0 = now();
    double compute = 0, sq = 0;
    std::map<int, std::vector<int64_t>> ids;
    // Per (model chunk, micro-batch): received activations and gradients, outputs waiting to be sent.
    std::map<std::pair<int, int>, torch::Tensor> activationIn, gradientIn, outbox;
    // This step's timeline; the last step's (runtime.timeline "all": every step's) goes out with "done".
    if (spec_.runtime.timeline != "all") events_.clear();
    for (const Action& a : schedule) {
      const bool toNext = a.peer == Action::Peer::kNext;
      const std::pair<int, int> at{a.chunk, a.microBatch};
      const int chunk = protocol::boundaryChunk(layout_, id_.stage, a);  // the message's key
      StageRunner& runner = *runners_.at(a.chunk);
      const double ta = now();
      switch (a.kind) {
        case K::kDpBegin:
          sync_->pack(a.microBatch, g, dpBuf_);
          dp_->begin(dpBuf_.data(), static_cast<int64_t>(dpBuf_.size()), g, a.microBatch, sync_->exactRound(g));
          break;
        case K::kDpEnd:
          dp_->end();
          sync_->unpack(a.microBatch, g, dpBuf_);
          break;
        case K::kOuterStep:
          sync_->outerStep(g, dpBuf_);
          break;
        case K::kRecv:
          if (a.isDataParallel()) {
            dp_->execute(a);
          } else if (a.message == Msg::kActivation) {
            Tensor32 t = transport_->recv(true, MessageKind::kActivation, g, epoch, a.microBatch, chunk);
            ids[a.microBatch] = batchIds(epoch, s, a.microBatch);
            if (t.exampleIds != ids[a.microBatch])
              throw std::runtime_error("rank " + std::to_string(rank_) + ": example ids of micro-batch " +
                                       std::to_string(a.microBatch) + " differ from the data plan");
            activationIn[at] = fromTransport(t);
          } else if (a.message == Msg::kGradient) {
            Tensor32 t = transport_->recv(false, MessageKind::kGradient, g, epoch, a.microBatch, chunk);
            gradientIn[at] = fromTransport(t);
          } else {
            const double v = scalarOf(transport_->recv(!toNext, MessageKind::kControl, g, epoch, normTag(a.message)));
            sq = a.message == Msg::kNormPartial ? sq + v : v;
          }
          break;
        case K::kSend:
          if (a.isDataParallel()) {
            dp_->execute(a);
          } else if (a.message == Msg::kActivation || a.message == Msg::kGradient) {
            const MessageKind kind = a.message == Msg::kActivation ? MessageKind::kActivation : MessageKind::kGradient;
            sendTensor(toNext, kind, g, epoch, a.microBatch, outbox.at(at), ids[a.microBatch], chunk);
            outbox.erase(at);
          } else {
            sendScalar(toNext, g, epoch, normTag(a.message), sq);
          }
          break;
        case K::kForward: {
          torch::Tensor inputs, tgt;
          std::vector<int64_t> mbIds;
          makeBatch(plan_.train, plan_.epochs.microBatch(epoch, s, globalMb(a.microBatch)), spec_.model.seqLen, &inputs, &tgt, &mbIds);
          ids[a.microBatch] = mbIds;
          const torch::Tensor in = runner.first() ? inputs : activationIn.at(at);
          activationIn.erase(at);
          const double tc = now();
          torch::Tensor out = runner.forward(a.microBatch, in, tgt);
          compute += now() - tc;
          if (!runner.last()) outbox[at] = out;
          break;
        }
        case K::kBackward:
        case K::kBackwardInput: {
          torch::Tensor grad;
          if (!runner.last()) {
            grad = gradientIn.at(at);
            gradientIn.erase(at);
          }
          const double tc = now();
          torch::Tensor gin = a.kind == K::kBackward ? runner.backward(a.microBatch, grad) : runner.backwardInput(a.microBatch, grad);
          compute += now() - tc;
          if (!runner.first()) outbox[at] = gin;
          break;
        }
        case K::kBackwardWeight: {
          const double tc = now();
          runner.backwardWeight(a.microBatch);
          compute += now() - tc;
          break;
        }
        case K::kEvalForward:
          throw std::logic_error("an evaluation action in a training step's list");
        case K::kGradNorm:
          sq = 0;
          for (const auto& r : runners_) sq += r->localGradSquaredNorm();
          break;
        case K::kStep: {
          const double tc = now();
          lastLoss_ = 0;
          if (lastRunner().last())
            for (int m = 0; m < spec_.pipeline.microBatches; ++m)
              lastLoss_ += lastRunner().lossValue(m) / spec_.pipeline.microBatches;
          norm_ = std::sqrt(sq);
          if (sync_ && sync_->replacesStep(g)) {
            sync_->clipAndMomentum(norm_);  // qadam: OuterStep updates
          } else {
            for (auto& r : runners_) r->step(g, norm_);
          }
          compute += now() - tc;
          break;
        }
      }
      events_.push_back({a, ta, now(), g});
    }
    const TransportStats st = transport_->takeStats();
    const DpStats dst = dp_ ? dp_->takeStats() : DpStats{};
    json r = {{"type", "step"}, {"step", g}, {"epoch", epoch}, {"time_s", now() - t0}, {"compute_s", compute},
              {"encode_s", st.encodeS + dst.encodeS}, {"decode_s", st.decodeS + dst.decodeS},
              {"wait_s", st.waitS + dst.waitS}, {"fwd_raw", st.fwdRaw}, {"fwd_wire", st.fwdWire},
              {"bwd_raw", st.bwdRaw}, {"bwd_wire", st.bwdWire}, {"grad_raw", dst.raw}, {"grad_wire", dst.wire},
              {"grad_norm", norm_}, {"lr", runners_[0]->learningRate(g)}};
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
    report(r);
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

// Per-message buffers (frames, tensors) are 0.1-10 MB. With glibc's default, dynamic mmap
// threshold they were often mmap'ed and munmap'ed for every message, page-faulting on each reuse,
// and whether that happened depended on unrelated allocations (an AC-SGD buffer store raised the
// threshold as a side effect): fp32 runs measured ~8% more compute time than AC-SGD runs at 10 Gbps.
// Fixing the thresholds gives every codec the same allocator behaviour.
void tuneAllocator() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest value glibc accepts on 64-bit
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

int runWorker(const WorkerArgs& args) {
  const bool orphanGuard = prctl(PR_SET_PDEATHSIG, SIGKILL) == 0;  // never outlive the launcher
  const int prctlErrno = errno;
  tuneAllocator();
  // The launcher died before prctl took effect: our parent is no longer the pid it told us. (Not
  // getppid() == 1: in a container the launcher itself may be pid 1.)
  if (args.launcherPid > 0 && getppid() != args.launcherPid) return 4;
  zmq::context_t ctx(1);
  try {
    if (!orphanGuard)  // reported to the launcher like any error (the catch below)
      throw std::runtime_error(std::string("prctl(PR_SET_PDEATHSIG) failed: ") + std::strerror(prctlErrno) +
                               "; refusing to run a worker that could outlive its launcher");
    // Everything, setup included, runs inside the try: a failed setup is reported like any error.
    if (!args.netns.empty()) emulator::enterNamespace(args.netns);
    const RunSpec spec = loadRunSpec(args.specPath);
    torch::set_num_threads(spec.runtime.threadsPerWorker);
    // The local launcher's bootstrap: everything from its command line; the peer table comes on
    // a socket of this rank's own.
    Context c;
    c.rank = args.rank;
    c.size = spec.pipeline.stages * spec.pipeline.replicas;
    c.id = rankLayout(spec).id(args.rank);
    c.control = args.control;
    c.bindPrev = args.bindPrev;
    c.bindNext = args.bindNext;
    c.kernelPacesRate = args.kernelPacesRate;
    c.prevLatencyS = args.prevLatencyS;
    c.prevJitterS = args.prevJitterS;
    c.nextLatencyS = args.nextLatencyS;
    c.nextJitterS = args.nextJitterS;
    c.peerTable = [&args](zmq::context_t& zctx, const std::function<void()>& sayHello) {
      // Connect the peer-table socket *before* saying hello: the launcher answers a hello with a
      // send to this socket, which must already have its reader.
      zmq::socket_t peers(zctx, zmq::socket_type::pull);
      peers.set(zmq::sockopt::linger, 0);
      peers.connect(args.peers);
      sayHello();
      zmq::message_t m;
      zmq::pollitem_t item{static_cast<void*>(peers), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::seconds(60)) == 0 || !peers.recv(m, zmq::recv_flags::dontwait))
        throw std::runtime_error("rank " + std::to_string(args.rank) + ": no peer table from the launcher within 60 s");
      return json::parse(m.to_string());
    };
    PipelineWorker w(spec, c, ctx);
    w.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "slowpipe worker %d: %s\n", args.rank, e.what());
    zmq::socket_t control(ctx, zmq::socket_type::push);
    control.set(zmq::sockopt::linger, 2000);
    control.set(zmq::sockopt::sndtimeo, 2000);
    control.connect(args.control);
    const std::string s = json{{"type", "error"}, {"rank", args.rank}, {"message", e.what()}}.dump();
    (void)control.send(zmq::buffer(s), zmq::send_flags::none);
    return 3;
  }
  return 0;
}

namespace {

// Runs across hosts: a heartbeat to the coordinator every 0.5 s, and the coordinator's events. On
// "abort" (another rank failed, or the coordinator stopped the run) this process exits at once;
// when the coordinator's own heartbeat stops for 5 s it exits too (the coordinator is gone).
// `coordinatorDone` (rank 0, whose process hosts the coordinator): on "abort" wait until the
// coordinator has returned (at most 5 s), so that its abort reaches the other ranks before this
// process ends. Exiting at once killed the coordinator before its I/O thread had sent the abort
// to every rank; one then waited out the 5 s heartbeat instead (seen: 1 of 30 runs under load).
class Watchdog {
 public:
  Watchdog(zmq::context_t& ctx, const Context& c, const std::string& events, const std::atomic<bool>* coordinatorDone)
      : thread_([this, &ctx, rank = c.rank, control = c.control, events, own = c.security->own, key = c.coordinatorKey,
                 coordinatorDone] {
          zmq::socket_t beat(ctx, zmq::socket_type::push), sub(ctx, zmq::socket_type::sub);
          beat.set(zmq::sockopt::linger, 0);
          sub.set(zmq::sockopt::linger, 0);
          makeCurveClient(beat, own, key);
          makeCurveClient(sub, own, key);
          sub.set(zmq::sockopt::subscribe, "");
          beat.connect(control);
          sub.connect(events);
          const std::string beatText = json{{"type", "beat"}, {"rank", rank}}.dump();
          double heard = emulator::hostClockNow(), sent = 0;
          bool ended = false;
          while (!stop_) {
            const double t = emulator::hostClockNow();
            if (!ended && t - sent >= 0.5) {
              (void)beat.send(zmq::buffer(beatText), zmq::send_flags::dontwait);
              sent = t;
            }
            zmq::pollitem_t item{static_cast<void*>(sub), 0, ZMQ_POLLIN, 0};
            zmq::poll(&item, 1, std::chrono::milliseconds(100));
            zmq::message_t m;
            while (sub.recv(m, zmq::recv_flags::dontwait)) {
              const json e = json::parse(m.to_string(), nullptr, false);
              const std::string type = e.is_object() ? e.value("type", "") : "";
              heard = emulator::hostClockNow();
              if (type == "end") ended = true;
              if (type == "abort") {
                std::fprintf(stderr, "slowpipe worker %d: the coordinator stopped the run: %s\n", rank, e.value("reason", "").c_str());
                std::fflush(stderr);
                emulator::removeAllDeviceShaping();
                for (const double until = emulator::hostClockNow() + 5.0; coordinatorDone && !*coordinatorDone &&
                                                                        emulator::hostClockNow() < until;)
                  usleep(10000);
                _exit(4);
              }
            }
            if (!ended && emulator::hostClockNow() - heard > 5.0) {
              std::fprintf(stderr, "slowpipe worker %d: no heartbeat from the coordinator for 5 s (%s): it is gone; exiting\n",
                           rank, events.c_str());
              std::fflush(stderr);
              emulator::removeAllDeviceShaping();
              // The coordinator in this process (rank 0) stalled with it (SIGSTOP, starvation):
              // it notices its own stall and writes the failed result; wait for that (5 s at most).
              for (const double until = emulator::hostClockNow() + 5.0; coordinatorDone && !*coordinatorDone &&
                                                                      emulator::hostClockNow() < until;)
                usleep(10000);
              _exit(5);
            }
          }
        }) {}
  ~Watchdog() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

int64_t largestFrameBytes(const RunSpec& spec) {
  const int64_t mb = spec.pipeline.microBatchSize;
  const compression::Shape act = {mb, spec.model.seqLen, spec.model.width};
  // Each codec's own bound on its payload (topk's indices, lowrank's basis and plug-ins may
  // exceed fp32), with the frame header and one example id per row.
  uint64_t payload = 4 * static_cast<uint64_t>(compression::numelOf(act));
  for (const std::string& c : {spec.compression.forward, spec.compression.backward})
    payload = std::max(payload, compression::makeCodec(c, "frame-bound")->maxPayloadBytes(act) + 8 * static_cast<uint64_t>(mb));
  if (spec.pipeline.replicas > 1) {
    const GradientCompressor g = parseGradientCompressor(spec.dp.codec);
    const auto none = compression::makeCodec("none"), message = compression::makeCodec(g.messageCodec, "frame-bound");
    for (int s = 0; s < spec.pipeline.stages; ++s)
      for (int round = 0; round < dpShape(spec).rounds; ++round) {
        const compression::Shape chunk = {dpRoundValues(spec, s, round) / spec.pipeline.replicas + 1};
        payload = std::max({payload, none->maxPayloadBytes(chunk), message->maxPayloadBytes(chunk)});
      }
  }
  return static_cast<int64_t>(payload) + (64 << 10);
}

namespace {

// A one-line error record to the coordinator from a process whose worker could not be built.
void reportError(zmq::context_t& ctx, const Context& c, const std::string& what) {
  zmq::socket_t s(ctx, zmq::socket_type::push);
  connectControl(ctx, s, c);
  const int rank = c.rank;
  s.set(zmq::sockopt::sndtimeo, 2000);
  const std::string text = json{{"type", "error"}, {"rank", rank}, {"message", what}}.dump();
  (void)s.send(zmq::buffer(text), zmq::send_flags::none);
}

}  // namespace

int runExternalWorker(const ExternalWorkerArgs& a) {
  tuneAllocator();
  int rank = a.rank, size = a.size;
  std::string who = "slowpipe worker";
  std::thread coordinator;
  std::atomic<int> coordinatorRc{0};  // rank 0: the run's status
  std::atomic<bool> coordinatorDone{false};  // rank 0: launchRun returned (its sockets flushed and closed)
  RunSpec spec0;  // rank 0: the spec the coordinator runs (outlives its thread)
  auto finish = [&](int rc) {
    if (coordinator.joinable()) coordinator.join();
    return rc != 0 ? rc : coordinatorRc.load();
  };
  std::string rvHost, secret, source = "flags";
  int rvPort = 0;
  try {
    if (rank < 0) {
      const auto b = bootstrapFromEnv(processEnv());
      if (!b)
        throw std::invalid_argument("no rank: start the workers with mpirun, srun or torchrun-style variables (RANK, WORLD_SIZE), "
                                    "or give --rank and --size");
      rank = b->rank;
      size = b->size;
      source = b->source;
      if (!b->masterAddr.empty()) {
        if (b->masterPort <= 0) throw std::invalid_argument("environment: MASTER_ADDR is set but MASTER_PORT is not");
        rvHost = b->masterAddr;
        rvPort = b->masterPort;
      }
    } else if (size <= rank) {
      throw std::invalid_argument("--rank " + std::to_string(rank) + " needs --size above it");
    }
    who += " " + std::to_string(rank);
    if (!a.rendezvous.empty()) std::tie(rvHost, rvPort) = parseHostPort(a.rendezvous, "--rendezvous");
    if (rvHost.empty())
      throw std::invalid_argument("no rendezvous: give --rendezvous HOST:PORT (rank 0's host and a free port) or set MASTER_ADDR "
                                  "and MASTER_PORT");
    secret = loadSecret(processEnv());
    if (rank == 0) {  // the coordinator, in this process
      if (a.specPath.empty() || a.outDir.empty()) throw std::invalid_argument("rank 0 runs the coordinator: give --spec and --out");
      spec0 = loadRunSpec(a.specPath);
      LaunchOptions o;
      o.outDir = a.outDir;
      o.progress = false;
      o.external.enabled = true;
      o.external.listenHost = rvHost;
      o.external.listenPort = rvPort;
      o.external.secret = secret;
      o.external.joinTimeoutS = a.joinTimeoutS;
      auto ready = std::make_shared<std::promise<std::string>>();
      std::future<std::string> isReady = ready->get_future();
      o.external.ready = [ready](const std::string& error) { ready->set_value(error); };
      coordinator = std::thread([&coordinatorRc, &coordinatorDone, &spec0, o] {
        coordinatorRc = launchRun(spec0, o);
        coordinatorDone = true;
      });
      const std::string error = isReady.get();  // the corpus is prepared before the rendezvous listens
      if (!error.empty()) throw std::runtime_error("the coordinator did not start: " + error);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
    return finish(2);
  }
  int rc = 0;
  {
    zmq::context_t ctx(1);
    CurveGate gate(ctx);
    const CurveKeyPair own = newCurveKeyPair();
    SocketSecurity security;
    security.own = own;
    security.gate = &gate;
    // The rendezvous' bootstrap: rank and size from the launcher's environment, the rest from
    // the coordinator.
    Context c;
    c.rank = rank;
    c.size = size;
    c.security = &security;
    try {
      const std::string address = a.bindHost.empty() ? localAddressToward(rvHost) : resolveIPv4(a.bindHost);
      c.bindPrev = c.bindNext = c.bindDp = address;
      RendezvousClient rv(ctx, rvHost, rvPort, secret, a.joinTimeoutS);
      const json join = rv.call({{"type", "join"}, {"rank", rank}, {"size", size}, {"key", own.publicKey}, {"host", hostName()},
                                 {"address", address}, {"pid", getpid()}, {"bootstrap", source}},
                                a.joinTimeoutS + 10);
      c.control = join.at("control").get<std::string>();
      c.coordinatorKey = join.at("coordinator_key").get<std::string>();
      for (const auto& [k, v] : join.at("keys").items()) security.rankKeys[std::stoi(k)] = v.get<std::string>();
      // The coordinator's clock, NTP-style; rank 0 shares its process (and clock).
      const ClockEstimate clock = rank == 0 ? ClockEstimate{} : rv.estimateClock();
      emulator::setClockOffset(clock.offsetS);
      c.hello = {{"host", hostName()}, {"address", address}, {"bootstrap", source},
                 {"clock", {{"offset_s", clock.offsetS}, {"rtt_s", clock.rttS}, {"error_bound_s", 0.5 * clock.rttS}}}};
      const RunSpec spec = runSpecFromJson(join.at("spec"), "the run's spec (from the rendezvous)");
      c.id = rankLayout(spec).id(rank);
      if (spec.network.backend == "tc-dev") {
        // The kernel paces the rate on each host's interface; without netem this worker adds the
        // delay and jitter of what it receives itself.
        c.shapeDevice = spec.network.dev;
        c.kernelPacesRate = true;
        const emulator::Topology topo = emulator::topologyFromJson(spec.network.links, "network.links");
        const int st = c.id.stage;
        if (!emulator::kernelFeatures().netem) {
          if (st > 0) {
            c.prevLatencyS = topo.link(st - 1, st).latencyS;
            c.prevJitterS = topo.link(st - 1, st).jitterS;
          }
          if (st + 1 < spec.pipeline.stages) {
            c.nextLatencyS = topo.link(st + 1, st).latencyS;
            c.nextJitterS = topo.link(st + 1, st).jitterS;
          }
        }
      }
      c.peerTable = [&rv, rank, &spec](zmq::context_t&, const std::function<void()>& sayHello) {
        sayHello();  // the coordinator answers once every rank said hello
        return rv.call({{"type", "table"}, {"rank", rank}}, 2 * spec.runtime.stepTimeoutS);
      };
      if (rank != 0) prepareCorpus(spec.data);  // rank 0's coordinator prepared it on its host
      torch::set_num_threads(spec.runtime.threadsPerWorker);
      security.maxMessageBytes = largestFrameBytes(spec);
      Watchdog dog(ctx, c, join.at("events").get<std::string>(), rank == 0 ? &coordinatorDone : nullptr);
      PipelineWorker w(spec, c, ctx);
      w.run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
      if (!c.control.empty()) reportError(ctx, c, e.what());
      rc = 3;
    }
  }
  return finish(rc);
}

void runSingleProcess(const RunSpec& specIn, const std::string& split,
                      const std::function<void(const json&)>& onRecord, const std::string& checkpoint) {
  RunSpec spec = specIn;
  spec.pipeline.stages = 1;
  spec.pipeline.virtualStages = 1;  // every layer in one model chunk
  spec.pipeline.partition.clear();
  // The same global batch in one process: every replica's micro-batches, in replica order.
  spec.pipeline.microBatches *= spec.pipeline.replicas;
  spec.pipeline.replicas = 1;
  tuneAllocator();
  torch::set_num_threads(spec.runtime.threadsPerWorker);
  Plan plan(spec, split);
  StageRunner runner(spec, 0, plan.totalSteps);
  const int M = spec.pipeline.microBatches;
  const auto schedule = makeSchedule(spec.pipeline.schedule, 1, M, 0);
  int64_t g = 0;
  for (int epoch = 0; epoch < spec.training.epochs && g < plan.totalSteps; ++epoch) {
    for (int64_t s = 0; s < plan.epochs.stepsPerEpoch() && g < plan.totalSteps; ++s, ++g) {
      const double t0 = now();
      double loss = 0;
      for (const Action& a : schedule) {
        if (a.kind == Action::Kind::kForward) {
          torch::Tensor in, tgt;
          std::vector<int64_t> ids;
          makeBatch(plan.train, plan.epochs.microBatch(epoch, s, a.microBatch), spec.model.seqLen, &in, &tgt, &ids);
          runner.forward(a.microBatch, in, tgt);
          loss += runner.lossValue(a.microBatch) / M;
        } else if (a.kind == Action::Kind::kBackward) {
          runner.backward(a.microBatch, {});
        } else if (a.kind == Action::Kind::kBackwardInput) {
          runner.backwardInput(a.microBatch, {});
        } else if (a.kind == Action::Kind::kBackwardWeight) {
          runner.backwardWeight(a.microBatch);
        } else if (a.kind == Action::Kind::kStep) {
          runner.step(g, std::sqrt(runner.localGradSquaredNorm()));
        }
      }
      onRecord({{"type", "step"}, {"step", g}, {"epoch", epoch}, {"loss", loss}, {"time_s", now() - t0},
                {"tokens", int64_t{M} * spec.pipeline.microBatchSize * spec.model.seqLen}});
    }
    if (spec.training.evalEachEpoch) {
      double lossSum = 0;
      int64_t tokens = 0;
      for (const std::vector<int64_t>& idx : evalBatches(plan.val.size(), spec.pipeline.microBatchSize)) {
        std::vector<int64_t> ids;
        torch::Tensor in, tgt;
        makeBatch(plan.val, idx, spec.model.seqLen, &in, &tgt, &ids);
        runner.evalForward(in, tgt, &lossSum);
        tokens += tgt.numel();
      }
      onRecord({{"type", "eval"}, {"epoch", epoch}, {"step", g}, {"val_loss", meanLoss(lossSum, tokens)}});
    }
  }
  if (!checkpoint.empty()) saveCheckpoint(runner.model(), checkpoint);
}

}  // namespace slowpipe::runtime
