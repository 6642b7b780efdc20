// Codec registry (spec strings and their errors) and the element-wise codecs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "compression/builtin.h"
#include "compression/codec.h"
#include "compression/frame.h"
#include "compression/hadamard.h"
#include "compression/half.h"
#include "compression/randk.h"
#include "compression/simple_codecs.h"
#include "tests/compression/spec_error.h"

namespace slowpipe::compression {
namespace {

TEST(RegistryTest, BuildsEveryDocumentedSpec) {
  for (const char* s :
       {"none", "fp16", "bf16", "quant:bits=4,scale=channel,round=nearest",
        "quant:bits=2,group=128,round=stochastic", "topk:ratio=0.01", "topk:ratio=0.02,bits=2",
        "acsgd:bits=2", "ef(quant:bits=4)", "acsgd:bits=4,store=fp16,backing=mmap,budget=16MiB",
        "randk:ratio=0.1", "randk:ratio=0.25,seed=7", "ef(randk:ratio=0.1)",
        "hadamard(quant:bits=3,scale=group,group=64)", "hadamard(acsgd:bits=2;seed=3;block=64)",
        "ef(hadamard(quant:bits=4))"}) {
    auto c = makeCodec(s);
    ASSERT_NE(c, nullptr) << s;
    EXPECT_EQ(makeCodec(c->spec())->spec(), c->spec()) << "canonical spec must round-trip: " << s;
  }
  EXPECT_EQ(makeCodec("quant:bits=2,group=128")->spec(),
            "quant:bits=2,scale=group,group=128,round=nearest");
}

TEST(RegistryTest, ErrorsListWhatIsValid) {
  EXPECT_NE(errorOf("zip").find("valid codecs: none, fp16"), std::string::npos) << errorOf("zip");
  EXPECT_NE(errorOf("quant:bitz=4").find("unknown parameter 'bitz'; valid: bits, scale"),
            std::string::npos);
  EXPECT_NE(errorOf("quant:bits=9").find("1..8"), std::string::npos);
  EXPECT_NE(errorOf("quant:bits=x").find("not an integer"), std::string::npos);
  EXPECT_NE(errorOf("quant:round=up").find("nearest, stochastic"), std::string::npos);
  EXPECT_NE(errorOf("topk").find("missing parameter ratio"), std::string::npos);
  EXPECT_NE(errorOf("topk:ratio=2").find("0 < ratio <= 1"), std::string::npos);
  EXPECT_NE(errorOf("ef(acsgd:bits=2)").find("stateful"), std::string::npos);
  EXPECT_NE(errorOf("ef(quant:bits=4").find("not closed"), std::string::npos);
  EXPECT_NE(errorOf("acsgd:store=fp8").find("fp32, fp16, q8"), std::string::npos);
  EXPECT_NE(errorOf("fp16:bits=3").find("valid: (none)"), std::string::npos);
}

TEST(HalfTest, MatchesKnownValuesAndRoundsToNearestEven) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);            // ties to even -> inf
  EXPECT_EQ(floatToHalf(5.960464477539063e-8f), 1);    // smallest subnormal
  EXPECT_EQ(floatToHalf(1.0f + 1.0f / 2048), 0x3c00);  // exact tie rounds to even
  EXPECT_EQ(floatToHalf(1.0f + 3.0f / 2048), 0x3c02);
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(std::nanf("")))));
  for (uint32_t h = 0; h < 0x7c00; ++h)  // every finite half survives half -> float -> half
    ASSERT_EQ(floatToHalf(halfToFloat(static_cast<uint16_t>(h))), h) << h;
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.5f)), 1.5f);
}

TEST(HalfTest, BulkConversionEqualsScalar) {
  std::mt19937 rng(5);
  std::vector<float> x(4099);
  for (auto& v : x) {
    const uint32_t bits = rng() & 0x7f7fffffu;  // any finite float, either sign
    std::memcpy(&v, &bits, 4);
    if (rng() & 1) v = -v;
  }
  std::vector<uint8_t> bytes(2 * x.size());
  floatToHalfBytes(x.data(), x.size(), bytes.data());
  std::vector<float> back(x.size());
  halfBytesToFloat(bytes.data(), x.size(), back.data());
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    ASSERT_EQ(h, floatToHalf(x[i])) << "value " << x[i];
    ASSERT_EQ(back[i], halfToFloat(h));
  }
}

TEST(CastCodecTest, RoundTripErrorWithinFormatPrecision) {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * 100;
  for (const auto& [spec, rel] : std::vector<std::pair<std::string, float>>{
           {"none", 0}, {"fp16", 1.0f / 2048}, {"bf16", 1.0f / 256}}) {
    auto c = makeCodec(spec);
    Bytes p;
    c->encode(x.data(), {1000}, {}, p);
    EXPECT_EQ(p.size(), spec == "none" ? 4000u : 2000u);
    std::vector<float> y(1000);
    c->decode(p.data(), p.size(), {1000}, {}, y.data());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_LE(std::fabs(y[i] - x[i]), rel * std::fabs(x[i])) << spec;
  }
}

