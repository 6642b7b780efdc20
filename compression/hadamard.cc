// Randomized Hadamard rotation around an inner codec (see hadamard.h).
#include "compression/hadamard.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "compression/bitpack.h"
#include "compression/bytes.h"
#include "compression/error.h"
#include "compression/kernels.h"
#include "compression/parallel.h"
#include "compression/quant.h"

namespace slowpipe::compression {
namespace {

// The textbook transform, for blocks below 8 values.
void fwht(float* v, int64_t b) {
  for (int64_t h = 1; h < b; h *= 2)
    for (int64_t i = 0; i < b; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = v[j], c = v[j + h];
        v[j] = a + c;
        v[j + h] = a - c;
      }
}

}  // namespace

HadamardCodec::HadamardCodec(std::unique_ptr<Codec> inner, uint64_t seed, int64_t maxBlock)
    : inner_(std::move(inner)), seed_(seed), maxBlock_(maxBlock) {
  SP_REQUIRE(maxBlock >= 1 && maxBlock <= 65536 && (maxBlock & (maxBlock - 1)) == 0,
             "hadamard: block=" + std::to_string(maxBlock) + " must be a power of two in 1..65536");
  SP_REQUIRE(inner_->id() != CodecId::kHadamard,
             "hadamard: nested hadamard(...) rotates twice; use one");
}

std::string HadamardCodec::spec() const {
  return "hadamard(" + inner_->spec() + ";seed=" + std::to_string(seed_) +
         ";block=" + std::to_string(maxBlock_) + ")";
}

int64_t HadamardCodec::blockFor(int64_t d) const {
  int64_t b = 1;
  while (b * 2 <= maxBlock_ && d % (b * 2) == 0) b *= 2;
  return b;
}

HadamardCodec::Rotation HadamardCodec::rotationFor(int64_t d, bool inverse) const {
  Rotation rot{d,
               blockFor(d),
               0.0f,
               std::vector<float>(static_cast<size_t>(d)),
               std::vector<float>(static_cast<size_t>(d), 1.0f),
               std::vector<float>(static_cast<size_t>(d))};
  for (int64_t j = 0; j < d; ++j)
    rot.sign[j] = (mix64(seed_ ^ static_cast<uint64_t>(j)) & 1) ? -1.0f : 1.0f;
  rot.norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(rot.b)));
  // Forward: sign in, norm out; inverse: nothing in, norm then sign out (x * norm * s is
  // x * (s * norm) exactly: s is +-1).
  for (int64_t j = 0; j < d; ++j) rot.post[j] = inverse ? rot.norm * rot.sign[j] : rot.norm;
  return rot;
}

void HadamardCodec::rotateRow(const Rotation& rot, bool inverse, float* row) const {
  const int64_t d = rot.d, b = rot.b;
  if (b >= 8) {
    const Kernels& kern = kernels();
    const float* pre = inverse ? rot.ones.data() : rot.sign.data();
    for (int64_t k = 0; k < d; k += b) kern.fwhtScaled(row + k, b, pre + k, rot.post.data() + k);
    return;
  }
  if (!inverse)
    for (int64_t j = 0; j < d; ++j) row[j] *= rot.sign[j];
  if (b > 1)
    for (int64_t k = 0; k < d; k += b) {
      fwht(row + k, b);
      for (int64_t j = k; j < k + b; ++j) row[j] *= rot.norm;
    }
  if (inverse)
    for (int64_t j = 0; j < d; ++j) row[j] *= rot.sign[j];
}

void HadamardCodec::rotate(float* x, int64_t n, int64_t d, bool inverse, const float* src) const {
  if (d <= 0 || n % d != 0)
    throw CodecError("hadamard: " + std::to_string(n) + " values are not rows of " +
                     std::to_string(d));
  const Rotation rot = rotationFor(d, inverse);
  parallelRanges(n, d, [&](int64_t lo, int64_t hi, int64_t) {
    for (int64_t at = lo; at < hi; at += d) {
      if (src) std::copy(src + at, src + at + d, x + at);
      rotateRow(rot, inverse, x + at);
    }
  });
}

int64_t HadamardCodec::fusedChunk(int64_t d) const {
  if (inner_->id() != CodecId::kQuant || d <= 0) return 0;
  const auto& q = static_cast<const QuantCodec&>(*inner_);
  if (q.options().scale != QuantOptions::Scale::kGroup) return 0;
  const int64_t base = std::lcm(std::lcm(d, q.options().group), int64_t{8});
  if (base > (int64_t{1} << 20)) return 0;
  return base * std::max<int64_t>(1, QuantCodec::kChunk / base);
}

