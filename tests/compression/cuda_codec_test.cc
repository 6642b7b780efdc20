// The device codecs (compression/cuda/device_codec.h) against the host codecs of the same spec, on
// a device: over a sequence of messages (epochs, micro-batches, overlapping example ids) the device
// encoder writes the host encoder's payload bytes, the device decoder's values equal the host
// decoder's bit for bit, and all four ends hold equal state digests. Without a device every test
// skips and says why (these machines compile CUDA; the device tool runs this where one is lent).
#include "compression/cuda/device_codec.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "compression/error.h"

namespace slowpipe::compression {
namespace {

struct DeviceMemory {
  explicit DeviceMemory(size_t bytes) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 1)), cudaSuccess);
  }
  ~DeviceMemory() { cudaFree(p); }
  float* f() const { return static_cast<float*>(p); }
  void* p = nullptr;
};

std::vector<float> activations(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  for (int64_t i = 0; i < n; i += 97) x[i] *= 20.0f;          // outliers
  for (int64_t i = 5; i + 1 < n; i += 211) x[i + 1] = -x[i];  // equal magnitudes (topk ties)
  for (int64_t i = 3; i < n; i += 389) x[i] = 0.0f;
  return x;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

class CudaCodecTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::deviceAvailable(&why)) GTEST_SKIP() << why << " (device codecs compiled, not run)";
  }
  void checkSequence(cuda::BufferPlace place) {
    const std::string spec = GetParam();
    auto hostEnc = makeCodec(spec), hostDec = makeCodec(spec);
    auto devEnc = cuda::DeviceCodec::make(spec, place),
         devDec = cuda::DeviceCodec::make(spec, place);
    const Shape shape{4, 33, 96};  // odd sequence length; rows = examples
    const int64_t n = numelOf(shape);
    DeviceMemory dx(4 * n), dout(4 * n);
    for (int epoch = 0; epoch < 3; ++epoch)
      for (int mb = 0; mb < 3; ++mb) {
        CodecContext ctx;
        ctx.epoch = epoch;
        ctx.step = epoch * 3 + mb;
        ctx.microBatch = mb;
        ctx.key = "fwd/mb" + std::to_string(mb);
        for (int r = 0; r < 4; ++r)
          ctx.exampleIds.push_back((mb * 3 + r * 5) % 11);  // overlaps across mbs
        const std::vector<float> x = activations(n, 100 * epoch + mb);
        ASSERT_EQ(cudaMemcpy(dx.p, x.data(), 4 * n, cudaMemcpyHostToDevice), cudaSuccess);
        Bytes want, got;
        hostEnc->encode(x.data(), shape, ctx, want);
        devEnc->encode(dx.f(), shape, ctx, got);
        ASSERT_EQ(got, want) << spec << " epoch " << epoch << " mb " << mb;
        std::vector<float> hostOut(n), devOut(n);
        hostDec->decode(want.data(), want.size(), shape, ctx, hostOut.data());
        devDec->decode(want.data(), want.size(), shape, ctx, dout.f());
        ASSERT_EQ(cudaMemcpy(devOut.data(), dout.p, 4 * n, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_TRUE(sameBits(devOut, hostOut)) << spec << " epoch " << epoch << " mb " << mb;
        ASSERT_EQ(devEnc->stateDigest(), hostEnc->stateDigest()) << spec;
        ASSERT_EQ(devDec->stateDigest(), hostDec->stateDigest()) << spec;
        // A truncated payload is refused, naming the codec, and leaves the state as it was.
        const uint64_t before = devDec->stateDigest();
        if (!want.empty()) {
          EXPECT_THROW(devDec->decode(want.data(), want.size() - 1, shape, ctx, dout.f()),
                       CodecError)
              << spec;
          EXPECT_EQ(devDec->stateDigest(), before) << spec;
        }
      }
  }
};

TEST_P(CudaCodecTest, PayloadsValuesAndStateEqualTheHostCodec) {
  checkSequence(cuda::BufferPlace::kDevice);
}

TEST_P(CudaCodecTest, PinnedHostBuffersGiveTheSameBytes) {
  if (GetParam().rfind("acsgd", 0) != 0) GTEST_SKIP() << "stateless: no buffers to place";
  checkSequence(cuda::BufferPlace::kPinnedHost);
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, CudaCodecTest,
    ::testing::Values("none", "fp16", "bf16", "quant:bits=2", "quant:bits=4", "quant:bits=8",
                      "quant:bits=3,scale=group,group=100", "quant:bits=4,round=stochastic,seed=7",
                      "quant:bits=2,scale=group,group=64,round=stochastic,seed=1",
                      "quant:bits=2,levels=fixpoint", "quant:bits=8,levels=fixpoint",
                      "acsgd:bits=2", "acsgd:bits=4,levels=fixpoint", "acsgd:bits=3,store=fp32",
                      "acsgd:bits=2,levels=fixpoint,warmup_epochs=1", "topk:ratio=0.01",
                      "topk:ratio=0.05,bits=2", "randk:ratio=0.1,seed=3"),
    [](const ::testing::TestParamInfo<std::string>& i) {
      std::string s = i.param;
      for (char& c : s)
        if (!isalnum(static_cast<unsigned char>(c))) c = '_';
      return s;
    });

// Specs without a device path are refused by name.
TEST(CudaCodecMake, RefusesCodecsWithoutADevicePath) {
  try {
    cuda::DeviceCodec::make("ef(quant:bits=4)");
    FAIL() << "ef has no device path";
  } catch (const CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("has no device path"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::DeviceCodec::make("acsgd:bits=2,round=stochastic"), CodecError);
}

}  // namespace
}  // namespace slowpipe::compression
