// The device codecs (device_codec.h). Kernels compute values with compression/element.h (compiled
// with --fmad=false); the host codec of the same spec supplies scales, headers and validation.
#include "compression/cuda/device_codec.h"

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <vector>

#include "compression/acsgd.h"
#include "compression/bytes.h"
#include "compression/cuda/launch.cuh"
#include "compression/element.h"
#include "compression/error.h"
#include "compression/quant.h"
#include "compression/randk.h"
#include "compression/simple_codecs.h"

namespace slowpipe::compression::cuda {

namespace el = slowpipe::compression::element;

namespace {

void toDevice(void* d, const void* h, size_t n, Stream s) {
  if (n) ok(cudaMemcpyAsync(d, h, n, cudaMemcpyDefault, asStream(s)), "copy to device");
}
void toHost(void* h, const void* d, size_t n, Stream s) {
  if (n) ok(cudaMemcpyAsync(h, d, n, cudaMemcpyDefault, asStream(s)), "copy to host");
}
void onDevice(void* d, const void* src, size_t n, Stream s) {
  if (n) ok(cudaMemcpyAsync(d, src, n, cudaMemcpyDefault, asStream(s)), "copy on device");
}
void wait(Stream s) { ok(cudaStreamSynchronize(asStream(s)), "synchronize"); }

// ---- kernels ----

// The scale index of flat value i (quant.h): channel i % cols, or group i / cols.
struct ScaleOf {
  bool channel;
  int64_t cols;
  __device__ int64_t operator()(int64_t i) const { return channel ? i % cols : i / cols; }
};

// The code of value i of a quant message, as QuantStream::quantize computes it.
struct QuantCode {
  ScaleOf g;
  int mode;  // 0 symmetric nearest, 1 symmetric stochastic, 2 fixpoint
  float top, mult, lo, hi;
  const float *m, *inv, *div;
  uint64_t drawn;            // stochastic: stream position of value 0
  uint32_t hi0, key0, key1;  // keys of the stream's high words hi0 and hi0 + 1
  __device__ uint8_t operator()(const float* x, int64_t i) const {
    const int64_t s = g(i);
    if (mode == 2) return el::fixCode(x[i], div[s], mult, lo, hi);
    if (mode == 0) return el::symCode(x[i], m[s], inv[s], top);
    const uint64_t at = drawn + static_cast<uint64_t>(i);
    const uint32_t key = static_cast<uint32_t>(at >> 32) == hi0 ? key0 : key1;
    return el::symCodeStochastic(x[i], m[s], inv[s], top,
                                 el::uniform24(static_cast<uint32_t>(at), key, 0));
  }
};

// Byte j of the packed codes, each code computed where it is needed: values spanning two bytes are
// computed by both threads (pure).
__global__ void quantPackK(const float* x, int64_t n, int bits, QuantCode q, int64_t bytes,
                           uint8_t* packed) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j < bytes) packed[j] = el::packedByteOf(n, bits, j, [&](int64_t i) { return q(x, i); });
}

struct QuantValue {
  ScaleOf g;
  bool fixpoint;
  float lo, finv;
  const float *m, *step, *s;
  __device__ float operator()(uint8_t c, int64_t i) const {
    const int64_t k = g(i);
    return fixpoint ? el::fixValue(c, s[k], lo, finv) : el::symValue(c, m[k], step[k]);
  }
};

__global__ void unpackDequantK(const uint8_t* packed, int64_t n, int bits, QuantValue v,
                               float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = v(el::codeAt(packed, i, bits), i);
}

// AC-SGD's delta rows: value i of the flattened deltas is row j = i / rowLen, offset o = i %
// rowLen; x of it at x[xRow[j] * rowLen + o]; m at mRows[j][o] (fp32, or fp16 words when half).
struct DeltaRows {
  const float* x;
  const int64_t* xRow;
  void* const* mRows;
  int64_t rowLen;
  bool half;
  __device__ float xAt(int64_t j, int64_t o) const { return x[xRow[j] * rowLen + o]; }
  __device__ float mAt(int64_t j, int64_t o) const {
    return half ? el::floatFromHalf(static_cast<const uint16_t*>(mRows[j])[o])
                : static_cast<const float*>(mRows[j])[o];
  }
  __device__ void put(int64_t j, int64_t o, float m) const {
    if (half)
      static_cast<uint16_t*>(mRows[j])[o] = el::halfFromFloat(m);
    else
      static_cast<float*>(mRows[j])[o] = m;
  }
};

