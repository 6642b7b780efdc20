// none / fp16 / bf16 / topk.
#include "compression/simple_codecs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "compression/half.h"
#include "compression/kernels.h"
#include "compression/parallel.h"
#include "compression/quant.h"

namespace slowpipe::compression {
namespace {

size_t elementBytes(CodecId id) { return id == CodecId::kNone ? 4 : 2; }

void requireSize(const char* codec, size_t size, size_t expect, const Shape& shape) {
  SP_REQUIRE(size == expect, std::string(codec) + ": payload is " + std::to_string(size) +
                                 " bytes, expected " + std::to_string(expect) + " for shape " +
                                 shapeString(shape));
}

// A large copy's part into memory that is not in cache: non-temporal stores (the kernels'
// streamBytes; memcpy of a 1 MiB part uses ordinary ones, which read every destination line first).
void copyAround(const void* src, size_t n, void* dst) {
  const Kernels& k = kernels();
  k.streamBytes(src, n, dst);
  k.streamFence();
}

}  // namespace

CastCodec::CastCodec(CodecId id) : id_(id) {
  SP_REQUIRE(id == CodecId::kNone || id == CodecId::kFp16 || id == CodecId::kBf16,
             "CastCodec: not a cast codec");
}

// Element-wise, so split over the codec threads (compression/parallel.h) at any boundary.
void CastCodec::encode(const float* x, const Shape& shape, const CodecContext&, Bytes& out) {
  const auto n = static_cast<int64_t>(numelOf(shape));
  const size_t eb = elementBytes(id_);
  uint8_t* p = ByteWriter(out).grow(static_cast<size_t>(n) * eb);
  const bool stream = n >= QuantCodec::kStreamValues;  // large: around the cache (kernels.h)
  parallelRanges(n, 64, [&](int64_t lo, int64_t hi, int64_t) {
    const auto cnt = static_cast<size_t>(hi - lo);
    uint8_t* o = p + static_cast<size_t>(lo) * eb;
    if (id_ == CodecId::kNone && stream) return copyAround(x + lo, cnt * 4, o);
    if (id_ == CodecId::kNone) return copyBytes(o, x + lo, cnt * 4);
    if (id_ == CodecId::kFp16) return floatToHalfBytes(x + lo, cnt, o);
    kernels().toBf16(x + lo, cnt, o);
  });
}

void CastCodec::decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext&,
                       float* out) {
  const auto n = static_cast<int64_t>(numelOf(shape));
  const size_t eb = elementBytes(id_);
  requireSize(codecName(id_), size, static_cast<size_t>(n) * eb, shape);
  const bool stream = n >= QuantCodec::kStreamValues;
  parallelRanges(n, 64, [&](int64_t lo, int64_t hi, int64_t) {
    const auto cnt = static_cast<size_t>(hi - lo);
    const uint8_t* in = payload + static_cast<size_t>(lo) * eb;
    if (id_ == CodecId::kNone && stream) return copyAround(in, cnt * 4, out + lo);
    if (id_ == CodecId::kNone) return copyBytes(out + lo, in, cnt * 4);
    if (id_ == CodecId::kFp16) return halfBytesToFloat(in, cnt, out + lo);
    kernels().fromBf16(in, cnt, out + lo);
  });
}

TopkCodec::~TopkCodec() = default;

TopkCodec::TopkCodec(const TopkCodec& other)
    : Codec(other), ratio_(other.ratio_), bits_(other.bits_) {}

TopkCodec::Scratch& TopkCodec::scratch() {
  if (!scratch_) scratch_ = std::make_unique<Scratch>();
  return *scratch_;
}

TopkCodec::TopkCodec(double ratio, int bits) : ratio_(ratio), bits_(bits) {
  SP_REQUIRE(ratio > 0.0 && ratio <= 1.0,
             "topk: ratio=" + std::to_string(ratio) + " is out of range; expected 0 < ratio <= 1");
  SP_REQUIRE(bits == 16 || (bits >= 1 && bits <= 8),
             "topk: bits=" + std::to_string(bits) +
                 " is out of range; expected 1..8 (or 16: fp16 values)");
}

