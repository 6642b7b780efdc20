// AC-SGD delta codec and error feedback; the protocol is described in acsgd.h.
#include "compression/acsgd.h"
#include "compression/bitpack.h"
#include "compression/hadamard.h"
#include "compression/half.h"
#include "compression/kernels.h"
#include "compression/parallel.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <unordered_set>

namespace slowpipe::compression {
namespace {

bool flagOf(const uint8_t* flags, int64_t r) { return (flags[r / 8] >> (r % 8)) & 1; }

// Values per fused step: the step's m, d and codes stay in L1.
constexpr int64_t kChunk = 4096;

// Calls fn(j, off, p, cnt) for the pieces of flat delta values [i0, i0 + len): delta row j,
// values [off, off + cnt) of that row, at position p of the chunk.
template <typename Fn>
void forEachPiece(int64_t i0, int64_t len, int64_t rowLen, Fn&& fn) {
  for (int64_t i = i0; i < i0 + len;) {
    const int64_t j = i / rowLen, off = i % rowLen, cnt = std::min(rowLen - off, i0 + len - i);
    fn(j, off, i - i0, cnt);
    i += cnt;
  }
}

}  // namespace

AcsgdCodec::AcsgdCodec(AcsgdOptions opt)
    : opt_(std::move(opt)), quant_(opt_.quant), store_(opt_.store) {
  SP_REQUIRE(opt_.warmupEpochs >= 0,
             "acsgd: warmup_epochs=" + std::to_string(opt_.warmupEpochs) + " must be >= 0");
}

std::string AcsgdCodec::spec() const {
  std::string q = quant_.spec();  // "quant:bits=...": reuse its parameters
  std::string s = "acsgd:" + q.substr(q.find(':') + 1);
  s += ",warmup_epochs=" + std::to_string(opt_.warmupEpochs);
  s += ",store=" + storeDtypeName(opt_.store.dtype);
  if (opt_.store.backing == StoreOptions::Backing::kMmap) {
    s += ",backing=mmap";
    if (!opt_.store.path.empty()) s += ",path=" + opt_.store.path;
    if (opt_.store.keepFile) s += ",keep=true";
  }
  if (opt_.store.budgetBytes) s += ",budget=" + std::to_string(opt_.store.budgetBytes);
  return s;
}

AcsgdRows acsgdRows(const Shape& shape, const CodecContext& ctx) {
  SP_REQUIRE(!shape.empty(),
             "acsgd: needs a tensor with a leading example dimension, got a scalar");
  const int64_t rows = shape[0], n = numelOf(shape);
  SP_REQUIRE(static_cast<int64_t>(ctx.exampleIds.size()) == rows,
             "acsgd: " + std::to_string(ctx.exampleIds.size()) + " example ids for " +
                 std::to_string(rows) + " rows of shape " + shapeString(shape));
  std::unordered_set<int64_t> seen;
  for (int64_t id : ctx.exampleIds)
    SP_REQUIRE(seen.insert(id).second,
               "acsgd: example id " + std::to_string(id) + " appears twice in one message");
  return {rows, rows ? n / rows : 0};
}

AcsgdPayload parseAcsgdPayload(const uint8_t* payload, size_t size, const Shape& shape,
                               const CodecContext& ctx, const QuantOptions& quant,
                               const std::function<bool(int64_t)>& holds) {
  AcsgdPayload p;
  p.rows = acsgdRows(shape, ctx);
  const int64_t rows = p.rows.rows;
  ByteReader rd(payload, size, "acsgd payload");
  const uint32_t sentRows = rd.get<uint32_t>("row count");
  SP_REQUIRE(sentRows == rows, "acsgd: payload has " + std::to_string(sentRows) + " rows, shape " +
                                   shapeString(shape) + " has " + std::to_string(rows));
  const uint8_t* flags = rd.take((rows + 7) / 8, "row flags");
  for (int64_t r = 0; r < rows; ++r) (flagOf(flags, r) ? p.fullRows : p.deltaRows).push_back(r);
  for (int64_t r : p.deltaRows)
    SP_REQUIRE(holds(ctx.exampleIds[r]),
               "acsgd: delta for example id " + std::to_string(ctx.exampleIds[r]) +
                   " but the receiver holds no buffer for it (sender and receiver diverged)");
  p.full = rd.take(4 * p.rows.rowLen * p.fullRows.size(), "full-precision rows");
  p.deltaShape = shape;
  p.deltaShape[0] = static_cast<int64_t>(p.deltaRows.size());
  p.deltaBytes = p.deltaRows.empty() ? 0 : quantPayloadBytes(quant, p.deltaShape);
  SP_REQUIRE(rd.remaining() == p.deltaBytes, "acsgd: " + std::to_string(rd.remaining()) +
                                                 " bytes of quantized deltas, expected " +
                                                 std::to_string(p.deltaBytes));
  p.deltas = rd.take(p.deltaBytes, "deltas");
  return p;
}

void AcsgdCodec::applyDeltas(const std::vector<int64_t>& ids, const std::vector<float>& deq,
                             int64_t rowLen, const std::vector<int64_t>& deltaRows,
                             const float* loaded, float* out) {
  std::vector<float> m(rowLen);
  for (size_t j = 0; j < deltaRows.size(); ++j) {
    const int64_t id = ids[deltaRows[j]];
    if (loaded) {
      std::copy(loaded + j * rowLen, loaded + (j + 1) * rowLen, m.begin());
    } else {
      store_.load(id, m.data(), rowLen);
    }
    const float* d = deq.data() + j * rowLen;
    for (int64_t i = 0; i < rowLen; ++i) m[i] += d[i];
    store_.store(id, m.data(), rowLen);
    if (out) store_.load(id, out + deltaRows[j] * rowLen, rowLen);  // what both sides now hold
  }
}

void AcsgdCodec::encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) {
  const auto [rows, rowLen] = acsgdRows(shape, ctx);
  store_.prefetch(ctx.exampleIds);
  std::vector<uint8_t> flags((rows + 7) / 8, 0);
  std::vector<int64_t> fullRows, deltaRows;
  for (int64_t r = 0; r < rows; ++r) {
    const bool full = ctx.epoch < opt_.warmupEpochs || !store_.contains(ctx.exampleIds[r]);
    if (full) flags[r / 8] |= static_cast<uint8_t>(1u << (r % 8));
    (full ? fullRows : deltaRows).push_back(r);
  }
  ByteWriter w(out);
  w.put<uint32_t>(static_cast<uint32_t>(rows));
  w.append(flags.data(), flags.size());
  for (int64_t r : fullRows) w.append(x + r * rowLen, 4 * rowLen);
  if (!deltaRows.empty() && store_.elementwise()) {
    Shape dshape = shape;
    dshape[0] = static_cast<int64_t>(deltaRows.size());
    encodeDeltasFused(x, dshape, ctx.exampleIds, deltaRows, out);
  } else if (!deltaRows.empty()) {
    Shape dshape = shape;
    dshape[0] = static_cast<int64_t>(deltaRows.size());
    std::vector<float>& d = scratch_;
    std::vector<float>& m = buffers_;
    d.resize(deltaRows.size() * rowLen);
    m.resize(deltaRows.size() * rowLen);
    for (size_t j = 0; j < deltaRows.size(); ++j) {
      float* mr = m.data() + j * rowLen;
      store_.load(ctx.exampleIds[deltaRows[j]], mr, rowLen);
      const float* xr = x + deltaRows[j] * rowLen;
      for (int64_t i = 0; i < rowLen; ++i) d[j * rowLen + i] = xr[i] - mr[i];
    }
    const size_t at = out.size();
    quant_.encode(d.data(), dshape, ctx, out);
    quant_.decode(out.data() + at, out.size() - at, dshape, ctx, d.data());  // d := Q(d)
    applyDeltas(ctx.exampleIds, d, rowLen, deltaRows, m.data(), nullptr);
  }
  for (int64_t r : fullRows) store_.store(ctx.exampleIds[r], x + r * rowLen, rowLen);
  fullRows_ += static_cast<int64_t>(fullRows.size());
  deltaRows_ += static_cast<int64_t>(deltaRows.size());
}

