// Run-time choice of the kernel build (kernels.h).
#include "compression/kernels.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "compression/error.h"

namespace slowpipe::compression {

#if !defined(SLOWPIPE_KERNELS_AVX2)
const Kernels* avx2Kernels() { return nullptr; }
bool setAvx512(bool) { return false; }
bool randkKeepOfWidth(int, uint64_t, uint64_t, int64_t, int64_t, uint8_t*, int64_t*) {
  return false;
}
#else
namespace kernels_avx2 {
extern std::atomic<bool> allow512;
bool cpuHas512DQ();
int64_t randkKeepOfWidth(int bits, uint64_t base, uint64_t threshold, int64_t lo, int64_t n,
                         uint8_t* keep);
}  // namespace kernels_avx2

bool setAvx512(bool allowed) { return kernels_avx2::allow512.exchange(allowed); }

bool randkKeepOfWidth(int bits, uint64_t base, uint64_t threshold, int64_t lo, int64_t n,
                      uint8_t* keep, int64_t* count) {
  if (!cpuPathAvailable(CpuPath::kAvx2) || (bits != 256 && bits != 512) ||
      (bits == 512 && !kernels_avx2::cpuHas512DQ()))
    return false;
  *count = kernels_avx2::randkKeepOfWidth(bits, base, threshold, lo, n, keep);
  return true;
}
#endif

namespace {

const Kernels* tableOf(CpuPath path) {
  return path == CpuPath::kAvx2 ? avx2Kernels() : baselineKernels();
}

const Kernels* initial() {
  const char* forced = std::getenv("SLOWPIPE_CPU");
  if (forced && *forced) {
    const std::string f = forced;
    SP_REQUIRE(f == "baseline" || f == "avx2", "SLOWPIPE_CPU=" + f + ": expected baseline or avx2");
    const CpuPath p = f == "avx2" ? CpuPath::kAvx2 : CpuPath::kBaseline;
    SP_REQUIRE(cpuPathAvailable(p),
               "SLOWPIPE_CPU=" + f + ": this build or this CPU has no " + f + " path");
    return tableOf(p);
  }
  return cpuPathAvailable(CpuPath::kAvx2) ? avx2Kernels() : baselineKernels();
}

std::atomic<const Kernels*>& active() {
  static std::atomic<const Kernels*> a{initial()};
  return a;
}

}  // namespace

bool cpuPathAvailable(CpuPath path) {
  if (path == CpuPath::kBaseline) return true;
  if (path != CpuPath::kAvx2) return false;
#if defined(__x86_64__)
  return avx2Kernels() != nullptr && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

void setCpuPath(CpuPath path) {
  SP_REQUIRE(cpuPathAvailable(path), std::string("cpu path ") +
                                         (path == CpuPath::kAvx2 ? "avx2" : "baseline") +
                                         " is not available in this build or on this CPU");
  active().store(tableOf(path));
}

const Kernels& kernels() { return *active().load(std::memory_order_relaxed); }

const char* cpuPathName() { return kernels().name; }

}  // namespace slowpipe::compression
