// randk (randk.h).
#include "compression/randk.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "compression/kernels.h"
#include "compression/parallel.h"
#include "compression/quant.h"

namespace slowpipe::compression {

BuiltinCodec randkCodec() {
  return {"randk",
          kRandkWireId,
          "randk:ratio=R[,seed=S]",
          true,
          {"ratio", "seed"},
          [](const CodecParams& p, const std::string&) -> std::unique_ptr<Codec> {
            return std::make_unique<RandkCodec>(
                ratioParam("randk", p), static_cast<uint64_t>(intParam("randk", p, "seed", 1)));
          }};
}

RandkCodec::RandkCodec(double ratio, uint64_t seed) : ratio_(ratio), seed_(seed) {
  SP_REQUIRE(ratio > 0.0 && ratio <= 1.0,
             "randk: ratio=" + std::to_string(ratio) + " is out of range; expected 0 < ratio <= 1");
  all_ = ratio >= 1.0;
  threshold_ = all_ ? UINT64_MAX : static_cast<uint64_t>(std::ldexp(ratio, 64));
}

std::string RandkCodec::spec() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, "randk:ratio=%g,seed=%llu", ratio_,
                static_cast<unsigned long long>(seed_));
  return buf;
}

uint64_t RandkCodec::messageSeed(const CodecContext& ctx) const {
  uint64_t h = mix64(seed_);
  h = mix64(h ^ static_cast<uint64_t>(ctx.step));
  h = mix64(h ^ static_cast<uint64_t>(static_cast<uint32_t>(ctx.microBatch)));
  h = mix64(h ^ static_cast<uint64_t>(ctx.exampleIds.empty() ? -1 : ctx.exampleIds[0]));
  return h;
}

// The kept set in blocks of kRandkBlock indices: a vectorized mask per block (Kernels::randkKeep)
// into keep_, counted per part of the message (the codec threads); starts_[p]: the kept values
// before part p. The hash runs once per value: the second pass reads the mask.
namespace {
constexpr int64_t kRandkBlock = 4096;
}

uint64_t RandkCodec::keepMask(int64_t n, uint64_t base) {
  const Kernels& kern = kernels();
  const uint64_t threshold = all_ ? UINT64_MAX : threshold_;
  const int64_t parts = parallelParts(n, kRandkBlock);
  keep_.resize(static_cast<size_t>(n));
  starts_.assign(static_cast<size_t>(parts) + 1, 0);
  parallelRanges(n, kRandkBlock, [&](int64_t lo, int64_t hi, int64_t part) {
    int64_t c = 0;
    for (int64_t b = lo; b < hi; b += kRandkBlock) {
      const int64_t len = std::min(kRandkBlock, hi - b);
      if (all_) {
        std::memset(keep_.data() + b, 1, static_cast<size_t>(len));
        c += len;
      } else {
        c += kern.randkKeep(base, threshold, b, len, keep_.data() + b);
      }
    }
    starts_[static_cast<size_t>(part) + 1] = c;
  });
  for (int64_t p = 0; p < parts; ++p) starts_[p + 1] += starts_[p];
  return static_cast<uint64_t>(starts_[parts]);
}

void RandkCodec::encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) {
  const int64_t n = numelOf(shape);
  const float scale = static_cast<float>(1.0 / ratio_);
  const auto k = static_cast<uint32_t>(keepMask(n, messageSeed(ctx)));
  uint8_t* head = ByteWriter(out).grow(4 + 4 * static_cast<size_t>(k));
  std::memcpy(head, &k, 4);
  uint8_t* values = head + 4;
  const Kernels& kern = kernels();
  parallelRanges(n, kRandkBlock, [&](int64_t lo, int64_t hi, int64_t part) {
    float kept[kRandkBlock + 8];  // room for the kernel's last whole vector
    uint8_t* vp = values + 4 * starts_[part];
    for (int64_t b = lo; b < hi; b += kRandkBlock) {
      const int64_t len = std::min(kRandkBlock, hi - b);
      const int64_t c = kern.randkGather(x + b, keep_.data() + b, len, scale, kept);
      std::memcpy(vp, kept, 4 * static_cast<size_t>(c));
      vp += 4 * c;
    }
  });
}

void RandkCodec::decode(const uint8_t* payload, size_t size, const Shape& shape,
                        const CodecContext& ctx, float* out) {
  const int64_t n = numelOf(shape);
  ByteReader r(payload, size, "randk payload");
  const uint32_t k = r.get<uint32_t>("count");
  // The shared index set is counted first; the payload is validated against it before any write.
  const uint64_t kept = keepMask(n, messageSeed(ctx));
  SP_REQUIRE(k == kept, "randk: count is " + std::to_string(k) + ", the shared index set has " +
                            std::to_string(kept) +
                            " (another seed, step or micro-batch?) for shape " +
                            shapeString(shape));
  SP_REQUIRE(size == 4 + 4 * static_cast<size_t>(k),
             "randk: payload is " + std::to_string(size) + " bytes, expected " +
                 std::to_string(4 + 4 * static_cast<size_t>(k)) + " for shape " +
                 shapeString(shape));
  const uint8_t* values = r.take(4 * static_cast<size_t>(k), "values");
  // The kernel reads no value past the payload's end; a large output is streamed around the
  // cache as quant's is.
  const bool stream = n >= QuantCodec::kStreamValues;
  const Kernels& kern = kernels();
  parallelRanges(n, kRandkBlock, [&](int64_t lo, int64_t hi, int64_t part) {
    float buf[kRandkBlock];
    int64_t at = starts_[part];
    for (int64_t b = lo; b < hi; b += kRandkBlock) {
      const int64_t len = std::min(kRandkBlock, hi - b);
      float* o = stream ? buf : out + b;
      at += kern.randkScatter(values + 4 * at, static_cast<int64_t>(k) - at, keep_.data() + b, len,
                              o);
      if (stream) kern.streamOut(buf, len, out + b);
    }
    if (stream) kern.streamFence();
  });
}

}  // namespace slowpipe::compression
