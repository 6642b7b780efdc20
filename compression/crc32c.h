// CRC-32C (Castagnoli) of a byte range: the frame checksum, computed by the sender over every
// payload and again by the receiver. Uses the SSE4.2 crc32 instruction when the CPU has it, a table
// otherwise; both give the same value. The instruction's 3-cycle latency caps one chain of it at 8
// bytes per 3 cycles (8.8 GB/s on the Zen 5 VM this was measured on, slower than most codecs'
// encode), so the hardware path runs three chains over three adjacent blocks and joins their values
// (as crc32cCombine does); large ranges are split over the codec threads (compression/parallel.h)
// and joined the same way. Every path gives the value of one byte-at-a-time pass.
#pragma once

#include <cstddef>
#include <cstdint>

namespace slowpipe::compression {

uint32_t crc32c(const uint8_t* data, size_t n, uint32_t crc = 0);

// The checksum of A followed by B from crc32c(A), crc32c(B) and B's length.
uint32_t crc32cCombine(uint32_t crcA, uint32_t crcB, size_t lenB);

}  // namespace slowpipe::compression
