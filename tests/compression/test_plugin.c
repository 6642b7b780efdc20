/* A codec plug-in in plain C, built three ways for the plug-in tests:
 *   (default)        "int8": per-tensor max-abs scale, one signed byte per value; a mirrored
 *                    state (messages seen and the sum of their example ids) in state_digest
 *   PLUGIN_BAD_ABI   the same table claiming ABI version 99
 *   PLUGIN_CRASH     decode dereferences NULL (a plug-in with a bug: the check must survive it)
 *   PLUGIN_OOB       the scale travels after the values and decode checks only for payloads
 *                    that are too long: a truncated payload makes it read past its end (a bug
 *                    the check must catch: the payload ends at a protected page there)
 *   PLUGIN_SLOW      the same codec, spending about 100 ns a value in encode (a codec too slow
 *                    for a 10 Gbps link: the sweep flags its points codec_bound)
 * Parameters: "clip=C" (values beyond +-C are clipped before scaling; default: no clip). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compression/plugin_abi.h"

struct slowpipe_codec {
  double clip;
  uint64_t messages, idSum, ctxSum;
};

static int64_t numel(const int64_t* shape, int ndim) {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

static slowpipe_codec* create(const char* params, char* err, size_t errLen) {
  slowpipe_codec* c = (slowpipe_codec*)calloc(1, sizeof *c);
  if (!c) return NULL;
  if (params[0]) {
    if (strncmp(params, "clip=", 5) != 0 || strchr(params, ',')) {
      snprintf(err, errLen, "unknown parameters '%s'; expected clip=C", params);
      free(c);
      return NULL;
    }
    char* end = NULL;
    c->clip = strtod(params + 5, &end);
    if (*end || !(c->clip > 0)) {
      snprintf(err, errLen, "clip='%s' is not a positive number", params + 5);
      free(c);
      return NULL;
    }
  }
  return c;
}

static void destroy(slowpipe_codec* c) { free(c); }

static size_t canonicalParams(const slowpipe_codec* c, char* buf, size_t len) {
  char tmp[64] = "";
  if (c->clip > 0) snprintf(tmp, sizeof tmp, "clip=%g", c->clip);
  if (buf && len) snprintf(buf, len, "%s", tmp);
  return strlen(tmp);
}

static size_t maxPayload(const slowpipe_codec* c, const int64_t* shape, int ndim) {
  (void)c;
  return 4 + (size_t)numel(shape, ndim);
}

/* The mirrored state folds in the whole context, so a context that differs between the ends
 * (direction, epoch, step, micro-batch, key) makes the digests differ. */
static void see(slowpipe_codec* c, const slowpipe_codec_context* ctx) {
  c->messages++;
  for (size_t i = 0; i < ctx->n_example_ids; ++i) c->idSum += (uint64_t)ctx->example_ids[i];
  uint64_t h = (uint64_t)ctx->direction * 7u + (uint64_t)(uint32_t)ctx->epoch * 131u +
               (uint64_t)ctx->step * 1009u + (uint64_t)(uint32_t)ctx->micro_batch * 17u;
  for (const char* k = ctx->key ? ctx->key : ""; *k; ++k) h = h * 31u + (uint8_t)*k;
  c->ctxSum = c->ctxSum * 1000003u + h;
}

static int64_t encode(slowpipe_codec* c, const float* x, const int64_t* shape, int ndim,
                      const slowpipe_codec_context* ctx, uint8_t* out, size_t outLen, char* err,
                      size_t errLen) {
  const int64_t n = numel(shape, ndim);
  if (outLen < (size_t)(4 + n)) {
    snprintf(err, errLen, "buffer of %zu bytes for %lld values", outLen, (long long)n);
    return -1;
  }
  float m = 0;
  for (int64_t i = 0; i < n; ++i) {
    float v = fabsf(x[i]);
    if (c->clip > 0 && v > c->clip) v = (float)c->clip;
    if (v > m) m = v;
  }
  const float scale = m > 0 ? m / 127.0f : 1.0f;
#ifdef PLUGIN_OOB
  uint8_t* values = out;
  memcpy(out + n, &scale, 4);
#else
  uint8_t* values = out + 4;
  memcpy(out, &scale, 4);
#endif
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    if (c->clip > 0) v = v > c->clip ? (float)c->clip : (v < -c->clip ? (float)-c->clip : v);
    long q = lrintf(v / scale);
    values[i] = (uint8_t)(int8_t)(q > 127 ? 127 : (q < -127 ? -127 : q));
#ifdef PLUGIN_SLOW
    for (volatile int spin = 0; spin < 100; ++spin) {
    }
#endif
  }
  see(c, ctx);
  return 4 + n;
}

static int decode(slowpipe_codec* c, const uint8_t* payload, size_t size, const int64_t* shape,
                  int ndim, const slowpipe_codec_context* ctx, float* out, char* err,
                  size_t errLen) {
#ifdef PLUGIN_CRASH
  volatile int* null = NULL;
  *null = (int)size;
#endif
  const int64_t n = numel(shape, ndim);
#ifdef PLUGIN_OOB
  if (size > (size_t)(4 + n)) { /* the bug: a short payload is not refused */
    snprintf(err, errLen, "payload of %zu bytes, more than %lld", size, (long long)(4 + n));
    return 1;
  }
  float scale;
  memcpy(&scale, payload + n, 4);
  const uint8_t* values = payload;
#else
  if (size != (size_t)(4 + n)) {
    snprintf(err, errLen, "payload of %zu bytes, expected %lld", size, (long long)(4 + n));
    return 1;
  }
  float scale;
  memcpy(&scale, payload, 4);
  const uint8_t* values = payload + 4;
#endif
  if (!isfinite(scale) || scale <= 0) {
    snprintf(err, errLen, "scale %g is not a positive number", (double)scale);
    return 1;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = scale * (float)(int8_t)values[i];
  see(c, ctx);
  return 0;
}

static uint64_t stateDigest(const slowpipe_codec* c) {
  return c->messages * 1000003u + c->idSum + c->ctxSum * 7919u;
}

static const slowpipe_codec_api kApi = {
#ifdef PLUGIN_BAD_ABI
    99u,
#else
    SLOWPIPE_CODEC_ABI_VERSION,
#endif
    "int8", create, destroy, canonicalParams, maxPayload, encode, decode, stateDigest};

const slowpipe_codec_api* slowpipe_codec_plugin(void) { return &kApi; }

#ifdef PLUGIN_DEVICE_COST
/* What it costs on a device (optional export, plugin_abi.h): declared rates of the fp32 message. */
size_t slowpipe_codec_device_cost(const char* canonical_params, char* buf, size_t len) {
  (void)canonical_params;
  const char* cost = "{\"encode_bytes_per_s\": 5e11, \"decode_bytes_per_s\": 7e11}";
  const size_t n = strlen(cost);
  if (buf && len > 0) {
    strncpy(buf, cost, len - 1);
    buf[len - 1] = 0;
  }
  return n;
}
#endif
