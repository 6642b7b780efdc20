// The fast paths against their definitions: AC-SGD's and ef's fused loops give the bytes and the
// state of the protocol composed from the plain quantizer (acsgd.h, the ef comment), and every
// codec gives the same bits on every CPU path (kernels.h).
#include "compression/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "compression/acsgd.h"
#include "compression/bitpack.h"
#include "compression/half.h"
#include "compression/parallel.h"
#include "compression/quant.h"

namespace slowpipe::compression {
namespace {

std::vector<float> randomTensor(int64_t n, uint32_t seed, float outlier = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  if (outlier > 0 && n > 3) x[n / 3] = outlier;
  return x;
}

// AC-SGD as acsgd.h defines it, built from QuantCodec and a map of rows rounded to the store's
// dtype: the transcription the fused codec must equal.
struct ComposedAcsgd {
  QuantCodec quant;
  bool fp16;
  int warmup;
  std::map<int64_t, std::vector<float>> m;

  static float held(float v, bool fp16) { return fp16 ? halfToFloat(floatToHalf(v)) : v; }

  Bytes encode(const std::vector<float>& x, const Shape& shape, const std::vector<int64_t>& ids,
               int epoch) {
    const int64_t rows = shape[0], rowLen = numelOf(shape) / rows;
    std::vector<uint8_t> flags((rows + 7) / 8, 0);
    std::vector<int64_t> full, delta;
    for (int64_t r = 0; r < rows; ++r) {
      const bool f = epoch < warmup || !m.count(ids[r]);
      if (f) flags[r / 8] |= static_cast<uint8_t>(1u << (r % 8));
      (f ? full : delta).push_back(r);
    }
    Bytes out;
    ByteWriter w(out);
    w.put<uint32_t>(static_cast<uint32_t>(rows));
    w.append(flags.data(), flags.size());
    for (int64_t r : full) w.append(x.data() + r * rowLen, 4 * rowLen);
    if (!delta.empty()) {
      Shape ds = shape;
      ds[0] = static_cast<int64_t>(delta.size());
      std::vector<float> d(delta.size() * rowLen), q(d.size());
      for (size_t j = 0; j < delta.size(); ++j)
        for (int64_t i = 0; i < rowLen; ++i)
          d[j * rowLen + i] = x[delta[j] * rowLen + i] - m[ids[delta[j]]][i];
      const size_t at = out.size();
      quant.encode(d.data(), ds, {}, out);
      quant.decode(out.data() + at, out.size() - at, ds, {}, q.data());
      for (size_t j = 0; j < delta.size(); ++j) {
        auto& row = m[ids[delta[j]]];
        for (int64_t i = 0; i < rowLen; ++i) row[i] = held(row[i] + q[j * rowLen + i], fp16);
      }
    }
    for (int64_t r : full) {
      auto& row = m[ids[r]];
      row.assign(x.begin() + r * rowLen, x.begin() + (r + 1) * rowLen);
      for (auto& v : row) v = held(v, fp16);
    }
    return out;
  }
};

struct FusedCase {
  std::string quant;  // acsgd's quantizer parameters
  Shape shape;
};

class FusedAcsgdTest : public ::testing::TestWithParam<std::tuple<FusedCase, std::string>> {};

TEST_P(FusedAcsgdTest, BytesAndBuffersEqualTheComposedProtocol) {
  const auto& [c, store] = GetParam();
  const std::string spec = "acsgd:" + c.quant + ",store=" + store;
  auto sender = makeCodec(spec), receiver = makeCodec(spec);
  const auto plain = makeCodec("quant:" + c.quant);  // the same quantizer on its own
  ComposedAcsgd ref{QuantCodec(static_cast<QuantCodec&>(*plain).options()), store == "fp16", 0, {}};
  const int64_t rows = c.shape[0], n = numelOf(c.shape), rowLen = n / rows;
  for (int epoch = 0; epoch < 4; ++epoch) {
    // Ids overlap between epochs, so every message mixes FULL and DELTA rows after the first.
    std::vector<int64_t> ids;
    for (int64_t r = 0; r < rows; ++r) ids.push_back((r + epoch) % (rows + 2));
    const auto x = randomTensor(n, 100 + epoch, epoch == 2 ? 40.0f : 0.0f);
    CodecContext ctx;
    ctx.exampleIds = ids;
    ctx.epoch = epoch;
    Bytes mine;
    sender->encode(x.data(), c.shape, ctx, mine);
    const Bytes want = ref.encode(x, c.shape, ids, epoch);
    ASSERT_EQ(mine, want) << spec << " epoch " << epoch;
    std::vector<float> y(n);
    receiver->decode(mine.data(), mine.size(), c.shape, ctx, y.data());
    for (int64_t r = 0; r < rows;
         ++r) {  // FULL rows (flag set): x itself; DELTA rows: the updated m
      const bool full = (mine[4 + r / 8] >> (r % 8)) & 1;
      const float* want = full ? x.data() + r * rowLen : ref.m.at(ids[r]).data();
      ASSERT_EQ(0, std::memcmp(want, y.data() + r * rowLen, 4 * rowLen))
          << spec << " epoch " << epoch << " row " << r;
    }
    ASSERT_EQ(sender->stateDigest(), receiver->stateDigest());
  }
  for (const auto& [id, row] : ref.m) {
    std::vector<float> held(rowLen);
    static_cast<AcsgdCodec&>(*sender).store().load(id, held.data(), rowLen);
    ASSERT_EQ(0, std::memcmp(row.data(), held.data(), 4 * rowLen)) << "id " << id;
  }
}

// Odd row lengths (codes of one row end mid-byte), rows longer than a fused step (4096 values),
// channel and group scales, both level mappings, stochastic rounding; channels of a multiple of 8
// (fp16 buffers: codes packed in registers, Kernels::deltaQuantUpdateHPacked, 16 values a step and
// a tail of 8) at 1, 2, 4 and 8 bits.
INSTANTIATE_TEST_SUITE_P(
    Fused, FusedAcsgdTest,
    ::testing::Combine(::testing::Values(FusedCase{"bits=2", {3, 5, 7}},
                                         FusedCase{"bits=3", {2, 3, 4099}},
                                         FusedCase{"bits=4,levels=fixpoint", {5, 9, 13}},
                                         FusedCase{"bits=2,levels=fixpoint", {2, 2, 5000}},
                                         FusedCase{"bits=3,scale=group,group=7", {3, 11, 3}},
                                         FusedCase{"bits=2,round=stochastic,seed=5", {4, 2, 2100}},
                                         FusedCase{"bits=8", {1, 1, 1}},
                                         FusedCase{"bits=4", {3, 4, 1032}},
                                         FusedCase{"bits=1", {2, 3, 64}},
                                         FusedCase{"bits=8,levels=fixpoint", {2, 2, 520}}),
                       ::testing::Values("fp32", "fp16")));

// ef's fused steps against the definition, v = x + r, send Q(v), r = v - deQ(Q(v)), with the
// residual in fp32 or (store=bf16) rounded to bf16 after every step; also through hadamard and topk
// (the generic path). Channels of a multiple of 8 (the second shape) take the packed update steps
// (Kernels::efQuantUpdatePacked and its kin: 16 values a step, then a tail of 8).
TEST(FusedEfTest, BytesAndResidualEqualTheDefinition) {
  for (const Shape& shape : {Shape{3, 7, 4100}, Shape{2, 5, 1032}})
    for (const std::string store : {"", ";store=bf16"})
      for (const std::string q :
           {"quant:bits=4", "quant:bits=2,scale=group,group=5",
            "quant:bits=3,round=stochastic,seed=2", "quant:bits=4,levels=fixpoint",
            "quant:bits=8,levels=fixpoint", "quant:bits=1", "topk:ratio=0.1",
            "hadamard(quant:bits=3;seed=4)"}) {
        auto ef = makeCodec("ef(" + q + store + ")");
        EXPECT_EQ(ef->spec(), "ef(" + makeCodec(q)->spec() + store + ")");
        auto inner = makeCodec(q);
        const int64_t n = numelOf(shape);
        std::vector<float> r(n, 0.0f);
        CodecContext ctx;
        ctx.key = "fwd/mb0";
        for (int step = 0; step < 3; ++step) {
          const auto x = randomTensor(n, 7 + step);
          std::vector<float> v(n), deq(n);
          for (int64_t i = 0; i < n; ++i) v[i] = x[i] + r[i];
          Bytes want, mine;
          inner->encode(v.data(), shape, ctx, want);
          inner->decode(want.data(), want.size(), shape, ctx, deq.data());
          for (int64_t i = 0; i < n; ++i) {
            r[i] = v[i] - deq[i];
            if (!store.empty()) r[i] = bf16ToFloat(floatToBf16(r[i]));
          }
          ef->encode(x.data(), shape, ctx, mine);
          ASSERT_EQ(mine, want) << q << store << " on " << shapeString(shape) << " step " << step;
          const std::vector<float> held = static_cast<ErrorFeedbackCodec&>(*ef).residual(ctx.key);
          ASSERT_EQ(held.size(), r.size());
          ASSERT_EQ(0, std::memcmp(held.data(), r.data(), 4 * n)) << q << store << " step " << step;
        }
      }
}

// The option's spelling: at ef's own level (a nested hadamard keeps its ';' options), named errors.
TEST(FusedEfTest, StoreOptionIsParsedAtItsOwnLevel) {
  EXPECT_EQ(makeCodec("ef(hadamard(quant:bits=3;seed=4;block=64);store=bf16)")->spec(),
            "ef(hadamard(quant:bits=3,scale=channel,round=nearest;seed=4;block=64);store=bf16)");
  EXPECT_EQ(makeCodec("ef(quant:bits=2;store=fp32)")->spec(),
            "ef(quant:bits=2,scale=channel,round=nearest)");
  // The same rule for hadamard's options: an inner ef keeps its own, and the canonical spec parses
  // back.
  const std::string rotatedEf = makeCodec("hadamard(ef(quant:bits=3;store=bf16);seed=4)")->spec();
  EXPECT_EQ(rotatedEf,
            "hadamard(ef(quant:bits=3,scale=channel,round=nearest;store=bf16);seed=4;block=256)");
  EXPECT_EQ(makeCodec(rotatedEf)->spec(), rotatedEf);
  for (const auto& [bad, needle] : std::vector<std::pair<std::string, std::string>>{
           {"ef(quant:bits=2;store=fp8)", "fp8"}, {"ef(quant:bits=2;stroe=bf16)", "stroe"}}) {
    try {
      makeCodec(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

// topk's radix select against its definition: a full sort by (|x| descending, index ascending),
// on data with many ties (few distinct magnitudes, zeros of both signs, equal buckets).
TEST(TopkSelectTest, SameChoiceAsAFullSortWithTies) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 5000);
    std::vector<float> x(n);
    const int levels = 1 + trial % 7;
    for (auto& v : x) {
      const int l = static_cast<int>(rng() % (levels + 1));
      v = (rng() & 1 ? -1.0f : 1.0f) * (trial % 3 == 0 ? 1.0f + l * 1e-7f : static_cast<float>(l));
    }
    for (const double ratio : {0.001, 0.01, 0.3, 0.999, 1.0}) {
      char spec[64];
      std::snprintf(spec, sizeof spec, "topk:ratio=%g", ratio);
      auto c = makeCodec(spec);
      Bytes p;
      c->encode(x.data(), {n}, {}, p);
      uint32_t k;
      std::memcpy(&k, p.data(), 4);
      std::vector<uint32_t> order(n);
      for (int64_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
      std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
        const float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
        return fa > fb || (fa == fb && a < b);
      });
      order.resize(k);
      std::sort(order.begin(), order.end());
      std::vector<uint32_t> got(k);
      std::memcpy(got.data(), p.data() + 4, 4 * k);
      ASSERT_EQ(got, order) << spec << " n=" << n << " trial " << trial;
    }
  }
}

// The same definition on messages large enough for the sampled threshold (n >= 131072), its
// candidates in many parts (a small parallel grain) on 1 and 3 codec threads, one codec instance
// reused across messages of different sizes: heavy ties straddle the parts, and a message whose
// ties defeat the sample takes the radix path.
TEST(TopkSelectTest, SampledChoiceOverManyPartsIsTheFullSortsOnAnyThreadCount) {
  std::mt19937 rng(11);
  const int64_t grain = parallelGrain();
  setParallelGrain(4096);
  for (const int threads : {1, 3}) {
    setCodecThreads(threads);
    auto c = makeCodec("topk:ratio=0.01");
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t n = 131072 + static_cast<int64_t>(rng() % 200000);
      std::vector<float> x(n);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (int64_t i = 0; i < n; ++i) {
        x[i] = normal(rng);
        // Trials 0-2: a third of the tail snapped to a few magnitudes, so the k-th largest key
        // is shared by values in many parts; trial 5: nothing but ties.
        if (trial < 3 && std::fabs(x[i]) > 2.0f && rng() % 3 == 0)
          x[i] = std::copysign(2.0f + 0.25f * static_cast<float>(rng() % 3), x[i]);
        if (trial == 5) x[i] = (rng() & 1) ? 1.0f : -1.0f;
      }
      Bytes p;
      c->encode(x.data(), {n}, {}, p);
      uint32_t k;
      std::memcpy(&k, p.data(), 4);
      ASSERT_EQ(k, static_cast<uint32_t>(std::ceil(0.01 * static_cast<double>(n))));
      std::vector<uint32_t> order(n);
      for (int64_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
      std::stable_sort(order.begin(), order.end(),
                       [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
      order.resize(k);
      std::sort(order.begin(), order.end());
      std::vector<uint32_t> got(k);
      std::memcpy(got.data(), p.data() + 4, 4 * k);
      ASSERT_EQ(got, order) << "n=" << n << " trial " << trial << " threads " << threads;
      std::vector<float> y(n);
      c->decode(p.data(), p.size(), {n}, {}, y.data());
      for (uint32_t i : order) ASSERT_EQ(y[i], halfToFloat(floatToHalf(x[i]))) << i;
    }
  }
  setCodecThreads(1);
  setParallelGrain(grain);
}

// One message sequence through a sender/receiver pair: every payload and every decoded value.
std::vector<Bytes> runSequence(const std::string& spec, std::vector<std::vector<float>>* decoded) {
  auto s = makeCodec(spec), r = makeCodec(spec);
  const Shape shape{4, 3, 1031};
  const int64_t n = numelOf(shape);
  std::vector<Bytes> out;
  for (int step = 0; step < 3; ++step) {
    CodecContext ctx;
    ctx.exampleIds = {0, 1, 2 + step, 9};
    ctx.epoch = step;
    ctx.key = "k";
    const auto x = randomTensor(n, 31 + step, 12.0f);
    Bytes p;
    s->encode(x.data(), shape, ctx, p);
    std::vector<float> y(n);
    r->decode(p.data(), p.size(), shape, ctx, y.data());
    out.push_back(p);
    decoded->push_back(y);
  }
  return out;
}

TEST(CpuPathTest, EveryCodecGivesTheSameBitsOnEveryPath) {
  if (!cpuPathAvailable(CpuPath::kAvx2))
    GTEST_SKIP() << "no AVX2 + F16C on this CPU: one path only";
  const char* specs[] = {"fp16",
                         "bf16",
                         "quant:bits=2",
                         "quant:bits=4,scale=group,group=64",
                         "quant:bits=3,round=stochastic,seed=9",
                         "quant:bits=2,levels=fixpoint",
                         "quant:bits=8,levels=fixpoint,scale=group,group=100",
                         "topk:ratio=0.05",
                         "randk:ratio=0.2",
                         "acsgd:bits=2",
                         "acsgd:bits=4,store=fp16",
                         "acsgd:bits=2,levels=fixpoint,store=fp16",
                         "acsgd:bits=2,store=q8",
                         "acsgd:bits=2,store=fp32",
                         "acsgd:bits=4,levels=fixpoint,store=fp32",
                         "ef(quant:bits=4)",
                         "ef(topk:ratio=0.1)",
                         "topk:ratio=0.05,bits=2",
                         "ef(quant:bits=4;store=bf16)",
                         "ef(quant:bits=2,levels=fixpoint;store=bf16)",
                         "ef(quant:bits=2,levels=fixpoint)",
                         "ef(quant:bits=3,scale=group,group=64)",
                         "ef(quant:bits=3,scale=group,group=64;store=bf16)",
                         "hadamard(quant:bits=3,scale=group,group=64)",
                         "hadamard(acsgd:bits=2)",
                         "lowrank:rank=16",
                         "lowrank:rank=5,basis=pca"};
  const char* before = cpuPathName();
  for (const char* spec : specs) {
    std::vector<std::vector<float>> yBase, yAvx;
    setCpuPath(CpuPath::kBaseline);
    const auto base = runSequence(spec, &yBase);
    setCpuPath(CpuPath::kAvx2);
    for (const bool wide : {true, false}) {  // AVX-512 kernels where the CPU has them, then not
      const bool was = setAvx512(wide);
      yAvx.clear();
      const auto avx = runSequence(spec, &yAvx);
      setAvx512(was);
      EXPECT_EQ(base, avx) << spec << (wide ? "" : ", 256-bit only");
      for (size_t k = 0; k < yBase.size(); ++k)
        EXPECT_EQ(0, std::memcmp(yBase[k].data(), yAvx[k].data(), 4 * yBase[k].size()))
            << spec << " message " << k << (wide ? "" : ", 256-bit only");
    }
  }
  setCpuPath(std::string(before) == "avx2" ? CpuPath::kAvx2 : CpuPath::kBaseline);
}

// randk's mask by the scalar kernel, the 256-bit one and, where the CPU has AVX-512 DQ, the 512-bit
// one (which the AVX2 table then uses): the same bytes and counts, for lengths that are not whole
// vectors, offsets past 2^32 and thresholds at both ends.
// Decoders of large messages write around the cache straight from the codes (AVX2: the kernels'
// *Stream, non-temporal stores from the first aligned value); the baseline build writes the same
// loops' values with ordinary stores. Every scale layout, on an output 4 bytes off alignment and,
// for channels of a multiple of 8, one on a 64-byte boundary.
TEST(CpuPathTest, LargeDecodesWrittenAroundTheCacheAreTheBaselines) {
  if (!cpuPathAvailable(CpuPath::kAvx2)) GTEST_SKIP() << "no AVX2 + F16C on this CPU";
  const std::string before = cpuPathName();
  // Past QuantCodec::kStreamValues: rows and groups unaligned; then channels of a multiple of 8
  // (acsgd's receiver from the packed codes, kernels.h; lowrank's 4-row AVX-512 blocks).
  for (const Shape& shape : {Shape{3, 700, 1031}, Shape{3, 683, 1024}})
    for (const char* spec :
         {"quant:bits=4", "quant:bits=2,levels=fixpoint", "quant:bits=3,scale=group,group=100",
          "quant:bits=8,levels=fixpoint,scale=group,group=100",
          "quant:bits=4,scale=group,group=128", "acsgd:bits=2", "acsgd:bits=3",
          "acsgd:bits=2,levels=fixpoint,store=fp32", "lowrank:rank=16",
          "lowrank:rank=5,basis=pca"}) {
      const int64_t n = numelOf(shape);
      ASSERT_GE(n, QuantCodec::kStreamValues);
      const auto x = randomTensor(n, 17, 3.0f);
      std::vector<std::vector<float>> outs;
      for (const CpuPath path : {CpuPath::kBaseline, CpuPath::kAvx2}) {
        setCpuPath(path);
        auto sender = makeCodec(spec), receiver = makeCodec(spec);
        CodecContext ctx;
        ctx.exampleIds = {0, 1, 2};
        ctx.key = "k";
        // The unaligned shape into an output 4 bytes past a 16-byte boundary; the aligned one
        // into an output on a 64-byte boundary (every non-temporal store width).
        std::vector<float> y(n + 16);
        float* to = y.data() + 1;
        if (shape.back() % 8 == 0)
          while (reinterpret_cast<uintptr_t>(to) % 64 != 0) ++to;
        for (int step = 0; step < 2; ++step) {  // acsgd: a full first sighting, then deltas
          ctx.epoch = step;
          Bytes p;
          sender->encode(x.data(), shape, ctx, p);
          receiver->decode(p.data(), p.size(), shape, ctx, to);
        }
        outs.push_back(y);
      }
      EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), 4 * (n + 16)))
          << spec << " on " << shapeString(shape);
    }
  setCpuPath(before == "avx2" ? CpuPath::kAvx2 : CpuPath::kBaseline);
}

// AC-SGD's receiver step from packed codes (Kernels::deltaApplyPackedH) against its definition
// written here: bitpack's codes, dequantized per value (symmetric: code * step - m; fixpoint:
// ((code + lo) * inv) * s), added to the fp16 buffer with the scalar fp16 conversions, or to an
// fp32 one. Every width it takes (1-4 and 8 bits), runs that are not a whole step, outputs aligned
// to 32, 16 and 4 bytes, streamed or not, 16 values a step (AVX-512 F, where the CPU has it) and 8.
TEST(CpuPathTest, PackedReceiverStepIsTheDefinition) {
  if (!cpuPathAvailable(CpuPath::kAvx2)) GTEST_SKIP() << "no AVX2 + F16C on this CPU";
  const Kernels& avx = *avx2Kernels();
  ASSERT_NE(avx.deltaApplyPackedH, nullptr);
  ASSERT_NE(avx.deltaApplyPackedF, nullptr);
  EXPECT_EQ(baselineKernels()->deltaApplyPackedH, nullptr);
  std::mt19937 rng(9);
  for (const bool wide : {true, false})  // 16 values a step with AVX-512 F, then 8
    for (const int bits : {1, 2, 3, 4, 8})
      for (const int64_t n : {1, 7, 8, 9, 24, 40, 1000, 4099})
        for (const bool fix : {false, true})
          for (const int shift : {0, 4, 1})  // floats: out 32-, 16-, 4-byte aligned
            for (const bool stream : {false, true}) {
              std::vector<uint8_t> codes(n), packed(packedBytes(n, bits));
              std::vector<float> a(n), b(n), m0(n);
              for (int64_t i = 0; i < n; ++i) {
                codes[i] = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
                a[i] = 0.01f + 0.001f * static_cast<float>(rng() % 97);
                b[i] = 0.5f * static_cast<float>(rng() % 13);
                m0[i] = std::normal_distribution<float>(0.0f, 3.0f)(rng);
              }
              packBits(codes.data(), n, bits, packed.data());
              const float lo = -static_cast<float>(1 << (bits - 1)), inv = 1.0f / (1 << (bits - 1));
              std::vector<uint8_t> want(2 * n), got(2 * n);
              floatToHalfBytes(m0.data(), n, want.data());
              got = want;
              std::vector<float> wantOut(n);
              for (int64_t i = 0; i < n; ++i) {
                const float c = static_cast<float>(codes[i]);
                const float dq = fix ? ((c + lo) * inv) * a[i] : c * a[i] - b[i];
                const uint16_t h = static_cast<uint16_t>(want[2 * i] | want[2 * i + 1] << 8);
                const uint16_t next = floatToHalf(halfToFloat(h) + dq);
                want[2 * i] = static_cast<uint8_t>(next & 0xff);
                want[2 * i + 1] = static_cast<uint8_t>(next >> 8);
                wantOut[i] = halfToFloat(next);
              }
              // The fp32 buffer's step: m + dq, unrounded.
              std::vector<float> wantF(n), gotF = m0;
              for (int64_t i = 0; i < n; ++i) {
                const float c = static_cast<float>(codes[i]);
                wantF[i] = m0[i] + (fix ? ((c + lo) * inv) * a[i] : c * a[i] - b[i]);
              }
              alignas(64) float outBuf[4099 + 16], outBufF[4099 + 16];
              float* out = outBuf + shift;
              float* outF = outBufF + shift;
              const bool was = setAvx512(wide);
              avx.deltaApplyPackedH(packed.data(), bits, a.data(), fix ? nullptr : b.data(), lo,
                                    inv, n, got.data(), out, stream);
              avx.deltaApplyPackedF(packed.data(), bits, a.data(), fix ? nullptr : b.data(), lo,
                                    inv, n, gotF.data(), outF, stream);
              avx.streamFence();
              setAvx512(was);
              const std::string where = std::to_string(bits) + " bits, n " + std::to_string(n) +
                                        (fix ? ", fixpoint" : "") + ", out +" +
                                        std::to_string(4 * shift) + " bytes" +
                                        (stream ? ", streamed" : "") + (wide ? "" : ", 256-bit");
              EXPECT_EQ(got, want) << where;
              EXPECT_EQ(0, std::memcmp(out, wantOut.data(), 4 * n)) << where;
              EXPECT_EQ(0, std::memcmp(gotF.data(), wantF.data(), 4 * n)) << where << ", fp32";
              EXPECT_EQ(0, std::memcmp(outF, wantF.data(), 4 * n)) << where << ", fp32";
            }
}

// Stochastic rounding's kernels (16 lanes a step with AVX-512 F, 8 without, one at a time in the
// baseline build) give the same codes: per-value and per-run scales, lengths that are not a whole
// step, stream positions just below 2^32, values far outside the scale (clamped), zero scales.
TEST(CpuPathTest, StochasticCodesAreTheSameAtEveryWidth) {
  if (!cpuPathAvailable(CpuPath::kAvx2)) GTEST_SKIP() << "no AVX2 + F16C on this CPU";
  const Kernels& base = *baselineKernels();
  const Kernels& avx = *avx2Kernels();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const int64_t n : {1, 15, 16, 31, 32, 33, 1000, 4099}) {
    std::vector<float> x(n), m(n), inv(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = normal(rng) * (i % 17 == 0 ? 100.0f : 1.0f);
      m[i] = i % 23 == 0 ? 0.0f : 1.0f + static_cast<float>(i % 7);
      inv[i] = m[i] > 0.0f ? 3.0f / (2.0f * m[i]) : 0.0f;
    }
    for (const uint32_t lo : {0u, 12345u, 0xffffffffu - static_cast<uint32_t>(n) + 1u})
      for (const bool wide : {true, false}) {
        const bool was = setAvx512(wide);
        std::vector<uint8_t> want(n), got(n), wantRun(n), gotRun(n);
        base.stochVec(x.data(), m.data(), inv.data(), n, 3.5f, lo, 0x9e3779b9u, want.data());
        avx.stochVec(x.data(), m.data(), inv.data(), n, 3.5f, lo, 0x9e3779b9u, got.data());
        base.stochScalar(x.data(), 2.5f, 0.6f, n, 15.5f, lo, 77u, wantRun.data());
        avx.stochScalar(x.data(), 2.5f, 0.6f, n, 15.5f, lo, 77u, gotRun.data());
        setAvx512(was);
        EXPECT_EQ(got, want) << "n " << n << ", lo " << lo << (wide ? "" : ", 256-bit only");
        EXPECT_EQ(gotRun, wantRun) << "n " << n << ", lo " << lo << (wide ? "" : ", 256-bit only");
      }
  }
}

