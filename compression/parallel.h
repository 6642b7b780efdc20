// Threads for large messages: a codec may split one message over compression.threads threads
// (setCodecThreads; 1, the default, runs everything on the caller's thread as before). A split
// never changes a byte: work is cut at fixed boundaries that do not depend on the thread count
// (parts of parallelGrain() values, rounded to the caller's alignment), each part writes its own
// bytes, and reductions are exact (max). The digest test (tests/compression/digest_test.cc) checks
// every codec at several thread counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace slowpipe::compression {

// Values per part (default 2^18, 1 MiB of fp32): below two parts a message runs on the caller's
// thread alone. Tests set it small to split small messages into many parts.
void setParallelGrain(int64_t values);
int64_t parallelGrain();

void setCodecThreads(int threads);  // >= 1; throws CodecError otherwise
int codecThreads();

// The parts [lo, hi) of [0, n): boundaries at multiples of `align` (> 0), each part about
// parallelGrain() values, the same for every thread count.
int64_t parallelParts(int64_t n, int64_t align);
void partRange(int64_t n, int64_t align, int64_t part, int64_t* lo, int64_t* hi);

// Runs fn(part) for part in [0, parts), on up to codecThreads() threads (the caller is one of
// them), and returns when all are done. The first exception thrown by a part is rethrown here.
void parallelFor(int64_t parts, const std::function<void(int64_t part)>& fn);

// parallelFor over the parts of [0, n): fn(lo, hi, part).
void parallelRanges(int64_t n, int64_t align,
                    const std::function<void(int64_t lo, int64_t hi, int64_t part)>& fn);

// A part's scratch of n floats from its thread's own store, handed back when it goes out of scope
// (buffers nest: the last taken is the first given back): no allocation, zeroing or page fault
// per part, where a message of 64 MiB runs 64 parts a pass. Its values start undefined.
class PartBuffer {
 public:
  explicit PartBuffer(size_t n);
  ~PartBuffer();
  PartBuffer(const PartBuffer&) = delete;
  PartBuffer& operator=(const PartBuffer&) = delete;
  float* data() { return p_; }
  const float* data() const { return p_; }

 private:
  float* p_;
};

}  // namespace slowpipe::compression
