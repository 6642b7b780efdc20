// Frame encoding and validation (layout in frame.h).
#include "compression/frame.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compression/crc32c.h"

namespace slowpipe::compression {
namespace {

bool validKind(uint8_t k) { return k >= 1 && k <= 5; }

}  // namespace

__attribute__((target_clones("avx2", "default"))) static bool allFiniteBlock(const float* x,
                                                                             int64_t n) {
  // x * 0 is 0 for finite x and NaN for NaN/Inf, so the sums are 0 iff all are finite. Eight
  // independent lanes let the compiler vectorise without -ffast-math.
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += x[i + k] * 0.0f;
  for (; i < n; ++i) lane[0] += x[i] * 0.0f;
  float acc = 0.0f;
  for (float v : lane) acc += v;
  return acc == 0.0f;
}

int64_t firstNonFinite(const float* x, int64_t n) {
  constexpr int64_t kBlock = 4096;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    if (allFiniteBlock(x + b, len)) continue;
    for (int64_t i = b; i < b + len; ++i)
      if (!std::isfinite(x[i])) return i;
  }
  return -1;
}

Bytes encodeFrame(Codec& codec, const float* x, FrameHeader h, const CodecContext& ctx) {
  SP_REQUIRE(h.shape.size() <= kMaxDims, "frame: " + std::to_string(h.shape.size()) +
                                             " dimensions, at most " + std::to_string(kMaxDims));
  const int64_t n = numelOf(h.shape);
  if (const int64_t bad = firstNonFinite(x, n); bad >= 0) throw NonFiniteError(bad, x[bad]);
  Bytes out;
  ByteWriter w(out);
  w.put<uint32_t>(kFrameMagic);
  w.put<uint16_t>(kFrameVersion);
  w.put<uint8_t>(static_cast<uint8_t>(h.kind));
  w.put<uint8_t>(0);  // dtype fp32
  w.put<int64_t>(h.step);
  w.put<int32_t>(h.microBatch);
  w.put<int32_t>(h.src);
  w.put<int32_t>(h.dst);
  w.put<uint16_t>(static_cast<uint16_t>(codec.id()));
  w.put<uint8_t>(static_cast<uint8_t>(h.shape.size()));
  w.put<uint8_t>(h.chunk);
  w.append(h.shape.data(), 8 * h.shape.size());
  w.put<uint32_t>(static_cast<uint32_t>(h.exampleIds.size()));
  w.append(h.exampleIds.data(), 8 * h.exampleIds.size());
  const size_t lenAt = out.size();
  w.put<uint64_t>(0);
  w.put<uint32_t>(0);
  const size_t payloadAt = out.size();
  codec.encode(x, h.shape, ctx, out);
  const uint64_t len = out.size() - payloadAt;
  std::memcpy(out.data() + lenAt, &len, 8);
  uint32_t crc = crc32c(out.data(), lenAt + 8);
  crc = crc32c(out.data() + payloadAt, len, crc);
  std::memcpy(out.data() + lenAt + 8, &crc, 4);
  return out;
}

