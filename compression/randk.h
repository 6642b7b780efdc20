// randk, a built-in codec in the registry's form: this file and randk.cc are the codec, its
// registration is randkCodec() (listed in one line of registry.cc; compression/builtin.h).
#pragma once

#include <vector>

#include "compression/builtin.h"
#include "compression/bytes.h"
#include "compression/codec.h"

namespace slowpipe::compression {

constexpr uint16_t kRandkWireId = 9;  // in every frame: fixed once given

// randk: unbiased random sparsification with no indices on the wire. Element i of a message is
// kept when a hash of (seed, step, micro-batch, first example id, i) falls below ratio x 2^64, so
// both ends derive the same set from the context they share; kept values travel as fp32 scaled by
// 1/ratio (E[decoded] = x). Payload: u32 count, then the count scaled values in index order.
class RandkCodec : public Codec {
 public:
  RandkCodec(double ratio, uint64_t seed);
  CodecId id() const override { return static_cast<CodecId>(kRandkWireId); }
  std::string spec() const override;
  void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) override;
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* out) override;
  // Value i of a message is kept when keepsAll() or mix64(messageSeed(ctx) ^ i) < threshold().
  uint64_t messageSeed(const CodecContext& ctx) const;
  uint64_t threshold() const { return threshold_; }
  bool keepsAll() const { return all_; }
  double ratio() const { return ratio_; }

 private:
  // The kept set of a message, one byte per value (counted, then used), and how many each part of
  // it keeps; reused between messages.
  uint64_t keepMask(int64_t n, uint64_t base);
  double ratio_;
  uint64_t seed_, threshold_;
  Bytes keep_;
  std::vector<int64_t> starts_;
  bool all_ = false;
};

BuiltinCodec randkCodec();

}  // namespace slowpipe::compression
