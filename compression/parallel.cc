// The codec thread pool (parallel.h): threads started on first use, parts handed out by an atomic
// counter, the caller working beside them. A helper that finishes waits a short while spinning
// before it sleeps: one message runs several parallel steps in quick succession (quant: scales,
// then codes; topk: its scan, then three passes over the candidates), and a helper woken from
// sleep joins a step late (on this VM, a step of 0.4 ms ran no faster on 2 threads than on 1).
#include "compression/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "compression/bytes.h"
#include "compression/error.h"

namespace slowpipe::compression {
namespace {

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void setThreads(int n) {
    std::lock_guard<std::mutex> run(runMu_);
    wanted_ = n;
  }
  int threads() const { return wanted_; }

  void run(int64_t parts, const std::function<void(int64_t)>& fn) {
    std::lock_guard<std::mutex> run(runMu_);  // one message at a time through the pool
    const int helpers = static_cast<int>(std::min<int64_t>(wanted_ - 1, parts - 1));
    if (helpers <= 0) {
      for (int64_t p = 0; p < parts; ++p) fn(p);
      return;
    }
    while (static_cast<int>(threads_.size()) < helpers)
      threads_.emplace_back([this, k = threads_.size()] { loop(k); });
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      parts_ = parts;
      next_ = 0;
      active_ = helpers;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return busy_ == 0 && joined_ == active_; });
    joined_ = 0;
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Takes parts until none are left; the first exception is kept, the rest of the parts still run
  // (their writes go to the caller's buffers, which outlive the call).
  void work() {
    for (int64_t p; (p = next_.fetch_add(1)) < parts_;) {
      try {
        (*fn_)(p);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  void loop(size_t k) {
    uint64_t seen = 0;
    for (;;) {
      spinFor(seen);
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock,
                   [&] { return stop_ || (generation_ != seen && static_cast<int>(k) < active_); });
        if (stop_) return;
        seen = generation_;
        ++busy_;
      }
      work();
      {
        std::lock_guard<std::mutex> lock(mu_);
        --busy_;
        ++joined_;
      }
      done_.notify_all();
    }
  }

  // Up to kSpin for a generation after `seen` (or a stop); the wait under the lock decides.
  void spinFor(uint64_t seen) const {
    constexpr auto kSpin = std::chrono::microseconds(200);
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0; generation_.load(std::memory_order_acquire) == seen && !stopping_.load(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#else
      std::this_thread::yield();
#endif
      if ((i & 63) == 63 && std::chrono::steady_clock::now() >= until) return;
    }
  }

  std::mutex runMu_, mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  std::atomic<int64_t> next_{0};
  int64_t parts_ = 0;
  int wanted_ = 1, active_ = 0, busy_ = 0, joined_ = 0;
  std::atomic<uint64_t> generation_{0};  // written under mu_; read by spinning helpers
  bool stop_ = false;
  std::atomic<bool> stopping_{false};
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p;
  return p;
}

std::atomic<int64_t> grain{int64_t{1} << 18};

int64_t perPart(int64_t align) { return std::max<int64_t>(align, grain.load() / align * align); }

}  // namespace

void setCodecThreads(int threads) {
  SP_REQUIRE(threads >= 1 && threads <= 256, "compression.threads = " + std::to_string(threads) +
                                                 ": expected 1..256 threads per stage");
  pool().setThreads(threads);
}

int codecThreads() { return pool().threads(); }

void setParallelGrain(int64_t values) {
  SP_REQUIRE(values >= 1, "parallel grain " + std::to_string(values) + ": expected >= 1 value");
  grain.store(values);
}

int64_t parallelGrain() { return grain.load(); }

int64_t parallelParts(int64_t n, int64_t align) {
  const int64_t per = perPart(align);
  return n <= 0 ? 1 : (n + per - 1) / per;
}

void partRange(int64_t n, int64_t align, int64_t part, int64_t* lo, int64_t* hi) {
  const int64_t per = perPart(align);
  *lo = std::min(n, part * per);
  *hi = std::min(n, *lo + per);
}

// Set on the pool's threads and on a caller while it runs parts: a part that splits its own work
// again runs that split on its own thread (the pool serves one message at a time).
static thread_local bool insidePart = false;

void parallelFor(int64_t parts, const std::function<void(int64_t)>& fn) {
  if (parts <= 1 || codecThreads() == 1 || insidePart) {
    for (int64_t p = 0; p < parts; ++p) fn(p);
    return;
  }
  pool().run(parts, [&](int64_t p) {
    struct Mark {
      bool was = insidePart;
      Mark() { insidePart = true; }
      ~Mark() { insidePart = was; }
    } mark;
    fn(p);
  });
}

void parallelRanges(int64_t n, int64_t align,
                    const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  parallelFor(parallelParts(n, align), [&](int64_t part) {
    int64_t lo, hi;
    partRange(n, align, part, &lo, &hi);
    fn(lo, hi, part);
  });
}

namespace {
// The calling thread's part buffers, deepest last; each kept at its largest size.
struct PartBuffers {
  std::vector<std::vector<float, UninitAllocator<float>>> store;
  size_t depth = 0;
};
thread_local PartBuffers partBuffers;
}  // namespace

PartBuffer::PartBuffer(size_t n) {
  PartBuffers& b = partBuffers;
  if (b.store.size() <= b.depth) b.store.resize(b.depth + 1);
  auto& v = b.store[b.depth];
  if (v.size() < n) v.resize(n);  // may throw: the depth moves only once the buffer is there
  p_ = v.data();
  ++b.depth;
}

PartBuffer::~PartBuffer() { --partBuffers.depth; }

}  // namespace slowpipe::compression
