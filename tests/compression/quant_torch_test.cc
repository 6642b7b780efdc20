// Golden comparison: QuantCodec against the same quantizer written with libtorch ops. Nearest
// rounding must give byte-identical payloads and bit-identical decoded tensors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>

#include "compression/bitpack.h"
#include "compression/torch_ops_quant.h"

namespace slowpipe::compression {
namespace {

struct Case {
  int bits;
  bool channel;
  int64_t group;
  Shape shape;
};

class QuantTorchTest : public ::testing::TestWithParam<Case> {};

TEST_P(QuantTorchTest, PayloadAndDecodeMatchTorchOps) {
  const Case& c = GetParam();
  QuantOptions o;
  o.bits = c.bits;
  o.scale = c.channel ? QuantOptions::Scale::kChannel : QuantOptions::Scale::kGroup;
  o.group = c.group;
  torch::manual_seed(c.bits * 100 + c.group);
  const auto x = torch::randn(c.shape) * torch::rand({c.shape.back()}).add(0.1);
  QuantCodec codec(o);
  Bytes payload;
  codec.encode(x.data_ptr<float>(), c.shape, {}, payload);
  const auto ref = torchOpsQuantEncode(o, x);
  ASSERT_EQ(static_cast<size_t>(ref.numel()), payload.size());
  const auto* rp = ref.data_ptr<uint8_t>();
  for (size_t i = 0; i < payload.size(); ++i) ASSERT_EQ(payload[i], rp[i]) << "payload byte " << i;
  std::vector<float> y(x.numel());
  codec.decode(payload.data(), payload.size(), c.shape, {}, y.data());
  const auto refY = torchOpsQuantDecode(o, ref, c.shape).contiguous();
  const float* ry = refY.data_ptr<float>();
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], ry[i]) << "value " << i;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (int b = 1; b <= 8; ++b) {
    v.push_back({b, true, 128, {4, 9, 24}});
    v.push_back({b, false, 128, {3, 100}});
    v.push_back({b, false, 5, {7, 11}});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Bits, QuantTorchTest, ::testing::ValuesIn(cases()), [](const auto& info) {
  return "b" + std::to_string(info.param.bits) +
         (info.param.channel ? std::string("_channel")
                             : "_group" + std::to_string(info.param.group));
});

// levels=fixpoint against the transcription of the AC-SGD reference (torch_ops_quant.h), bit for
// bit: fp16 scales, codes and decoded values, on activations with outliers, exact ties, zero
// channels and tiny channels (where fp16(s) + 1e-6 is decided in fp16 subnormals).
torch::Tensor fixpointInput(const Shape& shape, uint64_t seed) {
  torch::manual_seed(static_cast<int64_t>(seed));
  auto x = torch::randn(shape) * torch::rand({shape.back()}).add(0.05);
  auto flat = x.view({-1, shape.back()});
  const int64_t rows = flat.size(0), c = shape.back();
  flat.index_put_({0, 0}, 900.0f);  // outliers: one channel's scale dominated by one value
  flat.index_put_({rows - 1, 1}, -350.5f);
  flat.select(1, 2).zero_();      // a channel of zeros
  flat.select(1, 3).mul_(1e-5f);  // tiny channel: subnormal fp16 scale
  if (c > 5) {                    // exact ties: max 2.0, values on k + 0.5 grid points
    flat.select(1, 4).copy_(
        torch::arange(rows, torch::kFloat32).remainder(8).sub(4.0f).add(0.5f).div(4.0f));
    flat.index_put_({0, 4}, 2.0f);
    flat.index_put_({1, 5}, 0.0f);
  }
  return x;
}

// Many values and many tiny scales: rare rounding differences (a multiply by 2^f/d instead of the
// division, fp32 instead of fp16 for s + 1e-6) show up here and not in a small tensor.
torch::Tensor fixpointWideInput(uint64_t seed) {
  torch::manual_seed(static_cast<int64_t>(seed));
  const int64_t c = 512;
  auto scales = torch::logspace(-7.5, 1.5, c);  // subnormal fp16 scales up to ~30
  return torch::randn({16, 64, c}) * scales;
}

class FixpointTorchTest : public ::testing::TestWithParam<int> {};

TEST_P(FixpointTorchTest, BitExactWithTheReferenceTranscription) {
  const int bits = GetParam();
  QuantOptions o;
  o.bits = bits;
  o.levels = QuantOptions::Levels::kFixpoint;
  for (const Shape& shape : {Shape{4, 9, 24}, Shape{2, 16, 7}, Shape{33, 6}, Shape{16, 64, 512}}) {
    const auto x =
        (shape.back() == 512 ? fixpointWideInput(7 + bits) : fixpointInput(shape, 1000 + bits))
            .contiguous();
    QuantCodec codec(o);
    Bytes payload;
    codec.encode(x.data_ptr<float>(), shape, {}, payload);
    const FixpointReference ref = referenceFixpointCompress(x, bits);
    const int64_t c = shape.back(), n = x.numel();
    ASSERT_EQ(payload.size(), static_cast<size_t>(2 * c) + (static_cast<size_t>(n) * bits + 7) / 8);
    const auto scale = ref.scale.contiguous().view({-1});
    for (int64_t k = 0; k < c; ++k) {
      uint16_t mine;
      std::memcpy(&mine, payload.data() + 2 * k, 2);
      ASSERT_EQ(mine, reinterpret_cast<const uint16_t*>(scale.data_ptr<at::Half>())[k])
          << "scale " << k;
    }
    std::vector<uint8_t> codes(n);
    unpackBits(payload.data() + 2 * c, n, bits, codes.data());
    const auto refCodes = ref.codes.contiguous();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(codes[i], refCodes.data_ptr<uint8_t>()[i])
          << "code " << i << " x=" << x.view({-1})[i].item<float>();
    std::vector<float> y(n);
    codec.decode(payload.data(), payload.size(), shape, {}, y.data());
    const auto refY = referenceFixpointDecompress(ref, bits).contiguous();
    ASSERT_EQ(refY.scalar_type(), torch::kFloat32);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], refY.data_ptr<float>()[i]) << "value " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Bits, FixpointTorchTest, ::testing::Range(1, 9));

// The reference's levels, written out: 2-bit is {-s, -s/2, 0, +s/2} (zero-preserving, asymmetric),
// which the symmetric mapping ({-m, -m/3, m/3, m}) is not.
TEST(FixpointLevels, TwoBitLevelsAreTheReferences) {
  QuantOptions o;
  o.bits = 2;
  o.levels = QuantOptions::Levels::kFixpoint;
  QuantCodec codec(o);
  const std::vector<float> x = {-2.0f, -1.0f, 0.0f, 1.0f, 2.0f, 0.3f, -0.6f};
  Bytes p;
  codec.encode(x.data(), {7, 1}, {}, p);
  std::vector<float> y(7);
  codec.decode(p.data(), p.size(), {7, 1}, {}, y.data());
  EXPECT_EQ(y, (std::vector<float>{-2.0f, -1.0f, 0.0f, 1.0f, 1.0f, 0.0f, -1.0f}));
  EXPECT_EQ(codec.spec(), "quant:bits=2,scale=channel,round=nearest,levels=fixpoint");
  EXPECT_EQ(makeCodec(codec.spec())->spec(), codec.spec());
}

}  // namespace
}  // namespace slowpipe::compression