// The channel quantizer's codes packed in registers (quantVecPacked, fixVecPacked,
// stochVecPacked) are the baseline build's codes put through packBits: every width, lengths that
// are not a whole step (the kernel does the whole steps and says so; the rest goes the old way),
// values far outside the scale, NaN and infinities, zero scales, stream positions near 2^32. Not a
// byte past the values it did is written.
TEST(CpuPathTest, PackedQuantizerIsTheBaselinesCodesPacked) {
  if (!cpuPathAvailable(CpuPath::kAvx2)) GTEST_SKIP() << "no AVX2 + F16C on this CPU";
  const Kernels& base = *baselineKernels();
  const Kernels& avx = *avx2Kernels();
  EXPECT_EQ(base.quantVecPacked, nullptr);
  ASSERT_NE(avx.quantVecPacked, nullptr);
  const bool has512 = __builtin_cpu_supports("avx512f");
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const int64_t n : {0, 15, 16, 17, 48, 1000, 4099}) {
    std::vector<float> x(n), m(n), inv(n), d(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = normal(rng) * (i % 17 == 0 ? 100.0f : 1.0f);
      if (i % 101 == 5) x[i] = std::nanf("");
      if (i % 103 == 7) x[i] = (i % 2 ? 1.0f : -1.0f) * INFINITY;
      m[i] = i % 23 == 0 ? 0.0f : 1.0f + static_cast<float>(i % 7);
      d[i] = 0.5f + static_cast<float>(i % 5);
    }
    for (const int bits : {1, 2, 3, 4, 5, 8})
      for (const int mode : {0, 1, 2})  // nearest, fixpoint, stochastic
        for (const bool wide : {true, false}) {
          const float top = static_cast<float>(1 << bits) - 0.5f;
          const float mult = static_cast<float>(1 << (bits - 1)), lo = -mult, hi = mult - 1.0f;
          for (int64_t i = 0; i < n; ++i)
            inv[i] = m[i] > 0.0f ? static_cast<float>((1 << bits) - 1) / (2.0f * m[i]) : 0.0f;
          const uint32_t pos = 0xffffffffu - static_cast<uint32_t>(n), key = 0x9e3779b9u;
          std::vector<uint8_t> codes(n), want(packedBytes(n, bits));
          auto codesOf = [&](const Kernels& k, int64_t i0, int64_t len, uint8_t* out) {
            if (mode == 0) k.quantVec(x.data() + i0, m.data() + i0, inv.data() + i0, len, top, out);
            if (mode == 1) k.fixVec(x.data() + i0, d.data() + i0, len, mult, lo, hi, out);
            if (mode == 2)
              k.stochVec(x.data() + i0, m.data() + i0, inv.data() + i0, len, top,
                         pos + static_cast<uint32_t>(i0), key, out);
          };
          codesOf(base, 0, n, codes.data());
          packBits(codes.data(), n, bits, want.data());
          std::vector<uint8_t> got(want.size() + 64, 0xa5);
          const bool was = setAvx512(wide);
          const int64_t done =
              mode == 0
                  ? avx.quantVecPacked(x.data(), m.data(), inv.data(), n, top, bits, got.data())
              : mode == 1 ? avx.fixVecPacked(x.data(), d.data(), n, mult, lo, hi, bits, got.data())
                          : avx.stochVecPacked(x.data(), m.data(), inv.data(), n, top, pos, key,
                                               bits, got.data());
          const std::string where = std::to_string(bits) + " bits, n " + std::to_string(n) +
                                    ", mode " + std::to_string(mode) + (wide ? "" : ", 256-bit");
          const bool packs = wide && has512 && (bits == 1 || bits == 2 || bits == 4 || bits == 8);
          EXPECT_EQ(done, packs ? n / 16 * 16 : 0) << where;
          for (size_t b = packedBytes(done, bits); b < got.size(); ++b)
            ASSERT_EQ(got[b], 0xa5) << where << ": byte " << b << " written";
          codesOf(avx, done, n - done, codes.data());
          packBits(codes.data(), n - done, bits, got.data() + done / 8 * bits);
          setAvx512(was);
          got.resize(want.size());
          EXPECT_EQ(got, want) << where;
        }
  }
}

