// Codec conformance: the contract every codec (built-in or not) must keep, checked on real calls.
//
//   round_trip    shapes of rank 1-4 with odd sizes decode to the right number of finite values;
//                 a lossless codec (none) returns its input bit for bit
//   determinism   two fresh codecs given the same message sequence write the same payloads
//   state         a sender/receiver pair over several epochs, micro-batches and example ids keeps
//                 equal stateDigest()s after every message
//   damage        truncated, extended and bit-flipped frames are rejected with an error, and
//                 truncated or extended payloads handed to decode() too; a bit-flipped payload may
//                 decode to other values but never crashes. Each damaged decode runs in a forked
//                 child, so a crash is reported (with its signal) instead of ending the check
//   error         max |error| and relative L2 error on activations with outliers, seen a second
//                 time after a small drift (x1 = x0 + 0.1 n: the steady state AC-SGD is built
//                 for); figures, and for codecs with a known bound, a check
//   speed         single-thread encode/decode GB/s of fp32 input against memcpy in the same run,
//                 and whether that sustains 100 Mbps, 1 Gbps and 10 Gbps links
// The result is JSON: {"codec", "checks": [{"name", "ok", "detail"}], "figures": {...}, "ok"}.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "compression/codec.h"

namespace slowpipe::compression {

struct ConformanceOptions {
  int64_t speedElements = int64_t{16} << 20;  // fp32 elements of the speed message (64 MiB)
  double speedSeconds = 0.3;                  // minimum timed seconds per measurement
  bool isolate = true;                        // damaged decodes in forked children
};

// `make` builds a fresh codec of the spec under test (called several times: sender, receiver, ...).
nlohmann::json checkCodec(const std::function<std::unique_ptr<Codec>()>& make,
                          const ConformanceOptions& opt = {});
// checkCodec of makeCodec(spec) in a forked child that sends its JSON back through a pipe: a codec
// (a plug-in above all) that crashes ends the child, not the caller, and comes back as
// {"codec": spec, "error": "the check crashed (signal N) while running codec '...'"}.
nlohmann::json checkCodecIsolated(const std::string& spec, const ConformanceOptions& opt = {});

}  // namespace slowpipe::compression