// acc[c] = max over delta values of channel c of |x - m| (max is exact: any order gives the CPU's;
// maxOf(acc, NaN) = acc there, so a NaN counts as 0 here). Float bits of values >= 0 order as ints.
__global__ void deltaMaxK(DeltaRows d, int64_t rows, int64_t channels, int64_t rowsPerBlock,
                          unsigned* acc) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  const int64_t perRow = d.rowLen / channels;
  float m = 0.0f;
  const int64_t r0 = blockIdx.y * rowsPerBlock,
                r1 = r0 + rowsPerBlock < rows * perRow ? r0 + rowsPerBlock : rows * perRow;
  for (int64_t r = r0; r < r1; ++r) {  // r: (delta row, channel row within it)
    const int64_t j = r / perRow, o = (r % perRow) * channels + c;
    m = el::maxOf(m, el::absOf(d.xAt(j, o) - d.mAt(j, o)));
  }
  atomicMax(acc + c, el::floatBits(m));
}

struct DeltaStep {
  DeltaRows d;
  int64_t channels;
  bool fixpoint;
  float top, mult, lo, hi, finv;
  const float *mx, *inv, *step, *div, *s;
  // The code of delta value i; m moves by its value and is stored (fp16-rounded for a half store).
  __device__ uint8_t operator()(int64_t i) const {
    const int64_t j = i / d.rowLen, o = i % d.rowLen, c = i % channels;
    float m = d.mAt(j, o);
    const float x = d.xAt(j, o);
    const uint8_t code = fixpoint ? el::deltaFixStep(x, m, div[c], s[c], mult, lo, hi, finv)
                                  : el::deltaSymStep(x, m, mx[c], inv[c], step[c], top);
    d.put(j, o, m);
    return code;
  }
};

// bits dividing 8: each value belongs to one byte, so one thread per byte packs and updates.
__global__ void deltaPackK(DeltaStep st, int64_t n, int bits, int64_t bytes, uint8_t* packed) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= bytes) return;
  const int per = 8 / bits;
  uint32_t out = 0;
  for (int k = 0; k < per && j * per + k < n; ++k)
    out |= static_cast<uint32_t>(st(j * per + k)) << (k * bits);
  packed[j] = static_cast<uint8_t>(out);
}
// Other widths: codes first (one thread per value), then packBits.
__global__ void deltaCodesK(DeltaStep st, int64_t n, uint8_t* codes) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) codes[i] = st(i);
}

// The receiver: m += deQ(code), stored as the buffer's dtype; out = what the buffer now holds.
__global__ void deltaApplyK(const uint8_t* packed, int64_t n, int bits, QuantValue v, DeltaRows d,
                            float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t j = i / d.rowLen, o = i % d.rowLen;
  float m = d.mAt(j, o) + v(el::codeAt(packed, i, bits), i);
  if (d.half) m = el::floatFromHalf(el::halfFromFloat(m));
  d.put(j, o, m);
  out[d.xRow[j] * d.rowLen + o] = m;
}

// rows[j] (len values) of x into dst rows (fp32 or fp16 words); a full-precision row's buffer.
__global__ void storeRowsK(const float* x, const int64_t* xRow, void* const* dst, int64_t rows,
                           int64_t len, bool half) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * len) return;
  const int64_t j = i / len, o = i % len;
  const float v = x[xRow[j] * len + o];
  if (half)
    static_cast<uint16_t*>(dst[j])[o] = el::halfFromFloat(v);
  else
    static_cast<float*>(dst[j])[o] = v;
}
__global__ void gatherRowsK(const float* x, const int64_t* xRow, int64_t rows, int64_t len,
                            float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < rows * len) out[i] = x[xRow[i / len] * len + i % len];
}

__global__ void gatherK(const float* x, const uint32_t* idx, int64_t k, float scale, bool scaled,
                        float* out) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j < k) out[j] = scaled ? x[idx[j]] * scale : x[idx[j]];
}
__global__ void gatherHalfK(const float* x, const uint32_t* idx, int64_t k, uint16_t* out) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j < k) out[j] = el::halfFromFloat(x[idx[j]]);
}
__global__ void scatterK(const float* v, const uint32_t* idx, int64_t k, float* out) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j < k) out[idx[j]] = v[j];
}
struct AbsKey {
  const float* x;
  __device__ uint32_t operator()(int64_t i) const { return el::floatBits(x[i]) & 0x7fffffffu; }
};
struct Above {
  uint32_t t;
  __device__ bool operator()(uint32_t k) const { return k > t; }
};
struct Kept {  // topk: key above the threshold, or one of the first `ties` equal to it
  const uint32_t *keys, *eqRank;
  uint32_t t;
  int64_t ties;
  __device__ bool operator()(int64_t i) const {
    return keys[i] > t || (keys[i] == t && eqRank[i] < ties);
  }
};
struct IsEqual {
  uint32_t t;
  __device__ uint32_t operator()(uint32_t k) const { return k == t ? 1u : 0u; }
};
struct RandKept {
  uint64_t base, threshold;
  bool all;
  __device__ bool operator()(int64_t i) const {
    return all || el::mix64(base ^ static_cast<uint64_t>(i)) < threshold;
  }
};