void AcsgdCodec::decode(const uint8_t* payload, size_t size, const Shape& shape,
                        const CodecContext& ctx, float* out) {
  const AcsgdPayload p = parseAcsgdPayload(payload, size, shape, ctx, opt_.quant,
                                           [&](int64_t id) { return store_.contains(id); });
  const int64_t rowLen = p.rows.rowLen;
  const std::vector<int64_t>& fullRows = p.fullRows;
  const std::vector<int64_t>& deltaRows = p.deltaRows;
  const Shape& dshape = p.deltaShape;
  const uint8_t* q = p.deltas;
  const bool fused = store_.elementwise();
  std::vector<float>& deq = scratch_;
  QuantStream qs(quant_, dshape);
  if (fused && !deltaRows.empty()) {
    qs.readScales(q);  // validates the scales before any state changes
  } else {
    deq.resize(deltaRows.size() * rowLen);
    if (!deltaRows.empty()) quant_.decode(q, p.deltaBytes, dshape, ctx, deq.data());
  }
  // Everything validated: only now touch the state.
  for (size_t j = 0; j < fullRows.size(); ++j) {
    float* row = out + fullRows[j] * rowLen;
    copyBytes(row, p.full + 4 * rowLen * j, 4 * rowLen);
    store_.store(ctx.exampleIds[fullRows[j]], row, rowLen);
  }
  if (fused) {
    if (!deltaRows.empty())
      decodeDeltasFused(qs, q + qs.scaleBytes(), ctx.exampleIds, deltaRows, out);
  } else {
    applyDeltas(ctx.exampleIds, deq, rowLen, deltaRows, nullptr, out);
  }
  fullRows_ += static_cast<int64_t>(fullRows.size());
  deltaRows_ += static_cast<int64_t>(deltaRows.size());
}

