// Low-rank projection codec (lowrank.h).
#include "compression/lowrank.h"

#include <cstdio>

#include <cmath>
#include <cstring>

#include "compression/error.h"
#include "compression/half.h"
#include "compression/kernels.h"
#include "compression/parallel.h"

namespace slowpipe::compression {
namespace {

// Eight independent partial sums: vectorizes without reassociation, and the result is a fixed
// function of the inputs.
float dot(const float* a, const float* b, int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += a[i + k] * b[i + k];
  for (; i < n; ++i) lane[i % 8] += a[i] * b[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// Modified Gram-Schmidt in double on r rows of d values, in place. Returns false if a row is
// (numerically) in the span of the ones before it.
bool orthonormalize(std::vector<float>& rows, int64_t r, int64_t d) {
  std::vector<double> q(static_cast<size_t>(r * d));
  for (int64_t i = 0; i < r * d; ++i) q[i] = rows[i];
  for (int64_t j = 0; j < r; ++j) {
    double* v = q.data() + j * d;
    double before = 0;
    for (int64_t k = 0; k < d; ++k) before += v[k] * v[k];
    for (int64_t i = 0; i < j; ++i) {
      const double* u = q.data() + i * d;
      double p = 0;
      for (int64_t k = 0; k < d; ++k) p += u[k] * v[k];
      for (int64_t k = 0; k < d; ++k) v[k] -= p * u[k];
    }
    double norm = 0;
    for (int64_t k = 0; k < d; ++k) norm += v[k] * v[k];
    if (!(norm > 1e-20 * before) || !std::isfinite(norm) || norm == 0) return false;
    const double inv = 1.0 / std::sqrt(norm);
    for (int64_t k = 0; k < d; ++k) v[k] *= inv;
  }
  for (int64_t i = 0; i < r * d; ++i) rows[i] = static_cast<float>(q[i]);
  return true;
}

// What travels: the basis rounded to fp16, and the floats both ends then use.
void roundToHalf(std::vector<float>& rows) {
  for (float& v : rows) v = halfToFloat(floatToHalf(v));
}

}  // namespace

LowrankCodec::LowrankCodec(LowrankOptions opt) : opt_(opt) {
  SP_REQUIRE(opt_.rank >= 1 && opt_.rank <= 65536,
             "lowrank: rank=" + std::to_string(opt_.rank) + " is out of range; expected 1..65536");
  SP_REQUIRE(opt_.refresh >= 0,
             "lowrank: refresh=" + std::to_string(opt_.refresh) + " must be >= 0");
  SP_REQUIRE(opt_.iters >= 1 && opt_.iters <= 100,
             "lowrank: iters=" + std::to_string(opt_.iters) + " is out of range; expected 1..100");
}

std::string LowrankCodec::spec() const {
  std::string s = "lowrank:rank=" + std::to_string(opt_.rank) +
                  ",basis=" + (opt_.pca ? "pca" : "random") +
                  ",refresh=" + std::to_string(opt_.refresh);
  if (opt_.pca) s += ",iters=" + std::to_string(opt_.iters);
  return s + ",seed=" + std::to_string(opt_.seed);
}

size_t LowrankCodec::payloadBytes(const Shape& shape, bool withBasis) const {
  const int64_t n = numelOf(shape), d = shape.empty() ? 1 : shape.back();
  const int64_t r = rankFor(d), rows = d > 0 ? n / d : 0;
  return 5 + (withBasis ? 2 * static_cast<size_t>(d * r) : 0) + 2 * static_cast<size_t>(rows * r);
}

std::vector<float> LowrankCodec::randomBasis(int64_t d, uint32_t epoch) const {
  const int64_t r = rankFor(d);
  std::vector<float> rows(static_cast<size_t>(r * d));
  uint64_t salt = 0;
  // A Rademacher matrix is of full rank with overwhelming probability; if not, the next salt.
  do {
    const uint64_t key =
        mix64(opt_.seed ^ mix64(static_cast<uint64_t>(d) * 0x9E3779B97F4A7C15ull ^ epoch) ^ salt++);
    for (int64_t i = 0; i < r * d; ++i)
      rows[i] = (mix64(key + static_cast<uint64_t>(i)) >> 63) ? 1.0f : -1.0f;
  } while (!orthonormalize(rows, r, d));
  return rows;
}

// Subspace iteration: P <- orth(X^T X P), `iters` times, from `start`. The sender alone runs it.
std::vector<float> LowrankCodec::principalBasis(const float* x, int64_t n, int64_t d,
                                                const std::vector<float>& start) const {
  const int64_t r = rankFor(d), rows = n / d;
  std::vector<float> p = start, w(static_cast<size_t>(r * d)), z(static_cast<size_t>(r));
  for (int it = 0; it < opt_.iters; ++it) {
    std::fill(w.begin(), w.end(), 0.0f);
    for (int64_t i = 0; i < rows; ++i) {
      const float* xi = x + i * d;
      for (int64_t j = 0; j < r; ++j) z[j] = dot(xi, p.data() + j * d, d);
      for (int64_t j = 0; j < r; ++j) {
        float* wj = w.data() + j * d;
        for (int64_t k = 0; k < d; ++k) wj[k] += z[j] * xi[k];
      }
    }
    if (!orthonormalize(w, r, d)) return p;  // rank-deficient data: keep the basis it had
    p = w;
  }
  return p;
}

void LowrankCodec::encode(const float* x, const Shape& shape, const CodecContext&, Bytes& out) {
  const int64_t n = numelOf(shape), d = shape.empty() ? 1 : shape.back();
  const int64_t r = rankFor(d), rows = d > 0 ? n / d : 0;
  ByteWriter w(out);
  if (d == 0 || r == 0) {  // nothing to project
    w.put<uint8_t>(0);
    w.put<uint32_t>(0);
    return;
  }
  auto it = basis_.find(d);
  bool send = false;
  if (it == basis_.end()) {
    it = basis_.emplace(d, Basis{0, 0, randomBasis(d, 0)}).first;
    send = opt_.pca;
  } else if (opt_.refresh > 0 && it->second.sent >= opt_.refresh) {
    ++it->second.epoch;
    it->second.sent = 0;
    send = opt_.pca;
    if (!opt_.pca) it->second.rows = randomBasis(d, it->second.epoch);
  }
  Basis& b = it->second;
  if (send) {
    b.rows = principalBasis(x, n, d, b.rows);
    roundToHalf(b.rows);
  }
  ++b.sent;
  w.put<uint8_t>(send ? 1 : 0);
  w.put<uint32_t>(b.epoch);
  if (send) floatToHalfBytes(b.rows.data(), b.rows.size(), w.grow(2 * b.rows.size()));
  coef_.resize(static_cast<size_t>(rows * r));
  const Kernels& k = kernels();
  parallelRanges(n, d, [&](int64_t lo, int64_t hi, int64_t) {
    k.lowrankProject(x + lo, (hi - lo) / d, d, b.rows.data(), r, coef_.data() + lo / d * r);
  });
  uint8_t* cp = w.grow(2 * coef_.size());
  floatToHalfBytes(coef_.data(), coef_.size(), cp);
  for (size_t i = 0; i < coef_.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, cp + 2 * i, 2);
    SP_REQUIRE((h & 0x7c00u) != 0x7c00u, "lowrank: coefficient " + std::to_string(i) + " = " +
                                             std::to_string(coef_[i]) +
                                             " overflows fp16 (|c| <= 65504)");
  }
}

void LowrankCodec::decode(const uint8_t* payload, size_t size, const Shape& shape,
                          const CodecContext&, float* out) {
  const int64_t n = numelOf(shape), d = shape.empty() ? 1 : shape.back();
  const int64_t r = rankFor(d), rows = d > 0 ? n / d : 0;
  ByteReader rd(payload, size, "lowrank payload");
  const uint8_t kind = rd.get<uint8_t>("kind");
  const uint32_t epoch = rd.get<uint32_t>("basis epoch");
  SP_REQUIRE(kind <= 1 && (kind == 0 || opt_.pca),
             "lowrank: payload kind " + std::to_string(kind) +
                 (opt_.pca ? ", expected 0 or 1" : ", expected 0 (basis=random sends no basis)"));
  SP_REQUIRE(size == payloadBytes(shape, kind == 1) || (d == 0 && size == 5),
             "lowrank: payload is " + std::to_string(size) + " bytes, expected " +
                 std::to_string(payloadBytes(shape, kind == 1)) + " for shape " +
                 shapeString(shape));
  if (d == 0 || r == 0) return;
  std::vector<float> fresh;
  const uint8_t* basisBytes =
      kind == 1 ? rd.take(2 * static_cast<size_t>(r * d), "basis") : nullptr;
  if (basisBytes) {
    fresh.resize(static_cast<size_t>(r * d));
    halfBytesToFloat(basisBytes, fresh.size(), fresh.data());
    for (size_t i = 0; i < fresh.size(); ++i)
      SP_REQUIRE(std::isfinite(fresh[i]) && std::fabs(fresh[i]) <= 1.0f,
                 "lowrank: basis value " + std::to_string(i) + " is " + std::to_string(fresh[i]) +
                     ", expected a finite value in [-1, 1]");
  }
  const uint8_t* cp = rd.take(2 * static_cast<size_t>(rows * r), "coefficients");
  coef_.resize(static_cast<size_t>(rows * r));
  halfBytesToFloat(cp, coef_.size(), coef_.data());
  for (size_t i = 0; i < coef_.size(); ++i)
    SP_REQUIRE(std::isfinite(coef_[i]),
               "lowrank: coefficient " + std::to_string(i) + " is not finite");
  // Validated: now the state.
  auto it = basis_.find(d);
  if (basisBytes) {
    Basis& b = basis_[d];
    b.epoch = epoch;
    b.rows = std::move(fresh);
    it = basis_.find(d);
  } else if (opt_.pca) {
    SP_REQUIRE(it != basis_.end() && it->second.epoch == epoch,
               "lowrank: coefficients on basis epoch " + std::to_string(epoch) + " of width " +
                   std::to_string(d) + " but the receiver holds " +
                   (it == basis_.end() ? std::string("none")
                                       : "epoch " + std::to_string(it->second.epoch)) +
                   " (sender and receiver diverged)");
  } else if (it == basis_.end() || it->second.epoch != epoch) {
    it = basis_.insert_or_assign(d, Basis{epoch, 0, randomBasis(d, epoch)}).first;
  }
  const std::vector<float>& p = it->second.rows;
  const Kernels& k = kernels();
  parallelRanges(n, d, [&](int64_t lo, int64_t hi, int64_t) {
    k.lowrankExpand(coef_.data() + lo / d * r, (hi - lo) / d, r, p.data(), d, out + lo);
  });
}

uint64_t LowrankCodec::stateDigest() const {
  // The basis both ends hold, per width (a sender's message count is its own).
  uint64_t h = kFnvOffset;
  for (const auto& [d, b] : basis_) {
    h = fnv1a(&d, sizeof d, h);
    h = fnv1a(&b.epoch, sizeof b.epoch, h);
    h = fnv1a(b.rows.data(), 4 * b.rows.size(), h);
  }
  return h;
}

std::string LowrankCodec::deviceCost() const {
  const double r = static_cast<double>(opt_.rank);
  const double refresh =
      opt_.pca ? 4.0 * r * opt_.iters / static_cast<double>(opt_.refresh > 0 ? opt_.refresh : 8)
               : 0.0;
  char b[320];
  std::snprintf(b, sizeof b,
                "{\"source\": \"derived: its matrix products' FLOPs and one pass over the fp32 "
                "message, on the device\", "
                "\"encode_flops_per_element\": %.17g, \"encode_bytes_per_element\": 8, "
                "\"decode_flops_per_element\": %.17g, "
                "\"decode_bytes_per_element\": 8}",
                2.0 * r + refresh, 2.0 * r);
  return b;
}

}  // namespace slowpipe::compression
