// Bit packing kernels. Codes are handled in groups of 8: 8 codes of b bits are exactly b bytes, so
// every group starts byte-aligned. Widths 1, 2, 4 pack a word at a time and unpack through a
// 256-entry table (1, 2 bits) or shifts (4 bits); 8 is a copy; the others go through a 64-bit
// accumulator per group.
#include "compression/bitpack.h"

#include "compression/bytes.h"
#include "compression/kernels.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace slowpipe::compression {
namespace {

// Pack: load the kPer codes of one output byte as one little-endian word; code k sits at bit 8k
// and moves down to bit k*kBits. Word-at-a-time loops vectorize well.
__attribute__((target_clones("avx2", "default"))) void pack1(const uint8_t* c, size_t bytes,
                                                             uint8_t* out) {
  for (size_t j = 0; j < bytes; ++j) {
    uint64_t w;
    std::memcpy(&w, c + 8 * j, 8);
    w &= 0x0101010101010101ull;
    // Multiplying gathers bit 8k into bit 56 + k for every k (no carries: the partial sums hit
    // distinct bits).
    out[j] = static_cast<uint8_t>((w * 0x0102040810204080ull) >> 56 & 0xff);
  }
}

__attribute__((target_clones("avx2", "default"))) void pack2(const uint8_t* c, size_t bytes,
                                                             uint8_t* out) {
  for (size_t j = 0; j < bytes; ++j) {
    uint32_t w;
    std::memcpy(&w, c + 4 * j, 4);
    w &= 0x03030303u;
    out[j] = static_cast<uint8_t>(w | (w >> 6) | (w >> 12) | (w >> 18));
  }
}

__attribute__((target_clones("avx2", "default"))) void pack4(const uint8_t* c, size_t bytes,
                                                             uint8_t* out) {
  for (size_t j = 0; j < bytes; ++j) {
    uint16_t w;
    std::memcpy(&w, c + 2 * j, 2);
    w &= 0x0f0f;
    out[j] = static_cast<uint8_t>(w | (w >> 4));
  }
}

// Unpack: one table lookup per packed byte yields all its codes as one word.
template <int kBits, typename Word>
struct UnpackTable {
  Word entry[256];
  UnpackTable() {
    constexpr int kPer = 8 / kBits;
    for (int v = 0; v < 256; ++v) {
      uint64_t w = 0;
      for (int k = 0; k < kPer; ++k)
        w |= static_cast<uint64_t>((v >> (k * kBits)) & ((1 << kBits) - 1)) << (8 * k);
      entry[v] = static_cast<Word>(w);
    }
  }
};

template <int kBits, typename Word>
void unpackPow2(const uint8_t* in, size_t bytes, uint8_t* c) {
  static const UnpackTable<kBits, Word> kTable;
  for (size_t j = 0; j < bytes; ++j)
    std::memcpy(c + j * sizeof(Word), &kTable.entry[in[j]], sizeof(Word));
}

// 4 bits: a shift and a mask per output code, which vectorize (measured: 2x the table lookup per
// byte; for 2 bits the table is faster).
__attribute__((target_clones("avx2", "default"))) void unpack4(const uint8_t* in, size_t bytes,
                                                               uint8_t* c) {
  for (size_t j = 0; j < bytes; ++j) {
    c[2 * j] = static_cast<uint8_t>(in[j] & 15u);
    c[2 * j + 1] = static_cast<uint8_t>(in[j] >> 4);
  }
}

// Odd widths: 8 codes <-> kBits bytes through a 64-bit accumulator. kBits is a template argument so
// the byte copies have a constant size and compile to plain loads and stores.
template <int bits>
void packGeneric(const uint8_t* c, size_t groups, uint8_t* out) {
  const uint64_t mask = (1u << bits) - 1;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t acc = 0;
    for (int k = 0; k < 8; ++k) acc |= (c[g * 8 + k] & mask) << (k * bits);
    std::memcpy(out + g * bits, &acc, bits);  // little-endian: low bytes first
  }
}

template <int bits>
void unpackGeneric(const uint8_t* in, size_t groups, uint8_t* c) {
  const uint64_t mask = (1u << bits) - 1;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t acc = 0;
    std::memcpy(&acc, in + g * bits, bits);
    for (int k = 0; k < 8; ++k) c[g * 8 + k] = static_cast<uint8_t>((acc >> (k * bits)) & mask);
  }
}

#if defined(__x86_64__)
// Odd widths with BMI2 (chosen at run time): one pext gathers the low `bits` bits of each of 8 code
// bytes into 8 * bits contiguous bits, code k at bit k * bits, the accumulator's layout exactly;
// pdep spreads them back. Measured here for 3 bits: about 4x the accumulator loops.
template <int bits>
__attribute__((target("bmi2"))) void packPext(const uint8_t* c, size_t groups, uint8_t* out) {
  constexpr uint64_t mask = 0x0101010101010101ull * ((1u << bits) - 1);
  for (size_t g = 0; g < groups; ++g) {
    uint64_t w;
    std::memcpy(&w, c + g * 8, 8);
    const uint64_t p = _pext_u64(w, mask);
    std::memcpy(out + g * bits, &p, bits);
  }
}