// m of delta row j, values [off, off + cnt): an fp32 store's row is used in place; an fp16
// store's is converted into buf.
const float* AcsgdCodec::heldRange(uint8_t* row, int64_t off, int64_t cnt, float* buf) const {
  if (store_.options().dtype == StoreOptions::Dtype::kFp32)
    return reinterpret_cast<const float*>(row) + off;
  store_.loadElems(row, off, cnt, buf);
  return buf;
}

// The stored rows of the DELTA rows' examples (valid until a new id is stored).
std::vector<uint8_t*> AcsgdCodec::deltaRowData(const std::vector<int64_t>& ids,
                                               const std::vector<int64_t>& deltaRows) {
  std::vector<uint8_t*> rows(deltaRows.size());
  for (size_t j = 0; j < deltaRows.size(); ++j) rows[j] = store_.rowData(ids[deltaRows[j]]);
  return rows;
}

// The DELTA rows of one message, walked a chunk (kChunk values) at a time; chunk scratch per part
// (parts run on the codec threads, compression/parallel.h): m of the chunk converted from the store
// (mbuf) and its d = x - m (d).
struct AcsgdCodec::DeltaChunks {
  struct Scratch {
    PartBuffer mbuf{kChunk}, d{kChunk};
    uint8_t codes[kChunk];
  };
  AcsgdCodec& codec;
  const float* x;
  const std::vector<int64_t>& deltaRows;
  std::vector<uint8_t*> rows;
  int64_t rowLen;
  bool inPlace, oneLoop, inRegisters;  // fp32 store; channel scales, nearest; fp16 in registers
  const Kernels& k = kernels();

  const float* xAt(int64_t j, int64_t off) const { return x + deltaRows[j] * rowLen + off; }

  // d = x - m for the chunk's pieces (an fp16 store's m of the chunk lands in mbuf).
  void deltas(int64_t i0, int64_t len, Scratch& sc) const {
    forEachPiece(i0, len, rowLen, [&](int64_t j, int64_t off, int64_t p, int64_t cnt) {
      k.sub(xAt(j, off), codec.heldRange(rows[j], off, cnt, sc.mbuf.data() + p), cnt,
            sc.d.data() + p);
    });
  }

