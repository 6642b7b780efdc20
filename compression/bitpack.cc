// Bit packing kernels. Codes are handled in groups of 8: 8 codes of b bits are exactly b bytes, so
// every group starts byte-aligned. Widths 1, 2, 4, 8 get loops the compiler vectorizes; the others
// go through a 64-bit accumulator per group.
#include "compression/bitpack.h"

#include <cstring>

namespace slowpipe::compression {
namespace {

template <int kBits>
__attribute__((target_clones("avx2", "default"))) void packPow2(const uint8_t* c, size_t groups,
                                                                 uint8_t* out) {
  constexpr int kPer = 8 / kBits;  // codes per byte
  constexpr uint8_t kMask = static_cast<uint8_t>((1u << kBits) - 1);
  const size_t bytes = groups * kBits;
  for (size_t j = 0; j < bytes; ++j) {
    uint8_t v = 0;
    for (int k = 0; k < kPer; ++k) v |= static_cast<uint8_t>((c[j * kPer + k] & kMask) << (k * kBits));
    out[j] = v;
  }
}

template <int kBits>
__attribute__((target_clones("avx2", "default"))) void unpackPow2(const uint8_t* in, size_t groups,
                                                                   uint8_t* c) {
  constexpr int kPer = 8 / kBits;
  constexpr uint8_t kMask = static_cast<uint8_t>((1u << kBits) - 1);
  const size_t bytes = groups * kBits;
  for (size_t j = 0; j < bytes; ++j) {
    const uint8_t v = in[j];
    for (int k = 0; k < kPer; ++k) c[j * kPer + k] = static_cast<uint8_t>((v >> (k * kBits)) & kMask);
  }
}

void packGeneric(const uint8_t* c, size_t groups, int bits, uint8_t* out) {
  const uint64_t mask = (1u << bits) - 1;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t acc = 0;
    for (int k = 0; k < 8; ++k) acc |= (c[g * 8 + k] & mask) << (k * bits);
    std::memcpy(out + g * bits, &acc, bits);  // little-endian: low bytes first
  }
}

void unpackGeneric(const uint8_t* in, size_t groups, int bits, uint8_t* c) {
  const uint64_t mask = (1u << bits) - 1;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t acc = 0;
    std::memcpy(&acc, in + g * bits, bits);
    for (int k = 0; k < 8; ++k) c[g * 8 + k] = static_cast<uint8_t>((acc >> (k * bits)) & mask);
  }
}

void packGroups(const uint8_t* c, size_t groups, int bits, uint8_t* out) {
  switch (bits) {
    case 1: return packPow2<1>(c, groups, out);
    case 2: return packPow2<2>(c, groups, out);
    case 4: return packPow2<4>(c, groups, out);
    case 8: return static_cast<void>(std::memcpy(out, c, groups * 8));
    default: return packGeneric(c, groups, bits, out);
  }
}

void unpackGroups(const uint8_t* in, size_t groups, int bits, uint8_t* c) {
  switch (bits) {
    case 1: return unpackPow2<1>(in, groups, c);
    case 2: return unpackPow2<2>(in, groups, c);
    case 4: return unpackPow2<4>(in, groups, c);
    case 8: return static_cast<void>(std::memcpy(c, in, groups * 8));
    default: return unpackGeneric(in, groups, bits, c);
  }
}

}  // namespace

void packBits(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  const size_t groups = n / 8;
  packGroups(codes, groups, bits, out);
  const size_t rest = n - groups * 8;
  if (rest == 0) return;
  uint8_t tail[8] = {0};
  std::memcpy(tail, codes + groups * 8, rest);
  uint8_t packed[8];
  packGroups(tail, 1, bits, packed);  // zero codes pad the last group; keep only its used bytes
  std::memcpy(out + groups * bits, packed, packedBytes(rest, bits));
}

void unpackBits(const uint8_t* in, size_t n, int bits, uint8_t* codes) {
  const size_t groups = n / 8;
  unpackGroups(in, groups, bits, codes);
  const size_t rest = n - groups * 8;
  if (rest == 0) return;
  uint8_t packed[8] = {0};
  std::memcpy(packed, in + groups * bits, packedBytes(rest, bits));
  uint8_t tail[8];
  unpackGroups(packed, 1, bits, tail);
  std::memcpy(codes + groups * 8, tail, rest);
}

}  // namespace slowpipe::compression
