// hadamard(<inner>[;seed=S][;block=B]): a randomized Hadamard rotation before any inner codec (the
// core of TAH-Quant, arXiv 2506.01352). Along the last dimension, every value is multiplied by a
// random sign (from the seed, the same on both ends) and every block of B values (B: the largest
// power of two that divides the last dimension, at most `block`, default 256) is rotated by the
// orthonormal Walsh-Hadamard matrix H/sqrt(B). The inner codec encodes the rotated tensor; the
// receiver decodes it and rotates back (H/sqrt(B) is its own inverse). Rotation spreads outlier
// channels over the block, so per-group scales fit the values better. The rotation is fixed, so
// stateful inner codecs (acsgd, ef) work unchanged in the rotated space.
#pragma once

#include <memory>
#include <vector>

#include "compression/codec.h"

namespace slowpipe::compression {

class HadamardCodec : public Codec {
 public:
  HadamardCodec(std::unique_ptr<Codec> inner, uint64_t seed, int64_t maxBlock);
  CodecId id() const override { return CodecId::kHadamard; }
  std::string spec() const override;
  void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) override;
  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* out) override;
  uint64_t stateDigest() const override { return inner_->stateDigest(); }
  uint64_t maxPayloadBytes(const Shape& shape) const override {
    return inner_->maxPayloadBytes(shape);
  }
  const Codec& inner() const { return *inner_; }
  // Block size used for a last dimension of `d` values.
  int64_t blockFor(int64_t d) const;
  // In place: x (rows of `d` values) -> H D x / sqrt(B) (forward) or D H x / sqrt(B) (inverse).
  // Rotates the n / d rows of x in place; with src, row r is first copied from src (while it is in
  // L1, so the copy costs no extra pass over memory). Rows go to the codec threads.
  void rotate(float* x, int64_t n, int64_t d, bool inverse, const float* src = nullptr) const;

 private:
  // The rotation's constants for rows of d values, and one row's rotation with them.
  struct Rotation {
    int64_t d, b;
    float norm;
    std::vector<float> sign, ones, post;
  };
  Rotation rotationFor(int64_t d, bool inverse) const;
  void rotateRow(const Rotation& rot, bool inverse, float* row) const;
  // hadamard(quant with group scales): values per fused step (whole rows, whole groups, a multiple
  // of 8), or 0 where the inner codec is not such a quantizer.
  int64_t fusedChunk(int64_t d) const;
  void encodeFused(const float* x, const Shape& shape, int64_t chunk, Bytes& out);
  void decodeFused(const uint8_t* payload, size_t size, const Shape& shape, int64_t chunk,
                   float* out);
  std::unique_ptr<Codec> inner_;
  uint64_t seed_;
  int64_t maxBlock_;
  std::vector<float> scratch_;  // encode's rotated copy, kept: a fresh 64 MiB buffer costs its page
                                // faults each message
};

}  // namespace slowpipe::compression
