/* slowpipe codec plug-in ABI, version 1. A plain C header: a plug-in is a shared library built
 * against this file alone (C or C++), loaded with dlopen by `plugin:path=libx.so[,key=value...]`.
 *
 * The library exports one function,
 *
 *     const slowpipe_codec_api* slowpipe_codec_plugin(void);
 *
 * returning a table that lives as long as the library. slowpipe checks abi_version first and
 * refuses a table of another version, naming the library.
 *
 * Contract (the same as compression/codec.h; `slowpipe codec check plugin:path=...` verifies it):
 *   - create() parses the parameters after path= ("key=value,key=value", possibly ""), returns NULL
 *     with a message in err on bad input. slowpipe makes one instance per end of each link: the
 *     sender only encodes, the receiver only decodes.
 *   - max_payload() bounds the payload of a message of `shape`; encode() writes at most that many
 *     bytes into out and returns how many, or -1 with a message in err.
 *   - decode() validates the whole payload (its size included) before writing state, writes
 *     numel(shape) floats, returns 0, or nonzero with a message in err. It must never read outside
 *     payload[0, size) whatever the bytes are.
 *   - Deterministic: the same messages in the same order give the same payloads. Randomness must
 *     be seeded from the parameters and the context, which both ends see identically.
 *   - State both ends mirror (like AC-SGD's per-example buffers) goes into state_digest(), equal on
 *     the sender and the receiver after every message; NULL when there is none.
 *   - Calls on one instance never overlap; different instances may run on different threads.
 */
#ifndef SLOWPIPE_PLUGIN_ABI_H
#define SLOWPIPE_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SLOWPIPE_CODEC_ABI_VERSION 1u

/* What a codec may know about a message besides its values: equal on both ends (the encoder's
 * and the decoder's calls for one message get the same values, the key included). */
typedef struct slowpipe_codec_context {
  int32_t direction; /* 0 forward activations, 1 backward gradients, 2 data-parallel exchange */
  int32_t epoch;
  int64_t step;
  int32_t micro_batch;
  int32_t reserved;
  const int64_t* example_ids; /* one per index of dim 0 */
  size_t n_example_ids;
  const char* key; /* stable tensor name, e.g. "fwd/mb3", "dp/round0/c1" */
} slowpipe_codec_context;

typedef struct slowpipe_codec slowpipe_codec; /* the plug-in's own state */

typedef struct slowpipe_codec_api {
  uint32_t abi_version; /* SLOWPIPE_CODEC_ABI_VERSION */
  const char* name;     /* short name, e.g. "mycodec" */
  slowpipe_codec* (*create)(const char* params, char* err, size_t err_len);
  void (*destroy)(slowpipe_codec* c);
  /* Canonical parameters ("key=value,..."): writes up to len bytes with a terminating 0, returns
   * the length it needs (without the 0). */
  size_t (*canonical_params)(const slowpipe_codec* c, char* buf, size_t len);
  size_t (*max_payload)(const slowpipe_codec* c, const int64_t* shape, int ndim);
  int64_t (*encode)(slowpipe_codec* c, const float* x, const int64_t* shape, int ndim,
                    const slowpipe_codec_context* ctx, uint8_t* out, size_t out_len, char* err,
                    size_t err_len);
  int (*decode)(slowpipe_codec* c, const uint8_t* payload, size_t size, const int64_t* shape,
                int ndim, const slowpipe_codec_context* ctx, float* out, char* err, size_t err_len);
  uint64_t (*state_digest)(const slowpipe_codec* c); /* NULL: no mirrored state */
} slowpipe_codec_api;

typedef const slowpipe_codec_api* (*slowpipe_codec_plugin_fn)(void);

/* Optional, for projections on a device (`slowpipe simulate` with an analytic profile): what the
 * codec with these canonical parameters costs where it would run. Export
 *   size_t slowpipe_codec_device_cost(const char* canonical_params, char* buf, size_t len);
 * writing a JSON object (up to len bytes with a terminating 0; it returns the length it needs,
 * 0 for "nothing declared") with either "encode_bytes_per_s" and "decode_bytes_per_s" (of the fp32
 * message) or "encode_flops_per_element", "encode_bytes_per_element", "decode_flops_per_element",
 * "decode_bytes_per_element" (against the device's peak FLOP/s and memory bandwidth). Without it a
 * plug-in is costed on the host's CPU, measured. */
typedef size_t (*slowpipe_codec_device_cost_fn)(const char* canonical_params, char* buf,
                                                size_t len);

#ifdef __cplusplus
}
#endif

#endif /* SLOWPIPE_PLUGIN_ABI_H */