// ---- codecs ----

void requireSize(const std::string& codec, size_t size, size_t expect, const Shape& shape) {
  SP_REQUIRE(size == expect, codec + ": payload is " + std::to_string(size) + " bytes, expected " +
                                 std::to_string(expect) + " for shape " + shapeString(shape));
}

template <typename T>
T* upload(DeviceBuffer& b, const std::vector<T>& v, Stream s) {
  T* p = static_cast<T*>(b.reserve(std::max<size_t>(1, v.size() * sizeof(T))));
  toDevice(p, v.data(), v.size() * sizeof(T), s);
  return p;
}
float* upload(DeviceBuffer& b, const float* v, int64_t n, Stream s) {
  float* p = static_cast<float*>(b.reserve(std::max<size_t>(1, 4 * static_cast<size_t>(n))));
  toDevice(p, v, 4 * static_cast<size_t>(n), s);
  return p;
}

class CastDevice : public DeviceCodec {
 public:
  explicit CastDevice(CodecId id) : id_(id) {}
  std::string spec() const override { return codecName(id_); }
  size_t encodeToDevice(const float* dx, const Shape& shape, const CodecContext&,
                        Stream s) override {
    const int64_t n = numelOf(shape);
    const size_t bytes = static_cast<size_t>(n) * (id_ == CodecId::kNone ? 4 : 2);
    void* p = payload_.reserve(std::max<size_t>(1, bytes));
    if (id_ == CodecId::kNone)
      onDevice(p, dx, bytes, s);
    else if (id_ == CodecId::kFp16)
      toHalf(dx, n, static_cast<uint16_t*>(p), s);
    else
      toBf16(dx, n, static_cast<uint16_t*>(p), s);
    return bytes;
  }
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext&,
              float* dout, Stream s) override {
    const int64_t n = numelOf(shape);
    requireSize(codecName(id_), size, static_cast<size_t>(n) * (id_ == CodecId::kNone ? 4 : 2),
                shape);
    if (id_ == CodecId::kNone) {
      toDevice(dout, payload, size, s);
    } else {
      uint16_t* h = static_cast<uint16_t*>(staging_.reserve(std::max<size_t>(1, size)));
      toDevice(h, payload, size, s);
      if (id_ == CodecId::kFp16)
        fromHalf(h, n, dout, s);
      else
        fromBf16(h, n, dout, s);
    }
    wait(s);
  }

 private:
  CodecId id_;
  DeviceBuffer staging_;
};

// The per-scale arrays a quant message's kernels read, uploaded from the host QuantStream.
struct ScaleArrays {
  DeviceBuffer m, inv, step, div, s, max;
  // After finishScales (encoding: every array) or readScales (decoding: the values' arrays only).
  void upload(const QuantStream::Params& p, bool encoding, Stream st) {
    const int64_t g = p.groups;
    if (p.fixpoint) {
      if (encoding) cuda::upload(div, p.div, g, st);
      cuda::upload(s, p.s, g, st);
    } else {
      cuda::upload(m, p.m, g, st);
      if (encoding) cuda::upload(inv, p.inv, g, st);
      cuda::upload(step, p.step, g, st);
    }
  }
  QuantCode code(const QuantStream::Params& p) const {
    QuantCode q{{p.channel, p.cols},
                p.fixpoint ? 2 : (p.stochastic ? 1 : 0),
                p.top,
                p.mult,
                p.lo,
                p.hi,
                m.as<float>(),
                inv.as<float>(),
                div.as<float>(),
                p.drawn,
                0,
                0,
                0};
    if (p.stochastic) {
      q.hi0 = static_cast<uint32_t>(p.drawn >> 32);
      q.key0 = quantStreamKey(p.seed, q.hi0);
      q.key1 = quantStreamKey(p.seed, q.hi0 + 1);
    }
    return q;
  }
  QuantValue value(const QuantStream::Params& p) const {
    return {{p.channel, p.cols}, p.fixpoint,       p.lo,         p.finv,
            m.as<float>(),       step.as<float>(), s.as<float>()};
  }
};

// Per-scale max |x| of a quant message on the device (channel or group), then to the host stream.
void reduceScales(const float* dx, int64_t n, QuantStream& qs, ScaleArrays& a, Stream s) {
  const QuantStream::Params p = qs.params();
  float* dmax =
      static_cast<float*>(a.max.reserve(std::max<size_t>(1, 4 * static_cast<size_t>(p.groups))));
  if (p.groups > 0) {
    if (p.channel)
      channelAbsMax(dx, n / p.cols, p.cols, dmax, s);
    else
      groupAbsMax(dx, n, p.cols, dmax, s);
  }
  std::vector<float> h(static_cast<size_t>(p.groups));
  toHost(h.data(), dmax, 4 * h.size(), s);
  wait(s);
  qs.setMaxima(h.data());
  qs.finishScales();
}

