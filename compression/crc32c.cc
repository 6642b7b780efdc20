// CRC-32C: hardware path (SSE4.2, three chains of 8 bytes per instruction), a byte-table fallback,
// and the joins of checksums of adjacent ranges that let both split their input (crc32c.h).
//
// Linearity is what joins them: the register after a range D starting from register r is the
// register D gives from 0, xor r times x^(8|D|) modulo the polynomial (the register alone, fed
// zeros, is multiplied by x a bit). In the reflected form used here bit 31 holds x^0.
#include "compression/crc32c.h"

#include <array>
#include <cstring>
#include <vector>

#include "compression/parallel.h"

namespace slowpipe::compression {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // reflected Castagnoli polynomial
constexpr uint32_t kOne = 0x80000000u;   // the polynomial 1

std::array<uint32_t, 256> makeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (kPoly & (0u - (c & 1u)));
    t[i] = c;
  }
  return t;
}

uint32_t crcTable(const uint8_t* p, size_t n, uint32_t c) {
  static const std::array<uint32_t, 256> kTable = makeTable();
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xffu] ^ (c >> 8);
  return c;
}

// a * b modulo the polynomial.
uint32_t mulMod(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = kOne; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b >> 1) ^ (kPoly & (0u - (b & 1u)));  // b * x
  }
  return product;
}

// x^(8 n) modulo the polynomial, by squaring.
uint32_t xPowBytes(uint64_t n) {
  uint32_t result = kOne, square = 0x00800000u;  // x^8
  for (; n != 0; n >>= 1) {
    if (n & 1) result = mulMod(result, square);
    square = mulMod(square, square);
  }
  return result;
}

// Register r carried over n zero bytes: r * x^(8n), as four byte tables for one fixed n.
class Shift {
 public:
  explicit Shift(uint64_t n) {
    const uint32_t k = xPowBytes(n);
    for (int b = 0; b < 4; ++b)
      for (uint32_t v = 0; v < 256; ++v) t_[b][v] = mulMod(v << (8 * b), k);
  }
  uint32_t operator()(uint32_t r) const {
    return t_[0][r & 0xffu] ^ t_[1][(r >> 8) & 0xffu] ^ t_[2][(r >> 16) & 0xffu] ^ t_[3][r >> 24];
  }

 private:
  uint32_t t_[4][256];
};

#if defined(__x86_64__)
// Three chains over adjacent blocks of kBlock bytes (a chain's instruction issues while the other
// two wait on their 3-cycle results), joined per round: 2 table shifts per 24 KiB. Each line read
// asks for the next round's line of its block: without it the three streams ran from memory at
// 16.7-17.6 GB/s, with it 23.2-25.9 (64 MiB, 28.8 GB/s in cache; scratch program, best of 10).
constexpr size_t kBlock = 8192;

__attribute__((target("sse4.2"))) uint64_t crcWords(const uint8_t* p, size_t words, uint64_t c) {
  for (size_t i = 0; i < words; ++i) {
    uint64_t v;
    std::memcpy(&v, p + 8 * i, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  return c;
}

__attribute__((target("sse4.2"))) uint32_t crcHardware(const uint8_t* p, size_t n, uint32_t c) {
  static const Shift kShiftBlock(kBlock);
  uint64_t c64 = c;
  for (; n >= 3 * kBlock; n -= 3 * kBlock, p += 3 * kBlock) {
    uint64_t a = c64, b = 0, d = 0;
    for (size_t line = 0; line < kBlock; line += 64) {
      for (size_t next = 3 * kBlock; next < 6 * kBlock; next += kBlock)
        __builtin_prefetch(p + next + line, 0, 2);  // the next round's line of each block
      for (size_t i = line; i < line + 64; i += 8) {
        uint64_t va, vb, vd;
        std::memcpy(&va, p + i, 8);
        std::memcpy(&vb, p + kBlock + i, 8);
        std::memcpy(&vd, p + 2 * kBlock + i, 8);
        a = __builtin_ia32_crc32di(a, va);
        b = __builtin_ia32_crc32di(b, vb);
        d = __builtin_ia32_crc32di(d, vd);
      }
    }
    const uint32_t ab = kShiftBlock(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    c64 = kShiftBlock(ab) ^ static_cast<uint32_t>(d);
  }
  c64 = crcWords(p, n / 8, c64);
  p += n / 8 * 8;
  c = static_cast<uint32_t>(c64);
  for (n %= 8; n > 0; --n, ++p) c = __builtin_ia32_crc32qi(c, *p);
  return c;
}
#endif

// The register over [p, p + n) from register c, on this thread.
uint32_t crcRegister(const uint8_t* p, size_t n, uint32_t c) {
#if defined(__x86_64__)
  static const bool kHw = __builtin_cpu_supports("sse4.2");
  return kHw ? crcHardware(p, n, c) : crcTable(p, n, c);
#else
  return crcTable(p, n, c);
#endif
}

}  // namespace

uint32_t crc32cCombine(uint32_t crcA, uint32_t crcB, size_t lenB) {
  return crcB ^ mulMod(crcA, xPowBytes(lenB));
}

uint32_t crc32c(const uint8_t* data, size_t n, uint32_t crc) {
  // Ranges of at least two parts (parallelGrain() bytes each, 256 KiB by default) over the codec
  // threads: the first part's register from the caller's, the others' from 0, joined in order.
  const int64_t align = 4 * 64;
  const int64_t parts = codecThreads() > 1 ? parallelParts(static_cast<int64_t>(n), align) : 1;
  if (parts < 2) return ~crcRegister(data, n, ~crc);
  std::vector<uint32_t> regs(static_cast<size_t>(parts));
  parallelRanges(static_cast<int64_t>(n), align, [&](int64_t lo, int64_t hi, int64_t part) {
    regs[static_cast<size_t>(part)] =
        crcRegister(data + lo, static_cast<size_t>(hi - lo), part == 0 ? ~crc : 0u);
  });
  uint32_t c = regs[0];
  uint64_t shiftLen = 0;
  uint32_t k = kOne;
  for (int64_t part = 1; part < parts; ++part) {
    int64_t lo, hi;
    partRange(static_cast<int64_t>(n), align, part, &lo, &hi);
    if (static_cast<uint64_t>(hi - lo) != shiftLen) {  // parts but the last are one length
      shiftLen = static_cast<uint64_t>(hi - lo);
      k = xPowBytes(shiftLen);
    }
    c = mulMod(c, k) ^ regs[static_cast<size_t>(part)];
  }
  return ~c;
}

}  // namespace slowpipe::compression