FrameHeader parseFrame(const uint8_t* data, size_t size, size_t* payloadOffset) {
  ByteReader r(data, size, "frame");
  FrameHeader h;
  const auto magic = r.get<uint32_t>("magic");
  if (magic != kFrameMagic) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", magic);
    throw CodecError(std::string("frame: bad magic 0x") + hex + ", expected 0x31465053 (\"SPF1\")");
  }
  const auto version = r.get<uint16_t>("version");
  SP_REQUIRE(version == kFrameVersion, "frame: version " + std::to_string(version) +
                                           " is not supported, expected " +
                                           std::to_string(kFrameVersion));
  const auto kind = r.get<uint8_t>("kind");
  SP_REQUIRE(validKind(kind),
             "frame: unknown message kind " + std::to_string(kind) + ", expected 1..5");
  h.kind = static_cast<MessageKind>(kind);
  const auto dtype = r.get<uint8_t>("dtype");
  SP_REQUIRE(dtype == 0,
             "frame: dtype " + std::to_string(dtype) + " is not supported, expected 0 (fp32)");
  h.step = r.get<int64_t>("step");
  h.microBatch = r.get<int32_t>("micro-batch");
  h.src = r.get<int32_t>("src rank");
  h.dst = r.get<int32_t>("dst rank");
  const auto codec = r.get<uint16_t>("codec id");
  SP_REQUIRE(knownCodecId(codec), "frame: unknown codec id " + std::to_string(codec));
  h.codec = static_cast<CodecId>(codec);
  const auto ndim = r.get<uint8_t>("ndim");
  SP_REQUIRE(ndim <= kMaxDims,
             "frame: ndim " + std::to_string(ndim) + " exceeds " + std::to_string(kMaxDims));
  h.chunk = r.get<uint8_t>("chunk");
  h.shape.resize(ndim);
  copyBytes(h.shape.data(), r.take(8 * ndim, "shape"), 8 * ndim);
  numelOf(h.shape);  // throws on negative or absurd dimensions
  const auto nIds = r.get<uint32_t>("example id count");
  SP_REQUIRE(nIds == 0 || (ndim > 0 && nIds == h.shape[0]),
             "frame: " + std::to_string(nIds) + " example ids for shape " + shapeString(h.shape));
  // The ids' bytes are taken (bounds-checked against the frame) before anything is allocated:
  // a header may not make the receiver reserve memory its frame does not hold.
  const uint8_t* ids = r.take(8 * static_cast<size_t>(nIds), "example ids");
  h.exampleIds.resize(nIds);
  copyBytes(h.exampleIds.data(), ids, 8 * static_cast<size_t>(nIds));
  h.payloadBytes = r.get<uint64_t>("payload length");
  const size_t crcAt = r.position();
  const auto crc = r.get<uint32_t>("checksum");
  SP_REQUIRE(h.payloadBytes == r.remaining(),
             "frame: payload length field says " + std::to_string(h.payloadBytes) + " bytes, " +
                 std::to_string(r.remaining()) + " follow the header");
  uint32_t want = crc32c(data, crcAt);
  want = crc32c(data + r.position(), r.remaining(), want);
  SP_REQUIRE(crc == want, "frame: checksum mismatch (frame says " + std::to_string(crc) +
                              ", contents give " + std::to_string(want) + ")");
  *payloadOffset = r.position();
  return h;
}

FrameHeader decodeFrame(Codec& codec, const uint8_t* data, size_t size, CodecContext ctx,
                        std::vector<float>& out) {
  size_t at = 0;
  FrameHeader h = parseFrame(data, size, &at);
  decodeParsedFrame(codec, h, data, at, std::move(ctx), out);
  return h;
}

void decodeParsedFrame(Codec& codec, const FrameHeader& h, const uint8_t* data, size_t at,
                       CodecContext ctx, std::vector<float>& out, int64_t maxElements) {
  SP_REQUIRE(h.codec == codec.id(), std::string("frame: encoded with codec '") +
                                        codecName(h.codec) + "', receiver expects '" +
                                        codecName(codec.id()) + "'");
  ctx.step = h.step;
  ctx.microBatch = h.microBatch;
  ctx.exampleIds = h.exampleIds;
  const int64_t n = numelOf(h.shape);
  SP_REQUIRE(n <= std::min(maxElements, kMaxFrameElements),
             "frame: shape " + shapeString(h.shape) + " has " + std::to_string(n) +
                 " elements, more than a frame of " +
                 (maxElements < kMaxFrameElements
                      ? "this run may carry (" + std::to_string(maxElements) + ")"
                      : "any run may carry (" + std::to_string(kMaxFrameElements) + ")") +
                 "; refused before anything was allocated (its payload is " +
                 std::to_string(h.payloadBytes) + " bytes)");
  out.resize(static_cast<size_t>(n));
  codec.decode(data + at, h.payloadBytes, h.shape, ctx, out.data());
}

}  // namespace slowpipe::compression