class QuantDevice : public DeviceCodec {
 public:
  explicit QuantDevice(const QuantOptions& o) : host_(o) {}
  std::string spec() const override { return host_.spec(); }
  size_t encodeToDevice(const float* dx, const Shape& shape, const CodecContext&,
                        Stream s) override {
    const int bits = host_.options().bits;
    QuantStream qs(host_, shape);
    const int64_t n = qs.size();
    SP_REQUIRE(!qs.params().stochastic || n < (int64_t{1} << 32),
               "quant (device): stochastic rounding of one message of 2^32 or more values is not "
               "supported");
    reduceScales(dx, n, qs, a_, s);
    const size_t bytes = quantPayloadBytes(host_.options(), shape), scaleBytes = qs.scaleBytes();
    uint8_t* p = static_cast<uint8_t*>(payload_.reserve(std::max<size_t>(1, bytes)));
    std::vector<uint8_t> scales(scaleBytes);
    qs.writeScales(scales.data());
    toDevice(p, scales.data(), scaleBytes, s);
    const QuantStream::Params par = qs.params();
    a_.upload(par, true, s);
    const int64_t packed = static_cast<int64_t>(bytes - scaleBytes);
    launch("quantPack", packed, s, quantPackK, dx, n, bits, a_.code(par), packed, p + scaleBytes);
    wait(s);  // the host scale vectors die with qs
    qs.done();
    return bytes;
  }
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext&,
              float* dout, Stream s) override {
    const QuantOptions& o = host_.options();
    const size_t expect = quantPayloadBytes(o, shape);
    SP_REQUIRE(size == expect, "quant: payload is " + std::to_string(size) + " bytes, expected " +
                                   std::to_string(expect) + " for shape " + shapeString(shape) +
                                   " at " + std::to_string(o.bits) + " bits");
    QuantStream qs(host_, shape);
    qs.readScales(payload);  // validates every scale
    const QuantStream::Params par = qs.params();
    a_.upload(par, false, s);
    const size_t packedBytes = size - qs.scaleBytes();
    uint8_t* packed = static_cast<uint8_t*>(staging_.reserve(std::max<size_t>(1, packedBytes + 1)));
    toDevice(packed, payload + qs.scaleBytes(), packedBytes, s);
    launch("unpackDequant", qs.size(), s, unpackDequantK, packed, qs.size(), o.bits, a_.value(par),
           dout);
    wait(s);
  }

 private:
  QuantCodec host_;
  ScaleArrays a_;
  DeviceBuffer staging_;
};

class AcsgdDevice : public DeviceCodec {
 public:
  AcsgdDevice(const AcsgdOptions& o, BufferPlace place) : opt_(o), quant_(o.quant), place_(place) {
    SP_REQUIRE(
        o.quant.scale == QuantOptions::Scale::kChannel &&
            o.quant.round == QuantOptions::Round::kNearest,
        "acsgd (device): needs scale=channel and round=nearest (the fused step the device runs)");
    SP_REQUIRE(o.store.dtype != StoreOptions::Dtype::kQ8,
               "acsgd (device): store=q8 is not supported; use fp16 or fp32");
    SP_REQUIRE(o.store.backing == StoreOptions::Backing::kRam && o.store.budgetBytes == 0,
               "acsgd (device): backing=mmap and budget= are host-store options; the device keeps "
               "its buffers itself");
  }
  ~AcsgdDevice() override {
    for (void* c : chunks_) place_ == BufferPlace::kDevice ? cudaFree(c) : cudaFreeHost(c);
  }
  std::string spec() const override {
    AcsgdCodec host(opt_);
    return host.spec();
  }

