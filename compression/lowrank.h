// lowrank:rank=R[,basis=random|pca][,refresh=N][,iters=I][,seed=S]: low-rank projection of
// activations, the family of subspace methods for slow links. The message x is viewed as rows of
// its last dimension d (N = numel / d rows); the sender sends the coefficients C = X P (N x r,
// fp16) on an orthonormal basis P (d x r, r = min(R, d)) that both ends hold, and the receiver
// outputs C P^T, the projection of x onto span(P).
//
// basis=random (default): P is an orthonormalized Rademacher matrix derived from (seed, d, basis
//   epoch) on both ends; no basis bytes travel. refresh=N draws the next epoch's basis every N
//   messages of that width (0, the default: never).
// basis=pca: on the first message of a width and then every refresh=N messages (default 8), the
//   sender computes the top-r principal subspace of that message's rows by subspace iteration
//   (iters=I rounds, default 2, warm-started from the current basis) and sends it as fp16 in that
//   message; both ends then use that fp16 basis, so their states are equal (stateDigest).
//
// Payload: u8 kind (0: coefficients only, 1: a basis follows) | u32 basis epoch |
//   kind 1: d*r fp16 basis values (row j = basis vector j) | N*r fp16 coefficients.
// Size: exactly 5 + 2*d*r*kind + 2*N*r bytes. All arithmetic is IEEE without contraction, so the
// random basis is the same on every machine.
#pragma once

#include <map>

#include "compression/codec.h"

namespace slowpipe::compression {

struct LowrankOptions {
  int64_t rank = 8;
  bool pca = false;
  int64_t refresh = 0;  // messages per basis (per width); 0 = never (random only)
  int iters = 2;
  uint64_t seed = 1;
};

class LowrankCodec : public Codec {
 public:
  explicit LowrankCodec(LowrankOptions opt);
  CodecId id() const override { return CodecId::kLowrank; }
  std::string spec() const override;
  void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) override;
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* out) override;
  uint64_t stateDigest() const override;
  // Payload bytes for this shape, with or without a basis.
  size_t payloadBytes(const Shape& shape, bool withBasis) const;
  uint64_t maxPayloadBytes(const Shape& shape) const override {
    return payloadBytes(shape, opt_.pca) + 16;
  }

 private:
  struct Basis {
    uint32_t epoch = 0;
    int64_t sent = 0;         // sender: messages encoded on this basis
    std::vector<float> rows;  // r rows of d values: the basis vectors
  };
  int64_t rankFor(int64_t d) const { return d < opt_.rank ? d : opt_.rank; }
  // Derived from its products: encode C = X P and decode C P^T are 2r FLOPs per element each (a
  // PCA refresh adds its subspace iteration, 4r per element per round, once every `refresh`
  // messages); each reads and writes the fp32 message once (the fp16 factors are r/d of it).
  std::string deviceCost() const override;
  std::vector<float> randomBasis(int64_t d, uint32_t epoch) const;
  std::vector<float> principalBasis(const float* x, int64_t n, int64_t d,
                                    const std::vector<float>& start) const;

  LowrankOptions opt_;
  std::map<int64_t, Basis> basis_;  // per width d
  std::vector<float> coef_;
};

}  // namespace slowpipe::compression