TEST(TopkCodecTest, KeepsLargestMagnitudes) {
  std::vector<float> x(100);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * static_cast<float>(i);
  auto c = makeCodec("topk:ratio=0.05");
  Bytes p;
  c->encode(x.data(), {10, 10}, {}, p);
  EXPECT_EQ(p.size(), 4u + 5 * 6);
  std::vector<float> y(100);
  c->decode(p.data(), p.size(), {10, 10}, {}, y.data());
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(y[i], i >= 95 ? x[i] : 0.0f) << i;
}

// A topk payload whose indices are out of range, repeated or decreasing is refused, naming the
// first bad one (its position and value), before anything is written to the output; the last
// index of a long payload (past a vector's width) is checked as the first is.
TEST(TopkCodecTest, DecodeRefusesIndicesOutOfRangeOrNotIncreasing) {
  const Shape shape{4, 1000};
  std::vector<float> x(4000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  auto c = makeCodec("topk:ratio=0.01");  // k = 40
  Bytes good;
  c->encode(x.data(), shape, {}, good);
  auto indexAt = [&](const Bytes& p, uint32_t j) {
    uint32_t v;
    std::memcpy(&v, p.data() + 4 + 4 * j, 4);
    return v;
  };
  struct Bad {
    uint32_t j, value;
  };
  const uint32_t k = 40;
  for (const Bad b : {Bad{0, 4000}, Bad{39, 4000}, Bad{17, 0xffffffffu}, Bad{20, 0},
                      Bad{39, indexAt(good, 38)}, Bad{9, indexAt(good, 8)}}) {
    Bytes p = good;
    std::memcpy(p.data() + 4 + 4 * b.j, &b.value, 4);
    // The first bad position: b.j, unless the new value leaves b.j in order and breaks b.j + 1.
    uint32_t first = b.j;
    if (b.value < 4000 && (b.j == 0 || b.value > indexAt(p, b.j - 1))) first = b.j + 1;
    ASSERT_LT(first, k);
    std::vector<float> y(4000, 7.0f);
    try {
      c->decode(p.data(), p.size(), shape, {}, y.data());
      ADD_FAILURE() << "index " << b.j << " = " << b.value << " accepted";
    } catch (const CodecError& e) {
      const std::string want = "topk: index " + std::to_string(first) + " = " +
                               std::to_string(indexAt(p, first)) +
                               " is out of range or not increasing";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return v == 7.0f; }))
        << "output written for index " << b.j << " = " << b.value;
  }
  std::vector<float> y(4000);
  c->decode(good.data(), good.size(), shape, {}, y.data());  // the unchanged payload decodes
}

// topk with bits=B (SparseLoCo's 2-bit values): the same indices, and the kept values are exactly
// what quant:bits=B with one scale over them (scale=group, group=k) makes of them.
TEST(TopkCodecTest, QuantizedValuesAreTheQuantizerOfTheKeptOnes) {
  std::vector<float> x(1000);
  std::mt19937 g(4);
  std::normal_distribution<float> d;
  for (auto& v : x) v = d(g);
  for (int bits : {2, 4, 8}) {
    const std::string spec = "topk:ratio=0.03,bits=" + std::to_string(bits);
    auto c = makeCodec(spec);
    EXPECT_EQ(c->spec(), spec);
    Bytes p;
    c->encode(x.data(), {10, 100}, {}, p);
    std::vector<float> y(1000), full(1000);
    c->decode(p.data(), p.size(), {10, 100}, {}, y.data());
    auto plain = makeCodec("topk:ratio=0.03");
    Bytes pp;
    plain->encode(x.data(), {10, 100}, {}, pp);
    plain->decode(pp.data(), pp.size(), {10, 100}, {}, full.data());
    std::vector<float> kept;
    std::vector<size_t> at;
    for (size_t i = 0; i < 1000; ++i)
      if (full[i] != 0.0f) {
        kept.push_back(x[i]);
        at.push_back(i);
      }
    ASSERT_EQ(kept.size(), 30u);
    const std::string q = "quant:bits=" + std::to_string(bits) + ",scale=group,group=30";
    auto quant = makeCodec(q);
    Bytes qp;
    quant->encode(kept.data(), {30}, {}, qp);
    std::vector<float> qv(30);
    quant->decode(qp.data(), qp.size(), {30}, {}, qv.data());
    EXPECT_EQ(p.size(), 4 + 4 * 30 + qp.size()) << spec;
    size_t j = 0;
    for (size_t i = 0; i < 1000; ++i)
      EXPECT_EQ(y[i], j < at.size() && at[j] == i ? qv[j++] : 0.0f) << spec << " " << i;
  }
  EXPECT_NE(errorOf("topk:ratio=0.1,bits=9").find("bits=9 is out of range"), std::string::npos)
      << errorOf("topk:ratio=0.1,bits=9");
}