  // The next chunk's x and m requested while this one is worked on: the conversion and kernel
  // loops each touch one stream at a time, which alone leaves the memory system half idle. Fused
  // steps that prefetch as they go (kernels.h) need none of this.
  void prefetch(int64_t i0, int64_t end) const {
    if (k.fusedStepsPrefetch || i0 >= end) return;
    const int64_t mBytes = inPlace ? 4 : 2;
    forEachPiece(i0, std::min(kChunk, end - i0), rowLen,
                 [&](int64_t j, int64_t off, int64_t, int64_t cnt) {
                   const char* xp = reinterpret_cast<const char*>(xAt(j, off));
                   const char* mp = reinterpret_cast<const char*>(rows[j] + off * mBytes);
                   for (int64_t b = 0; b < 4 * cnt; b += 64) __builtin_prefetch(xp + b);
                   for (int64_t b = 0; b < mBytes * cnt; b += 64) __builtin_prefetch(mp + b);
                 });
  }

  // Pass 1 on one chunk: the scales of d.
  void accumulate(QuantStream& part, int64_t i0, int64_t len, int64_t end, Scratch& sc) const {
    if (!oneLoop) {
      deltas(i0, len, sc);
      return part.accumulate(sc.d.data(), i0, len);
    }
    prefetch(i0 + kChunk, end);
    forEachPiece(i0, len, rowLen, [&](int64_t j, int64_t off, int64_t p, int64_t cnt) {
      if (inRegisters) return part.deltaAccumulateHalf(xAt(j, off), rows[j] + 2 * off, i0 + p, cnt);
      part.deltaAccumulate(xAt(j, off), codec.heldRange(rows[j], off, cnt, sc.mbuf.data() + p),
                           i0 + p, cnt);
    });
  }

  // Pass 2 on one chunk: its codes into sc.codes (or, with `packed`, value 0's byte, packed there:
  // packedUpdate), m += Q(d).
  void update(QuantStream& qs, int64_t i0, int64_t len, int64_t end, Scratch& sc,
              uint8_t* packed) const {
    float* mbuf = sc.mbuf.data();
    float* d = sc.d.data();
    if (oneLoop) {
      prefetch(i0 + kChunk, end);
      return forEachPiece(i0, len, rowLen, [&](int64_t j, int64_t off, int64_t pos, int64_t cnt) {
        uint8_t* c = sc.codes + pos;
        const int64_t at = i0 + pos;
        uint8_t* to = packed ? packed + at / 8 * codec.opt_.quant.bits : nullptr;
        if (inRegisters)
          return to ? qs.deltaUpdateHalfPacked(xAt(j, off), rows[j] + 2 * off, at, cnt, c, to)
                    : qs.deltaUpdateHalf(xAt(j, off), rows[j] + 2 * off, at, cnt, c);
        float* m = inPlace ? reinterpret_cast<float*>(rows[j]) + off : mbuf + pos;
        if (to) return qs.deltaUpdatePacked(xAt(j, off), m, at, cnt, c, to);  // inPlace
        if (!inPlace) codec.store_.loadElems(rows[j], off, cnt, m);
        qs.deltaUpdate(xAt(j, off), m, i0 + pos, cnt, c);
        if (!inPlace) codec.store_.storeElems(rows[j], off, cnt, m, nullptr);
      });
    }
    deltas(i0, len, sc);
    qs.quantize(d, i0, len, sc.codes);
    qs.dequantize(sc.codes, i0, len, d);
    forEachPiece(i0, len, rowLen, [&](int64_t j, int64_t off, int64_t pos, int64_t cnt) {
      float* m = inPlace ? reinterpret_cast<float*>(rows[j]) + off : mbuf + pos;
      k.add(m, d + pos, cnt, m);
      if (!inPlace) codec.store_.storeElems(rows[j], off, cnt, m, nullptr);
    });
  }
};