  size_t encodeToDevice(const float* dx, const Shape& shape, const CodecContext& ctx,
                        Stream s) override {
    const AcsgdRows r = acsgdRows(shape, ctx);
    const int64_t rows = r.rows, rowLen = checkRowLen(r);
    std::vector<uint8_t> flags((rows + 7) / 8, 0);
    std::vector<int64_t> fullRows, deltaRows;
    for (int64_t r = 0; r < rows; ++r) {
      const bool full = ctx.epoch < opt_.warmupEpochs || !slots_.count(ctx.exampleIds[r]);
      if (full) flags[r / 8] |= static_cast<uint8_t>(1u << (r % 8));
      (full ? fullRows : deltaRows).push_back(r);
    }
    Shape dshape = shape;
    dshape[0] = static_cast<int64_t>(deltaRows.size());
    const size_t head = 4 + flags.size(),
                 fullBytes = 4 * static_cast<size_t>(rowLen) * fullRows.size();
    const size_t qbytes = deltaRows.empty() ? 0 : quantPayloadBytes(opt_.quant, dshape);
    uint8_t* p = static_cast<uint8_t*>(payload_.reserve(head + fullBytes + qbytes));
    Bytes header;
    ByteWriter w(header);
    w.put<uint32_t>(static_cast<uint32_t>(rows));
    w.append(flags.data(), flags.size());
    toDevice(p, header.data(), head, s);
    if (!fullRows.empty()) {
      const int64_t* idx = upload(fullIdx_, fullRows, s);
      const int64_t count = static_cast<int64_t>(fullRows.size()) * rowLen;
      launch("acsgd full rows", count, s, gatherRowsK, dx, idx,
             static_cast<int64_t>(fullRows.size()), rowLen, reinterpret_cast<float*>(p + head));
    }
    if (!deltaRows.empty()) {
      QuantStream qs(quant_, dshape);
      const DeltaRows d = rowsOf(dx, deltaRows, ctx, rowLen, s);
      const QuantStream::Params p0 = qs.params();
      const int64_t channels = p0.cols, perRow = rowLen / channels,
                    all = static_cast<int64_t>(deltaRows.size()) * perRow;
      unsigned* acc = static_cast<unsigned*>(a_.max.reserve(4 * static_cast<size_t>(channels)));
      ok(cudaMemsetAsync(acc, 0, 4 * static_cast<size_t>(channels), asStream(s)), "memset");
      const int64_t rowsPerBlock = std::max<int64_t>(64, (all + 65534) / 65535);  // grid.y <= 65535
      const dim3 grid(static_cast<unsigned>(blocksFor(channels)),
                      static_cast<unsigned>((all + rowsPerBlock - 1) / rowsPerBlock));
      deltaMaxK<<<grid, kThreads, 0, asStream(s)>>>(d, static_cast<int64_t>(deltaRows.size()),
                                                    channels, rowsPerBlock, acc);
      ok(cudaGetLastError(), "acsgd delta max");
      std::vector<float> maxima(static_cast<size_t>(channels));
      toHost(maxima.data(), acc, 4 * maxima.size(), s);
      wait(s);
      qs.setMaxima(maxima.data());
      qs.finishScales();
      std::vector<uint8_t> scales(qs.scaleBytes());
      qs.writeScales(scales.data());
      uint8_t* q = p + head + fullBytes;
      toDevice(q, scales.data(), scales.size(), s);
      const QuantStream::Params par = qs.params();
      a_.upload(par, true, s);
      const DeltaStep st{d,
                         channels,
                         par.fixpoint,
                         par.top,
                         par.mult,
                         par.lo,
                         par.hi,
                         par.finv,
                         a_.m.as<float>(),
                         a_.inv.as<float>(),
                         a_.step.as<float>(),
                         a_.div.as<float>(),
                         a_.s.as<float>()};
      const int bits = opt_.quant.bits;
      const int64_t n = qs.size(), packedBytes = static_cast<int64_t>(qbytes - scales.size());
      if (8 % bits == 0) {
        launch("acsgd delta step", packedBytes, s, deltaPackK, st, n, bits, packedBytes,
               q + scales.size());
      } else {
        uint8_t* codes = static_cast<uint8_t*>(codes_.reserve(static_cast<size_t>(n)));
        launch("acsgd delta codes", n, s, deltaCodesK, st, n, codes);
        packBits(codes, n, bits, q + scales.size(), s);
      }
      wait(s);  // qs's host arrays are about to go
    }
    storeFull(dx, fullRows, ctx, rowLen, s);
    wait(s);
    return head + fullBytes + qbytes;
  }

  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* dout, Stream s) override {
    const AcsgdPayload p = parseAcsgdPayload(payload, size, shape, ctx, opt_.quant,
                                             [&](int64_t id) { return slots_.count(id) != 0; });
    const std::vector<int64_t>& fullRows = p.fullRows;
    const std::vector<int64_t>& deltaRows = p.deltaRows;
    const uint8_t* q = p.deltas;
    const size_t qbytes = p.deltaBytes;
    QuantStream qs(quant_, p.deltaShape);
    if (!deltaRows.empty()) qs.readScales(q);  // validates the scales before any state changes
    const int64_t rowLen = checkRowLen(p.rows);
    // Validated: only now touch the state.
    for (size_t j = 0; j < fullRows.size(); ++j)
      toDevice(dout + fullRows[j] * rowLen, p.full + 4 * static_cast<size_t>(rowLen) * j,
               4 * static_cast<size_t>(rowLen), s);
    if (!deltaRows.empty()) {
      const DeltaRows d = rowsOf(dout, deltaRows, ctx, rowLen, s);
      const QuantStream::Params par = qs.params();
      a_.upload(par, false, s);
      const size_t packedBytes = qbytes - qs.scaleBytes();
      uint8_t* packed = static_cast<uint8_t*>(codes_.reserve(packedBytes + 1));
      toDevice(packed, q + qs.scaleBytes(), packedBytes, s);
      launch("acsgd delta apply", qs.size(), s, deltaApplyK, packed, qs.size(), opt_.quant.bits,
             a_.value(par), d, dout);
    }
    storeFull(dout, fullRows, ctx, rowLen, s);
    wait(s);
  }

  // AcsgdCodec::stateDigest (ExampleStore::digest): FNV-1a over (id, row bytes) in id order.
  uint64_t stateDigest() const override {
    std::vector<uint8_t> row(slotBytes());
    uint64_t h = kFnvOffset;
    for (const auto& [id, slot] : slots_) {  // std::map: id order
      toHost(row.data(), rowPtr(slot), row.size(), nullptr);
      wait(nullptr);
      h = fnv1a(&id, sizeof id, h);
      h = fnv1a(row.data(), row.size(), h);
    }
    return h;
  }

 private:
  // Every message's rows hold as many values as the first one's (the buffers' row length).
  int64_t checkRowLen(const AcsgdRows& r) {
    if (rowLen_ < 0 && r.rows > 0) rowLen_ = r.rowLen;
    SP_REQUIRE(r.rowLen == rowLen_ || r.rows == 0,
               "acsgd (device): rows of " + std::to_string(r.rowLen) + " values after rows of " +
                   std::to_string(rowLen_));
    return r.rowLen;
  }
  bool half() const { return opt_.store.dtype == StoreOptions::Dtype::kFp16; }
  size_t slotBytes() const {
    return std::max<size_t>(1,
                            (half() ? 2 : 4) * static_cast<size_t>(std::max<int64_t>(rowLen_, 0)));
  }
  static constexpr int64_t kChunkRows = 1024;
  void* rowPtr(int64_t slot) const {
    return static_cast<uint8_t*>(chunks_[slot / kChunkRows]) + (slot % kChunkRows) * slotBytes();
  }
  void* deviceRow(int64_t slot) const {
    if (place_ == BufferPlace::kDevice) return rowPtr(slot);
    void* d = nullptr;
    ok(cudaHostGetDevicePointer(&d, chunks_[slot / kChunkRows], 0),
       "pinned buffer's device address");
    return static_cast<uint8_t*>(d) + (slot % kChunkRows) * slotBytes();
  }
  int64_t slotOf(int64_t id) {
    auto it = slots_.find(id);
    if (it != slots_.end()) return it->second;
    const int64_t slot = static_cast<int64_t>(slots_.size());
    if (slot / kChunkRows >= static_cast<int64_t>(chunks_.size())) {
      void* c = nullptr;
      const size_t bytes = slotBytes() * kChunkRows;
      if (place_ == BufferPlace::kDevice)
        ok(cudaMalloc(&c, bytes), "acsgd buffers (device)");
      else
        ok(cudaHostAlloc(&c, bytes, cudaHostAllocMapped), "acsgd buffers (pinned host)");
      chunks_.push_back(c);
    }
    slots_.emplace(id, slot);
    return slot;
  }
  DeltaRows rowsOf(const float* x, const std::vector<int64_t>& deltaRows, const CodecContext& ctx,
                   int64_t rowLen, Stream s) {
    std::vector<void*> ptrs;
    for (int64_t r : deltaRows) ptrs.push_back(deviceRow(slots_.at(ctx.exampleIds[r])));
    return {x, upload(deltaIdx_, deltaRows, s), upload(deltaPtr_, ptrs, s), rowLen, half()};
  }
  void storeFull(const float* x, const std::vector<int64_t>& fullRows, const CodecContext& ctx,
                 int64_t rowLen, Stream s) {
    if (fullRows.empty()) return;
    std::vector<void*> ptrs;
    for (int64_t r : fullRows) ptrs.push_back(deviceRow(slotOf(ctx.exampleIds[r])));
    const int64_t* idx = upload(fullIdx_, fullRows, s);
    void* const* dst = upload(fullPtr_, ptrs, s);
    const int64_t count = static_cast<int64_t>(fullRows.size()) * rowLen;
    launch("acsgd store rows", count, s, storeRowsK, x, idx, dst,
           static_cast<int64_t>(fullRows.size()), rowLen, half());
    wait(s);  // the uploaded tables are reused by the next call
  }

  AcsgdOptions opt_;
  QuantCodec quant_;
  BufferPlace place_;
  int64_t rowLen_ = -1;
  std::map<int64_t, int64_t> slots_;  // example id -> slot
  std::vector<void*> chunks_;         // kChunkRows slots each
  ScaleArrays a_;
  DeviceBuffer fullIdx_, fullPtr_, deltaIdx_, deltaPtr_, codes_;
};

