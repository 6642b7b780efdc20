// Golden comparison: QuantCodec against the same quantizer written with libtorch ops. Nearest
// rounding must give byte-identical payloads and bit-identical decoded tensors.
#include <gtest/gtest.h>
#include <torch/torch.h>

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
         (info.param.channel ? std::string("_channel") : "_group" + std::to_string(info.param.group));
});

}  // namespace
}  // namespace slowpipe::compression
