// rowquant: an example codec plug-in. Every row (last dimension) gets its own fp32 scale, max|x|
// over the row; values become b-bit signed codes round(x / scale * (2^(b-1) - 1)), packed
// little-endian into bytes. Stateless, deterministic. Parameter: bits=2..8 (default 4).
#include <slowpipe/plugin_abi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

struct slowpipe_codec {
  int bits = 4;
};

namespace {

int64_t numel(const int64_t* shape, int ndim) {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

int64_t rowLength(const int64_t* shape, int ndim) {
  return ndim > 0 ? std::max<int64_t>(1, shape[ndim - 1]) : 1;
}

size_t codeBytes(int64_t n, int bits) { return static_cast<size_t>((n * bits + 7) / 8); }

slowpipe_codec* create(const char* params, char* err, size_t errLen) {
  auto* c = new slowpipe_codec;
  const std::string p = params;
  if (!p.empty()) {
    int bits = 0;
    char extra = 0;
    if (std::sscanf(p.c_str(), "bits=%d%c", &bits, &extra) != 1 || bits < 2 || bits > 8) {
      std::snprintf(err, errLen, "parameters '%s': expected bits=2..8", params);
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

size_t maxPayload(const slowpipe_codec* c, const int64_t* shape, int ndim) {
  const int64_t n = numel(shape, ndim), rows = n / rowLength(shape, ndim);
  return static_cast<size_t>(4 * rows) + codeBytes(n, c->bits);
}

int64_t encode(slowpipe_codec* c, const float* x, const int64_t* shape, int ndim,
               const slowpipe_codec_context*, uint8_t* out, size_t outLen, char* err,
               size_t errLen) {
  const int64_t n = numel(shape, ndim), len = rowLength(shape, ndim), rows = n / len;
  const size_t need = maxPayload(c, shape, ndim);
  if (outLen < need) {
    std::snprintf(err, errLen, "buffer of %zu bytes, need %zu", outLen, need);
    return -1;
  }
  const int levels = (1 << (c->bits - 1)) - 1;
  std::memset(out + 4 * rows, 0, codeBytes(n, c->bits));
  for (int64_t r = 0; r < rows; ++r) {
    float m = 0;
    for (int64_t i = 0; i < len; ++i) m = std::max(m, std::fabs(x[r * len + i]));
    std::memcpy(out + 4 * r, &m, 4);
    const float inv = m > 0 ? levels / m : 0.0f;
    for (int64_t i = 0; i < len; ++i) {
      const int64_t k = r * len + i;
      const int q = static_cast<int>(std::lrint(x[k] * inv));
      const uint32_t code =
          static_cast<uint32_t>(std::clamp(q, -levels, levels) + levels);  // 0..2*levels
      for (int b = 0; b < c->bits; ++b)
        if (code >> b & 1u)
          out[4 * rows + (k * c->bits + b) / 8] |=
              static_cast<uint8_t>(1u << ((k * c->bits + b) % 8));
    }
  }
  return static_cast<int64_t>(need);
}

int decode(slowpipe_codec* c, const uint8_t* payload, size_t size, const int64_t* shape, int ndim,
           const slowpipe_codec_context*, float* out, char* err, size_t errLen) {
  const int64_t n = numel(shape, ndim), len = rowLength(shape, ndim), rows = n / len;
  if (size != maxPayload(c, shape, ndim)) {
    std::snprintf(err, errLen, "payload of %zu bytes, expected %zu", size,
                  maxPayload(c, shape, ndim));
    return 1;
  }
  const int levels = (1 << (c->bits - 1)) - 1;
  for (int64_t r = 0; r < rows; ++r) {
    float m;
    std::memcpy(&m, payload + 4 * r, 4);
    if (!std::isfinite(m) || m < 0) {
      std::snprintf(err, errLen, "row %lld has scale %g", static_cast<long long>(r),
                    static_cast<double>(m));
      return 1;
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    uint32_t code = 0;
    for (int b = 0; b < c->bits; ++b)
      code |= static_cast<uint32_t>(
                  payload[4 * rows + (k * c->bits + b) / 8] >> ((k * c->bits + b) % 8) & 1u)
              << b;
    float m;
    std::memcpy(&m, payload + 4 * (k / len), 4);
    const int q =
        std::min(static_cast<int>(code), 2 * levels) - levels;  // a damaged code stays in range
    out[k] = levels ? m * static_cast<float>(q) / static_cast<float>(levels) : 0.0f;
  }
  return 0;
}

const slowpipe_codec_api kApi = {SLOWPIPE_CODEC_ABI_VERSION,
                                 "rowquant",
                                 create,
                                 destroy,
                                 canonicalParams,
                                 maxPayload,
                                 encode,
                                 decode,
                                 nullptr};

}  // namespace

extern "C" const slowpipe_codec_api* slowpipe_codec_plugin(void) { return &kApi; }
