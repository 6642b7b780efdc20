// Dense bit packing of b-bit unsigned codes (1 <= b <= 8). Value i occupies bits [i*b, i*b + b)
// of a little-endian, LSB-first bit stream; n codes take exactly ceil(n*b/8) bytes and the unused
// high bits of the last byte are zero.
#pragma once

#include <cstddef>
#include <cstdint>

namespace slowpipe::compression {

constexpr size_t packedBytes(size_t n, int bits) { return (n * static_cast<size_t>(bits) + 7) / 8; }

// Packs n codes (each < 2^bits; higher bits are masked off) into out[0, packedBytes(n, bits)).
void packBits(const uint8_t* codes, size_t n, int bits, uint8_t* out);
// Inverse of packBits: reads packedBytes(n, bits) bytes from in, writes n codes.
void unpackBits(const uint8_t* in, size_t n, int bits, uint8_t* codes);

}  // namespace slowpipe::compression
