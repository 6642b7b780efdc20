// The CUDA kernels (compression/cuda/device_kernels.h) against the CPU kernels, bit for bit, on a
// device. Without a device every test skips and says why (these machines compile CUDA, they have
// no GPU; the device tool runs this suite where one is lent).
#include "compression/cuda/device_kernels.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "compression/bitpack.h"
#include "compression/half.h"
#include "compression/kernels.h"

namespace slowpipe::compression {
namespace {

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::deviceAvailable(&why)) GTEST_SKIP() << why << " (CUDA kernels compiled, not run)";
  }
  template <typename T>
  T* toDevice(const std::vector<T>& v) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, v.size() * sizeof(T))), cudaSuccess);
    cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  T* deviceBuffer(size_t n) {
    return toDevice(std::vector<T>(n));
  }
  template <typename T>
  std::vector<T> toHost(const T* p, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
  void TearDown() override {
    for (void* p : owned_) cudaFree(p);
  }
  std::vector<void*> owned_;
};

std::vector<float> inputs(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  x[0] = 0.5f;
  x[1] = -2.5f;
  x[2] = 65520.0f;
  x[3] = 1e-40f;
  return x;
}

TEST_F(CudaKernelsTest, QuantizersEqualTheCpu) {
  const int64_t n = (1 << 20) + 17;
  const std::vector<float> x = inputs(n, 1);
  std::vector<float> m(n), inv(n), step(n), d(n), s(n);
  for (int64_t i = 0; i < n; ++i) {
    m[i] = 0.5f + static_cast<float>(i % 13);
    inv[i] = 7.0f / (2 * m[i]);
    step[i] = 1 / inv[i];
    d[i] = m[i] + 1e-6f;
    s[i] = m[i];
  }
  const Kernels& k = kernels();
  const float *dx = toDevice(x), *dm = toDevice(m), *dinv = toDevice(inv), *dstep = toDevice(step),
              *dd = toDevice(d), *ds = toDevice(s);
  uint8_t* dcodes = deviceBuffer<uint8_t>(n);
  float* dout = deviceBuffer<float>(n);
  std::vector<uint8_t> want(n);
  std::vector<float> wantOut(n);

  k.quantVec(x.data(), m.data(), inv.data(), n, 7.0f, want.data());
  cuda::quantVec(dx, dm, dinv, n, 7.0f, dcodes);
  ASSERT_EQ(toHost(dcodes, n), want);
  k.dequantVec(want.data(), m.data(), step.data(), n, wantOut.data());
  cuda::dequantVec(dcodes, dm, dstep, n, dout);
  ASSERT_EQ(toHost(dout, n), wantOut);
  k.stochVec(x.data(), m.data(), inv.data(), n, 8.0f, 77u, 0x9e3779b9u, want.data());
  cuda::stochVec(dx, dm, dinv, n, 8.0f, 77u, 0x9e3779b9u, dcodes);
  ASSERT_EQ(toHost(dcodes, n), want);
  for (int bits : {2, 4, 8}) {
    const float mult = static_cast<float>(1 << (bits - 1));
    k.fixVec(x.data(), d.data(), n, mult, -mult, mult - 1, want.data());
    cuda::fixVec(dx, dd, n, mult, -mult, mult - 1, dcodes);
    ASSERT_EQ(toHost(dcodes, n), want) << bits;
    k.fixDequantVec(want.data(), s.data(), n, -mult, 1 / mult, wantOut.data());
    cuda::fixDequantVec(dcodes, ds, n, -mult, 1 / mult, dout);
    ASSERT_EQ(toHost(dout, n), wantOut) << bits;
    std::vector<uint8_t> packed(packedBytes(n, bits));
    packBits(want.data(), n, bits, packed.data());
    uint8_t* dpacked = deviceBuffer<uint8_t>(packed.size());
    cuda::packBits(dcodes, n, bits, dpacked);
    ASSERT_EQ(toHost(dpacked, packed.size()), packed) << bits;
    cuda::unpackBits(dpacked, n, bits, dcodes);
    ASSERT_EQ(toHost(dcodes, n), want) << bits;
  }
}

