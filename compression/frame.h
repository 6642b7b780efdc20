// The frame: one stage message on the wire, a self-describing header plus a codec payload.
//
// Layout (little-endian; offsets in bytes):
//   0  u32 magic "SPF1"      4  u16 version (1)     6  u8 kind          7  u8 dtype (0 = fp32)
//   8  i64 step             16  i32 micro-batch    20  i32 src rank    24  i32 dst rank
//  28  u16 codec id         30  u8 ndim (<= 8)     31  u8 chunk (boundary)
//  32  i64 shape[ndim] | u32 id count | i64 example ids[count] | u64 payload length
//      | u32 CRC-32C of every byte before it and of the payload | payload
// decodeFrame validates every field before reading the payload, and the codec validates the
// payload before it writes anything: a damaged frame is a FrameError naming the field.
#pragma once

#include <cstdint>
#include <vector>

#include "compression/codec.h"

namespace slowpipe::compression {

// kControl: small scalars between stages (gradient-norm reduction); kEval: validation activations.
enum class MessageKind : uint8_t {
  kActivation = 1,
  kGradient = 2,
  kParamGradient = 3,
  kControl = 4,
  kEval = 5
};

struct FrameHeader {
  MessageKind kind = MessageKind::kActivation;
  int64_t step = 0;
  int32_t microBatch = 0;
  int32_t src = 0, dst = 0;
  // The pipeline boundary a message crosses with interleaved model chunks (0 otherwise): where
  // frame version 1 had a reserved zero byte, so every frame before it reads as chunk 0.
  uint8_t chunk = 0;
  CodecId codec = CodecId::kNone;
  Shape shape;
  std::vector<int64_t> exampleIds;
  uint64_t payloadBytes = 0;  // filled in by encodeFrame / parseFrame
};

constexpr uint32_t kFrameMagic = 0x31465053u;  // "SPF1"
constexpr uint16_t kFrameVersion = 1;
constexpr size_t kMaxDims = 8;
constexpr int64_t kMaxFrameElements = int64_t{1} << 30;  // 4 GiB of fp32 per message

// Index of the first NaN/Inf among x[0, n), or -1 if all are finite (one vectorised pass).
int64_t firstNonFinite(const float* x, int64_t n);
// Encodes x with codec into a complete frame. header.codec/payloadBytes are set from the codec.
// Throws NonFiniteError if x holds NaN or +-Inf: no codec is handed non-finite input.
Bytes encodeFrame(Codec& codec, const float* x, FrameHeader header, const CodecContext& ctx);
// Validates magic, version, fields, length and checksum; returns the header and the payload offset.
FrameHeader parseFrame(const uint8_t* data, size_t size, size_t* payloadOffset);
// parseFrame, then checks the codec id and decodes into out (resized to the shape).
// ctx.step/microBatch/exampleIds are taken from the header.
FrameHeader decodeFrame(Codec& codec, const uint8_t* data, size_t size, CodecContext ctx,
                        std::vector<float>& out);
// The second half of decodeFrame for a frame already parsed (header h, payload at `payloadOffset`):
// the receive path parses once, checks the header against the schedule, then decodes. A shape of
// more than maxElements elements (what the receiver's largest message holds) is refused before
// `out` is allocated.
void decodeParsedFrame(Codec& codec, const FrameHeader& h, const uint8_t* data,
                       size_t payloadOffset, CodecContext ctx, std::vector<float>& out,
                       int64_t maxElements = kMaxFrameElements);

}  // namespace slowpipe::compression
