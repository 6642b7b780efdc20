// Plug-in codecs: a Codec over the C table of a dlopen'ed library (see plugin_abi.h).
#include "compression/plugin.h"

#include <dlfcn.h>

#include <atomic>
#include <map>
#include <mutex>

#include "compression/error.h"
#include "compression/plugin_abi.h"

namespace slowpipe::compression {
namespace {

struct Library {
  void* handle = nullptr;
  const slowpipe_codec_api* api = nullptr;
  slowpipe_codec_device_cost_fn deviceCost = nullptr;  // optional export
};

// One handle per path for the life of the process: codecs of one library share it, and it is
// never closed while an instance might still run its code.
const Library& load(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, Library> libs;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = libs.find(path); it != libs.end()) return it->second;
  Library lib;
  lib.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib.handle) throw CodecError("codec plugin '" + path + "': cannot load it: " + dlerror());
  auto entry =
      reinterpret_cast<slowpipe_codec_plugin_fn>(dlsym(lib.handle, "slowpipe_codec_plugin"));
  if (!entry) {
    dlclose(lib.handle);
    throw CodecError("codec plugin '" + path +
                     "': exports no slowpipe_codec_plugin() (see compression/plugin_abi.h)");
  }
  lib.api = entry();
  lib.deviceCost = reinterpret_cast<slowpipe_codec_device_cost_fn>(
      dlsym(lib.handle, "slowpipe_codec_device_cost"));
  if (!lib.api)
    throw CodecError("codec plugin '" + path + "': slowpipe_codec_plugin() returned NULL");
  if (lib.api->abi_version != SLOWPIPE_CODEC_ABI_VERSION)
    throw CodecError("codec plugin '" + path + "': ABI version " +
                     std::to_string(lib.api->abi_version) + ", this slowpipe speaks version " +
                     std::to_string(SLOWPIPE_CODEC_ABI_VERSION));
  if (!lib.api->name || !lib.api->create || !lib.api->destroy || !lib.api->canonical_params ||
      !lib.api->max_payload || !lib.api->encode || !lib.api->decode)
    throw CodecError("codec plugin '" + path +
                     "': its table leaves a required function NULL (name, create, destroy, "
                     "canonical_params, max_payload, encode, decode)");
  return libs.emplace(path, lib).first->second;
}

std::string errText(const char* buf) {
  return buf[0] ? std::string(buf) : std::string("(no message)");
}

std::atomic<const char*> gPluginInUse{nullptr};

// Marks the plug-in's code as running for the scope (calls nest only through a plug-in, never).
class InPlugin {
 public:
  explicit InPlugin(const std::string& where) : previous_(gPluginInUse.exchange(where.c_str())) {}
  ~InPlugin() { gPluginInUse = previous_; }

 private:
  const char* previous_;
};

class PluginCodec : public Codec {
 public:
  PluginCodec(std::string path, const Library& lib, slowpipe_codec* c)
      : path_(std::move(path)), api_(lib.api), costFn_(lib.deviceCost), c_(c) {
    const size_t n = api_->canonical_params(c_, nullptr, 0);
    std::string params(n, '\0');
    api_->canonical_params(c_, params.data(), n + 1);
    params_ = params;
    spec_ = "plugin:path=" + path_ + (params.empty() ? "" : "," + params);
    for (const char* f : {"encode", "decode", "max_payload", "state_digest"})
      inside_[f] = where() + ", in its " + f;
  }
  ~PluginCodec() override { api_->destroy(c_); }

  CodecId id() const override { return CodecId::kPlugin; }
  std::string deviceCost() const override {
    if (!costFn_) return "";
    const InPlugin in(where() + ", in its slowpipe_codec_device_cost");
    const size_t n = costFn_(params_.c_str(), nullptr, 0);
    if (n == 0) return "";
    std::string text(n, '\0');
    costFn_(params_.c_str(), text.data(), n + 1);
    return text;
  }
  std::string spec() const override { return spec_; }
  uint64_t maxPayloadBytes(const Shape& shape) const override {
    const InPlugin in(inside_.at("max_payload"));
    return api_->max_payload(c_, shape.data(), static_cast<int>(shape.size()));
  }

  void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) override {
    const size_t cap = maxPayloadBytes(shape);
    const InPlugin in(inside_.at("encode"));
    const size_t at = out.size();
    out.resize(at + cap);
    char err[512] = {0};
    const slowpipe_codec_context cx = context(ctx);
    const int64_t n = api_->encode(c_, x, shape.data(), static_cast<int>(shape.size()), &cx,
                                   out.data() + at, cap, err, sizeof err);
    if (n < 0) throw CodecError(where() + ": encode failed: " + errText(err));
    if (static_cast<size_t>(n) > cap)
      throw CodecError(where() + ": encode returned " + std::to_string(n) +
                       " bytes, more than max_payload " + std::to_string(cap));
    out.resize(at + static_cast<size_t>(n));
  }

  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* out) override {
    const InPlugin in(inside_.at("decode"));
    char err[512] = {0};
    const slowpipe_codec_context cx = context(ctx);
    if (api_->decode(c_, payload, size, shape.data(), static_cast<int>(shape.size()), &cx, out, err,
                     sizeof err) != 0)
      throw CodecError(where() + ": " + errText(err));
  }

  uint64_t stateDigest() const override {
    const InPlugin in(inside_.at("state_digest"));
    return api_->state_digest ? api_->state_digest(c_) : 0;
  }

 private:
  std::string where() const { return "codec plugin '" + path_ + "' (" + api_->name + ")"; }
  static slowpipe_codec_context context(const CodecContext& ctx) {
    slowpipe_codec_context cx{};
    cx.direction = ctx.direction == Direction::kForward ? 0 : 1;
    cx.epoch = ctx.epoch;
    cx.step = ctx.step;
    cx.micro_batch = ctx.microBatch;
    cx.example_ids = ctx.exampleIds.data();
    cx.n_example_ids = ctx.exampleIds.size();
    cx.key = ctx.key.c_str();
    return cx;
  }

  std::string path_, spec_;
  std::map<std::string, std::string>
      inside_;  // what pluginInUse() says while each entry point runs
  const slowpipe_codec_api* api_;
  slowpipe_codec_device_cost_fn costFn_;
  std::string params_;
  slowpipe_codec* c_;
};

}  // namespace

const char* pluginInUse() { return gPluginInUse.load(); }

std::unique_ptr<Codec> makePluginCodec(const std::string& path, const std::string& params) {
  const Library& lib = load(path);
  char err[512] = {0};
  slowpipe_codec* c = lib.api->create(params.c_str(), err, sizeof err);
  if (!c) throw CodecError("codec plugin '" + path + "' (" + lib.api->name + "): " + errText(err));
  return std::make_unique<PluginCodec>(path, lib, c);
}

}  // namespace slowpipe::compression