template <int bits>
__attribute__((target("bmi2"))) void unpackPdep(const uint8_t* in, size_t groups, uint8_t* c) {
  constexpr uint64_t mask = 0x0101010101010101ull * ((1u << bits) - 1);
  size_t g = 0;
  // Whole 8-byte loads while they stay inside the input (a `bits`-byte copy into a zeroed word
  // stalls on store forwarding), the last groups byte by byte. pdep takes only the low 8 * bits
  // bits of the word: the next group's bytes in it are ignored.
  for (; g * bits + 8 <= groups * bits; ++g) {
    uint64_t p;
    std::memcpy(&p, in + g * bits, 8);
    const uint64_t w = _pdep_u64(p, mask);
    std::memcpy(c + g * 8, &w, 8);
  }
  for (; g < groups; ++g) {
    uint64_t p = 0;
    std::memcpy(&p, in + g * bits, bits);
    const uint64_t w = _pdep_u64(p, mask);
    std::memcpy(c + g * 8, &w, 8);
  }
}

// A static initialiser may run before libgcc's: it initialises the CPU model itself.
const bool kBmi2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("bmi2") != 0;
}();
// Taken with the AVX2 kernels (every AVX2 CPU has BMI2): SLOWPIPE_CPU=baseline, or a test's
// setCpuPath, runs the portable loops, so both are checked to give the same bytes.
bool useBmi2() { return kBmi2 && &kernels() == avx2Kernels(); }
#define SLOWPIPE_ODD(fast, generic, bits, a, groups, b) \
  return useBmi2() ? fast<bits>(a, groups, b) : generic<bits>(a, groups, b)
#else
#define SLOWPIPE_ODD(fast, generic, bits, a, groups, b) return generic<bits>(a, groups, b)
#endif

void packGroups(const uint8_t* c, size_t groups, int bits, uint8_t* out) {
  switch (bits) {
    case 1:
      return pack1(c, groups, out);
    case 2:
      return pack2(c, groups * 2, out);
    case 4:
      return pack4(c, groups * 4, out);
    case 8:
      return static_cast<void>(copyBytes(out, c, groups * 8));
    case 3:
      SLOWPIPE_ODD(packPext, packGeneric, 3, c, groups, out);
    case 5:
      SLOWPIPE_ODD(packPext, packGeneric, 5, c, groups, out);
    case 6:
      SLOWPIPE_ODD(packPext, packGeneric, 6, c, groups, out);
    default:
      SLOWPIPE_ODD(packPext, packGeneric, 7, c, groups, out);
  }
}

void unpackGroups(const uint8_t* in, size_t groups, int bits, uint8_t* c) {
  switch (bits) {
    case 1:
      return unpackPow2<1, uint64_t>(in, groups, c);
    case 2:
      return unpackPow2<2, uint32_t>(in, groups * 2, c);
    case 4:
      return unpack4(in, groups * 4, c);
    case 8:
      return static_cast<void>(copyBytes(c, in, groups * 8));
    case 3:
      SLOWPIPE_ODD(unpackPdep, unpackGeneric, 3, in, groups, c);
    case 5:
      SLOWPIPE_ODD(unpackPdep, unpackGeneric, 5, in, groups, c);
    case 6:
      SLOWPIPE_ODD(unpackPdep, unpackGeneric, 6, in, groups, c);
    default:
      SLOWPIPE_ODD(unpackPdep, unpackGeneric, 7, in, groups, c);
  }
}

}  // namespace

void packBits(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  const size_t groups = n / 8;
  packGroups(codes, groups, bits, out);
  const size_t rest = n - groups * 8;
  if (rest == 0) return;
  uint8_t tail[8] = {0};
  copyBytes(tail, codes + groups * 8, rest);
  uint8_t packed[8];
  packGroups(tail, 1, bits, packed);  // zero codes pad the last group; keep only its used bytes
  copyBytes(out + groups * bits, packed, packedBytes(rest, bits));
}

void unpackBits(const uint8_t* in, size_t n, int bits, uint8_t* codes) {
  const size_t groups = n / 8;
  unpackGroups(in, groups, bits, codes);
  const size_t rest = n - groups * 8;
  if (rest == 0) return;
  uint8_t packed[8] = {0};
  copyBytes(packed, in + groups * bits, packedBytes(rest, bits));
  uint8_t tail[8];
  unpackGroups(packed, 1, bits, tail);
  copyBytes(codes + groups * 8, tail, rest);
}

}  // namespace slowpipe::compression