// The rotation is the textbook transform bit for bit (the signs from the seed, every pass h = 1, 2,
// 4, ... of butterflies, then the normalisation; the inverse its mirror), whatever the block: the
// fast path (blocks of 8 and more) only reorders independent operations.
TEST(HadamardCodecTest, RotationIsTheTextbookTransformBitForBit) {
  auto textbook = [](std::vector<float> v, int64_t d, int64_t b, uint64_t seed, bool inverse) {
    const float norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(b)));
    for (size_t r = 0; r < v.size() / d; ++r) {
      float* row = v.data() + r * d;
      auto signs = [&] {
        for (int64_t j = 0; j < d; ++j)
          row[j] *= (mix64(seed ^ static_cast<uint64_t>(j)) & 1) ? -1.0f : 1.0f;
      };
      if (!inverse) signs();
      for (int64_t k = 0; k < d; k += b) {
        for (int64_t h = 1; h < b; h *= 2)
          for (int64_t i = k; i < k + b; i += 2 * h)
            for (int64_t j = i; j < i + h; ++j) {
              const float a = row[j], c = row[j + h];
              row[j] = a + c;
              row[j + h] = a - c;
            }
        if (b > 1)
          for (int64_t j = k; j < k + b; ++j) row[j] *= norm;
      }
      if (inverse) signs();
    }
    return v;
  };
  std::mt19937 g(3);
  std::normal_distribution<float> dist;
  for (const auto& [d, maxBlock] : {std::pair<int64_t, int64_t>{1024, 256},
                                    {1024, 65536},
                                    {192, 256},
                                    {8, 256},
                                    {12, 256},
                                    {7, 256},
                                    {4096, 16}}) {
    HadamardCodec h(makeCodec("none"), 11, maxBlock);
    std::vector<float> x(static_cast<size_t>(3 * d));
    for (auto& v : x) v = dist(g) * 3.0f;
    for (const bool inverse : {false, true}) {
      std::vector<float> mine = x;
      h.rotate(mine.data(), static_cast<int64_t>(mine.size()), d, inverse);
      const std::vector<float> want = textbook(x, d, h.blockFor(d), 11, inverse);
      EXPECT_EQ(std::memcmp(mine.data(), want.data(), want.size() * sizeof(float)), 0)
          << "d " << d << ", block " << h.blockFor(d) << (inverse ? ", inverse" : ", forward");
    }
  }
}

// The rotation is orthonormal and its own inverse; blocks follow the last dimension; around a
// quantizer it cuts the error on activations with outlier channels (what TAH-Quant builds on).
TEST(HadamardCodecTest, OrthonormalInverseAndHelpsWithOutliers) {
  const Shape shape = {8, 32, 192};  // last dimension 192 = 64 x 3: blocks of 64
  const int64_t n = numelOf(shape);
  std::vector<float> x(n);
  std::mt19937 g(9);
  std::normal_distribution<float> d;
  for (int64_t i = 0; i < n; ++i)
    x[i] = d(g) * (i % 64 == 17 ? 8.0f : 1.0f);  // one 8x outlier per 64 values
  HadamardCodec h(makeCodec("none"), 7, 256);
  EXPECT_EQ(h.blockFor(192), 64);
  EXPECT_EQ(h.blockFor(7), 1);
  std::vector<float> y = x;
  h.rotate(y.data(), n, 192, false);
  double nx = 0, ny = 0;
  for (int64_t i = 0; i < n; ++i) {
    nx += static_cast<double>(x[i]) * x[i];
    ny += static_cast<double>(y[i]) * y[i];
  }
  EXPECT_NEAR(ny / nx, 1.0, 1e-5) << "orthonormal: the norm is kept";
  h.rotate(y.data(), n, 192, true);
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], x[i], 1e-4f * (1 + std::fabs(x[i]))) << i;
  auto relErr = [&](const std::string& spec) {
    auto tx = makeCodec(spec), rx = makeCodec(spec);
    Bytes p;
    tx->encode(x.data(), shape, {}, p);
    std::vector<float> z(n);
    rx->decode(p.data(), p.size(), shape, {}, z.data());
    double e = 0;
    for (int64_t i = 0; i < n; ++i) e += (z[i] - x[i]) * (z[i] - x[i]);
    return std::sqrt(e / nx);
  };
  // A group's scale follows its largest value: the outlier sets a coarse grid for the other 63.
  // Rotated, the outlier's energy is spread over the block and the grid is several times finer.
  const double plain = relErr("quant:bits=4,scale=group,group=64"),
               rotated = relErr("hadamard(quant:bits=4,scale=group,group=64)");
  EXPECT_LT(rotated, 0.5 * plain) << "plain " << plain << ", rotated " << rotated;
  EXPECT_NE(errorOf("hadamard(quant:bits=4;block=96)").find("power of two"), std::string::npos);
  EXPECT_NE(errorOf("ef(hadamard(acsgd:bits=2))").find("stateful"), std::string::npos);
}

