// CRC-32C: hardware path (SSE4.2, 8 bytes per instruction) and a byte-table fallback.
#include "compression/crc32c.h"

#include <array>
#include <cstring>

namespace slowpipe::compression {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // reflected Castagnoli polynomial

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

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crcHardware(const uint8_t* p, size_t n, uint32_t c) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = __builtin_ia32_crc32di(c64, v);
  }
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c = __builtin_ia32_crc32qi(c, *p);
  return c;
}
#endif

}  // namespace

uint32_t crc32c(const uint8_t* data, size_t n, uint32_t crc) {
  uint32_t c = ~crc;
#if defined(__x86_64__)
  static const bool kHw = __builtin_cpu_supports("sse4.2");
  c = kHw ? crcHardware(data, n, c) : crcTable(data, n, c);
#else
  c = crcTable(data, n, c);
#endif
  return ~c;
}

}  // namespace slowpipe::compression
