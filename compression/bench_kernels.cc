// Hand-written kernels against their Highway forms (bench_kernels.h).
#include "compression/bench_kernels.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "compression/bitpack.h"
#include "compression/half.h"
#include "compression/kernels.h"
#include "compression/kernels_hwy.h"
#include "compression/timing.h"

namespace slowpipe::compression {
namespace {

using nlohmann::json;

// kAbsMax / kQuant: the channel quantizer's passes; kDeltaAbsMaxH / kDeltaUpdateH: AC-SGD's on an
// fp16 buffer (the acsgd codec's default store).
enum class Kernel { kAbsMax, kQuant, kDeltaAbsMaxH, kDeltaUpdateH };

struct Case {
  Kernel kernel;
  int bits;  // the packing kernels: 1, 2, 4, 8; 0 for the max passes
};

const char* nameOf(Kernel k) {
  switch (k) {
    case Kernel::kAbsMax:
      return "absMaxAccum";
    case Kernel::kQuant:
      return "quantVecPacked";
    case Kernel::kDeltaAbsMaxH:
      return "deltaAbsMaxH";
    case Kernel::kDeltaUpdateH:
      return "deltaQuantUpdateHPacked";
  }
  return "";
}

struct Impl {
  std::string impl, target;
};

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = v.size();
  return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

json rangeOf(const std::vector<double>& v) {
  return {*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

// One kernel over the whole buffer, row by row, by one implementation; its output to `out` (the
// maxima or the packed codes; appendBuffer adds the update's fp16 buffer after it). AC-SGD's buffer
// m is fp16 of 0.9 x (the last sighting's activation, near this one); the update changes it in
// place, and reset() restores it before a run whose output is compared.
class Runner {
 public:
  Runner(const std::vector<float>& x, int64_t cols)
      : x_(x), cols_(cols), m_(cols), inv_(cols), mx_(cols), dinv_(cols), step_(cols) {
    kernels().absMaxAccum(x.data(), cols, m_.data());  // scales of the first row: real codes
    for (int64_t c = 0; c < cols; ++c) m_[c] = std::max(m_[c], 1.0f);
    std::vector<float> prev(x.size());
    for (size_t i = 0; i < x.size(); ++i) prev[i] = 0.9f * x[i];
    mh0_.resize(2 * x.size());
    floatToHalfBytes(prev.data(), x.size(), mh0_.data());
    mh_ = mh0_;
    for (int64_t c = 0; c < cols; ++c) mx_[c] = std::max(0.1f * m_[c], 0.1f);  // max |x - m|
  }
  void reset() { std::copy(mh0_.begin(), mh0_.end(), mh_.begin()); }
  // After a run, for the comparison (not timed): the update's buffer appended to its codes.
  void appendBuffer(const Case& c, std::vector<uint8_t>& out) const {
    if (c.kernel == Kernel::kDeltaUpdateH) out.insert(out.end(), mh_.begin(), mh_.end());
  }
  void run(const Case& c, const Impl& impl, std::vector<uint8_t>& out) {
    const bool hand = impl.impl == "hand";
    switch (c.kernel) {
      case Kernel::kAbsMax:
      case Kernel::kDeltaAbsMaxH:
        return maxima(c.kernel, hand, out);
      case Kernel::kQuant:
        return quantize(c.bits, hand, out);
      case Kernel::kDeltaUpdateH:
        return update(c.bits, hand, out);
    }
  }

 private:
  void maxima(Kernel k, bool hand, std::vector<uint8_t>& out) {
    const int64_t n = static_cast<int64_t>(x_.size());
    std::vector<float> acc(cols_, 0.0f);
    for (int64_t i = 0; i < n; i += cols_) {
      const float* x = x_.data() + i;
      if (k == Kernel::kAbsMax) {
        hand ? kernels().absMaxAccum(x, cols_, acc.data())
             : hwy_kernels::absMaxAccum(x, cols_, acc.data());
        continue;
      }
      const uint8_t* mh = mh_.data() + 2 * i;
      const int64_t done = hand ? 0 : hwy_kernels::deltaAbsMaxH(x, mh, cols_, acc.data());
      if (done < cols_) kernels().deltaAbsMaxH(x + done, mh + 2 * done, cols_ - done, acc.data());
    }
    out.assign(reinterpret_cast<const uint8_t*>(acc.data()),
               reinterpret_cast<const uint8_t*>(acc.data() + cols_));
  }
  void quantize(int bits, bool hand, std::vector<uint8_t>& out) {
    const int64_t n = static_cast<int64_t>(x_.size());
    const float top = static_cast<float>(1 << bits) - 0.5f;
    for (int64_t k = 0; k < cols_; ++k)
      inv_[k] = static_cast<float>((1 << bits) - 1) / (2.0f * m_[k]);
    out.resize(packedBytes(static_cast<size_t>(n), bits));
    codes_.resize(static_cast<size_t>(cols_));
    const auto packed = kernels().quantVecPacked;
    for (int64_t i = 0; i < n; i += cols_) {
      uint8_t* o = out.data() + i / 8 * bits;
      const int64_t done = !hand ? hwy_kernels::quantVecPacked(x_.data() + i, m_.data(),
                                                               inv_.data(), cols_, top, bits, o)
                           : packed
                               ? packed(x_.data() + i, m_.data(), inv_.data(), cols_, top, bits, o)
                               : 0;
      if (done < cols_) {  // what the kernel left: quantVec and packBits, as QuantStream does
        kernels().quantVec(x_.data() + i + done, m_.data() + done, inv_.data() + done, cols_ - done,
                           top, codes_.data());
        packBits(codes_.data(), static_cast<size_t>(cols_ - done), bits, o + done / 8 * bits);
      }
    }
  }
  // The packed codes (the buffer updated in place).
  void update(int bits, bool hand, std::vector<uint8_t>& out) {
    const int64_t n = static_cast<int64_t>(x_.size());
    const float top = static_cast<float>(1 << bits) - 0.5f;
    for (int64_t k = 0; k < cols_; ++k) {
      step_[k] = 2.0f * mx_[k] / static_cast<float>((1 << bits) - 1);
      dinv_[k] = 1.0f / step_[k];
    }
    const size_t codeBytes = packedBytes(static_cast<size_t>(n), bits);
    out.resize(codeBytes);
    codes_.resize(static_cast<size_t>(cols_));
    const Kernels& k = kernels();
    for (int64_t i = 0; i < n; i += cols_) {
      const float* x = x_.data() + i;
      uint8_t* mh = mh_.data() + 2 * i;
      uint8_t* o = out.data() + i / 8 * bits;
      const int64_t done =
          !hand ? hwy_kernels::deltaQuantUpdateHPacked(x, mh, mx_.data(), dinv_.data(),
                                                       step_.data(), cols_, top, bits, o)
          : k.deltaQuantUpdateHPacked ? k.deltaQuantUpdateHPacked(x, mh, mx_.data(), dinv_.data(),
                                                                  step_.data(), cols_, top, bits, o)
                                      : 0;
      if (done < cols_) {  // as QuantStream::fusedUpdatePacked does
        k.deltaQuantUpdateH(x + done, mh + 2 * done, mx_.data() + done, dinv_.data() + done,
                            step_.data() + done, cols_ - done, top, codes_.data());
        packBits(codes_.data(), static_cast<size_t>(cols_ - done), bits, o + done / 8 * bits);
      }
    }
  }

  const std::vector<float>& x_;
  int64_t cols_;
  std::vector<float> m_, inv_;           // the channel quantizer's max |x| and 1 / step
  std::vector<float> mx_, dinv_, step_;  // AC-SGD's: max |x - m|, 1 / step, step
  std::vector<uint8_t> mh0_, mh_, codes_;
};

// Does this implementation do the case? The hand-written AC-SGD kernels exist in the AVX2 build
// only; a Highway target that does none of a probe's 16 values (vectors under 8 floats, no
// hardware fp16) has no row for it.
bool doesCase(const Case& c, const Impl& impl) {
  const bool half = c.kernel == Kernel::kDeltaAbsMaxH || c.kernel == Kernel::kDeltaUpdateH;
  if (half && !kernels().deltaAbsMaxH) return false;
  if (impl.impl == "hand" || c.kernel == Kernel::kAbsMax) return true;
  hwy_kernels::useTarget(impl.target);
  const std::vector<float> ones(16, 1.0f);
  std::vector<uint8_t> mh(32, 0), probe(32);
  std::vector<float> acc(16, 0.0f);
  int64_t done = 0;
  if (c.kernel == Kernel::kQuant)
    done = hwy_kernels::quantVecPacked(ones.data(), ones.data(), ones.data(), 16, 1.5f, c.bits,
                                       probe.data());
  else if (c.kernel == Kernel::kDeltaAbsMaxH)
    done = hwy_kernels::deltaAbsMaxH(ones.data(), mh.data(), 16, acc.data());
  else
    done = hwy_kernels::deltaQuantUpdateHPacked(ones.data(), mh.data(), ones.data(), ones.data(),
                                                ones.data(), 16, 1.5f, c.bits, probe.data());
  hwy_kernels::useTarget("");
  return done > 0;
}

std::vector<std::vector<size_t>> implsPerCase(const std::vector<Case>& cases,
                                              const std::vector<Impl>& impls) {
  std::vector<std::vector<size_t>> runs(cases.size());
  for (size_t c = 0; c < cases.size(); ++c)
    for (size_t k = 0; k < impls.size(); ++k)
      if (doesCase(cases[c], impls[k])) runs[c].push_back(k);
  return runs;
}

// One implementation's row: its rounds' GB/s, and each round's ratio to memcpy and to the
// hand-written kernel in that round.
json rowOf(const Case& c, const Impl& impl, const std::vector<double>& gbps,
           const std::vector<double>& hand, const std::vector<double>& memcpyGBps, bool same) {
  std::vector<double> vsMemcpy, vsHand;
  for (size_t r = 0; r < gbps.size(); ++r) {
    vsMemcpy.push_back(gbps[r] / memcpyGBps[r]);
    vsHand.push_back(gbps[r] / hand[r]);
  }
  return {{"kernel", nameOf(c.kernel)},
          {"bits", c.bits == 0 ? json(nullptr) : json(c.bits)},
          {"impl", impl.impl},
          {"target", impl.target},
          {"GBps", medianOf(gbps)},
          {"GBps_range", rangeOf(gbps)},
          {"vs_memcpy", medianOf(vsMemcpy)},
          {"vs_memcpy_range", rangeOf(vsMemcpy)},
          {"vs_hand", medianOf(vsHand)},
          {"vs_hand_range", rangeOf(vsHand)},
          {"same_output", same}};
}

void checkOptions(const KernelBenchOptions& o) {
  if (o.sizeKiB < 4)
    throw std::invalid_argument("--size-kib " + std::to_string(o.sizeKiB) + ": expected >= 4");
  if (o.cols < 16 || o.cols % 16 != 0 || (o.sizeKiB * 256) % o.cols != 0)
    throw std::invalid_argument("--cols " + std::to_string(o.cols) +
                                ": expected a positive multiple of 16 that divides the " +
                                std::to_string(o.sizeKiB * 256) + " values");
  if (o.rounds < 1)
    throw std::invalid_argument("--rounds " + std::to_string(o.rounds) + ": expected >= 1");
}

}  // namespace

json benchKernels(const KernelBenchOptions& o) {
  checkOptions(o);
  const int64_t n = o.sizeKiB * 256;
  std::vector<float> x(static_cast<size_t>(n)), dst(static_cast<size_t>(n), 1.0f);
  uint32_t s = 12345;
  for (auto& v : x) {  // an LCG's spread in [-2, 2): every code level is used
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>(s)) * 0x1.0p-30f;
  }
  std::vector<Case> cases = {{Kernel::kAbsMax, 0}, {Kernel::kDeltaAbsMaxH, 0}};
  for (const int bits : {1, 2, 4, 8}) cases.push_back({Kernel::kQuant, bits});
  for (const int bits : {1, 2, 4, 8}) cases.push_back({Kernel::kDeltaUpdateH, bits});
  std::vector<Impl> impls = {{"hand", cpuPathName()}};
  for (const std::string& t : hwy_kernels::targets())
    if (t != "SCALAR") impls.push_back({"highway", t});
  const std::vector<std::vector<size_t>> runs = implsPerCase(cases, impls);
  Runner runner(x, o.cols);
  std::vector<double> memcpyGBps;
  // gbps[case][impl][round]
  std::vector<std::vector<std::vector<double>>> gbps(
      cases.size(), std::vector<std::vector<double>>(impls.size()));
  std::vector<std::vector<bool>> same(cases.size(), std::vector<bool>(impls.size(), true));
  const double bytes = 4.0 * static_cast<double>(n);
  std::vector<uint8_t> handOut, out;
  for (int round = 0; round < o.rounds; ++round) {
    if (o.onRound) o.onRound(round);
    memcpyGBps.push_back(
        bytes / medianSeconds([&] { std::memcpy(dst.data(), x.data(), 4 * x.size()); }) / 1e9);
    for (size_t c = 0; c < cases.size(); ++c)
      for (const size_t k : runs[c]) {
        const bool hwy = impls[k].impl == "highway";
        if (hwy) hwy_kernels::useTarget(impls[k].target);
        gbps[c][k].push_back(bytes / medianSeconds([&] { runner.run(cases[c], impls[k], out); }) /
                             1e9);
        runner.reset();  // the output compared comes from the same buffer for every kernel
        runner.run(cases[c], impls[k], out);
        runner.appendBuffer(cases[c], out);
        if (hwy) hwy_kernels::useTarget("");
        if (k == 0) handOut = out;
        same[c][k] = same[c][k] && out == handOut;
      }
  }
  json results = json::array();
  for (size_t c = 0; c < cases.size(); ++c)
    for (const size_t k : runs[c])
      results.push_back(rowOf(cases[c], impls[k], gbps[c][k], gbps[c][0], memcpyGBps, same[c][k]));
  return {{"benchmark", "kernels"},
          {"size_bytes", static_cast<int64_t>(bytes)},
          {"cols", o.cols},
          {"rounds", o.rounds},
          {"cpu_path", cpuPathName()},
          {"highway", hwy_kernels::built()},
          {"highway_targets", hwy_kernels::targets()},
          {"memcpy_GBps", medianOf(memcpyGBps)},
          {"memcpy_GBps_range", rangeOf(memcpyGBps)},
          {"unit", "GB/s of fp32 input (1e9 B/s), medians over rounds"},
          {"results", results}};
}

}  // namespace slowpipe::compression