// randk: the receiver derives the kept set from the shared context alone (the payload is a count
// and the values), keeps about ratio of the elements, and decodes to x in expectation.
// A codec in the registry's form (randk): found by name, named by its wire id, listed in the help,
// accepted in frames; a frame with an id nobody registered is refused by name.
TEST(BuiltinRegistryTest, ARegisteredCodecIsKnownEverywhere) {
  ASSERT_FALSE(builtinCodecs().empty());
  const auto names = codecNames();
  for (const BuiltinCodec& b : builtinCodecs()) {
    EXPECT_STREQ(codecName(static_cast<CodecId>(b.wireId)), b.name.c_str());
    EXPECT_TRUE(knownCodecId(b.wireId)) << b.name;
    EXPECT_FALSE(isEnumCodecId(b.wireId)) << b.name << ": its id is also the enum's";
    EXPECT_NE(std::find(names.begin(), names.end(), b.name), names.end()) << b.name;
    EXPECT_EQ(builtinCodecById(b.wireId), &b);
  }
  auto randk = makeCodec("randk:ratio=0.5,seed=3");
  EXPECT_EQ(static_cast<uint16_t>(randk->id()), builtinCodecById(9)->wireId);
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 20.0f;
  CodecContext ctx;
  Bytes frame = encodeFrame(*randk, x.data(), FrameHeader{.shape = {64}}, ctx);
  std::vector<float> out;
  const FrameHeader h =
      decodeFrame(*makeCodec("randk:ratio=0.5,seed=3"), frame.data(), frame.size(), ctx, out);
  EXPECT_EQ(h.codec, randk->id());
  EXPECT_FALSE(knownCodecId(200));
  EXPECT_EQ(codecName(static_cast<CodecId>(200)), std::string("unknown"));
  EXPECT_THROW(makeCodec("randk:ratio=0.5,bits=2"), CodecError);
}

TEST(RandkCodecTest, SharedIndicesUnbiasedNoIndexBytes) {
  const Shape shape = {4, 50, 50};
  const int64_t n = numelOf(shape);
  std::vector<float> x(n);
  std::mt19937 g(3);
  std::normal_distribution<float> d;
  for (auto& v : x) v = d(g);
  auto tx = makeCodec("randk:ratio=0.1,seed=5"), rx = makeCodec("randk:ratio=0.1,seed=5");
  std::vector<double> sum(n, 0.0);
  const int trials = 400;
  std::vector<float> y(n);
  Bytes first;
  for (int t = 0; t < trials; ++t) {
    CodecContext ctx;
    ctx.step = t;
    ctx.microBatch = t % 3;
    ctx.exampleIds = {10, 11, 12, 13};
    Bytes p;
    tx->encode(x.data(), shape, ctx, p);
    uint32_t k;
    std::memcpy(&k, p.data(), 4);
    ASSERT_EQ(p.size(), 4u + 4u * k) << "count and values only";
    EXPECT_NEAR(static_cast<double>(k) / n, 0.1, 0.02) << t;
    rx->decode(p.data(), p.size(), shape, ctx, y.data());
    for (int64_t i = 0; i < n; ++i) sum[i] += y[i];
    if (t == 0) first = p;
    if (t == 1) {
      EXPECT_NE(p, first) << "another step draws another set";
    }
    // A receiver with another seed derives another set: the count does not match, an error.
    if (t == 0) {
      auto other = makeCodec("randk:ratio=0.1,seed=6");
      EXPECT_THROW(other->decode(p.data(), p.size(), shape, ctx, y.data()), CodecError);
    }
  }
  // Unbiased: a decode is x/ratio with probability ratio, else 0, so its variance is
  // (1/ratio - 1) x^2 = 9 x^2: one decode is ~3x off (relative L2), the mean of 400 ~0.15x.
  auto relL2 = [&](auto value) {
    double err = 0, norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += (value(i) - x[i]) * (value(i) - x[i]);
      norm += static_cast<double>(x[i]) * x[i];
    }
    return std::sqrt(err / norm);
  };
  EXPECT_LT(relL2([&](int64_t i) { return sum[i] / trials; }), 0.25);
  EXPECT_GT(relL2([&](int64_t i) { return static_cast<double>(y[i]); }), 2.0);
}

}  // namespace
}  // namespace slowpipe::compression
