// `slowpipe bench codecs` (see bench.h).
#include "compression/bench.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "compression/acsgd.h"
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

// withTorchOps: also time the libtorch-ops baseline (quant codecs; once per codec and size: the
// row keeps its first round's baseline, and a 64 MiB baseline takes seconds a call).
json benchOne(const std::string& spec, const Shape& shape, const std::vector<float>& x,
              const std::vector<float>& x2, bool withTorchOps) {
  const int64_t n = numelOf(shape);
  const double rawBytes = 4.0 * n;
  auto sender = makeCodec(spec), receiver = makeCodec(spec);
  CodecContext ctx;
  for (int64_t r = 0; r < shape[0]; ++r) ctx.exampleIds.push_back(r);
  ctx.key = "bench";
  ctx.epoch = 1;
  Bytes payload;
  std::vector<float> y(n);
  // Stateful codecs: the first sighting (full precision) is set up untimed, then every timed
  // round alternates between two activations so that deltas never vanish.
  if (sender->id() == CodecId::kAcsgd) {
    sender->encode(x.data(), shape, ctx, payload);
    receiver->decode(payload.data(), payload.size(), shape, ctx, y.data());
  }
  // memcpy is timed right before every sample, of the input this sample does not encode (so it
  // leaves none of the codec's input in cache): each sample's ratio pairs the codec with memcpy a
  // few milliseconds apart, and the ratios' median is what a neighbour's load on this machine moves
  // least (a memcpy timed once per codec moved 11-23 GB/s between a run's rounds).
  std::vector<float> dst(static_cast<size_t>(n), 1.0f);
  int round = 0;
  double encodeS = 0.0, decodeS = 0.0;
  std::vector<double> encSamples, decSamples, mcSamples, encRatio, decRatio;
  const double t0 = nowSeconds();
  while (encSamples.size() < 5 || (nowSeconds() - t0 < 0.5 && encSamples.size() < 2000)) {
    const bool second = round++ % 2;
    const auto& in = second ? x2 : x;
    const auto& other = second ? x : x2;
    const double m = nowSeconds();
    std::memcpy(dst.data(), other.data(), 4 * static_cast<size_t>(n));
    payload.clear();
    const double a = nowSeconds();
    sender->encode(in.data(), shape, ctx, payload);
    const double b = nowSeconds();
    receiver->decode(payload.data(), payload.size(), shape, ctx, y.data());
    const double c = nowSeconds();
    encSamples.push_back(b - a);
    decSamples.push_back(c - b);
    mcSamples.push_back(a - m);
    encRatio.push_back((a - m) / (b - a));
    decRatio.push_back((a - m) / (c - b));
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  encodeS = median(encSamples);
  decodeS = median(decSamples);
  const auto& last = ((round - 1) % 2) ? x2 : x;
  json r = {{"codec", sender->spec()},
            {"shape", shape},
            {"raw_bytes", static_cast<int64_t>(rawBytes)},
            {"wire_bytes", payload.size()},
            {"compression_ratio", rawBytes / payload.size()},
            {"encode_GBps", rawBytes / encodeS / 1e9},
            {"decode_GBps", rawBytes / decodeS / 1e9},
            {"encode_vs_memcpy", median(encRatio)},
            {"decode_vs_memcpy", median(decRatio)},
            {"memcpy_GBps", rawBytes / median(mcSamples) / 1e9},
            {"rel_rms_error", relRmsError(last, y)},
            {"samples", encSamples.size()},
            {"torch_ops_encode_GBps", nullptr},
            {"torch_ops_decode_GBps", nullptr}};
  if (auto* q = dynamic_cast<QuantCodec*>(sender.get()); q && withTorchOps)
    compareWithTorchOps(r, *q, shape, x, ctx, encodeS, decodeS);
  return r;
}

// One round of one codec: the codec on one thread (each sample paired with a memcpy), the read-only
// pass, and with threads > 1 the codec and the read-only pass again on that many codec threads.
json benchRound(const std::string& codec, const Shape& shape, const std::vector<float>& x,
                const std::vector<float>& x2, int threads, bool withTorchOps) {
  const double bytes = 4.0 * static_cast<double>(x.size());
  setCodecThreads(1);
  json one = benchOne(codec, shape, x, x2, withTorchOps);
  one["read_GBps"] = bytes / readSeconds(x) / 1e9;
  if (threads > 1) {
    setCodecThreads(threads);
    const json t = benchOne(codec, shape, x, x2, false);
    one["read_GBps_threads"] = bytes / readSecondsThreads(x) / 1e9;
    setCodecThreads(1);
    one["encode_GBps_threads"] = t["encode_GBps"];
    one["decode_GBps_threads"] = t["decode_GBps"];
    one["encode_thread_speedup"] =
        t["encode_GBps"].get<double>() / one["encode_GBps"].get<double>();
    one["decode_thread_speedup"] =
        t["decode_GBps"].get<double>() / one["decode_GBps"].get<double>();
    one["read_thread_speedup"] =
        one["read_GBps_threads"].get<double>() / one["read_GBps"].get<double>();
  }
  return one;
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
        "decode_thread_speedup", "read_GBps_threads", "read_thread_speedup"}) {
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
  json results = json::array(), memcpyBySize = json::object();
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
  doc["results"] = results;
  return doc;
}

}  // namespace slowpipe::compression
