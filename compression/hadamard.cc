// Randomized Hadamard rotation around an inner codec (see hadamard.h).
#include "compression/hadamard.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compression/bytes.h"
#include "compression/error.h"
#include "compression/kernels.h"
#include "compression/parallel.h"

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
  SP_REQUIRE(inner_->id() != CodecId::kHadamard, "hadamard: nested hadamard(...) rotates twice; use one");
}

std::string HadamardCodec::spec() const {
  return "hadamard(" + inner_->spec() + ";seed=" + std::to_string(seed_) + ";block=" + std::to_string(maxBlock_) + ")";
}

int64_t HadamardCodec::blockFor(int64_t d) const {
  int64_t b = 1;
  while (b * 2 <= maxBlock_ && d % (b * 2) == 0) b *= 2;
  return b;
}

void HadamardCodec::rotate(float* x, int64_t n, int64_t d, bool inverse, const float* src) const {
  const int64_t b = blockFor(d);
  if (d <= 0 || n % d != 0) throw CodecError("hadamard: " + std::to_string(n) + " values are not rows of " + std::to_string(d));
  std::vector<float> sign(static_cast<size_t>(d));
  for (int64_t j = 0; j < d; ++j) sign[j] = (mix64(seed_ ^ static_cast<uint64_t>(j)) & 1) ? -1.0f : 1.0f;
  const float norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(b)));
  // Forward: sign in, norm out; inverse: nothing in, norm then sign out (x * norm * s is
  // x * (s * norm) exactly: s is +-1).
  std::vector<float> ones(static_cast<size_t>(d), 1.0f), out(static_cast<size_t>(d));
  for (int64_t j = 0; j < d; ++j) out[j] = inverse ? norm * sign[j] : norm;
  const Kernels& kern = kernels();
  auto oneRow = [&](float* row) {
    if (b >= 8) {
      const float* pre = inverse ? ones.data() : sign.data();
      for (int64_t k = 0; k < d; k += b) kern.fwhtScaled(row + k, b, pre + k, out.data() + k);
      return;
    }
    if (!inverse)
      for (int64_t j = 0; j < d; ++j) row[j] *= sign[j];
    if (b > 1)
      for (int64_t k = 0; k < d; k += b) {
        fwht(row + k, b);
        for (int64_t j = k; j < k + b; ++j) row[j] *= norm;
      }
    if (inverse)
      for (int64_t j = 0; j < d; ++j) row[j] *= sign[j];
  };
  parallelRanges(n, d, [&](int64_t lo, int64_t hi, int64_t) {
    for (int64_t at = lo; at < hi; at += d) {
      if (src) std::copy(src + at, src + at + d, x + at);
      oneRow(x + at);
    }
  });
}

void HadamardCodec::encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) {
  const int64_t n = numelOf(shape), d = shape.empty() ? 1 : shape.back();
  scratch_.resize(static_cast<size_t>(n));
  rotate(scratch_.data(), n, d, false, x);
  inner_->encode(scratch_.data(), shape, ctx, out);
}

void HadamardCodec::decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx, float* out) {
  const int64_t n = numelOf(shape), d = shape.empty() ? 1 : shape.back();
  inner_->decode(payload, size, shape, ctx, out);
  rotate(out, n, d, true);
}

}  // namespace slowpipe::compression
