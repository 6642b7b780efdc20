// `slowpipe bench codecs`: single-thread encode/decode throughput of codec configurations on
// activation-shaped fp32 tensors ([rows, seq, 1024]), against memcpy measured in the same run
// (every codec measured `rounds` times in turn; within a round, a memcpy of the same size is timed
// right before every encode/decode sample, and the ratios are medians of the samples' own ratios:
// medians and ranges over rounds) and, for quant, against the same quantizer written with libtorch
// ops (the AC-SGD reference's fixpoint.py transcription for fixpoint per-channel scales): speed and
// whether the bytes / values match. GB/s always counts fp32 *input* bytes (10^9 B/s). Torch side of
// compression.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compression/codec.h"

namespace slowpipe::compression {

std::vector<std::string> defaultBenchCodecs();

struct CodecBenchOptions {
  std::vector<std::string> codecs = defaultBenchCodecs();
  std::vector<int64_t> sizesKiB = {64, 65536};
  int rounds = 3;
  // > 1: every codec is measured again on this many threads (compression.threads, parallel.h), in
  // the same round, and its thread speed-up reported.
  int threads = 1;
  // The fastest link of a sweep, bits per second: a codec whose encode or decode rate (fp32 bytes)
  // is below twice this link's byte rate is flagged ("codec_bound": true).
  double linkBps = 10e9;
  // Called before each measurement (codec, tensor shape, round from 0).
  std::function<void(const std::string&, const Shape&, int)> onCodec;
};

// {"benchmark": "codecs", "threads": 1, "unit", "cpu_path", "memcpy_GBps", "memcpy_GBps_by_bytes",
// "checksum_GBps_by_bytes" (the frame checksum over that many bytes, one thread; with threads > 1
// also "checksum_GBps_threads_by_bytes"; a frame's sender and receiver each pay it per wire byte),
// "results": [{"codec", "shape", "raw_bytes", "wire_bytes", "compression_ratio", "encode_GBps",
// "decode_GBps", "encode_vs_memcpy", "decode_vs_memcpy" (medians, each with "_range"),
// "rel_rms_error", "memcpy_GBps" (the paired memcpys' median), "read_GBps" (one read-only pass
// over the input, measured after the codec: a two-pass encoder is bounded by half of it),
// "torch_ops_*", "matches_torch_ops", "rounds", "codec_bound", with threads > 1
// "encode_GBps_threads", "decode_GBps_threads", "encode_thread_speedup", "decode_thread_speedup",
// "read_GBps_threads" and "read_thread_speedup" (the read-only pass split over the threads: a
// read-bound codec's ceiling), "memcpy_GBps_threads" and "memcpy_thread_speedup" (memcpy split
// over the threads: the ceiling of a codec that writes as it reads); the speed-ups are medians of
// per-sample ratios, the threaded codec sampled in turn with the single-threaded one; for a
// quantizing codec (encodeTrafficOf, below) its traffic floor, timed after each sample:
// "floor_encode_GBps", "floor_vs_memcpy" and "encode_vs_floor" (medians of per-sample ratios;
// near 1.0 the codec is as fast as its memory traffic allows here; one thread), ...}],
// "link_bps", "threads"}. Throws
// std::invalid_argument naming a bad codec spec, size (< 4 KiB) or round count before measuring.
nlohmann::json benchCodecs(const CodecBenchOptions& o);

// The memory traffic a quantizing encoder cannot avoid: with two passes (channel scales: the
// scales before the codes) pass 1 reads x and the encoder's state buffer, pass 2 reads both again
// and writes the buffer and `bits` per value of codes; with one pass (group scales, each group
// worked in cache) only pass 2. bufferBytes: the state buffer's bytes per value (0 none; acsgd's m
// 4 fp32, 2 fp16, 1 q8; ef's residual 4 fp32, 2 bf16).
struct EncodeTraffic {
  int passes;  // 1 or 2
  int bufferBytes;
  int bits;
};
// quant (either scale layout, any rounding or levels), acsgd, and ef with a quant inner codec;
// nullopt for the others (their traffic depends on more than these three numbers).
std::optional<EncodeTraffic> encodeTrafficOf(const Codec& codec);
// Those passes over n values with next to no arithmetic (integer or/xor/add on 8-byte words,
// prefetched 16 KiB ahead into L2 as the codecs' kernels are): every byte of x and of the buffer
// (n * bufferBytes) read once a pass, every byte of the buffer and of out (n * bits / 8 rounded
// up) written once; each pass split over the codec threads (parallel.h). The rate the codec's
// encode would reach on one thread if only memory set it (`bench codecs`' floor_* fields). Returns
// a sum of the words read (kept, so that no pass is optimized away). Throws std::invalid_argument
// for passes not 1 or 2, bufferBytes not 0, 1, 2 or 4, or bits not 1 to 8.
uint64_t encodeTrafficPasses(const float* x, uint8_t* buffer, int64_t n, EncodeTraffic t,
                             uint8_t* out);

}  // namespace slowpipe::compression
