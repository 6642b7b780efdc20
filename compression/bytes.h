// Little-endian byte writer/reader for frames and payloads. The reader is bounds-checked: every
// read that would run past the end throws CodecError naming the field being read, so a truncated
// or lying payload is an error and never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "compression/element.h"
#include "compression/error.h"

namespace slowpipe::compression {

// An allocator whose value-less construct() leaves the bytes as they are: Bytes::resize then costs
// no zero fill, so a codec that grows its payload and writes every byte of it touches that memory
// once (a zeroing resize made `none` encode at half of memcpy's rate).
template <typename T>
struct UninitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <typename U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Payload bytes. resize() does not zero what it adds: write every byte you grow (ByteWriter::grow).
using Bytes = std::vector<uint8_t, UninitAllocator<uint8_t>>;

// memcpy that accepts n == 0 with null pointers (an empty vector's data() may be null, and
// memcpy(nullptr, ..., 0) is undefined behaviour).
inline void copyBytes(void* dst, const void* src, size_t n) {
  if (n) std::memcpy(dst, src, n);
}

// 64-bit FNV-1a of n bytes, continuing from h: the digest of codec state (sender vs receiver) and
// of sweep identities (specs, checkpoints).
// splitmix64's finaliser: a full-avalanche mix of 64 bits (seeded per-element hashes: randk's kept
// set, hadamard's signs).
inline uint64_t mix64(uint64_t z) { return element::mix64(z); }

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

class ByteWriter {
 public:
  explicit ByteWriter(Bytes& out) : out_(out) {}
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&v, sizeof(T));  // x86-64 and aarch64 are little-endian; the format is too.
  }
  void append(const void* p, size_t n) {
    const size_t at = out_.size();
    out_.resize(at + n);
    copyBytes(out_.data() + at, p, n);
  }
  // Grows the buffer by n bytes and returns a pointer to them (valid until the next write).
  uint8_t* grow(size_t n) {
    const size_t at = out_.size();
    out_.resize(at + n);
    return out_.data() + at;
  }
  size_t size() const { return out_.size(); }

 private:
  Bytes& out_;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* p, size_t n, std::string what) : p_(p), n_(n), what_(std::move(what)) {}
  template <typename T>
  T get(const char* field) {
    T v;
    copyBytes(&v, take(sizeof(T), field), sizeof(T));
    return v;
  }
  const uint8_t* take(size_t n, const char* field) {
    if (n > n_ - pos_) {
      throw CodecError(what_ + ": truncated while reading " + field + " (needs " +
                       std::to_string(n) + " bytes at offset " + std::to_string(pos_) + ", only " +
                       std::to_string(n_ - pos_) + " left)");
    }
    const uint8_t* at = p_ + pos_;
    pos_ += n;
    return at;
  }
  size_t remaining() const { return n_ - pos_; }
  size_t position() const { return pos_; }
  void expectEnd() const {
    if (pos_ != n_) {
      throw CodecError(what_ + ": " + std::to_string(n_ - pos_) +
                       " unexpected trailing bytes after offset " + std::to_string(pos_));
    }
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  std::string what_;
};

}  // namespace slowpipe::compression
