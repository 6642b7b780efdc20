// The frame checksum against CRC-32C's definition, one bit at a time (written here from the
// polynomial, not from compression/crc32c.cc's table): every length around the hardware path's
// three-block rounds and its 8-byte words, unaligned starts, chained calls, the join of two
// ranges' checksums, and ranges split over the codec threads.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "compression/crc32c.h"
#include "compression/parallel.h"

namespace slowpipe::compression {
namespace {

uint32_t bitwiseCrc32c(const uint8_t* p, size_t n, uint32_t crc = 0) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
  }
  return ~c;
}

std::vector<uint8_t> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(gen());
  return v;
}

// Lengths that end anywhere in a word, around one, two and three of the three-block rounds
// (3 x 8192 bytes) and inside a round's blocks.
std::vector<size_t> edgeLengths() {
  std::vector<size_t> lens;
  for (size_t n = 0; n <= 40; ++n) lens.push_back(n);
  for (size_t base : {8192, 16384, 24576, 2 * 24576, 3 * 24576})
    for (int d = -9; d <= 9; ++d) lens.push_back(base + d);
  return lens;
}

TEST(Crc32cTest, EveryLengthAndStartGivesTheBitwiseValue) {
  const std::vector<uint8_t> buf = randomBytes(3 * 24576 + 64, 7);
  for (size_t off = 0; off < 8; ++off)
    for (size_t n : edgeLengths()) {
      ASSERT_EQ(crc32c(buf.data() + off, n), bitwiseCrc32c(buf.data() + off, n))
          << "length " << n << " from byte " << off;
    }
}

TEST(Crc32cTest, ChainedCallsAndJoinsGiveTheWholeRangesValue) {
  const std::vector<uint8_t> buf = randomBytes(2 * 24576 + 100, 11);
  std::mt19937 gen(3);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = gen() % buf.size(), cut = n ? gen() % (n + 1) : 0;
    const uint32_t whole = bitwiseCrc32c(buf.data(), n);
    const uint32_t a = crc32c(buf.data(), cut), b = crc32c(buf.data() + cut, n - cut);
    EXPECT_EQ(crc32c(buf.data() + cut, n - cut, a), whole) << n << " cut at " << cut;
    EXPECT_EQ(crc32cCombine(a, b, n - cut), whole) << n << " cut at " << cut;
  }
  // Empty sides: the join is the other side's value.
  const uint32_t all = crc32c(buf.data(), buf.size());
  EXPECT_EQ(crc32cCombine(all, crc32c(buf.data(), 0), 0), all);
  EXPECT_EQ(crc32cCombine(0, all, buf.size()), all);
}

TEST(Crc32cTest, RangesSplitOverThreadsGiveTheBitwiseValue) {
  const int64_t grain = parallelGrain();
  const std::vector<uint8_t> buf =
      randomBytes((3 << 20) + 64, 5);  // lengths up to 3 MiB from byte 1
  std::vector<size_t> lens = edgeLengths();
  for (size_t n : {size_t{3} << 20, (size_t{3} << 20) - 13, size_t{1} << 20}) lens.push_back(n);
  for (int threads : {2, 3}) {
    setCodecThreads(threads);
    for (int64_t g : {int64_t{4096}, grain}) {  // parts of 4 KiB and of the default 256 KiB
      setParallelGrain(g);
      for (size_t n : lens)
        for (uint32_t start : {0u, 0x12345678u}) {
          ASSERT_EQ(crc32c(buf.data() + 1, n, start), bitwiseCrc32c(buf.data() + 1, n, start))
              << threads << " threads, grain " << g << ", length " << n;
        }
    }
  }
  setCodecThreads(1);
  setParallelGrain(grain);
}

}  // namespace
}  // namespace slowpipe::compression
