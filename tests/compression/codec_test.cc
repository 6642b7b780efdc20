// Codec registry (spec strings and their errors) and the element-wise codecs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "compression/codec.h"
#include "compression/half.h"
#include "compression/simple_codecs.h"

namespace slowpipe::compression {
namespace {

std::string errorOf(const std::string& spec) {
  try {
    makeCodec(spec);
  } catch (const CodecError& e) {
    return e.what();
  }
  return "";
}

TEST(RegistryTest, BuildsEveryDocumentedSpec) {
  for (const char* s : {"none", "fp16", "bf16", "quant:bits=4,scale=channel,round=nearest",
                        "quant:bits=2,group=128,round=stochastic", "topk:ratio=0.01", "acsgd:bits=2",
                        "ef(quant:bits=4)", "acsgd:bits=4,store=fp16,backing=mmap,budget=16MiB"}) {
    auto c = makeCodec(s);
    ASSERT_NE(c, nullptr) << s;
    EXPECT_EQ(makeCodec(c->spec())->spec(), c->spec()) << "canonical spec must round-trip: " << s;
  }
  EXPECT_EQ(makeCodec("quant:bits=2,group=128")->spec(), "quant:bits=2,scale=group,group=128,round=nearest");
}

TEST(RegistryTest, ErrorsListWhatIsValid) {
  EXPECT_NE(errorOf("zip").find("valid codecs: none, fp16"), std::string::npos) << errorOf("zip");
  EXPECT_NE(errorOf("quant:bitz=4").find("unknown parameter 'bitz'; valid: bits, scale"), std::string::npos);
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
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);        // ties to even -> inf
  EXPECT_EQ(floatToHalf(5.960464477539063e-8f), 1);  // smallest subnormal
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
  for (const auto& [spec, rel] : std::vector<std::pair<std::string, float>>{{"none", 0}, {"fp16", 1.0f / 2048}, {"bf16", 1.0f / 256}}) {
    auto c = makeCodec(spec);
    Bytes p;
    c->encode(x.data(), {1000}, {}, p);
    EXPECT_EQ(p.size(), spec == "none" ? 4000u : 2000u);
    std::vector<float> y(1000);
    c->decode(p.data(), p.size(), {1000}, {}, y.data());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_LE(std::fabs(y[i] - x[i]), rel * std::fabs(x[i])) << spec;
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

}  // namespace
}  // namespace slowpipe::compression