// max |x| over a run and over whole groups: the AVX2 build's four-accumulator loops give the
// baseline's value at every length (NaN skipped as maxOf skips it, infinities, -0, the tail).
TEST(CpuPathTest, AbsMaxIsTheBaselinesAtEveryLength) {
  if (!cpuPathAvailable(CpuPath::kAvx2)) GTEST_SKIP() << "no AVX2 + F16C on this CPU";
  const Kernels& base = *baselineKernels();
  const Kernels& avx = *avx2Kernels();
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(5000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng);
  for (const bool special : {false, true}) {
    if (special) {
      x[3] = std::nanf("");
      x[40] = -INFINITY;
      x[4000] = -std::nanf("");
      x[4001] = -0.0f;
    }
    for (int64_t n = 0; n <= 100; ++n)
      for (const int64_t at : {0, 1, 37}) {
        const float want = base.absMax(x.data() + at, n), got = avx.absMax(x.data() + at, n);
        EXPECT_EQ(std::memcmp(&want, &got, 4), 0)
            << "n " << n << " at " << at << ": " << got << " vs " << want;
      }
    EXPECT_EQ(avx.absMax(x.data(), 4099), base.absMax(x.data(), 4099));
    for (const int64_t g : {1, 7, 32, 64, 100, 128}) {
      const int64_t groups = 4000 / g;
      std::vector<float> want(groups, 0.5f), got(groups, 0.5f);
      base.absMaxGroups(x.data() + 1, groups, g, want.data());
      avx.absMaxGroups(x.data() + 1, groups, g, got.data());
      EXPECT_EQ(got, want) << "groups of " << g;
    }
  }
}

