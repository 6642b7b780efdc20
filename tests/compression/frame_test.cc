// Frames: round trips for every codec, and thousands of random truncations and bit flips of
// valid frames that must be rejected with CodecError or decode to the right shape, never crash.
#include "compression/frame.h"

#include <gtest/gtest.h>

#include <random>

#include "compression/crc32c.h"

namespace slowpipe::compression {
namespace {

const std::vector<std::string> kSpecs = {
    "none", "fp16", "bf16", "quant:bits=4", "quant:bits=3,group=16,round=stochastic",
    "quant:bits=8", "topk:ratio=0.1", "acsgd:bits=2", "ef(quant:bits=4)"};

Bytes makeFrame(const std::string& spec, std::vector<float>* x = nullptr) {
  auto codec = makeCodec(spec);
  FrameHeader h;
  h.kind = MessageKind::kActivation;
  h.step = 42;
  h.microBatch = 3;
  h.src = 0;
  h.dst = 1;
  h.shape = {2, 5, 12};
  h.exampleIds = {17, 18};
  std::vector<float> v(120);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::cos(0.37f * i) * (1 + i % 7);
  if (x) *x = v;
  CodecContext ctx;
  ctx.exampleIds = h.exampleIds;
  ctx.key = "t";
  return encodeFrame(*codec, v.data(), h, ctx);
}

TEST(Crc32cTest, KnownVector) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c(reinterpret_cast<const uint8_t*>(s.data()), s.size()), 0xE3069283u);
}

class FrameTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FrameTest, RoundTripKeepsHeader) {
  std::vector<float> x;
  const Bytes f = makeFrame(GetParam(), &x);
  auto codec = makeCodec(GetParam());
  std::vector<float> y;
  const FrameHeader h = decodeFrame(*codec, f.data(), f.size(), {}, y);
  EXPECT_EQ(h.step, 42);
  EXPECT_EQ(h.microBatch, 3);
  EXPECT_EQ(h.dst, 1);
  EXPECT_EQ(h.shape, (Shape{2, 5, 12}));
  EXPECT_EQ(h.exampleIds, (std::vector<int64_t>{17, 18}));
  ASSERT_EQ(y.size(), x.size());
  if (GetParam() == "none" || GetParam() == "acsgd:bits=2") EXPECT_EQ(y, x);  // acsgd: first sighting
}

TEST_P(FrameTest, RandomTruncationsAndBitFlipsNeverCrash) {
  const Bytes good = makeFrame(GetParam());
  std::mt19937 rng(1234);
  int rejected = 0, decoded = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes bad = good;
    switch (trial % 3) {
      case 0: bad.resize(rng() % good.size()); break;                       // truncation
      case 1: bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;  // one flip
      default:
        for (int k = 0; k < 4; ++k) bad[rng() % bad.size()] = static_cast<uint8_t>(rng());
    }
    auto codec = makeCodec(GetParam());  // fresh receiver: a stateful codec must not carry damage
    std::vector<float> y;
    try {
      const FrameHeader h = decodeFrame(*codec, bad.data(), bad.size(), {}, y);
      ASSERT_EQ(y.size(), static_cast<size_t>(numelOf(h.shape)));
      ASSERT_EQ(h.shape, (Shape{2, 5, 12})) << "a damaged frame decoded to a wrong shape";
      ++decoded;
    } catch (const CodecError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 2900);  // the checksum catches essentially all damage
  RecordProperty("decoded", decoded);
}

TEST_P(FrameTest, PayloadDamageBehindAValidChecksumIsStillRejectedByTheCodec) {
  // Recompute the checksum after damaging the payload: the codec's own validation must hold.
  const Bytes good = makeFrame(GetParam());
  size_t at = 0;
  const FrameHeader h0 = parseFrame(good.data(), good.size(), &at);
  std::mt19937 rng(99);
  for (int trial = 0; trial < 2000; ++trial) {
    Bytes bad = good;
    const size_t cut = rng() % (h0.payloadBytes + 1);
    bad.resize(at + cut);
    if (cut && trial % 2) bad[at + rng() % cut] ^= static_cast<uint8_t>(rng());
    const uint64_t len = cut;
    std::memcpy(bad.data() + at - 12, &len, 8);
    uint32_t crc = crc32c(bad.data(), at - 4);
    crc = crc32c(bad.data() + at, cut, crc);
    std::memcpy(bad.data() + at - 4, &crc, 4);
    auto codec = makeCodec(GetParam());
    std::vector<float> y;
    try {
      decodeFrame(*codec, bad.data(), bad.size(), {}, y);
      ASSERT_EQ(y.size(), 120u);
    } catch (const CodecError&) {
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, FrameTest, ::testing::ValuesIn(kSpecs), [](const auto& info) {
  std::string n;
  for (char c : info.param) n += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return n;
});

TEST(FrameErrors, NamesTheProblem) {
  const Bytes good = makeFrame("quant:bits=4");
  auto codec = makeCodec("quant:bits=4");
  std::vector<float> y;
  auto message = [&](Bytes b, Codec& c) -> std::string {
    try {
      decodeFrame(c, b.data(), b.size(), {}, y);
    } catch (const CodecError& e) {
      return e.what();
    }
    return "";
  };
  Bytes b = good;
  b[0] ^= 1;
  EXPECT_NE(message(b, *codec).find("magic"), std::string::npos);
  b = good;
  b.resize(10);
  EXPECT_NE(message(b, *codec).find("truncated"), std::string::npos);
  b = good;
  b.back() ^= 0x10;
  EXPECT_NE(message(b, *codec).find("checksum"), std::string::npos);
  auto other = makeCodec("fp16");
  EXPECT_NE(message(good, *other).find("codec"), std::string::npos);
}

}  // namespace
}  // namespace slowpipe::compression