std::string TopkCodec::spec() const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "topk:ratio=%g", ratio_);
  return bits_ == 16 ? std::string(buf) : std::string(buf) + ",bits=" + std::to_string(bits_);
}

QuantCodec topkValueQuant(int bits, int64_t k) {
  QuantOptions q;
  q.bits = bits;
  q.scale = QuantOptions::Scale::kGroup;
  q.group = std::max<int64_t>(k, 1);
  return QuantCodec(q);
}

int64_t TopkCodec::keepCount(int64_t n) const {
  if (n == 0) return 0;
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(ratio_ * static_cast<double>(n))), 1,
                             n);
}

namespace {

inline uint32_t keyOf(const float* x, int64_t i) { return floatBits(x[i]) & 0x7fffffffu; }

// A candidate: its index and its value's bits (|x|'s key is bits & 0x7fffffff), kept together so
// that choosing among candidates never goes back to the message.
struct Cand {
  uint32_t index, bits;
};

inline uint32_t keyOfCand(const Cand& c) { return c.bits & 0x7fffffffu; }

// Every i in [from, to) whose key is >= lo, in order, through the kernels' scan a block
// at a time; each counted in hist (2048 bins of key >> 20) where given.
void collect(const float* x, int64_t from, int64_t to, uint32_t lo, std::vector<Cand>& out,
             uint32_t* hist = nullptr) {
  constexpr int64_t kBlock = 4096;
  uint32_t idx[kBlock];
  const Kernels& k = kernels();
  for (int64_t b = from; b < to; b += kBlock) {
    const int64_t len = std::min(kBlock, to - b), c = k.keysAtLeast(x + b, len, lo, idx);
    for (int64_t j = 0; j < c; ++j) {
      const auto i = static_cast<uint32_t>(b + idx[j]);
      out.push_back({i, floatBits(x[i])});
      if (hist) ++hist[(out.back().bits & 0x7fffffffu) >> 20];
    }
  }
}

}  // namespace

// What one encode or decode needs beyond its input and output, kept from message to message: the
// candidates of each part and the choice's histograms (a fresh allocation of a few MiB a message
// costs its page faults every time).
struct TopkCodec::Scratch {
  // One part's, on cache lines of its own: parts run on different threads, and vectors that share a
  // line slow every push_back of both.
  struct alignas(64) Part {
    std::vector<Cand> found;                                // candidates, in index order
    std::vector<uint32_t, UninitAllocator<uint32_t>> edge;  // keys of the bucket that holds the
                                                            // k-th largest
    int64_t greater = 0, equal = 0, ties = 0, at = 0;
  };
  std::vector<uint32_t> sample;
  std::vector<Part> parts;
  std::vector<uint32_t> coarse, fine;  // per part: counts of key >> 20 (kept by collect), then of
                                       // key >> 10 within one bucket
  std::vector<float> kept;
  std::vector<uint32_t> idx;  // decode
  std::vector<float> values;  // decode
};

