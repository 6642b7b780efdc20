// The files `slowpipe codec new` writes (codec_template.h), as raw strings: @NAME@ is the codec's
// name, @CLASS@ its CamelCase (the TorchScript module's class). Each one, as generated, builds and
// passes `slowpipe codec check` (tests/compression/codec_template_test.cc, tools/test.sh).
#include <map>
#include <string>

namespace slowpipe::compression::templates {

namespace {

// codec.c
constexpr const char* kCodecC =
    R"TPL(/* @NAME@: a slowpipe codec plug-in in C, written by `slowpipe codec new @NAME@ --lang c`.
 *
 * Build against an installed slowpipe and check the contract:
 *   cmake -S . -B build -DCMAKE_PREFIX_PATH=<slowpipe prefix> && cmake --build build
 *   <slowpipe prefix>/bin/slowpipe codec check plugin:path=$PWD/build/lib@NAME@.so,bits=8
 * Use it:  slowpipe run SPEC --out DIR --set compression.forward=plugin:path=$PWD/build/lib@NAME@.so,bits=8
 *
 * As generated it is a working codec to replace: one fp32 scale per message (max |x|), then one
 * byte per value holding a signed code of `bits` bits (2..8, default 8). The contract (the whole
 * of it is in <slowpipe/plugin_abi.h>; `slowpipe codec check` verifies every rule):
 *   - create() parses "key=value,..." (maybe ""), returns NULL with a message in err on bad input.
 *   - max_payload() bounds encode's payload for a shape; encode() writes at most that, returns
 *     the bytes written or -1 with a message in err.
 *   - decode() validates the whole payload (its size first) before writing anything, writes
 *     numel(shape) floats, returns 0, or nonzero with a message in err; it never reads outside
 *     payload[0, size), whatever the bytes are (`codec check` truncates, extends and flips them).
 *   - Deterministic: the same messages in the same order give the same bytes. Randomness is seeded
 *     from the parameters and the context (direction, epoch, step, micro_batch, example_ids, key),
 *     which both ends see alike.
 *   - State both ends mirror (AC-SGD's buffers m(x)) goes into state_digest(), equal on the sender
 *     and the receiver after every message; state only the sender keeps (an error-feedback
 *     residual per ctx->key) needs no digest. NULL: no mirrored state.
 *   - Calls on one instance never overlap; instances may run on different threads.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slowpipe/plugin_abi.h>

struct slowpipe_codec {
  int bits;
};

static int64_t numel(const int64_t* shape, int ndim) {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

static slowpipe_codec* create(const char* params, char* err, size_t err_len) {
  slowpipe_codec* c = (slowpipe_codec*)calloc(1, sizeof *c);
  if (!c) return NULL;
  c->bits = 8;
  if (params[0] != '\0') {
    int bits = 0;
    char extra = 0;
    if (sscanf(params, "bits=%d%c", &bits, &extra) != 1 || bits < 2 || bits > 8) {
      snprintf(err, err_len, "@NAME@: parameters '%s': expected bits=2..8", params);
      free(c);
      return NULL;
    }
    c->bits = bits;
  }
  return c;
}

static void destroy(slowpipe_codec* c) { free(c); }

static size_t canonical_params(const slowpipe_codec* c, char* buf, size_t len) {
  char s[32];
  const int n = snprintf(s, sizeof s, "bits=%d", c->bits);
  if (buf && len) snprintf(buf, len, "%s", s);
  return (size_t)n;
}

static size_t max_payload(const slowpipe_codec* c, const int64_t* shape, int ndim) {
  (void)c;
  return 4 + (size_t)numel(shape, ndim);  /* the scale, then one byte per value */
}

static int64_t encode(slowpipe_codec* c, const float* x, const int64_t* shape, int ndim, const slowpipe_codec_context* ctx,
                      uint8_t* out, size_t out_len, char* err, size_t err_len) {
  (void)ctx;
  const int64_t n = numel(shape, ndim);
  const size_t need = max_payload(c, shape, ndim);
  if (out_len < need) {
    snprintf(err, err_len, "@NAME@: a buffer of %zu bytes, %zu needed", out_len, need);
    return -1;
  }
  const int top = (1 << (c->bits - 1)) - 1;
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = fmaxf(m, fabsf(x[i]));
  memcpy(out, &m, 4);
  const float inv = m > 0.0f ? (float)top / m : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    long q = lrintf(x[i] * inv);
    if (q > top) q = top;
    if (q < -top) q = -top;
    out[4 + i] = (uint8_t)(int8_t)q;
  }
  return (int64_t)need;
}

static int decode(slowpipe_codec* c, const uint8_t* payload, size_t size, const int64_t* shape, int ndim,
                  const slowpipe_codec_context* ctx, float* out, char* err, size_t err_len) {
  (void)ctx;
  const int64_t n = numel(shape, ndim);
  if (size != max_payload(c, shape, ndim)) {
    snprintf(err, err_len, "@NAME@: a payload of %zu bytes, %zu expected", size, max_payload(c, shape, ndim));
    return 1;
  }
  float m;
  memcpy(&m, payload, 4);
  if (!isfinite(m) || m < 0.0f) {
    snprintf(err, err_len, "@NAME@: scale %g", (double)m);
    return 1;
  }
  const int top = (1 << (c->bits - 1)) - 1;
  for (int64_t i = 0; i < n; ++i) {
    int q = (int8_t)payload[4 + i];
    if (q > top) q = top;  /* a damaged code stays in range */
    if (q < -top) q = -top;
    out[i] = m * (float)q / (float)top;
  }
  return 0;
}

static const slowpipe_codec_api kApi = {SLOWPIPE_CODEC_ABI_VERSION, "@NAME@", create, destroy, canonical_params,
                                        max_payload, encode, decode, NULL};

const slowpipe_codec_api* slowpipe_codec_plugin(void) { return &kApi; }
)TPL";

// codec.cc
constexpr const char* kCodecCpp =
    R"TPL(// @NAME@: a slowpipe codec plug-in in C++, written by `slowpipe codec new @NAME@ --lang cpp`.
//
// Build against an installed slowpipe and check the contract:
//   cmake -S . -B build -DCMAKE_PREFIX_PATH=<slowpipe prefix> && cmake --build build
//   <slowpipe prefix>/bin/slowpipe codec check plugin:path=$PWD/build/lib@NAME@.so,bits=8
// Use it:  slowpipe run SPEC --out DIR --set compression.forward=plugin:path=$PWD/build/lib@NAME@.so,bits=8
//
// As generated it is a working codec to replace: one fp32 scale per message (max |x|), then one
// byte per value holding a signed code of `bits` bits (2..8, default 8). The contract (the whole
// of it is in <slowpipe/plugin_abi.h>; `slowpipe codec check` verifies every rule):
//   - create() parses "key=value,..." (maybe ""), returns nullptr with a message in err on bad input.
//   - max_payload() bounds encode's payload for a shape; encode() writes at most that, returns the
//     bytes written or -1 with a message in err. No exception may leave a plug-in function.
//   - decode() validates the whole payload (its size first) before writing anything, writes
//     numel(shape) floats, returns 0, or nonzero with a message in err; it never reads outside
//     payload[0, size), whatever the bytes are (`codec check` truncates, extends and flips them).
//   - Deterministic: the same messages in the same order give the same bytes. Randomness is seeded
//     from the parameters and the context (direction, epoch, step, micro_batch, example_ids, key),
//     which both ends see alike.
//   - State both ends mirror (AC-SGD's buffers m(x)) goes into state_digest(), equal on the sender
//     and the receiver after every message; state only the sender keeps (an error-feedback
//     residual per ctx->key) needs no digest. nullptr: no mirrored state.
//   - Calls on one instance never overlap; instances may run on different threads.
#include <slowpipe/plugin_abi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

struct slowpipe_codec {
  int bits = 8;
};

namespace {

int64_t numel(const int64_t* shape, int ndim) {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

slowpipe_codec* create(const char* params, char* err, size_t errLen) {
  auto* c = new slowpipe_codec;
  if (params[0] != '\0') {
    int bits = 0;
    char extra = 0;
    if (std::sscanf(params, "bits=%d%c", &bits, &extra) != 1 || bits < 2 || bits > 8) {
      std::snprintf(err, errLen, "@NAME@: parameters '%s': expected bits=2..8", params);
      delete c;
      return nullptr;
    }
    c->bits = bits;
  }
  return c;
}

void destroy(slowpipe_codec* c) { delete c; }

size_t canonicalParams(const slowpipe_codec* c, char* buf, size_t len) {
  const std::string s = "bits=" + std::to_string(c->bits);
  if (buf && len) std::snprintf(buf, len, "%s", s.c_str());
  return s.size();
}

size_t maxPayload(const slowpipe_codec*, const int64_t* shape, int ndim) {
  return 4 + static_cast<size_t>(numel(shape, ndim));  // the scale, then one byte per value
}

int64_t encode(slowpipe_codec* c, const float* x, const int64_t* shape, int ndim, const slowpipe_codec_context*,
               uint8_t* out, size_t outLen, char* err, size_t errLen) {
  const int64_t n = numel(shape, ndim);
  const size_t need = maxPayload(c, shape, ndim);
  if (outLen < need) {
    std::snprintf(err, errLen, "@NAME@: a buffer of %zu bytes, %zu needed", outLen, need);
    return -1;
  }
  const int top = (1 << (c->bits - 1)) - 1;
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  std::memcpy(out, &m, 4);
  const float inv = m > 0 ? static_cast<float>(top) / m : 0.0f;
  for (int64_t i = 0; i < n; ++i)
    out[4 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(static_cast<int>(std::lrint(x[i] * inv)), -top, top)));
  return static_cast<int64_t>(need);
}

int decode(slowpipe_codec* c, const uint8_t* payload, size_t size, const int64_t* shape, int ndim, const slowpipe_codec_context*,
           float* out, char* err, size_t errLen) {
  const int64_t n = numel(shape, ndim);
  if (size != maxPayload(c, shape, ndim)) {
    std::snprintf(err, errLen, "@NAME@: a payload of %zu bytes, %zu expected", size, maxPayload(c, shape, ndim));
    return 1;
  }
  float m;
  std::memcpy(&m, payload, 4);
  if (!std::isfinite(m) || m < 0) {
    std::snprintf(err, errLen, "@NAME@: scale %g", static_cast<double>(m));
    return 1;
  }
  const int top = (1 << (c->bits - 1)) - 1;
  for (int64_t i = 0; i < n; ++i)  // a damaged code stays in range
    out[i] = m * static_cast<float>(std::clamp(static_cast<int>(static_cast<int8_t>(payload[4 + i])), -top, top)) /
             static_cast<float>(top);
  return 0;
}

const slowpipe_codec_api kApi = {SLOWPIPE_CODEC_ABI_VERSION, "@NAME@", create, destroy, canonicalParams,
                                 maxPayload, encode, decode, nullptr};

}  // namespace

extern "C" const slowpipe_codec_api* slowpipe_codec_plugin(void) { return &kApi; }
)TPL";

// codec.py
constexpr const char* kCodecTorchScript = R"TPL(#!/usr/bin/env python3
"""@NAME@: a slowpipe codec in Python (TorchScript), written by `slowpipe codec new @NAME@ --lang torchscript`.

    /usr/bin/python3 @NAME@.py @NAME@.pt                  # Debian's python3-torch (1.13, as libtorch-dev)
    slowpipe codec check torchscript:path=$PWD/@NAME@.pt,bits=8
    slowpipe codec check torchscript:path=$PWD/@NAME@.pt,bits=4,ef=1     # error feedback per micro-batch
    slowpipe run SPEC --out DIR --set compression.forward=torchscript:path=$PWD/@NAME@.pt,bits=4,ef=1

As generated it is a working codec to replace: one fp32 scale per message (max |x|), then one byte
per value holding a signed code of `bits` bits (2..8, default 8); with ef=1 the sender adds each
message's quantization error to the next message of the same key (one residual per micro-batch
and direction: the key is e.g. "fwd/mb3"). The contract (compression/torchscript.h; `slowpipe
codec check` verifies every rule):
  - encode(x, example_ids, epoch, step, direction, micro_batch, key) -> uint8 tensor (any shape,
    row-major). x: float32 of the message's shape (a copy). direction: 0 forward activations, 1
    backward gradients, 2 data-parallel exchange. The decoder gets the same context.
  - decode(payload, shape, example_ids, epoch, step, direction, micro_batch, key) -> float32 with
    numel(shape) values. A payload of the wrong size or with bad values must raise, never return
    garbage (`codec check` truncates, extends and flips payloads).
  - configure(params: Dict[str, str]) gets the spec's key=value parameters; raise on unknown ones.
  - Deterministic: the same messages in the same order give the same bytes.
  - state_digest() -> int (optional): a hash of state both ends mirror (like AC-SGD's buffers),
    equal on sender and receiver after every message. Sender-only state (the ef residuals) needs none.
  - The older form encode(x, example_ids, epoch, step) / decode(payload, shape, example_ids, epoch,
    step) is accepted too.
Byte views: TorchScript 1.13 cannot reinterpret a tensor's bytes (x.view(torch.uint8) resolves to
the shape overload), so f32_to_bytes / bytes_to_f32 and u32_to_bytes / bytes_to_u32 below do it
exactly with integer arithmetic (IEEE-754 little endian, as C's memcpy would).
"""
import sys
from typing import Dict, List

import torch


def u32_to_bytes(v: torch.Tensor) -> torch.Tensor:
    """int64 values in [0, 2^32) -> 4 little-endian bytes each (uint8)."""
    v = v.to(torch.int64).reshape(-1)
    parts = [torch.bitwise_and(torch.bitwise_right_shift(v, 8 * k), 255) for k in range(4)]
    return torch.stack(parts, dim=1).reshape(-1).to(torch.uint8)


def bytes_to_u32(b: torch.Tensor) -> torch.Tensor:
    """4 little-endian bytes each (uint8, a multiple of 4) -> int64 values in [0, 2^32)."""
    w = b.to(torch.int64).reshape(-1, 4)
    return w[:, 0] + w[:, 1] * 256 + w[:, 2] * 65536 + w[:, 3] * 16777216


def f32_bits(x: torch.Tensor) -> torch.Tensor:
    """The IEEE-754 bits of float32 values, as int64 in [0, 2^32): what x.view(torch.int32) would hold."""
    x = x.to(torch.float32).reshape(-1)
    a = x.abs().to(torch.float64)
    m, e = torch.frexp(a)  # a = m * 2^e, m in [0.5, 1)
    biased = e.to(torch.int64) + 126
    frac = ((m * 2.0 - 1.0) * 8388608.0).to(torch.int64)
    sub = biased <= 0  # subnormal: a = frac * 2^-149
    frac = torch.where(sub, (a * 2.0 ** 149).to(torch.int64), frac)
    biased = torch.where(sub, torch.zeros_like(biased), biased)
    zero = a == 0
    frac = torch.where(zero, torch.zeros_like(frac), frac)
    biased = torch.where(zero, torch.zeros_like(biased), biased)
    nan = torch.isnan(x)
    inf = torch.isinf(x)
    biased = torch.where(nan | inf, torch.full_like(biased, 255), biased)
    frac = torch.where(inf, torch.zeros_like(frac), torch.where(nan, torch.full_like(frac, 4194304), frac))
    sign = torch.signbit(x).to(torch.int64)
    return sign * 2147483648 + biased * 8388608 + frac


def bits_f32(bits: torch.Tensor) -> torch.Tensor:
    """float32 values from their IEEE-754 bits (int64 in [0, 2^32))."""
    bits = bits.to(torch.int64)
    sign = torch.bitwise_and(torch.bitwise_right_shift(bits, 31), 1)
    biased = torch.bitwise_and(torch.bitwise_right_shift(bits, 23), 255)
    frac = torch.bitwise_and(bits, 8388607).to(torch.float64)
    two = torch.full_like(frac, 2.0)
    v = torch.where(biased == 0, frac * 2.0 ** -149, (frac + 8388608.0) * torch.pow(two, (biased - 150).to(torch.float64)))
    v = torch.where(biased == 255, torch.where(frac == 0, torch.full_like(v, float("inf")), torch.full_like(v, float("nan"))), v)
    v = torch.where(sign == 1, -v, v)
    return v.to(torch.float32)


def f32_to_bytes(x: torch.Tensor) -> torch.Tensor:
    """float32 values -> their 4 IEEE-754 little-endian bytes each (uint8)."""
    return u32_to_bytes(f32_bits(x))


def bytes_to_f32(b: torch.Tensor) -> torch.Tensor:
    """4 IEEE-754 little-endian bytes each (uint8) -> float32 values."""
    return bits_f32(bytes_to_u32(b))


class @CLASS@(torch.nn.Module):
    bits: int
    ef: bool
    residual: Dict[str, torch.Tensor]  # sender only, per key (micro-batch and direction)