void AcsgdCodec::encodeDeltasFused(const float* x, const Shape& dshape,
                                   const std::vector<int64_t>& ids,
                                   const std::vector<int64_t>& deltaRows, Bytes& out) {
  QuantStream qs(quant_, dshape);
  const bool inPlace = store_.options().dtype == StoreOptions::Dtype::kFp32;
  // fp16 buffers converted in registers where the kernels can (AVX2 + F16C), else through mbuf.
  const DeltaChunks w{*this,
                      x,
                      deltaRows,
                      deltaRowData(ids, deltaRows),
                      numelOf(dshape) / dshape[0],
                      inPlace,
                      qs.fused(),
                      qs.fused() && !inPlace && qs.halfFused()};
  qs.accumulateParts([&](int64_t lo, int64_t hi, QuantStream& part) {
    DeltaChunks::Scratch sc;
    for (int64_t i0 = lo; i0 < hi; i0 += kChunk)
      w.accumulate(part, i0, std::min(kChunk, hi - i0), hi, sc);
  });
  qs.finishScales();
  uint8_t* p = ByteWriter(out).grow(quantPayloadBytes(opt_.quant, dshape));
  qs.writeScales(p);
  uint8_t* packed = p + qs.scaleBytes();
  const int bits = opt_.quant.bits;
  // fp32 buffers, or fp16 ones in registers, over channels of a multiple of 8 (so every row piece
  // starts on a byte): the codes packed as they are made.
  const bool packedUpdate = (w.inRegisters || (w.inPlace && w.oneLoop)) && qs.packedUpdates();
  parallelRanges(qs.size(), kChunk, [&](int64_t lo, int64_t hi, int64_t) {
    DeltaChunks::Scratch sc;
    for (int64_t i0 = lo; i0 < hi; i0 += kChunk) {
      const int64_t len = std::min(kChunk, hi - i0);
      w.update(qs, i0, len, hi, sc, packedUpdate ? packed : nullptr);
      if (!packedUpdate) packBits(sc.codes, len, bits, packed + i0 * bits / 8);
    }
  });
  qs.done();
}

// qs: the deltas' stream with its scales read; packed: their codes.
void AcsgdCodec::decodeDeltasFused(const QuantStream& qs, const uint8_t* packed,
                                   const std::vector<int64_t>& ids,
                                   const std::vector<int64_t>& deltaRows, float* out) {
  const Kernels& k = kernels();
  const int64_t rowLen = qs.size() / static_cast<int64_t>(deltaRows.size());
  const std::vector<uint8_t*> rows = deltaRowData(ids, deltaRows);
  const int bits = opt_.quant.bits;
  const bool inRegisters =
      store_.options().dtype == StoreOptions::Dtype::kFp16 && k.deltaApplyH != nullptr;
  // Large outputs are built a piece at a time in buffers that stay in L1 and streamed to their
  // place (as quant's decode does).
  const bool stream = qs.size() >= QuantCodec::kStreamValues;
  if (qs.packedApplies()) {  // rows and parts start at multiples of 8 values
    const bool half = store_.options().dtype == StoreOptions::Dtype::kFp16;
    parallelRanges(qs.size(), kChunk, [&](int64_t lo, int64_t hi, int64_t) {
      forEachPiece(lo, hi - lo, rowLen, [&](int64_t j, int64_t off, int64_t p, int64_t cnt) {
        float* const to = out + deltaRows[j] * rowLen + off;
        if (half)
          qs.applyPackedHalf(packed, lo + p, cnt, rows[j] + 2 * off, to, stream);
        else
          qs.applyPackedFloat(packed, lo + p, cnt, reinterpret_cast<float*>(rows[j]) + off, to,
                              stream);
      });
      if (stream) k.streamFence();
    });
    return;
  }
  const int64_t piece = stream ? QuantCodec::kStreamPiece : kChunk;
  parallelRanges(qs.size(), kChunk, [&](int64_t lo, int64_t hi, int64_t) {
    PartBuffer mbuf(piece), d(piece), obuf(stream ? piece : 0);
    uint8_t codes[kChunk];
    for (int64_t i0 = lo; i0 < hi; i0 += piece) {
      const int64_t len = std::min(piece, hi - i0);
      unpackBits(packed + i0 * bits / 8, len, bits, codes);
      qs.dequantize(codes, i0, len, d.data());
      // The output row is what both sides now hold: m + Q(d) after the store's rounding.
      forEachPiece(i0, len, rowLen, [&](int64_t j, int64_t off, int64_t p, int64_t cnt) {
        float* const to = out + deltaRows[j] * rowLen + off;
        if (inRegisters)  // fp16 buffer, AVX2 + F16C: straight to the output
          return k.deltaApplyH(d.data() + p, rows[j] + 2 * off, cnt, to, stream);
        float* o = stream ? obuf.data() + p : to;
        k.add(heldRange(rows[j], off, cnt, mbuf.data() + p), d.data() + p, cnt, o);
        store_.storeElems(rows[j], off, cnt, o, o);
        if (stream) k.streamOut(o, cnt, to);
      });
    }
    if (stream) k.streamFence();
  });
}

