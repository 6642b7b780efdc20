// AC-SGD activation compression (arXiv 2206.01299): compress the change of each example's
// activation since it was last seen, not the activation itself.
//
// Protocol, per message x of shape [rows, ...] with ctx.exampleIds[r] naming row r's example:
//  1. The sender marks row r FULL if ctx.epoch < warmup_epochs or it holds no buffer m(id);
//     otherwise DELTA.
//  2. Payload: u32 rows | ceil(rows/8) flag bytes (bit r = FULL, LSB first) | FULL rows as fp32 in
//     row order | if any DELTA row: one quant payload of d = x[DELTA rows] - m[DELTA rows]
//     (shape [deltaRows, ...], scale per hidden channel over the whole micro-batch and sequence).
//  3. Both sides then update: FULL -> m(id) = x_r; DELTA -> m(id) = m(id) + Q(d_r), stored in the
//     store's dtype. The receiver's output row is x_r (FULL) or the updated m(id) (DELTA).
// Both sides run the same float operations on the same bytes (built with -ffp-contract=off), so
// the sender's and the receiver's stores stay bit-identical; stateDigest() lets tests check it. A
// DELTA row for an id the receiver has no buffer for means the two diverged and is an error.
#pragma once

#include <functional>
#include <memory>

#include "compression/codec.h"
#include "compression/example_store.h"
#include "compression/quant.h"

namespace slowpipe::compression {

struct AcsgdOptions {
  QuantOptions quant{2, QuantOptions::Scale::kChannel, 128, QuantOptions::Round::kNearest, 0};
  int warmupEpochs = 0;  // epochs sent in full precision before deltas start (0: first sighting)
  // fp16 buffers by default, as the AC-SGD reference keeps them (its buffers are fp16 in a memory
  // map); store=fp32 keeps full precision at twice the memory and more memory traffic.
  StoreOptions store{StoreOptions::Dtype::kFp16};
};

// A message's rows: shape [rows, ...] with one distinct example id per row (CodecError otherwise).
struct AcsgdRows {
  int64_t rows, rowLen;
};
AcsgdRows acsgdRows(const Shape& shape, const CodecContext& ctx);

// An acsgd payload taken apart and validated against the shape and what the receiver holds
// (`holds(id)`: a buffer for that example), before any state changes: the rows sent in full
// precision (fp32, in row order) and the quant payload of the delta rows (shape deltaShape).
struct AcsgdPayload {
  AcsgdRows rows;
  std::vector<int64_t> fullRows, deltaRows;
  const uint8_t* full = nullptr;
  const uint8_t* deltas = nullptr;
  size_t deltaBytes = 0;
  Shape deltaShape;
};
AcsgdPayload parseAcsgdPayload(const uint8_t* payload, size_t size, const Shape& shape,
                               const CodecContext& ctx, const QuantOptions& quant,
                               const std::function<bool(int64_t)>& holds);

class AcsgdCodec : public Codec {
 public:
  explicit AcsgdCodec(AcsgdOptions opt);
  CodecId id() const override { return CodecId::kAcsgd; }
  std::string spec() const override;
  void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) override;
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* out) override;
  uint64_t stateDigest() const override { return store_.digest(); }
  const AcsgdOptions& options() const { return opt_; }
  const ExampleStore& store() const { return store_; }
  ExampleStore& store() { return store_; }
  // Rows sent in full precision / as deltas by this codec so far (sender or receiver side).
  int64_t fullRows() const { return fullRows_; }
  int64_t deltaRows() const { return deltaRows_; }

 private:
  // Folds the dequantized deltas into the buffers of the DELTA rows; writes updated m to out rows.
  // m: the rows' current buffers if the caller already loaded them (sender), else null.
  void applyDeltas(const std::vector<int64_t>& ids, const std::vector<float>& deq, int64_t rowLen,
                   const std::vector<int64_t>& deltaRows, const float* m, float* out);
  // The DELTA rows in one fused pass per direction (elementwise stores): the same operations as
  // the generic path in the same order, without materializing d, Q(d) or m for the message.
  void encodeDeltasFused(const float* x, const Shape& dshape, const std::vector<int64_t>& ids,
                         const std::vector<int64_t>& deltaRows, Bytes& out);
  // One message's DELTA rows as encodeDeltasFused walks them a chunk at a time (acsgd.cc).
  struct DeltaChunks;
  std::vector<uint8_t*> deltaRowData(const std::vector<int64_t>& ids,
                                     const std::vector<int64_t>& deltaRows);
  const float* heldRange(uint8_t* row, int64_t off, int64_t cnt, float* buf) const;
  void decodeDeltasFused(const QuantStream& qs, const uint8_t* packed,
                         const std::vector<int64_t>& ids, const std::vector<int64_t>& deltaRows,
                         float* out);

  AcsgdOptions opt_;
  QuantCodec quant_;
  ExampleStore store_;
  int64_t fullRows_ = 0, deltaRows_ = 0;
  std::vector<float> scratch_, buffers_;  // deltas and loaded m rows, reused between messages
};

// Error feedback: sends C(x + r) and keeps r = (x + r) - C(x + r) per ctx.key (the transport sets
// it to the direction and micro-batch slot, e.g. "fwd/mb2"). Only the sender holds residuals; the
// receiver decodes C(x + r) like the inner codec.
// store=bf16 (spec "ef(INNER;store=bf16)") keeps r in bf16, rounded to nearest even: half the
// residual's memory and memory traffic (the fused ef(quant) step moves 14.5 bytes per value
// instead of 20.5), at a relative error of at most 2^-9 of r itself, far below the inner codec's
// own error. The default keeps r in fp32.
class ErrorFeedbackCodec : public Codec {
 public:
  enum class Store { kFp32, kBf16 };
  explicit ErrorFeedbackCodec(std::unique_ptr<Codec> inner, Store store = Store::kFp32);
  CodecId id() const override { return CodecId::kErrorFeedback; }
  std::string spec() const override {
    return "ef(" + inner_->spec() + (store_ == Store::kBf16 ? ";store=bf16" : "") + ")";
  }
  void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) override;
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* out) override {
    inner_->decode(payload, size, shape, ctx, out);
  }
  // Only the inner codec's mirrored state: the residual lives on the sender alone.
  uint64_t stateDigest() const override { return inner_->stateDigest(); }
  uint64_t maxPayloadBytes(const Shape& shape) const override {
    return inner_->maxPayloadBytes(shape);
  }
  const Codec& inner() const { return *inner_; }
  Store residualStore() const { return store_; }
  // Digest of the sender's residuals as stored (tests; the receiver's is always the empty digest).
  uint64_t residualDigest() const;
  // The residual of `key` as fp32 values (the bf16 ones widened); empty if `key` has none.
  std::vector<float> residual(const std::string& key) const;

 private:
  template <typename R>
  void encodeWith(const float* x, const Shape& shape, const CodecContext& ctx, R* r, Bytes& out);
  template <typename R>
  void encodeQuantFused(const float* x, const Shape& shape, R* r, Bytes& out);

  std::unique_ptr<Codec> inner_;
  Store store_;
  std::unordered_map<std::string, std::vector<float>> residual_;         // store=fp32
  std::unordered_map<std::string, std::vector<uint16_t>> residualBf16_;  // store=bf16
  std::vector<float> v_, q_, w_;  // x + r, C(x + r), r widened: reused between messages
};

}  // namespace slowpipe::compression
