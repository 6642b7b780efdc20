#include "simulator/codec_cost.h"

#include <random>

#include "compression/codec.h"
#include "compression/frame.h"
#include "compression/timing.h"

namespace slowpipe::simulator {

CodecCost measureCodecOnHost(const std::string& spec, const std::vector<int64_t>& shape) {
  auto tx = compression::makeCodec(spec), rx = compression::makeCodec(spec);
  const int64_t n = compression::numelOf(shape);
  std::vector<float> x(static_cast<size_t>(n)), y;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  compression::FrameHeader h;
  h.shape = shape;
  for (int64_t i = 0; i < shape[0]; ++i) h.exampleIds.push_back(i);
  compression::CodecContext ctx;
  ctx.exampleIds = h.exampleIds;
  // Both ends see the same history: the first sighting (acsgd: full precision), then a delta.
  compression::Bytes frame = compression::encodeFrame(*tx, x.data(), h, ctx);
  compression::decodeFrame(*rx, frame.data(), frame.size(), ctx, y);
  frame = compression::encodeFrame(*tx, x.data(), h, ctx);
  compression::decodeFrame(*rx, frame.data(), frame.size(), ctx, y);
  // Steady state from here: every encode is a delta, and decoding a delta again is as costly.
  const double enc = medianSeconds([&] { compression::encodeFrame(*tx, x.data(), h, ctx); });
  const double dec =
      medianSeconds([&] { compression::decodeFrame(*rx, frame.data(), frame.size(), ctx, y); });
  const double bytes = 4.0 * static_cast<double>(n);
  return {{0.0, enc / bytes}, {0.0, dec / bytes}};
}

}  // namespace slowpipe::simulator