TEST(CpuPathTest, RandkMaskIsTheSameAtEveryVectorWidth) {
  if (!cpuPathAvailable(CpuPath::kAvx2)) GTEST_SKIP() << "no AVX2 + F16C on this CPU";
  int widths = 0;
  for (const uint64_t threshold : {uint64_t{0}, uint64_t{1} << 60, uint64_t{0x1999999999999999},
                                   uint64_t{0x8000000000000001}, ~uint64_t{0}})
    for (const int64_t lo : {int64_t{0}, int64_t{13}, (int64_t{1} << 32) - 21})
      for (const int64_t n : {int64_t{0}, int64_t{7}, int64_t{8}, int64_t{4099}}) {
        const uint64_t base = 0x0123456789abcdefull ^ static_cast<uint64_t>(lo * 31 + n);
        std::vector<uint8_t> want(n + 1, 7);
        const int64_t wantCount = baselineKernels()->randkKeep(base, threshold, lo, n, want.data());
        for (const int bits : {256, 512}) {
          std::vector<uint8_t> got(n + 1, 7);
          int64_t count = -1;
          if (!randkKeepOfWidth(bits, base, threshold, lo, n, got.data(), &count)) continue;
          ++widths;
          EXPECT_EQ(got, want) << bits << " bits, lo " << lo << ", n " << n;
          EXPECT_EQ(count, wantCount) << bits << " bits, lo " << lo << ", n " << n;
        }
      }
  EXPECT_GE(widths, 60) << "the 256-bit kernel ran for every case";
}

