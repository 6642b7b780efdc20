// `slowpipe bench codecs` (see bench.h).
#include "compression/bench.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <utility>

#include "compression/acsgd.h"
#include "compression/crc32c.h"
#include "compression/kernels.h"
#include "compression/parallel.h"
#include "compression/quant.h"
#include "compression/timing.h"
#include "compression/torch_ops_quant.h"

namespace slowpipe::compression {
namespace {

using nlohmann::json;

const std::vector<std::string> kDefaultBenchCodecs = {"none",
                                                      "fp16",
                                                      "bf16",
                                                      "quant:bits=2",
                                                      "quant:bits=4",
                                                      "quant:bits=8",
                                                      "quant:bits=4,group=128",
                                                      "quant:bits=2,round=stochastic",
                                                      "topk:ratio=0.01",
                                                      "acsgd:bits=2",
                                                      "acsgd:bits=4",
                                                      "ef(quant:bits=4)",
                                                      "ef(quant:bits=4;store=bf16)",
                                                      "quant:bits=2,levels=fixpoint",
                                                      "quant:bits=4,levels=fixpoint",
                                                      "quant:bits=8,levels=fixpoint",
                                                      "acsgd:bits=2,levels=fixpoint",
                                                      "acsgd:bits=2,levels=fixpoint,store=fp32",
                                                      "randk:ratio=0.1",
                                                      "hadamard(quant:bits=3,scale=group,group=64)",
                                                      "lowrank:rank=16",
                                                      "lowrank:rank=16,basis=pca"};

// Activation-shaped tensor of `bytes` fp32 bytes: [rows, seq, 1024 hidden channels].
Shape shapeFor(int64_t bytes) {
  const int64_t n = bytes / 4, hidden = 1024, perRow = 2048 * hidden;
  if (n <= perRow) return {1, n / hidden, hidden};
  return {n / perRow, 2048, hidden};
}

double memcpySeconds(const std::vector<float>& src) {
  std::vector<float> dst(src.size(), 1.0f);
  return medianSeconds([&] { std::memcpy(dst.data(), src.data(), src.size() * 4); });
}

// One read-only pass (max |x|): what a codec that must read its input twice (scales, then codes)
// is bounded by, at half this rate.
double readSeconds(const std::vector<float>& src) {
  volatile float sink = 0.0f;
  const double s =
      medianSeconds([&] { sink = kernels().absMax(src.data(), static_cast<int64_t>(src.size())); });
  (void)sink;
  return s;
}

// The same pass split over the codec threads (parallelRanges, as the codecs split theirs): how far
// more threads raise what memory delivers to this process, the bound of a read-bound codec's
// thread speed-up (read_thread_speedup).
double readSecondsThreads(const std::vector<float>& src) {
  std::vector<float> part(static_cast<size_t>(parallelParts(static_cast<int64_t>(src.size()), 16)));
  return medianSeconds([&] {
    parallelRanges(static_cast<int64_t>(src.size()), 16, [&](int64_t lo, int64_t hi, int64_t p) {
      part[static_cast<size_t>(p)] = kernels().absMax(src.data() + lo, hi - lo);
    });
  });
}

// The frame checksum (CRC-32C, compression/crc32c.h) over the input's bytes, on the codec threads
// set: what framing adds to a codec's encode (sender) and decode (receiver) for each payload byte.
double checksumSeconds(const std::vector<float>& src) {
  volatile uint32_t sink = 0;
  const double s = medianSeconds(
      [&] { sink = crc32c(reinterpret_cast<const uint8_t*>(src.data()), 4 * src.size()); });
  (void)sink;
  return s;
}

double relRmsError(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += double(y[i] - x[i]) * (y[i] - x[i]);
    den += double(x[i]) * x[i];
  }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}

// Quant codecs beside their libtorch-ops baselines (speed, and whether the bytes / values match):
// the AC-SGD reference's fixpoint.py transcription for fixpoint per-channel scales, else the
// torch-ops quantizer of the same options.
void compareWithTorchOps(json& r, QuantCodec& codec, const Shape& shape,
                         const std::vector<float>& x, const CodecContext& ctx, double encodeS,
                         double decodeS) {
  const int64_t n = numelOf(shape);
  const double rawBytes = 4.0 * n;
  QuantCodec* q = &codec;
  if (q->options().levels == QuantOptions::Levels::kFixpoint &&
      q->options().scale == QuantOptions::Scale::kChannel) {
    // The baseline is the transcription of the AC-SGD reference (fixpoint.py) in libtorch ops;
    // "match" = our decoded values are bit-identical to the reference's.
    const int bits = q->options().bits;
    const auto xt = torch::from_blob(const_cast<float*>(x.data()), shape, torch::kFloat32);
    FixpointReference ref;
    const double te =
        medianSeconds([&] { ref = referenceFixpointCompress(xt, bits); }, 3, 0.3, 200);
    torch::Tensor refY;
    const double td =
        medianSeconds([&] { refY = referenceFixpointDecompress(ref, bits); }, 3, 0.3, 200);
    r["torch_ops_encode_GBps"] = rawBytes / te / 1e9;
    r["torch_ops_decode_GBps"] = rawBytes / td / 1e9;
    r["encode_vs_torch_ops"] = te / encodeS;
    r["decode_vs_torch_ops"] = td / decodeS;
    Bytes mine;
    QuantCodec(q->options()).encode(x.data(), shape, ctx, mine);
    std::vector<float> y2(n);
    QuantCodec(q->options()).decode(mine.data(), mine.size(), shape, ctx, y2.data());
    refY = refY.contiguous();
    r["matches_torch_ops"] = std::memcmp(refY.data_ptr<float>(), y2.data(), 4 * n) == 0;
  } else {
    const auto opt = q->options();
    const auto xt = torch::from_blob(const_cast<float*>(x.data()), shape, torch::kFloat32);
    torch::Tensor ref;
    const double te = medianSeconds([&] { ref = torchOpsQuantEncode(opt, xt); }, 3, 0.3, 200);
    const double td = medianSeconds([&] { torchOpsQuantDecode(opt, ref, shape); }, 3, 0.3, 200);
    r["torch_ops_encode_GBps"] = rawBytes / te / 1e9;
    r["torch_ops_decode_GBps"] = rawBytes / td / 1e9;
    r["encode_vs_torch_ops"] = te / encodeS;
    r["decode_vs_torch_ops"] = td / decodeS;
    if (opt.round == QuantOptions::Round::kNearest) {
      Bytes mine;
      QuantCodec(opt).encode(x.data(), shape, ctx, mine);
      r["matches_torch_ops"] = static_cast<size_t>(ref.numel()) == mine.size() &&
                               std::memcmp(ref.data_ptr<uint8_t>(), mine.data(), mine.size()) == 0;
    }
  }
}

uint64_t word(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void putWord(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// 16 values a step (64 bytes of x, 16 W of the buffer), prefetched as the fused kernels prefetch
// (kernels_avx2.cc's kPrefetch: 16 KiB of x ahead, into L2); the tail byte by byte.
constexpr int64_t kAhead = 4096;
// Step i's prefetches and its 64 bytes of x, or-ed into one word.
template <int W>
uint64_t xWordAt(const uint8_t* x, const uint8_t* b, int64_t i) {
  __builtin_prefetch(x + 4 * (i + kAhead), 0, 2);
  if (W > 0) __builtin_prefetch(b + W * (i + kAhead), 0, 2);
  uint64_t a = 0;
  for (int k = 0; k < 8; ++k) a |= word(x + 4 * i + 8 * k);
  return a;
}

template <int W>
uint64_t readPass(const uint8_t* x, const uint8_t* b, int64_t lo, int64_t hi) {
  uint64_t acc = 0;
  int64_t i = lo;
  for (; i + 16 <= hi; i += 16) {
    uint64_t a = xWordAt<W>(x, b, i);
    for (int k = 0; k < 2 * W; ++k) a ^= word(b + W * i + 8 * k);
    acc += a;
  }
  for (; i < hi; ++i)
    for (int k = 0; k < 4; ++k) acc += x[4 * i + k] + (k < W ? b[W * i + k] : 0);
  return acc;
}

// lo a multiple of 16: its codes start on a byte. Bits a constant: a copy of 2 * Bits bytes the
// compiler turns into stores (a run-time length called memcpy for every 16 values: the 8-bit floor
// ran at 0.52x memcpy instead of 0.83-0.94x).
template <int W, int Bits>
uint64_t updatePass(const uint8_t* x, uint8_t* b, int64_t lo, int64_t hi, uint8_t* out) {
  constexpr int bits = Bits;
  uint64_t acc = 0;
  int64_t i = lo;
  for (; i + 16 <= hi; i += 16) {
    const uint64_t a = xWordAt<W>(x, b, i);
    for (int k = 0; k < 2 * W; ++k) putWord(b + W * i + 8 * k, word(b + W * i + 8 * k) + a);
    const uint64_t codes[2] = {a, ~a};
    std::memcpy(out + i * bits / 8, codes, static_cast<size_t>(2 * bits));
    acc += a;
  }
  for (int64_t j = i; j < hi; ++j) {
    for (int k = 0; k < 4; ++k) acc += x[4 * j + k];
    for (int k = 0; k < W; ++k) ++b[W * j + k];
  }
  for (int64_t o = i * bits / 8; o < (hi * bits + 7) / 8; ++o) out[o] = static_cast<uint8_t>(acc);
  return acc;
}

template <int W, int Bits>
uint64_t trafficPasses(const float* xf, uint8_t* b, int64_t n, int passes, uint8_t* out) {
  const auto* x = reinterpret_cast<const uint8_t*>(xf);
  std::vector<uint64_t> sums(static_cast<size_t>(parallelParts(n, 16)), 0);
  if (passes == 2)
    parallelRanges(n, 16, [&](int64_t lo, int64_t hi, int64_t p) {
      sums[static_cast<size_t>(p)] += readPass<W>(x, b, lo, hi);
    });
  parallelRanges(n, 16, [&](int64_t lo, int64_t hi, int64_t p) {
    sums[static_cast<size_t>(p)] += updatePass<W, Bits>(x, b, lo, hi, out);
  });
  uint64_t sum = 0;
  for (uint64_t v : sums) sum += v;
  return sum;
}

// trafficPasses<W, bits> for bits 1 to 8, picked at run time.
template <int W, int... B>
uint64_t trafficPassesOf(std::integer_sequence<int, B...>, const float* x, uint8_t* b, int64_t n,
                         int passes, int bits, uint8_t* out) {
  using Passes = uint64_t (*)(const float*, uint8_t*, int64_t, int, uint8_t*);
  static constexpr Passes kByBits[] = {&trafficPasses<W, B + 1>...};
  return kByBits[bits - 1](x, b, n, passes, out);
}
template <int W>
uint64_t trafficPassesOf(const float* x, uint8_t* b, int64_t n, int passes, int bits,
                         uint8_t* out) {
  return trafficPassesOf<W>(std::make_integer_sequence<int, 8>{}, x, b, n, passes, bits, out);
}

// The traffic passes' time on one thread (their buffer and codes kept between samples). On two
// threads the loop measured slower than the codecs it would bound (acsgd and ef encode at
// 1.06-1.28x its rate, bench codecs --threads 2, 64 MiB): no floor is reported there.
class TrafficFloor {
 public:
  TrafficFloor(EncodeTraffic t, int64_t n)
      : t_(t),
        n_(n),
        buffer_(static_cast<size_t>(n * t.bufferBytes), 0),
        out_(static_cast<size_t>((n * t.bits + 7) / 8)) {}
  double seconds(const std::vector<float>& x) {
    const double a = nowSeconds();
    sink_ += encodeTrafficPasses(x.data(), buffer_.data(), n_, t_, out_.data());
    return nowSeconds() - a;
  }

 private:
  EncodeTraffic t_;
  int64_t n_;
  std::vector<uint8_t> buffer_, out_;
  uint64_t sink_ = 0;
};

// One sender / receiver pair of a codec on a given number of codec threads, timed a sample at a
// time. Stateful codecs get their first sighting (full precision) untimed, then every sample
// alternates between two activations so that deltas never vanish.
class Lane {
 public:
  Lane(const std::string& spec, const Shape& shape, const std::vector<float>& x, int threads)
      : sender_(makeCodec(spec)),
        receiver_(makeCodec(spec)),
        y_(static_cast<size_t>(x.size())),
        threads_(threads) {
    for (int64_t r = 0; r < shape[0]; ++r) ctx_.exampleIds.push_back(r);
    ctx_.key = "bench";
    ctx_.epoch = 1;
    if (sender_->id() == CodecId::kAcsgd) {
      setCodecThreads(threads_);
      sender_->encode(x.data(), shape, ctx_, payload_);
      receiver_->decode(payload_.data(), payload_.size(), shape, ctx_, y_.data());
    }
  }
  // One sample: memcpy of the input this sample does not encode (so it leaves none of the codec's
  // input in cache; one call per thread, each of an equal share: copies of 1 MiB parts would take
  // glibc's in-cache path, not the streaming one of large copies), then encode and decode of the
  // other. Returns {memcpy, encode, decode} seconds.
  std::array<double, 3> sample(const Shape& shape, const std::vector<float>& x,
                               const std::vector<float>& x2, std::vector<float>& dst) {
    setCodecThreads(threads_);
    const bool second = round_++ % 2;
    const auto& in = second ? x2 : x;
    const auto& other = second ? x : x2;
    const double m = nowSeconds();
    const int64_t n = static_cast<int64_t>(x.size());
    parallelFor(threads_, [&](int64_t t) {
      const int64_t lo = n * t / threads_, hi = n * (t + 1) / threads_;
      std::memcpy(dst.data() + lo, other.data() + lo, 4 * static_cast<size_t>(hi - lo));
    });
    payload_.clear();
    const double a = nowSeconds();
    sender_->encode(in.data(), shape, ctx_, payload_);
    const double b = nowSeconds();
    receiver_->decode(payload_.data(), payload_.size(), shape, ctx_, y_.data());
    const double c = nowSeconds();
    last_ = &in;
    return {a - m, b - a, c - b};
  }
  Codec& sender() { return *sender_; }
  const CodecContext& ctx() const { return ctx_; }
  size_t wireBytes() const { return payload_.size(); }
  double relError() const { return relRmsError(*last_, y_); }

 private:
  std::unique_ptr<Codec> sender_, receiver_;
  CodecContext ctx_;
  Bytes payload_;
  std::vector<float> y_;
  int threads_, round_ = 0;
  const std::vector<float>* last_ = nullptr;
};

double medianOf(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// One round of one codec: samples of the codec on one thread, each paired with a memcpy timed
// right before it (a memcpy timed once per codec moved 11-23 GB/s between a run's rounds: the
// ratios' median is what a neighbour's load on this machine moves least), and with threads > 1 a
// second pair of the codec on that many codec threads, sampled in turn with the first: its
// speed-ups are medians of per-sample ratios a few milliseconds apart, as the memcpy ratios are
// (two sample sets timed half a second apart moved with the machine's memory rate). Then the
// read-only pass, on one thread and split over the threads. withTorchOps: also time the
// libtorch-ops baseline (quant codecs; once per codec and size: the row keeps its first round's
// baseline, and a 64 MiB baseline takes seconds a call).
json benchRound(const std::string& spec, const Shape& shape, const std::vector<float>& x,
                const std::vector<float>& x2, int threads, bool withTorchOps) {
  const int64_t n = numelOf(shape);
  const double rawBytes = 4.0 * n;
  Lane one(spec, shape, x, 1);
  std::unique_ptr<Lane> many =
      threads > 1 ? std::make_unique<Lane>(spec, shape, x, threads) : nullptr;
  std::vector<float> dst(static_cast<size_t>(n), 1.0f);
  std::vector<double> enc, dec, mc, encRatio, decRatio, encN, decN, mcN, encUp, decUp, mcUp;
  // A quantizing codec's traffic floor, timed after each sample; none for acsgd still in its
  // warm-up at the bench's epoch (every row sent in full).
  std::optional<EncodeTraffic> traffic = encodeTrafficOf(one.sender());
  if (const auto* a = dynamic_cast<const AcsgdCodec*>(&one.sender());
      a && one.ctx().epoch < a->options().warmupEpochs)
    traffic.reset();
  std::unique_ptr<TrafficFloor> floor =
      traffic ? std::make_unique<TrafficFloor>(*traffic, n) : nullptr;
  std::vector<double> fl, flRatio, encFloor;
  const double budget = many ? 1.0 : 0.5, t0 = nowSeconds();
  while (enc.size() < 5 || (nowSeconds() - t0 < budget && enc.size() < 2000)) {
    const auto s = one.sample(shape, x, x2, dst);
    mc.push_back(s[0]);
    enc.push_back(s[1]);
    dec.push_back(s[2]);
    encRatio.push_back(s[0] / s[1]);
    decRatio.push_back(s[0] / s[2]);
    if (floor) {
      fl.push_back(floor->seconds(x));
      flRatio.push_back(s[0] / fl.back());
      encFloor.push_back(fl.back() / s[1]);
    }
    if (!many) continue;
    const auto t = many->sample(shape, x, x2, dst);
    mcN.push_back(t[0]);
    encN.push_back(t[1]);
    decN.push_back(t[2]);
    mcUp.push_back(s[0] / t[0]);
    encUp.push_back(s[1] / t[1]);
    decUp.push_back(s[2] / t[2]);
  }
  setCodecThreads(1);
  const double encodeS = medianOf(enc), decodeS = medianOf(dec);
  json r = {{"codec", one.sender().spec()},
            {"shape", shape},
            {"raw_bytes", static_cast<int64_t>(rawBytes)},
            {"wire_bytes", one.wireBytes()},
            {"compression_ratio", rawBytes / static_cast<double>(one.wireBytes())},
            {"encode_GBps", rawBytes / encodeS / 1e9},
            {"decode_GBps", rawBytes / decodeS / 1e9},
            {"encode_vs_memcpy", medianOf(encRatio)},
            {"decode_vs_memcpy", medianOf(decRatio)},
            {"memcpy_GBps", rawBytes / medianOf(mc) / 1e9},
            {"rel_rms_error", one.relError()},
            {"samples", enc.size()},
            {"torch_ops_encode_GBps", nullptr},
            {"torch_ops_decode_GBps", nullptr}};
  if (auto* q = dynamic_cast<QuantCodec*>(&one.sender()); q && withTorchOps)
    compareWithTorchOps(r, *q, shape, x, one.ctx(), encodeS, decodeS);
  if (floor) {
    r["floor_encode_GBps"] = rawBytes / medianOf(fl) / 1e9;
    r["floor_vs_memcpy"] = medianOf(flRatio);
    r["encode_vs_floor"] = medianOf(encFloor);
  }
  r["read_GBps"] = rawBytes / readSeconds(x) / 1e9;
  if (many) {
    setCodecThreads(threads);
    r["read_GBps_threads"] = rawBytes / readSecondsThreads(x) / 1e9;
    setCodecThreads(1);
    r["encode_GBps_threads"] = rawBytes / medianOf(encN) / 1e9;
    r["decode_GBps_threads"] = rawBytes / medianOf(decN) / 1e9;
    r["memcpy_GBps_threads"] = rawBytes / medianOf(mcN) / 1e9;
    r["encode_thread_speedup"] = medianOf(encUp);
    r["decode_thread_speedup"] = medianOf(decUp);
    r["memcpy_thread_speedup"] = medianOf(mcUp);
    r["read_thread_speedup"] = r["read_GBps_threads"].get<double>() / r["read_GBps"].get<double>();
  }
  return r;
}

// A codec's rounds as one row: the first round's fields, each timing the median of the rounds with
// its range, and whether it is slower than twice the link's byte rate either way (on that link the
// codec, not the wire, would set the pace: encode and decode each take at least half the raw
// message's wire time).
json medianRow(const std::vector<json>& rounds, double linkBps) {
  json row = rounds.front();
  for (const char* key :
       {"encode_vs_memcpy", "decode_vs_memcpy", "encode_GBps", "decode_GBps", "memcpy_GBps",
        "read_GBps", "encode_GBps_threads", "decode_GBps_threads", "encode_thread_speedup",
        "decode_thread_speedup", "read_GBps_threads", "read_thread_speedup", "memcpy_GBps_threads",
        "memcpy_thread_speedup", "floor_encode_GBps", "floor_vs_memcpy", "encode_vs_floor"}) {
    if (!row.contains(key)) continue;
    std::vector<double> v;
    for (const auto& one : rounds) v.push_back(one[key].get<double>());
    std::sort(v.begin(), v.end());
    row[key] = v[v.size() / 2];
    row[std::string(key) + "_range"] = {v.front(), v.back()};
  }
  row["rounds"] = rounds.size();
  const double linkGBps = linkBps / 8 / 1e9;
  row["codec_bound"] = row["encode_GBps"].get<double>() < 2 * linkGBps ||
                       row["decode_GBps"].get<double>() < 2 * linkGBps;
  return row;
}

}  // namespace

std::optional<EncodeTraffic> encodeTrafficOf(const Codec& codec) {
  // acsgd's and ef's steps take two passes in every scale layout (compression/acsgd.cc).
  if (const auto* q = dynamic_cast<const QuantCodec*>(&codec))
    return EncodeTraffic{q->encodesInOnePass() ? 1 : 2, 0, q->options().bits};
  if (const auto* a = dynamic_cast<const AcsgdCodec*>(&codec)) {
    const auto dtype = a->store().options().dtype;
    const int bytes = dtype == StoreOptions::Dtype::kFp32   ? 4
                      : dtype == StoreOptions::Dtype::kFp16 ? 2
                                                            : 1;
    return EncodeTraffic{2, bytes, a->options().quant.bits};
  }
  if (const auto* e = dynamic_cast<const ErrorFeedbackCodec*>(&codec))
    if (const auto* q = dynamic_cast<const QuantCodec*>(&e->inner()))
      return EncodeTraffic{2, e->residualStore() == ErrorFeedbackCodec::Store::kBf16 ? 2 : 4,
                           q->options().bits};
  return std::nullopt;
}

uint64_t encodeTrafficPasses(const float* x, uint8_t* buffer, int64_t n, EncodeTraffic t,
                             uint8_t* out) {
  if (t.passes != 1 && t.passes != 2)
    throw std::invalid_argument("encode traffic: " + std::to_string(t.passes) +
                                " passes: expected 1 or 2");
  if (t.bits < 1 || t.bits > 8)
    throw std::invalid_argument("encode traffic: bits " + std::to_string(t.bits) +
                                ": expected 1 to 8");
  switch (t.bufferBytes) {
    case 0:
      return trafficPassesOf<0>(x, buffer, n, t.passes, t.bits, out);
    case 1:
      return trafficPassesOf<1>(x, buffer, n, t.passes, t.bits, out);
    case 2:
      return trafficPassesOf<2>(x, buffer, n, t.passes, t.bits, out);
    case 4:
      return trafficPassesOf<4>(x, buffer, n, t.passes, t.bits, out);
    default:
      throw std::invalid_argument("encode traffic: buffer of " + std::to_string(t.bufferBytes) +
                                  " bytes a value: expected 0, 1, 2 or 4");
  }
}

std::vector<std::string> defaultBenchCodecs() { return kDefaultBenchCodecs; }

json benchCodecs(const CodecBenchOptions& o) {
  for (const auto& s : o.codecs) makeCodec(s);  // fail before measuring
  for (int64_t k : o.sizesKiB)
    if (k < 4) throw std::invalid_argument("--size-kib " + std::to_string(k) + ": expected >= 4");
  if (o.rounds < 1)
    throw std::invalid_argument("--rounds " + std::to_string(o.rounds) + ": expected >= 1");
  if (o.threads < 1)
    throw std::invalid_argument("--threads " + std::to_string(o.threads) + ": expected >= 1");
  if (!(o.linkBps > 0)) throw std::invalid_argument("--link-gbps: expected a rate > 0");
  torch::set_num_threads(1);  // the codec's own threads only (compression.threads)
  json doc = {{"benchmark", "codecs"},
              {"threads", o.threads},
              {"unit", "GB/s = 1e9 fp32 input bytes per second"},
              {"cpu_path", cpuPathName()},
              {"link_bps", o.linkBps}};  // kernels built for (compression/kernels.h)
  json results = json::array(), memcpyBySize = json::object(), checksum = json::object(),
       checksumThreads = json::object();
  double memcpyLargest = 0.0;
  for (int64_t kib : o.sizesKiB) {
    const Shape shape = shapeFor(kib * 1024);
    const int64_t n = numelOf(shape);
    torch::manual_seed(1);
    const auto xt = torch::randn({n});
    std::vector<float> x(xt.data_ptr<float>(), xt.data_ptr<float>() + n), x2(x);
    const auto noise = torch::randn({n}).mul(0.1);
    for (int64_t i = 0; i < n; ++i) x2[i] += noise.data_ptr<float>()[i];
    const double mc = memcpySeconds(x);
    memcpyBySize[std::to_string(4 * n)] = 4.0 * n / mc / 1e9;
    memcpyLargest = 4.0 * n / mc / 1e9;
    checksum[std::to_string(4 * n)] = 4.0 * n / checksumSeconds(x) / 1e9;
    if (o.threads > 1) {
      setCodecThreads(o.threads);
      checksumThreads[std::to_string(4 * n)] = 4.0 * n / checksumSeconds(x) / 1e9;
      setCodecThreads(1);
    }
    // Rounds over all codecs in turn, memcpy measured right before each codec: a slow spell of the
    // machine hits both sides of a ratio, and each ratio is the median of its rounds.
    std::vector<std::vector<json>> rows(o.codecs.size());
    for (int round = 0; round < o.rounds; ++round)
      for (size_t c = 0; c < o.codecs.size(); ++c) {
        if (o.onCodec) o.onCodec(o.codecs[c], shape, round);
        rows[c].push_back(benchRound(o.codecs[c], shape, x, x2, o.threads, round == 0));
      }
    for (const auto& r : rows) results.push_back(medianRow(r, o.linkBps));
  }
  doc["memcpy_GBps"] = memcpyLargest;
  doc["memcpy_GBps_by_bytes"] = memcpyBySize;
  doc["checksum_GBps_by_bytes"] = checksum;
  if (o.threads > 1) doc["checksum_GBps_threads_by_bytes"] = checksumThreads;
  doc["results"] = results;
  return doc;
}

}  // namespace slowpipe::compression