    def __init__(self):
        super().__init__()
        self.bits = 8
        self.ef = False
        self.residual = {}

    @torch.jit.export
    def configure(self, params: Dict[str, str]) -> None:
        for key, value in params.items():
            if key == "bits":
                bits = int(value)
                if bits < 2 or bits > 8:
                    raise ValueError("@NAME@: bits=" + value + " is out of range; expected 2..8")
                self.bits = bits
            elif key == "ef":
                if value != "0" and value != "1":
                    raise ValueError("@NAME@: ef=" + value + "; expected 0 or 1")
                self.ef = value == "1"
            else:
                raise ValueError("@NAME@: unknown parameter '" + key + "'; expected bits, ef")

    @torch.jit.export
    def encode(self, x: torch.Tensor, example_ids: torch.Tensor, epoch: int, step: int, direction: int, micro_batch: int,
               key: str) -> torch.Tensor:
        flat = x.reshape(-1)
        if self.ef and key in self.residual and self.residual[key].numel() == flat.numel():
            flat = flat + self.residual[key]
        top = float(2 ** (self.bits - 1) - 1)
        scale = flat.abs().max() if flat.numel() > 0 else torch.zeros([], dtype=torch.float32)
        inv = torch.where(scale > 0, torch.full_like(scale, top) / scale, torch.zeros_like(scale))
        codes = torch.round(flat * inv).clamp(-top, top)
        if self.ef:
            self.residual[key] = flat - codes * (scale / top)
        return torch.cat([f32_to_bytes(scale.reshape(1)), (codes.to(torch.int64) + 128).to(torch.uint8)])

