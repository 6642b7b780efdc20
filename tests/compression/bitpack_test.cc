// Bit packing must be exact: every width 1..8, every length 0..1000, against a bit-by-bit
// reference.
#include "compression/bitpack.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace slowpipe::compression {
namespace {

// Reference: set bit (i*b + k) of an LSB-first stream one bit at a time.
std::vector<uint8_t> referencePack(const std::vector<uint8_t>& codes, int bits) {
  std::vector<uint8_t> out(packedBytes(codes.size(), bits), 0);
  for (size_t i = 0; i < codes.size(); ++i)
    for (int k = 0; k < bits; ++k)
      if ((codes[i] >> k) & 1) {
        const size_t bit = i * bits + k;
        out[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
      }
  return out;
}

class BitpackTest : public ::testing::TestWithParam<int> {};

TEST_P(BitpackTest, ExactForAllLengths) {
  const int bits = GetParam();
  std::mt19937 rng(bits);
  for (size_t n = 0; n <= 1000; ++n) {
    std::vector<uint8_t> codes(n);
    for (auto& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
    const auto want = referencePack(codes, bits);
    // Guard bytes around the output catch any write past ceil(n*b/8).
    std::vector<uint8_t> packed(want.size() + 2, 0xAB);
    packBits(codes.data(), n, bits, packed.data() + 1);
    ASSERT_EQ(packed.front(), 0xAB) << "bits=" << bits << " n=" << n;
    ASSERT_EQ(packed.back(), 0xAB) << "bits=" << bits << " n=" << n;
    ASSERT_TRUE(std::equal(want.begin(), want.end(), packed.begin() + 1))
        << "bits=" << bits << " n=" << n;
    std::vector<uint8_t> back(n + 1, 0xCD);
    unpackBits(packed.data() + 1, n, bits, back.data());
    ASSERT_EQ(back[n], 0xCD) << "unpack wrote past n";
    back.resize(n);
    ASSERT_EQ(back, codes) << "bits=" << bits << " n=" << n;
  }
}

TEST_P(BitpackTest, MasksHighBitsAndZeroesPadding) {
  const int bits = GetParam();
  std::vector<uint8_t> codes(13, 0xFF);
  std::vector<uint8_t> packed(packedBytes(13, bits));
  packBits(codes.data(), codes.size(), bits, packed.data());
  const size_t usedBits = 13 * bits;
  for (size_t bit = 0; bit < packed.size() * 8; ++bit)
    EXPECT_EQ((packed[bit / 8] >> (bit % 8)) & 1, bit < usedBits ? 1 : 0) << "bit " << bit;
}

INSTANTIATE_TEST_SUITE_P(AllWidths, BitpackTest, ::testing::Range(1, 9));

}  // namespace
}  // namespace slowpipe::compression
