// `bench codecs`' traffic floor (compression/bench.h): which codecs have one and with what traffic,
// and that its passes touch every byte they claim to and no other, at any thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "compression/bench.h"
#include "compression/parallel.h"

namespace slowpipe::compression {
namespace {

TEST(BenchTrafficTest, QuantizingCodecsHaveTheirEncodesTraffic) {
  struct Want {
    const char* spec;
    int passes, bufferBytes, bits;  // passes 0: no floor
  };
  for (const Want& w : std::vector<Want>{{"quant:bits=4", 2, 0, 4},
                                         {"quant:bits=2,round=stochastic", 2, 0, 2},
                                         {"quant:bits=8,levels=fixpoint", 2, 0, 8},
                                         {"quant:bits=4,group=128", 1, 0, 4},
                                         {"acsgd:bits=2", 2, 2, 2},
                                         {"acsgd:bits=4,store=fp32", 2, 4, 4},
                                         {"acsgd:bits=3,store=q8", 2, 1, 3},
                                         {"acsgd:bits=2,levels=fixpoint,store=fp32", 2, 4, 2},
                                         {"acsgd:bits=4,group=64", 2, 2, 4},
                                         {"ef(quant:bits=4)", 2, 4, 4},
                                         {"ef(quant:bits=8,group=32;store=bf16)", 2, 2, 8},
                                         {"ef(topk:ratio=0.1)", 0, 0, 0},
                                         {"topk:ratio=0.01", 0, 0, 0},
                                         {"none", 0, 0, 0}}) {
    const auto t = encodeTrafficOf(*makeCodec(w.spec));
    ASSERT_EQ(t.has_value(), w.passes > 0) << w.spec;
    if (!t) continue;
    EXPECT_EQ(t->passes, w.passes) << w.spec;
    EXPECT_EQ(t->bufferBytes, w.bufferBytes) << w.spec;
    EXPECT_EQ(t->bits, w.bits) << w.spec;
  }
}

// One call from a zero buffer and x of bytes 0x01: every buffer byte becomes 1, every byte of the
// n * bits / 8 (rounded up) code bytes is written (the same value from either sentinel) and the
// bytes past them are not.
std::vector<uint8_t> passesOnce(int64_t n, EncodeTraffic t, uint8_t sentinel,
                                std::vector<uint8_t>* buffer) {
  std::vector<float> x(static_cast<size_t>(n));
  std::memset(x.data(), 0x01, x.size() * 4);
  buffer->assign(static_cast<size_t>(n * t.bufferBytes), 0);
  std::vector<uint8_t> out(static_cast<size_t>(n + 64), sentinel);
  encodeTrafficPasses(x.data(), buffer->data(), n, t, out.data());
  return out;
}

TEST(BenchTrafficTest, PassesTouchEveryByteOfTheirRangesOnly) {
  const int64_t grain = parallelGrain();
  for (int threads : {1, 3}) {
    setCodecThreads(threads);
    setParallelGrain(threads == 1 ? grain : 48);  // many parts, some not a multiple of 16 long
    for (int64_t n : {1, 7, 15, 16, 17, 100, 1000, 4099})
      for (int passes : {1, 2})
        for (int bytes : {0, 1, 2, 4})
          for (int bits : {1, 2, 3, 4, 8}) {
            const EncodeTraffic t{passes, bytes, bits};
            std::vector<uint8_t> b0, b1;
            const auto o0 = passesOnce(n, t, 0x00, &b0), o1 = passesOnce(n, t, 0xff, &b1);
            const std::string at = "n " + std::to_string(n) + " passes " + std::to_string(passes) +
                                   " buffer " + std::to_string(bytes) + " bits " +
                                   std::to_string(bits) + " threads " + std::to_string(threads);
            for (size_t i = 0; i < b0.size(); ++i) ASSERT_EQ(b0[i], 1) << at << " byte " << i;
            const size_t codeBytes = static_cast<size_t>((n * bits + 7) / 8);
            for (size_t i = 0; i < o0.size(); ++i) {
              if (i < codeBytes)
                ASSERT_EQ(o0[i], o1[i]) << at << ": code byte " << i << " not written";
              else
                ASSERT_TRUE(o0[i] == 0x00 && o1[i] == 0xff) << at << ": byte " << i << " written";
            }
          }
  }
  setParallelGrain(grain);
  setCodecThreads(1);
}

TEST(BenchTrafficTest, RefusesWhatItCannotModel) {
  std::vector<float> x(16);
  std::vector<uint8_t> b(64), out(16);
  for (const EncodeTraffic t :
       {EncodeTraffic{2, 3, 4}, EncodeTraffic{2, 2, 9}, EncodeTraffic{2, 2, 0},
        EncodeTraffic{3, 2, 4}, EncodeTraffic{0, 0, 4}})
    EXPECT_THROW(encodeTrafficPasses(x.data(), b.data(), 16, t, out.data()), std::invalid_argument)
        << t.passes << " " << t.bufferBytes << " " << t.bits;
}

}  // namespace
}  // namespace slowpipe::compression