    @torch.jit.export
    def decode(self, payload: torch.Tensor, shape: List[int], example_ids: torch.Tensor, epoch: int, step: int,
               direction: int, micro_batch: int, key: str) -> torch.Tensor:
        n = 1
        for d in shape:
            n *= d
        if payload.numel() != 4 + n:
            raise ValueError("@NAME@: a payload of " + str(payload.numel()) + " bytes, " + str(4 + n) + " expected")
        scale = bytes_to_f32(payload[0:4])
        if not bool(torch.isfinite(scale).all()) or float(scale[0]) < 0:
            raise ValueError("@NAME@: the scale is not a finite value >= 0")
        top = float(2 ** (self.bits - 1) - 1)
        codes = (payload[4:].to(torch.int64) - 128).clamp(-int(top), int(top)).to(torch.float32)
        return codes * (scale / top)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: @NAME@.py OUT.pt")
    torch.jit.script(@CLASS@()).save(sys.argv[1])
    print(sys.argv[1])
)TPL";

// CMakeLists.c
constexpr const char* kCMakeC =
    R"TPL(# @NAME@: a slowpipe codec plug-in, built against an installed slowpipe:
#   cmake -S . -B build -DCMAKE_PREFIX_PATH=<slowpipe prefix> && cmake --build build
#   <slowpipe prefix>/bin/slowpipe codec check plugin:path=$PWD/build/lib@NAME@.so
cmake_minimum_required(VERSION 3.22)
project(@NAME@ LANGUAGES C)
find_package(slowpipe REQUIRED)
add_library(@NAME@ MODULE @NAME@.c)
target_link_libraries(@NAME@ PRIVATE slowpipe::codec m)
)TPL";

// CMakeLists.cpp
constexpr const char* kCMakeCpp =
    R"TPL(# @NAME@: a slowpipe codec plug-in, built against an installed slowpipe:
#   cmake -S . -B build -DCMAKE_PREFIX_PATH=<slowpipe prefix> && cmake --build build
#   <slowpipe prefix>/bin/slowpipe codec check plugin:path=$PWD/build/lib@NAME@.so
cmake_minimum_required(VERSION 3.22)
project(@NAME@ LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(slowpipe REQUIRED)
add_library(@NAME@ MODULE @NAME@.cc)
target_link_libraries(@NAME@ PRIVATE slowpipe::codec)
)TPL";

}  // namespace

const std::map<std::string, std::string>& all() {
  static const std::map<std::string, std::string> kFiles = {
      {"codec.c", kCodecC},      {"codec.cc", kCodecCpp},       {"codec.py", kCodecTorchScript},
      {"CMakeLists.c", kCMakeC}, {"CMakeLists.cpp", kCMakeCpp},
  };
  return kFiles;
}

}  // namespace slowpipe::compression::templates