namespace {

using Scratch = TopkCodec::Scratch;

// The bucket of per-part histograms (bins counts each, summed over parts) that holds the want-th
// largest key, and how many keys lie above it. The parts are summed a histogram at a time (bins
// apart, each bin's parts were 8 KiB apart: about half of a 64 MiB top-k's serial time).
int bucketOf(const std::vector<uint32_t>& h, int bins, size_t parts, int64_t want, int64_t* above) {
  std::vector<int64_t> sum(static_cast<size_t>(bins), 0);
  for (size_t p = 0; p < parts; ++p) {
    const uint32_t* hp = h.data() + p * static_cast<size_t>(bins);
    for (int b = 0; b < bins; ++b) sum[b] += hp[b];
  }
  *above = 0;
  for (int b = bins - 1; b > 0; --b) {
    if (*above + sum[b] >= want) return b;
    *above += sum[b];
  }
  return 0;
}

// Of the candidates (each part's in index order, the parts in index order) whose keys include the
// k largest of the message, the k largest by (|x| desc, index asc), written in index order: their
// indices (4 little-endian bytes each) to ip and their values to kept. The k-th largest key T is
// found by two histogram levels over the candidates (key >> 20, counted as they were collected,
// then key >> 10 within the bucket that holds T) and a selection among the few keys of the last
// bucket; every larger key is taken, and of the keys equal to T the first in index order. Parts are
// counted and written on the codec threads, each at an offset from the counts before it: the choice
// of one serial selection, for any thread count.
void chooseAmong(Scratch& sc, int64_t k, uint8_t* ip, float* kept) {
  constexpr int kCoarse = 1 << 11, kFine = 1 << 10;
  const auto P = sc.parts.size();
  const auto parts = static_cast<int64_t>(P);
  int64_t above1 = 0, above2 = 0;
  const auto b1 = static_cast<uint32_t>(bucketOf(sc.coarse, kCoarse, P, k, &above1));
  sc.fine.resize(P * kFine);
  parallelFor(parts, [&](int64_t p) {  // bucket b1's keys: counted by key >> 10, kept in edge
    auto& part = sc.parts[static_cast<size_t>(p)];
    uint32_t* h = sc.fine.data() + p * kFine;
    std::fill(h, h + kFine, 0u);
    part.edge.resize(part.found.size());
    uint32_t* e = part.edge.data();
    size_t m = 0;
    for (const Cand& c : part.found) {  // without branches: about half the keys are in b1
      const uint32_t key = keyOfCand(c), in = key >> 20 == b1;
      h[(key >> 10) & (kFine - 1)] += in;
      e[m] = key;
      m += in;
    }
    part.edge.resize(m);
  });
  const auto b2 = static_cast<uint32_t>(bucketOf(sc.fine, kFine, P, k - above1, &above2));
  const uint32_t last = (b1 << 10) | b2;  // key >> 10 of the bucket that holds T
  parallelFor(parts, [&](int64_t p) {     // the keys above T's bucket; edge: the keys in it
    auto& part = sc.parts[static_cast<size_t>(p)];
    part.greater = 0;
    for (int b = static_cast<int>(b1) + 1; b < kCoarse; ++b)
      part.greater += sc.coarse[p * kCoarse + b];
    for (int b = static_cast<int>(b2) + 1; b < kFine; ++b) part.greater += sc.fine[p * kFine + b];
    auto& e = part.edge;
    e.erase(std::remove_if(e.begin(), e.end(), [&](uint32_t key) { return key >> 10 != last; }),
            e.end());
  });
  std::vector<uint32_t> keys;
  for (const auto& part : sc.parts) keys.insert(keys.end(), part.edge.begin(), part.edge.end());
  const int64_t rank = k - above1 - above2;  // T's rank among the last bucket's keys, from 1
  std::nth_element(keys.begin(), keys.begin() + (rank - 1), keys.end(), std::greater<uint32_t>());
  const uint32_t t = keys[static_cast<size_t>(rank - 1)];
  int64_t ties = k, at = 0;
  for (auto& part : sc.parts) {
    part.equal = 0;
    for (uint32_t key : part.edge) {
      part.greater += key > t;
      part.equal += key == t;
    }
    ties -= part.greater;
  }
  for (auto& part : sc.parts) {
    part.ties = std::min(ties, part.equal);
    ties -= part.ties;
    part.at = at;
    at += part.greater + part.ties;
  }
  parallelFor(parts, [&](int64_t p) {  // the chosen, compacted in place without branches, then out
    auto& part = sc.parts[static_cast<size_t>(p)];
    Cand* f = part.found.data();
    const size_t count = part.found.size();
    int64_t m = 0, tie = part.ties;
    for (size_t i = 0; i < count; ++i) {
      const Cand c = f[i];
      const uint32_t key = keyOfCand(c);
      const int64_t isTie = key == t && tie > 0;
      tie -= isTie;
      f[m] = c;
      m += (key > t) | isTie;
    }
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(ip + 4 * (part.at + i), &f[i].index, 4);
      std::memcpy(&kept[part.at + i], &f[i].bits, 4);
    }
  });
}