TEST(CpuPathTest, HalfConversionIsTheScalarReferenceOnEveryPath) {
  // Every fp16 bit pattern back and forth, and floats around every rounding boundary.
  std::vector<float> x;
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7c00u) != 0x7c00u) {
      const float f = halfToFloat(static_cast<uint16_t>(h));
      x.push_back(f);
      x.push_back(std::nextafter(f, 1e30f));
      x.push_back(std::nextafter(f, -1e30f));
    }
  x.push_back(70000.0f);
  x.push_back(-1e-9f);
  for (CpuPath p : {CpuPath::kBaseline, CpuPath::kAvx2}) {
    if (!cpuPathAvailable(p)) continue;
    const Kernels& k = p == CpuPath::kAvx2 ? *avx2Kernels() : *baselineKernels();
    std::vector<uint8_t> h(2 * x.size());
    k.toHalf(x.data(), x.size(), h.data());
    for (size_t i = 0; i < x.size(); ++i) {
      uint16_t got;
      std::memcpy(&got, h.data() + 2 * i, 2);
      ASSERT_EQ(got, floatToHalf(x[i])) << k.name << " value " << x[i];
    }
    std::vector<float> back(x.size());
    k.fromHalf(h.data(), x.size(), back.data());
    for (size_t i = 0; i < x.size(); ++i) {
      uint16_t hv;
      std::memcpy(&hv, h.data() + 2 * i, 2);
      ASSERT_EQ(floatBits(back[i]), floatBits(halfToFloat(hv))) << k.name;
    }
  }
}