// Rows rotated a chunk at a time into a buffer that stays in cache, and quantized from there: the
// chunk's groups get their scales at once (group scales need nothing outside the chunk). The
// bytes are those of rotate-then-encode (the digest test).
void HadamardCodec::encodeFused(const float* x, const Shape& shape, int64_t chunk, Bytes& out) {
  auto& q = static_cast<QuantCodec&>(*inner_);
  const int64_t n = numelOf(shape), d = shape.back(), group = q.options().group,
                bits = q.options().bits;
  const Rotation rot = rotationFor(d, false);
  QuantStream s(q, shape);
  s.sizeScales();
  uint8_t* p = ByteWriter(out).grow(quantPayloadBytes(q.options(), shape));
  uint8_t* packed = p + s.scaleBytes();
  parallelRanges(n, chunk, [&](int64_t lo, int64_t hi, int64_t) {
    PartBuffer buf(static_cast<size_t>(chunk));
    uint8_t codes[QuantCodec::kChunk];
    for (int64_t c0 = lo; c0 < hi; c0 += chunk) {
      const int64_t len = std::min(chunk, hi - c0);
      for (int64_t r = 0; r < len; r += d) {
        std::copy(x + c0 + r, x + c0 + r + d, buf.data() + r);
        rotateRow(rot, false, buf.data() + r);
      }
      const int64_t g0 = c0 / group, g1 = (c0 + len + group - 1) / group;
      s.accumulate(buf.data(), c0, len);
      s.finishScales(g0, g1);
      s.writeScales(p, g0, g1);
      for (int64_t o = 0; o < len; o += QuantCodec::kChunk) {
        const int64_t l = std::min(QuantCodec::kChunk, len - o);
        s.quantize(buf.data() + o, c0 + o, l, codes);
        packBits(codes, l, static_cast<int>(bits), packed + (c0 + o) * bits / 8);
      }
    }
  });
  s.done();
}

void HadamardCodec::decodeFused(const uint8_t* payload, size_t size, const Shape& shape,
                                int64_t chunk, float* out) {
  auto& q = static_cast<QuantCodec&>(*inner_);
  const int64_t n = numelOf(shape), d = shape.back(), bits = q.options().bits;
  const size_t expect = quantPayloadBytes(q.options(), shape);
  SP_REQUIRE(size == expect, "quant: payload is " + std::to_string(size) + " bytes, expected " +
                                 std::to_string(expect) + " for shape " + shapeString(shape) +
                                 " at " + std::to_string(bits) + " bits");
  const Rotation rot = rotationFor(d, true);
  QuantStream s(q, shape);
  s.readScales(payload);  // every scale validated before anything is written
  const uint8_t* packed = payload + s.scaleBytes();
  const bool stream = n >= QuantCodec::kStreamValues;
  const Kernels& k = kernels();
  parallelRanges(n, chunk, [&](int64_t lo, int64_t hi, int64_t) {
    PartBuffer buf(static_cast<size_t>(chunk));
    uint8_t codes[QuantCodec::kChunk];
    for (int64_t c0 = lo; c0 < hi; c0 += chunk) {
      const int64_t len = std::min(chunk, hi - c0);
      for (int64_t o = 0; o < len; o += QuantCodec::kChunk) {
        const int64_t l = std::min(QuantCodec::kChunk, len - o);
        unpackBits(packed + (c0 + o) * bits / 8, l, static_cast<int>(bits), codes);
        s.dequantize(codes, c0 + o, l, buf.data() + o);
      }
      for (int64_t r = 0; r < len; r += d) rotateRow(rot, true, buf.data() + r);
      if (stream)
        k.streamOut(buf.data(), len, out + c0);
      else
        std::copy(buf.data(), buf.data() + len, out + c0);
    }
    if (stream) k.streamFence();
  });
}

void HadamardCodec::encode(const float* x, const Shape& shape, const CodecContext& ctx,
                           Bytes& out) {
  const int64_t n = numelOf(shape), d = shape.empty() ? 1 : shape.back();
  if (d <= 0 || n % d != 0)
    throw CodecError("hadamard: " + std::to_string(n) + " values are not rows of " +
                     std::to_string(d));
  if (const int64_t chunk = fusedChunk(d); chunk > 0 && !shape.empty())
    return encodeFused(x, shape, chunk, out);
  scratch_.resize(static_cast<size_t>(n));
  rotate(scratch_.data(), n, d, false, x);
  inner_->encode(scratch_.data(), shape, ctx, out);
}

void HadamardCodec::decode(const uint8_t* payload, size_t size, const Shape& shape,
                           const CodecContext& ctx, float* out) {
  const int64_t n = numelOf(shape), d = shape.empty() ? 1 : shape.back();
  if (const int64_t chunk = fusedChunk(d); chunk > 0 && !shape.empty() && n % d == 0)
    return decodeFused(payload, size, shape, chunk, out);
  inner_->decode(payload, size, shape, ctx, out);
  rotate(out, n, d, true);
}

}  // namespace slowpipe::compression
