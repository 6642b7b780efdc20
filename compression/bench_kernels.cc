// Hand-written kernels against their Highway forms (bench_kernels.h).
#include "compression/bench_kernels.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "compression/bitpack.h"
#include "compression/kernels.h"
#include "compression/kernels_hwy.h"
#include "compression/timing.h"

namespace slowpipe::compression {
namespace {

using nlohmann::json;

struct Case {
  std::string kernel;
  int bits;  // 0: absMaxAccum
};

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

// One kernel over the whole buffer, row by row, by one implementation; its output to `out`.
class Runner {
 public:
  Runner(const std::vector<float>& x, int64_t cols) : x_(x), cols_(cols), m_(cols), inv_(cols) {
    kernels().absMaxAccum(x.data(), cols, m_.data());  // scales of the first row: real codes
    for (int64_t c = 0; c < cols; ++c) m_[c] = std::max(m_[c], 1.0f);
  }
  void run(const Case& c, const Impl& impl, std::vector<uint8_t>& out) {
    const int64_t n = static_cast<int64_t>(x_.size());
    const bool hand = impl.impl == "hand";
    if (c.bits == 0) {
      std::vector<float> acc(cols_, 0.0f);
      for (int64_t i = 0; i < n; i += cols_)
        hand ? kernels().absMaxAccum(x_.data() + i, cols_, acc.data())
             : hwy_kernels::absMaxAccum(x_.data() + i, cols_, acc.data());
      out.assign(reinterpret_cast<const uint8_t*>(acc.data()),
                 reinterpret_cast<const uint8_t*>(acc.data() + cols_));
      return;
    }
    const float top = static_cast<float>(1 << c.bits) - 0.5f;
    for (int64_t k = 0; k < cols_; ++k)
      inv_[k] = static_cast<float>((1 << c.bits) - 1) / (2.0f * m_[k]);
    out.resize(packedBytes(static_cast<size_t>(n), c.bits));
    codes_.resize(static_cast<size_t>(cols_));
    const auto packed = kernels().quantVecPacked;
    for (int64_t i = 0; i < n; i += cols_) {
      uint8_t* o = out.data() + i / 8 * c.bits;
      const int64_t done =
          !hand    ? hwy_kernels::quantVecPacked(x_.data() + i, m_.data(), inv_.data(), cols_, top,
                                                 c.bits, o)
          : packed ? packed(x_.data() + i, m_.data(), inv_.data(), cols_, top, c.bits, o)
                   : 0;
      if (done < cols_) {  // what the kernel left: quantVec and packBits, as QuantStream does
        kernels().quantVec(x_.data() + i + done, m_.data() + done, inv_.data() + done, cols_ - done,
                           top, codes_.data());
        packBits(codes_.data(), static_cast<size_t>(cols_ - done), c.bits, o + done / 8 * c.bits);
      }
    }
  }

 private:
  const std::vector<float>& x_;
  int64_t cols_;
  std::vector<float> m_, inv_;
  std::vector<uint8_t> codes_;
};

// Which implementations run each case: a Highway target whose vectors are under 8 floats packs
// nothing (quantVecPacked returns 0 there), so it has no quantVecPacked rows.
std::vector<std::vector<size_t>> implsPerCase(const std::vector<Case>& cases,
                                              const std::vector<Impl>& impls) {
  std::vector<std::vector<size_t>> runs(cases.size());
  for (size_t c = 0; c < cases.size(); ++c)
    for (size_t k = 0; k < impls.size(); ++k) {
      bool packs = true;
      if (impls[k].impl == "highway" && cases[c].bits != 0) {
        hwy_kernels::useTarget(impls[k].target);
        const std::vector<float> ones(16, 1.0f);
        uint8_t probe[16];
        packs = hwy_kernels::quantVecPacked(ones.data(), ones.data(), ones.data(), 16, 1.5f,
                                            cases[c].bits, probe) > 0;
        hwy_kernels::useTarget("");
      }
      if (packs) runs[c].push_back(k);
    }
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
  return {{"kernel", c.kernel},
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
  const std::vector<Case> cases = {{"absMaxAccum", 0},
                                   {"quantVecPacked", 1},
                                   {"quantVecPacked", 2},
                                   {"quantVecPacked", 4},
                                   {"quantVecPacked", 8}};
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