TEST_F(CudaKernelsTest, FusedDeltaAndErrorFeedbackStepsEqualTheCpu) {
  const int64_t n = (1 << 20) + 5;
  const std::vector<float> x = inputs(n, 3), m0 = inputs(n, 4);
  std::vector<float> mx(n), inv(n), step(n), d(n), s(n);
  for (int64_t i = 0; i < n; ++i) {
    mx[i] = 1.0f + static_cast<float>(i % 7);
    inv[i] = 3.0f / (2 * mx[i]);
    step[i] = 1 / inv[i];
    d[i] = mx[i] + 1e-6f;
    s[i] = mx[i];
  }
  std::vector<float> rd(n);
  for (int64_t i = 0; i < n; ++i) rd[i] = 1.0f / d[i];
  const Kernels& k = kernels();
  const float *dx = toDevice(x), *dmx = toDevice(mx), *dinv = toDevice(inv),
              *dstep = toDevice(step), *dd = toDevice(d), *ds = toDevice(s);
  uint8_t* dcodes = deviceBuffer<uint8_t>(n);
  std::vector<uint8_t> codes(n);
  std::vector<float> m = m0;
  float* dm = toDevice(m0);
  k.deltaQuantUpdate(x.data(), m.data(), mx.data(), inv.data(), step.data(), n, 3.0f, codes.data());
  cuda::deltaQuantUpdate(dx, dm, dmx, dinv, dstep, n, 3.0f, dcodes);
  ASSERT_EQ(toHost(dcodes, n), codes);
  ASSERT_EQ(toHost(dm, n), m);
  m = m0;
  dm = toDevice(m0);
  k.deltaFixUpdate(x.data(), m.data(), d.data(), rd.data(), s.data(), n, 2.0f, -2.0f, 1.0f, 0.5f,
                   codes.data());
  cuda::deltaFixUpdate(dx, dm, dd, ds, n, 2.0f, -2.0f, 1.0f, 0.5f, dcodes);
  ASSERT_EQ(toHost(dcodes, n), codes);
  ASSERT_EQ(toHost(dm, n), m);
  m = m0;
  dm = toDevice(m0);
  k.efQuantUpdate(x.data(), m.data(), mx.data(), inv.data(), step.data(), n, 3.0f, codes.data());
  cuda::efQuantUpdate(dx, dm, dmx, dinv, dstep, n, 3.0f, dcodes);
  ASSERT_EQ(toHost(dcodes, n), codes);
  ASSERT_EQ(toHost(dm, n), m);
  m = m0;
  dm = toDevice(m0);
  k.efFixUpdate(x.data(), m.data(), d.data(), rd.data(), s.data(), n, 2.0f, -2.0f, 1.0f, 0.5f,
                codes.data());
  cuda::efFixUpdate(dx, dm, dd, ds, n, 2.0f, -2.0f, 1.0f, 0.5f, dcodes);
  ASSERT_EQ(toHost(dcodes, n), codes);
  ASSERT_EQ(toHost(dm, n), m);
  // fp16 buffers: the CPU's scalar composition (the same bits as its AVX2 kernel, element_test).
  std::vector<uint16_t> mh(n);
  for (int64_t i = 0; i < n; ++i) mh[i] = floatToHalf(m0[i]);
  uint16_t* dmh = toDevice(mh);
  cuda::deltaFixUpdateH(dx, dmh, dd, ds, n, 2.0f, -2.0f, 1.0f, 0.5f, dcodes);
  const std::vector<uint8_t> got = toHost(dcodes, n);
  const std::vector<uint16_t> gotH = toHost(dmh, n);
  for (int64_t i = 0; i < n; ++i) {
    float mi = halfToFloat(mh[i]);
    const float r = std::rint((x[i] - mi) / d[i] * 2.0f);
    const float q = std::min(1.0f, std::max(-2.0f, r));
    const uint8_t c = static_cast<uint8_t>(static_cast<int32_t>(q + 2.0f));
    ASSERT_EQ(got[i], c) << i;
    ASSERT_EQ(gotH[i], floatToHalf(mi + ((static_cast<float>(c) - 2.0f) * 0.5f) * s[i])) << i;
  }
}

TEST_F(CudaKernelsTest, HalfBf16AndScalesEqualTheCpu) {
  const int64_t rows = 333, channels = 1601, n = rows * channels;
  const std::vector<float> x = inputs(n, 2);
  const float* dx = toDevice(x);
  uint16_t* dh = deviceBuffer<uint16_t>(n);
  cuda::toHalf(dx, n, dh);
  const std::vector<uint16_t> h = toHost(dh, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h[i], floatToHalf(x[i])) << i;
  float* dback = deviceBuffer<float>(n);
  cuda::fromHalf(dh, n, dback);
  const std::vector<float> back = toHost(dback, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], halfToFloat(h[i])) << i;
  cuda::toBf16(dx, n, dh);
  const std::vector<uint16_t> b = toHost(dh, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(b[i], floatToBf16(x[i])) << i;
  std::vector<float> want(channels, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    kernels().absMaxAccum(x.data() + r * channels, channels, want.data());
  float* dmax = deviceBuffer<float>(channels);
  cuda::channelAbsMax(dx, rows, channels, dmax);
  ASSERT_EQ(toHost(dmax, channels), want);
  const int64_t group = 512, groups = (n + group - 1) / group;
  std::vector<float> gwant(groups);
  for (int64_t g = 0; g < groups; ++g)
    gwant[g] = kernels().absMax(x.data() + g * group, std::min(group, n - g * group));
  float* dg = deviceBuffer<float>(groups);
  cuda::groupAbsMax(dx, n, group, dg);
  ASSERT_EQ(toHost(dg, groups), gwant);
}

}  // namespace
}  // namespace slowpipe::compression
