/* A codec plug-in in plain C, built three ways for the plug-in tests:
 *   (default)        "int8": per-tensor max-abs scale, one signed byte per value; a mirrored
 *                    state (messages seen and the sum of their example ids) in state_digest
 *   PLUGIN_BAD_ABI   the same table claiming ABI version 99
 *   PLUGIN_CRASH     decode dereferences NULL (a plug-in with a bug: the check must survive it)
 * Parameters: "clip=C" (values beyond +-C are clipped before scaling; default: no clip). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compression/plugin_abi.h"

struct slowpipe_codec {
  double clip;
  uint64_t messages, idSum;
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

static void see(slowpipe_codec* c, const slowpipe_codec_context* ctx) {
  c->messages++;
  for (size_t i = 0; i < ctx->n_example_ids; ++i) c->idSum += (uint64_t)ctx->example_ids[i];
}

static int64_t encode(slowpipe_codec* c, const float* x, const int64_t* shape, int ndim, const slowpipe_codec_context* ctx,
                      uint8_t* out, size_t outLen, char* err, size_t errLen) {
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
  memcpy(out, &scale, 4);
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    if (c->clip > 0) v = v > c->clip ? (float)c->clip : (v < -c->clip ? (float)-c->clip : v);
    long q = lrintf(v / scale);
    out[4 + i] = (uint8_t)(int8_t)(q > 127 ? 127 : (q < -127 ? -127 : q));
  }
  see(c, ctx);
  return 4 + n;
}

static int decode(slowpipe_codec* c, const uint8_t* payload, size_t size, const int64_t* shape, int ndim,
                  const slowpipe_codec_context* ctx, float* out, char* err, size_t errLen) {
#ifdef PLUGIN_CRASH
  volatile int* null = NULL;
  *null = (int)size;
#endif
  const int64_t n = numel(shape, ndim);
  if (size != (size_t)(4 + n)) {
    snprintf(err, errLen, "payload of %zu bytes, expected %lld", size, (long long)(4 + n));
    return 1;
  }
  float scale;
  memcpy(&scale, payload, 4);
  if (!isfinite(scale) || scale <= 0) {
    snprintf(err, errLen, "scale %g is not a positive number", (double)scale);
    return 1;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = scale * (float)(int8_t)payload[4 + i];
  see(c, ctx);
  return 0;
}

static uint64_t stateDigest(const slowpipe_codec* c) { return c->messages * 1000003u + c->idSum; }

static const slowpipe_codec_api kApi = {
#ifdef PLUGIN_BAD_ABI
    99u,
#else
    SLOWPIPE_CODEC_ABI_VERSION,
#endif
    "int8", create, destroy, canonicalParams, maxPayload, encode, decode, stateDigest};

const slowpipe_codec_api* slowpipe_codec_plugin(void) { return &kApi; }
