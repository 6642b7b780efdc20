// CRC-32C (Castagnoli) of a byte range: the frame checksum. Uses the SSE4.2 crc32 instruction when
// the CPU has it, a table otherwise; both give the same value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace slowpipe::compression {

uint32_t crc32c(const uint8_t* data, size_t n, uint32_t crc = 0);

}  // namespace slowpipe::compression
