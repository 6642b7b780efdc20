// The message bill of a replay (see message_bill.h) and the frame sizes it is made of
// (simulate.h: steadyFrameBytes, firstFrameBytes, mixedFrameBytes).
#include "simulator/message_bill.h"

#include <algorithm>
#include <set>

#include "compression/codec.h"
#include "compression/frame.h"
#include "runtime/exec/protocol.h"

namespace slowpipe::simulator {

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

MessageBill::MessageBill(const runtime::RunSpec& spec, const Profile& profile,
                         const SimOptions& opt, const runtime::RankLayout& layout,
                         const ReplayPlan& plan, int steps)
    : spec_(spec),
      profile_(profile),
      opt_(opt),
      layout_(layout),
      plan_(plan),
      R_(spec.pipeline.replicas),
      steps_(steps) {
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
    const runtime::DpShape dp = runtime::dpShape(spec);
    for (int s = 0; s < spec.pipeline.stages; ++s) {
      dpValues_.emplace_back();
      for (int k = 0; k < dp.rounds; ++k)
        dpValues_.back().push_back(runtime::dpRoundValues(spec, s, k));
      dpCosts_.push_back(profile.dpCost(spec, s));
    }
  }
}

nlohmann::json MessageBill::record() const {
  return {{"forward", fwdBytes_},
          {"backward", bwdBytes_},
          {"control", ctlBytes_},
          {"raw", rawActBytes_},
          {"forward_first_epoch", fwdFirstBytes_},
          {"backward_first_epoch", bwdFirstBytes_}};
}

// The examples of each replayed step's micro-batches that their replica's pipeline meets for the
// first time: the run's epoch order (SimOptions::epochs), each replica's micro-batch mb of step
// k being the plan's micro-batch replica x M + mb (runtime/model/plan.h).
void MessageBill::freshRows() {
  if (!opt_.epochs || opt_.stepsPerEpoch <= 0 || opt_.epochs->stepsPerEpoch() != opt_.stepsPerEpoch)
    return;  // no plan, or one that is not this run's: epoch 0 in full, deltas after
  const int M = spec_.pipeline.microBatches;
  std::vector<std::set<int64_t>> seen(R_);
  fresh_.assign(steps_, std::vector<int>(static_cast<size_t>(R_) * M, 0));
  for (int k = 0; k < steps_; ++k)
    for (int r = 0; r < R_; ++r)
      for (int mb = 0; mb < M; ++mb)
        for (int64_t e :
             opt_.epochs->microBatch(plan_.epochOf(k), k % opt_.stepsPerEpoch, r * M + mb))
          fresh_[k][r * M + mb] += seen[r].insert(e).second;
}

// Rows of replica r's micro-batch mb at step k met for the first time (no plan: all in epoch 0).
int MessageBill::fresh(int k, int r, int mb) const {
  if (fresh_.empty()) return plan_.epochOf(k) == 0 ? spec_.pipeline.microBatchSize : 0;
  return fresh_.at(k).at(r * spec_.pipeline.microBatches + mb);
}

double MessageBill::evalRawBytes(int batch) const {
  return 4.0 * opt_.evalRows.at(batch) * spec_.model.seqLen * spec_.model.width;
}

int64_t MessageBill::evalFrameBytes(int batch) {
  const int rows = opt_.evalRows.at(batch);
  auto it = evalFrames_.find(rows);
  if (it == evalFrames_.end())
    it = evalFrames_
             .emplace(rows, steadyFrameBytes("none", {rows, spec_.model.seqLen, spec_.model.width}))
             .first;
  return it->second;
}

