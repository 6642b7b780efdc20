// The registered gradient compressors (runtime/dp/gradient_compressor.h): one file each, one line
// in runtime/dp/compressor_list.h (which registers the torch side too).
#include <algorithm>
#include <stdexcept>

#include "compression/codec.h"
#include "compression/strict_int.h"
#include "runtime/dp/compressor_list.h"
#include "runtime/dp/gradient_compressor.h"

namespace slowpipe::runtime {

#define SLOWPIPE_DECLARE_PARSE(name, named, parse, make) \
  std::unique_ptr<GradientCompressor> parse(const DpSpec& dp);
SLOWPIPE_GRADIENT_COMPRESSORS(SLOWPIPE_DECLARE_PARSE)
#undef SLOWPIPE_DECLARE_PARSE

const std::vector<GradientCompressorInfo>& gradientCompressors() {
#define SLOWPIPE_PARSE_ENTRY(name, named, parse, make) {name, named, parse},
  static const std::vector<GradientCompressorInfo> all = {
      SLOWPIPE_GRADIENT_COMPRESSORS(SLOWPIPE_PARSE_ENTRY)};
#undef SLOWPIPE_PARSE_ENTRY
  return all;
}

namespace {
bool namedBy(const std::string& spec, const std::string& name) {
  return spec.compare(0, name.size(), name) == 0 &&
         (spec.size() == name.size() || spec[name.size()] == ':');
}
const GradientCompressorInfo& entry(const std::string& name) {
  for (const auto& c : gradientCompressors())
    if (name == c.name) return c;
  throw std::logic_error("no gradient compressor '" + name + "' is registered");
}
}  // namespace

std::unique_ptr<GradientCompressor> gradientCompressor(const DpSpec& dp) {
  for (const auto& c : gradientCompressors())
    if (c.namedInCodec && namedBy(dp.codec, c.name)) {
      if (dp.localSteps > 1)
        throw std::invalid_argument("'" + dp.codec +
                                    "' compresses every step's gradient; with local_steps " +
                                    std::to_string(dp.localSteps) +
                                    " (DiLoCo) the outer gradient takes a codec spec "
                                    "(e.g. quant:bits=8,scale=group,group=512)");
      return c.parse(dp);
    }
  return entry(dp.localSteps > 1 ? "diloco" : "codec").parse(dp);
}

std::map<std::string, std::string> compressorParams(const std::string& spec,
                                                    const std::string& name,
                                                    const std::vector<std::string>& known) {
  std::map<std::string, std::string> out;
  const std::string text = spec.size() > name.size() ? spec.substr(name.size() + 1) : "";
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = text.find(',', at);
    const std::string kv =
        text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument(name + ": '" + kv + "' is not key=value");
    const std::string k = kv.substr(0, eq);
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      std::string list;
      for (const auto& x : known) list += (list.empty() ? "" : ", ") + x;
      throw std::invalid_argument(name + ": unknown parameter '" + k + "'; known: " + list);
    }
    out[k] = kv.substr(eq + 1);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

int64_t paramInt(const std::map<std::string, std::string>& p, const std::string& name,
                 const std::string& key, int64_t fallback, int64_t lo, int64_t hi) {
  const auto it = p.find(key);
  if (it == p.end()) return fallback;
  return compression::parseStrictIntIn<std::invalid_argument>(name + ": " + key, it->second, lo,
                                                              hi);
}

void GradientCompressor::useCodec(const std::string& codec) {
  compression::makeCodec(codec);  // throws a CodecError naming the problem
  codec_ = codec;
}

int64_t GradientCompressor::param(const std::string& key) const {
  const auto it = params_.find(key);
  if (it == params_.end())
    throw std::logic_error(std::string(name()) + " has no parameter '" + key + "'");
  return it->second;
}

int64_t GradientCompressor::roundValues(const std::vector<std::vector<int64_t>>& shapes,
                                        int round) const {
  int64_t n = 0;
  for (const auto& p : shapes) {
    int64_t numel = 1;
    for (int64_t d : p) numel *= d;
    n += round == 0 ? numel : 0;
  }
  return n;
}

}  // namespace slowpipe::runtime