// The bf16 codec's conversions likewise: every bf16 pattern, its float neighbours (ties and carries
// into the exponent), NaNs with payloads in either half (quieted, never rounded to infinity), and a
// length that is not a whole step.
TEST(CpuPathTest, Bf16ConversionIsTheScalarReferenceOnEveryPath) {
  std::vector<float> x;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16ToFloat(static_cast<uint16_t>(h));
    x.push_back(f);
    x.push_back(bitsFloat(floatBits(f) + 0x8000u));  // a tie
    x.push_back(bitsFloat(floatBits(f) + 0x7fffu));
    x.push_back(bitsFloat(floatBits(f) | 1u));
  }
  for (uint32_t u : {0x7f800001u, 0x7fbfffffu, 0xff800001u, 0x7fffffffu, 0x7f7fffffu, 0xff7fffffu})
    x.push_back(bitsFloat(u));
  x.push_back(1.0f);  // n % 8 != 0
  for (CpuPath p : {CpuPath::kBaseline, CpuPath::kAvx2}) {
    if (!cpuPathAvailable(p)) continue;
    const Kernels& k = p == CpuPath::kAvx2 ? *avx2Kernels() : *baselineKernels();
    std::vector<uint8_t> h(2 * x.size());
    k.toBf16(x.data(), x.size(), h.data());
    for (size_t i = 0; i < x.size(); ++i) {
      uint16_t got;
      std::memcpy(&got, h.data() + 2 * i, 2);
      ASSERT_EQ(got, floatToBf16(x[i])) << k.name << " bits " << std::hex << floatBits(x[i]);
    }
    std::vector<float> back(x.size());
    k.fromBf16(h.data(), x.size(), back.data());
    for (size_t i = 0; i < x.size(); ++i) {
      uint16_t hv;
      std::memcpy(&hv, h.data() + 2 * i, 2);
      ASSERT_EQ(floatBits(back[i]), static_cast<uint32_t>(hv) << 16) << k.name;
    }
  }
}