class TopkDevice : public DeviceCodec {
 public:
  TopkDevice(const TopkCodec& c) : host_(c) {}
  std::string spec() const override { return host_.spec(); }
  size_t encodeToDevice(const float* dx, const Shape& shape, const CodecContext&,
                        Stream s) override {
    const int64_t n = numelOf(shape), k = host_.keepCount(n);
    SP_REQUIRE(n < (int64_t{1} << 32), "topk (device): a message of 2^32 or more values");
    auto pol = thrust::cuda::par.on(asStream(s));
    uint32_t* keys = static_cast<uint32_t*>(keys_.reserve(4 * std::max<int64_t>(n, 1)));
    uint32_t* sorted = static_cast<uint32_t*>(sorted_.reserve(4 * std::max<int64_t>(n, 1)));
    uint32_t* idx = static_cast<uint32_t*>(idx_.reserve(4 * std::max<int64_t>(k, 1)));
    int64_t taken = 0;
    if (k > 0) {
      thrust::transform(pol, thrust::counting_iterator<int64_t>(0),
                        thrust::counting_iterator<int64_t>(n), keys, AbsKey{dx});
      onDevice(sorted, keys, 4 * static_cast<size_t>(n), s);
      thrust::sort(pol, sorted, sorted + n, thrust::greater<uint32_t>());
      uint32_t t = 0;
      toHost(&t, sorted + (k - 1), 4, s);
      wait(s);  // the k-th largest key
      const int64_t greater = thrust::count_if(pol, keys, keys + n, Above{t});
      uint32_t* eq = sorted;  // reused: rank among the keys equal to t, in index order
      thrust::transform(pol, keys, keys + n, eq, IsEqual{t});
      thrust::exclusive_scan(pol, eq, eq + n, eq);
      uint32_t* end = thrust::copy_if(pol, thrust::counting_iterator<uint32_t>(0),
                                      thrust::counting_iterator<uint32_t>(static_cast<uint32_t>(n)),
                                      thrust::counting_iterator<int64_t>(0), idx,
                                      Kept{keys, eq, t, k - greater});
      taken = end - idx;
    }
    SP_REQUIRE(taken == k, "topk (device): selected " + std::to_string(taken) +
                               " values, expected " + std::to_string(k));
    const bool halfValues = host_.bits() == 16;
    Bytes tail;  // bits < 16: the values' quant payload, made by the host codec
    if (!halfValues && k > 0) {
      float* v = static_cast<float*>(values_.reserve(4 * static_cast<size_t>(k)));
      launch("topk gather", k, s, gatherK, dx, idx, k, 1.0f, false, v);
      std::vector<float> kept(static_cast<size_t>(k));
      toHost(kept.data(), v, 4 * kept.size(), s);
      wait(s);
      topkValueQuant(host_.bits(), k).encode(kept.data(), {k}, CodecContext{}, tail);
    }
    const size_t bytes =
        4 + 4 * static_cast<size_t>(k) + (halfValues ? 2 * static_cast<size_t>(k) : tail.size());
    uint8_t* p = static_cast<uint8_t*>(payload_.reserve(bytes));
    const uint32_t count = static_cast<uint32_t>(k);
    toDevice(p, &count, 4, s);
    onDevice(p + 4, idx, 4 * static_cast<size_t>(k), s);
    if (halfValues && k > 0) {
      launch("topk values", k, s, gatherHalfK, dx, idx, k,
             reinterpret_cast<uint16_t*>(p + 4 + 4 * k));
    }
    toDevice(p + 4 + 4 * k, tail.data(), tail.size(), s);
    wait(s);
    return bytes;
  }
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* dout, Stream s) override {
    // The host codec validates and decodes the k values (small); the device scatters them.
    const int64_t n = numelOf(shape);
    std::vector<float> dense(static_cast<size_t>(n));
    host_.decode(payload, size, shape, ctx, dense.data());
    const uint32_t k = static_cast<uint32_t>(host_.keepCount(n));
    std::vector<uint32_t> idx(k);
    copyBytes(idx.data(), payload + 4, 4 * static_cast<size_t>(k));
    std::vector<float> v(k);
    for (uint32_t j = 0; j < k; ++j) v[j] = dense[idx[j]];
    ok(cudaMemsetAsync(dout, 0, 4 * static_cast<size_t>(n), asStream(s)), "memset");
    if (k > 0) {
      const uint32_t* di = upload(idx_, idx, s);
      const float* dv = upload(values_, v, s);
      launch("topk scatter", k, s, scatterK, dv, di, k, dout);
    }
    wait(s);
  }

 private:
  TopkCodec host_;
  DeviceBuffer keys_, sorted_, idx_, values_;
};