// The k largest by a threshold from a sample: 512 evenly spaced runs of 64 values (cache lines
// read whole); every value at or above the key that p*s + 4 sqrt(p*s) + 64 of the s sampled values
// reach (p = k / n) is a candidate: one pass over x, parts on the codec threads, each part's
// candidates in sc.parts. False when the sample cannot bound the candidates: fewer than k of
// them, or many more than k expected (heavy ties, all zeros).
bool sampledCandidates(const float* x, int64_t n, int64_t k, Scratch& sc) {
  constexpr int64_t kRuns = 512, kRun = 64;
  if (n < 4 * kRuns * kRun) return false;  // small messages: the radix path is cheap
  auto& sample = sc.sample;
  sample.resize(static_cast<size_t>(kRuns * kRun));
  // Each run's lines requested 8 runs ahead: one run at a time from memory waited on every miss
  // (the other half of the serial time).
  constexpr int64_t kAhead = 8;
  const int64_t stride = n / kRuns;
  for (int64_t r = 0; r < kRuns; ++r) {
    if (r + kAhead < kRuns)
      for (int64_t b = 0; b < kRun; b += 16) __builtin_prefetch(x + (r + kAhead) * stride + b);
    for (int64_t i = 0; i < kRun; ++i) sample[r * kRun + i] = keyOf(x, r * stride + i);
  }
  const auto s = static_cast<int64_t>(sample.size());
  const double ps = static_cast<double>(k) * static_cast<double>(s) / static_cast<double>(n);
  const int64_t rank = std::min<int64_t>(s, static_cast<int64_t>(ps + 4 * std::sqrt(ps)) + 64);
  std::nth_element(sample.begin(), sample.begin() + (rank - 1), sample.end(),
                   std::greater<uint32_t>());
  const uint32_t t0 = sample[rank - 1];
  int64_t above = 0;
  for (uint32_t key : sample) above += key >= t0;
  if (t0 == 0 || static_cast<double>(above) * static_cast<double>(n) / static_cast<double>(s) >
                     4.0 * static_cast<double>(k) + 65536)
    return false;
  const int64_t parts = parallelParts(n, 64);
  sc.parts.resize(static_cast<size_t>(parts));
  sc.coarse.resize(static_cast<size_t>(parts) << 11);
  parallelRanges(n, 64, [&](int64_t lo, int64_t hi, int64_t part) {
    auto& f = sc.parts[static_cast<size_t>(part)].found;
    f.clear();
    uint32_t* h = sc.coarse.data() + (part << 11);
    std::fill(h, h + (1 << 11), 0u);
    collect(x, lo, hi, t0, f, h);
  });
  int64_t total = 0;
  for (const auto& part : sc.parts) total += static_cast<int64_t>(part.found.size());
  return total >= k;
}

// The exact path for any input: |x| as an integer (the float's bits without the sign, which orders
// finite values as |x| does) is radix-selected: a histogram of its top 11 bits finds the bucket of
// the k-th largest; every key from that bucket up is a candidate (sc.parts: one part).
void radixCandidates(const float* x, int64_t n, int64_t k, Scratch& sc) {
  constexpr int kShift = 20, kBins = 1 << (31 - kShift);
  // Four histograms, in turn, so runs of equal buckets do not serialize on one counter.
  std::vector<uint32_t> hist(4 * kBins, 0);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int h = 0; h < 4; ++h) ++hist[h * kBins + (keyOf(x, i + h) >> kShift)];
  for (; i < n; ++i) ++hist[keyOf(x, i) >> kShift];
  int64_t above = 0;
  int bucket = kBins - 1;
  for (;; --bucket) {
    const int64_t c = int64_t{hist[bucket]} + hist[kBins + bucket] + hist[2 * kBins + bucket] +
                      hist[3 * kBins + bucket];
    if (above + c >= k) break;
    above += c;
  }
  sc.parts.resize(1);
  sc.parts[0].found.clear();
  sc.coarse.assign(kBins, 0);
  collect(x, 0, n, static_cast<uint32_t>(bucket) << kShift, sc.parts[0].found, sc.coarse.data());
}

}  // namespace