// ef's step on a bf16 residual (efQuantUpdateB / efFixUpdateB and their packed forms), 16 values a
// step (AVX-512 F, where the CPU has it) and 8, against the baseline build's loops: the same codes
// and the same residual bits where the new residual is NaN (x or r NaN: quieted), infinite, a
// denormal (x denormal, r zero, a zero level: rounded as a denormal, not flushed), a tie of bf16's
// rounding, or ordinary; lengths that are not a whole step.
TEST(CpuPathTest, Bf16ResidualStepIsTheBaselines) {
  if (!cpuPathAvailable(CpuPath::kAvx2)) GTEST_SKIP() << "no AVX2 + F16C on this CPU";
  const Kernels& base = *baselineKernels();
  const Kernels& avx = *avx2Kernels();
  ASSERT_NE(avx.efQuantUpdateBPacked, nullptr);
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const int64_t n : {1, 15, 16, 17, 100, 1031}) {
    std::vector<float> x(n), mx(n), d(n), rd(n), sc(n);
    std::vector<uint16_t> r0(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = normal(rng);
      r0[i] = floatToBf16(normal(rng) * 0.25f);
      mx[i] = 3.0f;
      d[i] = 0.5f + static_cast<float>(i % 5);
      switch (i % 8) {
        case 4:  // NaN (payloads that carry into the sign if rounded) or an infinity in x
          x[i] = i % 32 == 4    ? std::nanf("")
                 : i % 32 == 12 ? bitsFloat(0x7fffffffu)
                 : i % 32 == 20 ? bitsFloat(0xffffffffu)
                                : (i % 3 ? 1.0f : -1.0f) * INFINITY;
          break;
        case 5:  // a denormal x onto r = +-0 at a zero level: the new residual is x
          x[i] = bitsFloat((rng() & 0x807fffffu) | 1u);
          r0[i] = i % 3 ? 0x0000 : 0x8000;
          mx[i] = 0.0f;
          break;
        case 6:  // a NaN residual, quiet or signalling, either sign
          r0[i] = static_cast<uint16_t>((i % 3 ? 0x7f80 : 0xff80) | (1 + rng() % 0x7f));
          break;
        case 7:  // a small x exactly halfway between two bf16 values, r = 0, a zero level
          x[i] = bitsFloat((floatBits(normal(rng) * 0x1.0p-12f) & 0xffff0000u) | 0x8000u);
          r0[i] = 0;
          mx[i] = 0.0f;
          break;
      }
      rd[i] = 1.0f / d[i];
      sc[i] = d[i];
    }
    for (const int bits : {1, 2, 4, 8})
      for (const bool fix : {false, true})
        for (const bool wide : {true, false}) {
          const float levels = static_cast<float>((1 << bits) - 1), top = levels + 0.5f;
          const float mult = static_cast<float>(1 << (bits - 1)), lo = -mult, hi = mult - 1.0f;
          std::vector<float> inv(n), step(n);
          for (int64_t i = 0; i < n; ++i) {
            inv[i] = mx[i] > 0.0f ? levels / (2.0f * mx[i]) : 4.0f;
            step[i] = mx[i] > 0.0f ? 2.0f * mx[i] / levels : 0.25f;
          }
          auto step1 = [&](const Kernels& k, uint16_t* r, uint8_t* codes) {
            if (fix)
              k.efFixUpdateB(x.data(), r, d.data(), rd.data(), sc.data(), n, mult, lo, hi,
                             1.0f / mult, codes);
            else
              k.efQuantUpdateB(x.data(), r, mx.data(), inv.data(), step.data(), n, top, codes);
          };
          std::vector<uint16_t> rBase(r0), rAvx(r0), rPacked(r0);
          std::vector<uint8_t> cBase(n), cAvx(n), want(packedBytes(n, bits));
          step1(base, rBase.data(), cBase.data());
          packBits(cBase.data(), n, bits, want.data());
          const bool was = setAvx512(wide);
          step1(avx, rAvx.data(), cAvx.data());
          std::vector<uint8_t> got(want.size());
          const int64_t done =
              fix ? avx.efFixUpdateBPacked(x.data(), rPacked.data(), d.data(), rd.data(), sc.data(),
                                           n, mult, lo, hi, 1.0f / mult, bits, got.data())
                  : avx.efQuantUpdateBPacked(x.data(), rPacked.data(), mx.data(), inv.data(),
                                             step.data(), n, top, bits, got.data());
          setAvx512(was);
          const std::string where = std::to_string(bits) + " bits, n " + std::to_string(n) +
                                    (fix ? ", fixpoint" : "") + (wide ? "" : ", 256-bit");
          EXPECT_EQ(cAvx, cBase) << where;
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(rAvx[i], rBase[i]) << where << ": residual " << i << " from x bits "
                                         << std::hex << floatBits(x[i]) << ", r " << r0[i];
          // The packed form does whole steps from value 0 (or none): those codes and residuals.
          ASSERT_EQ(done % 16, 0) << where;
          got.resize(packedBytes(done, bits));
          EXPECT_EQ(got, std::vector<uint8_t>(want.begin(), want.begin() + got.size())) << where;
          for (int64_t i = 0; i < done; ++i)
            ASSERT_EQ(rPacked[i], rBase[i]) << where << ": packed step's residual " << i;
        }
  }
}

TEST(CpuPathTest, ForcingAnUnknownPathIsAnError) {
  EXPECT_THROW(setCpuPath(static_cast<CpuPath>(7)), CodecError);
}

}  // namespace
}  // namespace slowpipe::compression