class RandkDevice : public DeviceCodec {
 public:
  explicit RandkDevice(const RandkCodec& c) : host_(c) {}
  std::string spec() const override { return host_.spec(); }
  size_t encodeToDevice(const float* dx, const Shape& shape, const CodecContext& ctx,
                        Stream s) override {
    const int64_t n = numelOf(shape);
    const int64_t k = keptSet(n, ctx, s);
    uint8_t* p = static_cast<uint8_t*>(payload_.reserve(4 + 4 * static_cast<size_t>(k)));
    const uint32_t count = static_cast<uint32_t>(k);
    toDevice(p, &count, 4, s);
    if (k > 0) {
      launch("randk gather", k, s, gatherK, dx, idx_.as<uint32_t>(), k,
             static_cast<float>(1.0 / host_.ratio()), true, reinterpret_cast<float*>(p + 4));
    }
    wait(s);
    return 4 + 4 * static_cast<size_t>(k);
  }
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* dout, Stream s) override {
    const int64_t n = numelOf(shape);
    ByteReader r(payload, size, "randk payload");
    const uint32_t k = r.get<uint32_t>("count");
    const int64_t kept = keptSet(n, ctx, s);
    SP_REQUIRE(k == kept, "randk: count is " + std::to_string(k) + ", the shared index set has " +
                              std::to_string(kept) +
                              " (another seed, step or micro-batch?) for shape " +
                              shapeString(shape));
    requireSize("randk", size, 4 + 4 * static_cast<size_t>(k), shape);
    ok(cudaMemsetAsync(dout, 0, 4 * static_cast<size_t>(n), asStream(s)), "memset");
    if (k > 0) {
      float* v = static_cast<float*>(values_.reserve(4 * static_cast<size_t>(k)));
      toDevice(v, payload + 4, 4 * static_cast<size_t>(k), s);
      launch("randk scatter", k, s, scatterK, v, idx_.as<uint32_t>(), k, dout);
    }
    wait(s);
  }

 private:
  // The shared index set into idx_ (ascending); returns its size.
  int64_t keptSet(int64_t n, const CodecContext& ctx, Stream s) {
    SP_REQUIRE(n < (int64_t{1} << 32), "randk (device): a message of 2^32 or more values");
    uint32_t* idx = static_cast<uint32_t*>(idx_.reserve(4 * std::max<int64_t>(n, 1)));
    auto pol = thrust::cuda::par.on(asStream(s));
    uint32_t* end =
        thrust::copy_if(pol, thrust::counting_iterator<uint32_t>(0),
                        thrust::counting_iterator<uint32_t>(static_cast<uint32_t>(n)),
                        thrust::counting_iterator<int64_t>(0), idx,
                        RandKept{host_.messageSeed(ctx), host_.threshold(), host_.keepsAll()});
    return end - idx;
  }
  RandkCodec host_;
  DeviceBuffer idx_, values_;
};

}  // namespace

DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}

void* DeviceBuffer::reserve(size_t bytes) {
  if (bytes <= cap_) return p_;
  if (p_) cudaFree(p_);
  p_ = nullptr;
  cap_ = 0;
  ok(cudaMalloc(&p_, bytes), "allocate device buffer");
  cap_ = bytes;
  return p_;
}

void DeviceCodec::encode(const float* dx, const Shape& shape, const CodecContext& ctx, Bytes& out,
                         Stream s) {
  const size_t n = encodeToDevice(dx, shape, ctx, s);
  const size_t at = out.size();
  out.resize(at + n);
  toHost(out.data() + at, payload_.data(), n, s);
  wait(s);
}

std::unique_ptr<DeviceCodec> DeviceCodec::make(const std::string& spec, BufferPlace buffers) {
  const std::unique_ptr<Codec> host = makeCodec(spec);
  if (const std::string why = devicePathMissing(*host); !why.empty()) throw CodecError(why);
  if (host->id() == static_cast<CodecId>(kRandkWireId))
    return std::make_unique<RandkDevice>(static_cast<const RandkCodec&>(*host));
  switch (host->id()) {
    case CodecId::kNone:
    case CodecId::kFp16:
    case CodecId::kBf16:
      return std::make_unique<CastDevice>(host->id());
    case CodecId::kQuant:
      return std::make_unique<QuantDevice>(static_cast<const QuantCodec&>(*host).options());
    case CodecId::kAcsgd:
      return std::make_unique<AcsgdDevice>(static_cast<const AcsgdCodec&>(*host).options(),
                                           buffers);
    case CodecId::kTopk:
      return std::make_unique<TopkDevice>(static_cast<const TopkCodec&>(*host));
    default:
      throw std::logic_error("DeviceCodec::make: devicePathMissing accepted codec '" +
                             host->spec() + "'");
  }
}

}  // namespace slowpipe::compression::cuda