ErrorFeedbackCodec::ErrorFeedbackCodec(std::unique_ptr<Codec> inner, Store store)
    : inner_(std::move(inner)), store_(store) {
  const Codec* core = inner_.get();  // a rotation keeps the state of what it wraps
  while (core->id() == CodecId::kHadamard) core = &static_cast<const HadamardCodec*>(core)->inner();
  const CodecId id = core->id();
  SP_REQUIRE(id != CodecId::kAcsgd && id != CodecId::kErrorFeedback,
             "ef: inner codec '" + inner_->spec() +
                 "' is stateful; expected one of none, fp16, bf16, quant, topk, randk, lowrank (or "
                 "hadamard of one)");
}

namespace {
// A bf16 residual, widened to fp32 for the generic steps and narrowed back (round to nearest even).
void widen(const uint16_t* r, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16ToFloat(r[i]);
}
void narrow(const float* v, int64_t n, uint16_t* r) {
  for (int64_t i = 0; i < n; ++i) r[i] = floatToBf16(v[i]);
}
// Where the generic steps read and write the residual run [at, at + n): in place (fp32), or a
// widened copy in `w` that `store` narrows back (bf16).
float* residualRun(float* r, int64_t, float*) { return r; }
float* residualRun(uint16_t* r, int64_t n, float* w) {
  widen(r, n, w);
  return w;
}
void store(float*, int64_t, const float*) {}
void store(uint16_t* r, int64_t n, const float* w) { narrow(w, n, r); }
}  // namespace

void ErrorFeedbackCodec::encode(const float* x, const Shape& shape, const CodecContext& ctx,
                                Bytes& out) {
  const auto n = static_cast<size_t>(numelOf(shape));
  auto check = [&](size_t held) {
    SP_REQUIRE(held == n, "ef: tensor '" + ctx.key + "' changed size from " + std::to_string(held) +
                              " to " + std::to_string(n) + " values");
  };
  if (store_ == Store::kBf16) {
    auto& r = residualBf16_[ctx.key];
    if (r.empty()) r.assign(n, 0);  // bf16 +0
    check(r.size());
    return encodeWith(x, shape, ctx, r.data(), out);
  }
  auto& r = residual_[ctx.key];
  if (r.empty()) r.assign(n, 0.0f);
  check(r.size());
  encodeWith(x, shape, ctx, r.data(), out);
}

template <typename R>
void ErrorFeedbackCodec::encodeWith(const float* x, const Shape& shape, const CodecContext& ctx,
                                    R* r, Bytes& out) {
  if (inner_->id() == CodecId::kQuant) return encodeQuantFused(x, shape, r, out);
  const Kernels& k = kernels();
  const int64_t n = numelOf(shape);
  v_.resize(n);
  q_.resize(n);
  if constexpr (std::is_same_v<R, uint16_t>) w_.resize(n);
  float* rf = residualRun(r, n, w_.data());
  k.add(x, rf, n, v_.data());
  const size_t at = out.size();
  inner_->encode(v_.data(), shape, ctx, out);
  inner_->decode(out.data() + at, out.size() - at, shape, ctx, q_.data());
  k.sub(v_.data(), q_.data(), n, rf);
  store(r, n, w_.data());
}