int64_t MessageBill::tensorFrameBytes(Action::Message m, int newRows) {
  const bool forward = m == Action::Message::kActivation;
  const int rows = spec_.pipeline.microBatchSize;
  if (newRows >= rows) return forward ? fwdFirstBytes_ : bwdFirstBytes_;
  if (newRows <= 0) return forward ? fwdBytes_ : bwdBytes_;
  auto it = mixedBytes_.find({forward, newRows});
  if (it == mixedBytes_.end()) {
    const std::string& codec = runtime::protocol::codecOf(spec_.compression, m);
    it = mixedBytes_
             .emplace(std::pair{forward, newRows},
                      mixedFrameBytes(codec, {rows, spec_.model.seqLen, spec_.model.width},
                                      rows - newRows))
             .first;
  }
  return it->second;
}

const CodecCost& MessageBill::codecCost(const std::string& spec) {
  auto it = codecCosts_.find(spec);
  if (it == codecCosts_.end()) it = codecCosts_.emplace(spec, &profile_.codec(spec)).first;
  return *it->second;
}

int64_t MessageBill::frameBytes(const std::string& codec, int64_t values) {
  auto key = std::pair{codec, values};
  auto it = frameBytes_.find(key);
  if (it == frameBytes_.end())
    it = frameBytes_.emplace(key, steadyFrameBytes(codec, {values}, /*exampleIds=*/false)).first;
  return it->second;
}

// The codec of a step's DP messages, parsed once per step (not per message).
const std::string& MessageBill::dpCodec(int step) {
  auto it = dpCodecs_.find(step);
  if (it == dpCodecs_.end()) it = dpCodecs_.emplace(step, runtime::dpRoundCodec(spec_, step)).first;
  return it->second;
}

int64_t MessageBill::chunkValues(int i, int round, int chunk) const {
  return runtime::protocol::dpChunkValues(dpValues_[layout_.id(i).stage][round], chunk, R_);
}

int64_t MessageBill::send(int i, const Action& a, RankState& st, double* seconds) {
  int64_t bytes = ctlBytes_;
  *seconds = 0;
  if (runtime::protocol::compressed(a.message)) {
    const bool forward = a.message == Action::Message::kActivation;
    const std::string& codec = runtime::protocol::codecOf(spec_.compression, a.message);
    // Every message is billed as the run has it: examples the replica's pipeline has not seen
    // before go in full (acsgd), the others as deltas (freshRows). Without a data plan every
    // replayed step is one of the run's first steps (epoch 0), so it is billed in full.
    bytes = tensorFrameBytes(a.message, fresh(st.step, layout_.id(i).replica, a.microBatch));
    *seconds = codecCost(codec).encode.at(static_cast<double>(rawActBytes_));
    (forward ? st.record.fwdRaw : st.record.bwdRaw) += rawActBytes_;
    (forward ? st.record.fwdWire : st.record.bwdWire) += bytes;
  } else if (a.message == Action::Message::kEval) {  // uncompressed, the batch's rows
    bytes = evalFrameBytes(a.microBatch);
    *seconds = codecCost("none").encode.at(evalRawBytes(a.microBatch));
  } else if (a.isDataParallel()) {
    const std::string& codec = dpCodec(st.step);
    const int64_t values = chunkValues(i, st.round, a.shard);
    const double raw = 4.0 * static_cast<double>(values);
    bytes = frameBytes(codec, values);
    const CodecCost& c = codecCost(codec);
    const bool owned = runtime::protocol::dpSendsOwnFrame(a, layout_.id(i).replica, R_);
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

double MessageBill::receive(int i, const Action& a, const RankState& st, int64_t bytes) {
  double seconds = 0.5 * profile_.transport.at(static_cast<double>(bytes));
  if (runtime::protocol::compressed(a.message)) {
    seconds += codecCost(runtime::protocol::codecOf(spec_.compression, a.message))
                   .decode.at(static_cast<double>(rawActBytes_));
  } else if (a.message == Action::Message::kEval) {
    seconds += codecCost("none").decode.at(evalRawBytes(a.microBatch));
  } else if (a.isDataParallel()) {
    seconds += codecCost(dpCodec(st.step))
                   .decode.at(4.0 * static_cast<double>(chunkValues(i, st.round, a.shard)));
  }
  return seconds;
}

}  // namespace slowpipe::simulator