// The k largest |x| (ties: the lower index), in index order, without sorting the message: the same
// choice as a full sort by (|x| desc, index asc) (TopkSelectTest), from a sampled threshold in one
// pass where the sample bounds the candidates, else by radix selection (three passes).
void TopkCodec::encode(const float* x, const Shape& shape, const CodecContext&, Bytes& out) {
  const int64_t n = numelOf(shape);
  SP_REQUIRE(n <= int64_t{0xffffffff},
             "topk: tensor of " + std::to_string(n) + " values exceeds the 2^32 index range");
  const int64_t k = keepCount(n);
  Scratch& sc = scratch();
  if (k > 0 && !sampledCandidates(x, n, k, sc)) radixCandidates(x, n, k, sc);
  ByteWriter w(out);
  w.put<uint32_t>(static_cast<uint32_t>(k));
  const bool half = bits_ == 16;
  uint8_t* ip = w.grow((half ? 6 : 4) * static_cast<size_t>(k));  // k indices, then k fp16 values
  auto& kept = sc.kept;
  kept.resize(static_cast<size_t>(k));
  if (k > 0) chooseAmong(sc, k, ip, kept.data());
  if (half)
    return floatToHalfBytes(kept.data(), static_cast<size_t>(k), ip + 4 * static_cast<size_t>(k));
  topkValueQuant(bits_, k).encode(kept.data(), {k}, CodecContext{}, out);  // appends
}

void TopkCodec::decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext&,
                       float* out) {
  const int64_t n = numelOf(shape);
  ByteReader r(payload, size, "topk payload");
  const uint32_t k = r.get<uint32_t>("count");
  SP_REQUIRE(k == keepCount(n), "topk: count is " + std::to_string(k) + ", expected " +
                                    std::to_string(keepCount(n)) + " for shape " +
                                    shapeString(shape));
  const bool half = bits_ == 16;
  const size_t valueBytes =
      half ? 2 * static_cast<size_t>(k)
           : quantPayloadBytes(topkValueQuant(bits_, k).options(), {static_cast<int64_t>(k)});
  requireSize("topk", size, 4 + 4 * static_cast<size_t>(k) + valueBytes, shape);
  const uint8_t* ip = r.take(4 * static_cast<size_t>(k), "indices");
  const uint8_t* vp = r.take(valueBytes, "values");
  Scratch& sc = scratch();
  auto& idx = sc.idx;
  idx.resize(k);
  copyBytes(idx.data(), ip, 4 * static_cast<size_t>(k));
  // Checked without a branch a value (this runs on the caller's thread alone); the first bad index
  // is looked for only when there is one.
  const auto limit = static_cast<uint64_t>(n);
  bool ok = k == 0 || idx[0] < limit;
  for (uint32_t j = 1; j < k; ++j) ok &= (idx[j] < limit) & (idx[j] > idx[j - 1]);
  for (uint32_t j = 0; !ok && j < k; ++j) {
    SP_REQUIRE(idx[j] < limit && (j == 0 || idx[j] > idx[j - 1]),
               "topk: index " + std::to_string(j) + " = " + std::to_string(idx[j]) +
                   " is out of range or not increasing (n = " + std::to_string(n) + ")");
  }
  auto& values = sc.values;
  values.resize(k);
  if (half) {
    if (k > 0) kernels().fromHalf(vp, k, values.data());  // exact either way: fp16 widens to fp32
  } else {  // validates the quant payload before anything is written
    topkValueQuant(bits_, k).decode(vp, valueBytes, {static_cast<int64_t>(k)}, CodecContext{},
                                    values.data());
  }
  // Block by block (the codec threads): zeros and the block's kept values (its slice of the sorted
  // indices) built in cache, then written out once, around the cache for a large message.
  constexpr int64_t kBlock = 4096;
  const bool stream = n >= QuantCodec::kStreamValues;
  const Kernels& kern = kernels();
  parallelRanges(n, kBlock, [&](int64_t lo, int64_t hi, int64_t) {
    float buf[kBlock];
    auto j = static_cast<size_t>(
        std::lower_bound(idx.begin(), idx.end(), static_cast<uint32_t>(lo)) - idx.begin());
    for (int64_t b = lo; b < hi; b += kBlock) {
      const int64_t len = std::min(kBlock, hi - b);
      float* o = stream ? buf : out + b;
      std::fill(o, o + len, 0.0f);
      for (; j < idx.size() && idx[j] < b + len; ++j) o[idx[j] - b] = values[j];
      if (stream) kern.streamOut(buf, len, out + b);
    }
    if (stream) kern.streamFence();
  });
}

}  // namespace slowpipe::compression