// ef(quant): v = x + r chunk by chunk, twice (scales, then codes); r = v - Q(v) from the chunk's
// codes. The same operations as the generic path, without materializing v or Q(v); channel scales
// with nearest rounding run one kernel per pass, on the residual as stored.
template <typename R>
void ErrorFeedbackCodec::encodeQuantFused(const float* x, const Shape& shape, R* r, Bytes& out) {
  constexpr bool kBf16 = std::is_same_v<R, uint16_t>;
  const Kernels& k = kernels();
  auto& quant = static_cast<QuantCodec&>(*inner_);
  QuantStream qs(quant, shape);
  const bool oneLoop = qs.fused();  // channel scales, nearest: one kernel per pass (kernels.h)
  // Chunk scratch per part (the codec threads, compression/parallel.h): v = x + r, Q(v), and the
  // widened residual of a bf16 store.
  struct Scratch {
    PartBuffer v{kChunk}, q{kChunk}, w{kChunk};
  };
  qs.accumulateParts([&](int64_t lo, int64_t hi, QuantStream& part) {
    Scratch sc;
    for (int64_t i0 = lo; i0 < hi; i0 += kChunk) {
      const int64_t len = std::min(kChunk, hi - i0);
      if (oneLoop) {
        if constexpr (kBf16)
          part.sumAccumulateBf16(x + i0, r + i0, i0, len);
        else
          part.sumAccumulate(x + i0, r + i0, i0, len);
        continue;
      }
      k.add(x + i0, residualRun(r + i0, len, sc.w.data()), len, sc.v.data());
      part.accumulate(sc.v.data(), i0, len);
    }
  });
  qs.finishScales();
  uint8_t* p = ByteWriter(out).grow(quantPayloadBytes(quant.options(), shape));
  qs.writeScales(p);
  uint8_t* packed = p + qs.scaleBytes();
  const int bits = quant.options().bits;
  const bool packedUpdate = qs.packedUpdates();  // the codes packed as they are made
  parallelRanges(qs.size(), kChunk, [&](int64_t lo, int64_t hi, int64_t) {
    Scratch sc;
    uint8_t codes[kChunk];
    for (int64_t i0 = lo; i0 < hi; i0 += kChunk) {
      const int64_t len = std::min(kChunk, hi - i0);
      uint8_t* to = packed + i0 * bits / 8;
      if (oneLoop && packedUpdate) {
        if constexpr (kBf16)
          qs.residualUpdateBf16Packed(x + i0, r + i0, i0, len, codes, to);
        else
          qs.residualUpdatePacked(x + i0, r + i0, i0, len, codes, to);
        continue;
      }
      if (oneLoop) {
        if constexpr (kBf16)
          qs.residualUpdateBf16(x + i0, r + i0, i0, len, codes);
        else
          qs.residualUpdate(x + i0, r + i0, i0, len, codes);
        packBits(codes, len, bits, to);
        continue;
      }
      float* rf = residualRun(r + i0, len, sc.w.data());
      k.add(x + i0, rf, len, sc.v.data());
      qs.quantize(sc.v.data(), i0, len, codes);
      packBits(codes, len, bits, to);
      qs.dequantize(codes, i0, len, sc.q.data());
      k.sub(sc.v.data(), sc.q.data(), len, rf);
      store(r + i0, len, sc.w.data());
    }
  });
  qs.done();
}

uint64_t ErrorFeedbackCodec::residualDigest() const {
  uint64_t h = kFnvOffset;
  auto digest = [&h](const auto& map) {
    std::vector<std::string> keys;
    for (const auto& kv : map) keys.push_back(kv.first);
    std::sort(keys.begin(), keys.end());
    for (const auto& k : keys) {
      const auto& r = map.at(k);
      h = fnv1a(r.data(), r.size() * sizeof(r[0]), h);
    }
  };
  digest(residual_);
  digest(residualBf16_);
  return h;
}

std::vector<float> ErrorFeedbackCodec::residual(const std::string& key) const {
  if (const auto it = residual_.find(key); it != residual_.end()) return it->second;
  const auto it = residualBf16_.find(key);
  if (it == residualBf16_.end()) return {};
  std::vector<float> out(it->second.size());
  widen(it->second.data(), static_cast<int64_t>(out.size()), out.data());
  return out;
}

}  // namespace slowpipe::compression
