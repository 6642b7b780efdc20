// Frames: round trips for every codec, and thousands of random truncations and bit flips of
// valid frames that must be rejected with CodecError or decode to the right shape, never crash.
#include "compression/frame.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compression/bytes.h"
#include "compression/crc32c.h"
#include "compression/error.h"

namespace slowpipe::compression {
namespace {

const std::vector<std::string> kSpecs = {"none",
                                         "fp16",
                                         "bf16",
                                         "quant:bits=4",
                                         "quant:bits=3,group=16,round=stochastic",
                                         "quant:bits=8",
                                         "topk:ratio=0.1",
                                         "acsgd:bits=2",
                                         "ef(quant:bits=4)"};

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
  if (GetParam() == "none" || GetParam() == "acsgd:bits=2")
    EXPECT_EQ(y, x);  // acsgd: first sighting
}

TEST_P(FrameTest, RandomTruncationsAndBitFlipsNeverCrash) {
  const Bytes good = makeFrame(GetParam());
  std::mt19937 rng(1234);
  int rejected = 0, decoded = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes bad = good;
    switch (trial % 3) {
      case 0:
        bad.resize(rng() % good.size());
        break;  // truncation
      case 1:
        bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;  // one flip
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
  // Damage the payload, then recompute the length field and the checksum so that only the codec's
  // own validation stands between the damage and a wrong tensor. A shortened payload must be
  // rejected with CodecError, always; a same-length bit flip may decode (the bits are plausible
  // values) but then to exactly the frame's shape, or be rejected.
  const Bytes good = makeFrame(GetParam());
  size_t at = 0;
  const FrameHeader h0 = parseFrame(good.data(), good.size(), &at);
  ASSERT_GT(h0.payloadBytes, 0u);
  std::mt19937 rng(99);
  int truncated = 0, flipped = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    Bytes bad = good;
    const bool truncate = trial % 2 == 0;
    const size_t cut = truncate ? rng() % h0.payloadBytes : h0.payloadBytes;
    bad.resize(at + cut);
    if (!truncate) bad[at + rng() % cut] ^= static_cast<uint8_t>(1u << (rng() % 8));
    const uint64_t len = cut;
    std::memcpy(bad.data() + at - 12, &len, 8);
    uint32_t crc = crc32c(bad.data(), at - 4);
    crc = crc32c(bad.data() + at, cut, crc);
    std::memcpy(bad.data() + at - 4, &crc, 4);
    auto codec = makeCodec(GetParam());
    std::vector<float> y;
    if (truncate) {
      ASSERT_THROW(decodeFrame(*codec, bad.data(), bad.size(), {}, y), CodecError)
          << GetParam() << ": a payload cut from " << h0.payloadBytes << " to " << cut
          << " bytes was accepted";
      ++truncated;
    } else {
      try {
        decodeFrame(*codec, bad.data(), bad.size(), {}, y);
        ASSERT_EQ(y.size(), 120u);
      } catch (const CodecError&) {
      }
      ++flipped;
    }
  }
  EXPECT_EQ(truncated, 1000);
  EXPECT_EQ(flipped, 1000);
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

// A zero dimension must not hide an absurd one; the old check accepted [0, 2^62].
TEST(FrameErrors, AbsurdShapesAreRejected) {
  EXPECT_THROW(numelOf({0, int64_t{1} << 62}), CodecError);
  EXPECT_THROW(numelOf({int64_t{1} << 62, 0}), CodecError);
  EXPECT_THROW(numelOf({int64_t{1} << 21, int64_t{1} << 21}), CodecError);
  EXPECT_EQ(numelOf({0, 5}), 0);
  EXPECT_EQ(numelOf({3, 5}), 15);
  // A group size whose rounding-up would overflow is refused up front.
  EXPECT_THROW(makeCodec("quant:bits=4,group=4611686018427387904"), CodecError);
  auto q = makeCodec("quant:bits=4,group=1099511627776");  // 2^40: accepted, one group
  std::vector<float> x(10, 1.0f);
  Bytes out;
  q->encode(x.data(), {10}, {}, out);
  EXPECT_EQ(out.size(), 4u + 5u);
}

// NaN/Inf never reach a codec's float-to-int conversion: the frame encoder names the element.
TEST(FrameErrors, NonFiniteInputIsRejectedWithItsIndex) {
  for (const std::string spec : {"quant:bits=2", "acsgd:bits=2", "topk:ratio=0.1", "none"}) {
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      auto codec = makeCodec(spec);
      std::vector<float> x(120, 0.5f);
      x[77] = bad;
      FrameHeader h;
      h.shape = {2, 5, 12};
      h.exampleIds = {1, 2};
      CodecContext ctx;
      ctx.exampleIds = h.exampleIds;
      try {
        encodeFrame(*codec, x.data(), h, ctx);
        ADD_FAILURE() << spec << " accepted " << bad;
      } catch (const NonFiniteError& e) {
        EXPECT_EQ(e.index(), 77) << spec;
        EXPECT_NE(std::string(e.what()).find("element 77"), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_EQ(firstNonFinite(nullptr, 0), -1);
  std::vector<float> big(10000, 1.0f);
  EXPECT_EQ(firstNonFinite(big.data(), 10000), -1);
  big[9999] = NAN;
  EXPECT_EQ(firstNonFinite(big.data(), 10000), 9999);
}

// Parsing once then decoding gives what decodeFrame gives.
TEST(FrameErrors, ParsedFrameDecodesLikeDecodeFrame) {
  std::vector<float> x;
  const Bytes good = makeFrame("quant:bits=4", &x);
  auto a = makeCodec("quant:bits=4"), b = makeCodec("quant:bits=4");
  std::vector<float> ya, yb;
  decodeFrame(*a, good.data(), good.size(), {}, ya);
  size_t at = 0;
  const FrameHeader h = parseFrame(good.data(), good.size(), &at);
  decodeParsedFrame(*b, h, good.data(), at, {}, yb);
  EXPECT_EQ(ya, yb);
}

// A 60-byte header that claims 2^30 example ids (8 GiB) must be refused by the bounds check, not
// allocated first: parsed in a child limited to 1 GiB of address space, where the old
// resize-then-read died of bad_alloc.
TEST(FrameErrors, HeaderCannotMakeTheReceiverAllocateWhatTheFrameDoesNotHold) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: RLIMIT_AS cannot bound it";
#else
  Bytes b;
  ByteWriter w(b);
  w.put<uint32_t>(kFrameMagic);
  w.put<uint16_t>(kFrameVersion);
  w.put<uint8_t>(static_cast<uint8_t>(MessageKind::kActivation));
  w.put<uint8_t>(0);
  w.put<int64_t>(1);
  w.put<int32_t>(0);
  w.put<int32_t>(0);
  w.put<int32_t>(1);
  w.put<uint16_t>(static_cast<uint16_t>(CodecId::kNone));
  w.put<uint8_t>(1);
  w.put<uint8_t>(0);
  w.put<int64_t>(int64_t{1} << 30);    // shape {2^30}
  w.put<uint32_t>(uint32_t{1} << 30);  // as many ids, none of them in the frame
  ASSERT_LE(b.size(), 60u);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit lim{1ull << 30, 1ull << 30};
    setrlimit(RLIMIT_AS, &lim);
    try {
      size_t at = 0;
      parseFrame(b.data(), b.size(), &at);
      _exit(3);
    } catch (const CodecError& e) {
      _exit(std::string(e.what()).find("example ids") != std::string::npos ? 0 : 2);
    } catch (const std::bad_alloc&) {
      _exit(1);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the parser crashed";
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: allocated before validating (bad_alloc); 2: another error; 3: accepted";
#endif
}

}  // namespace
}  // namespace slowpipe::compression
