// TorchScript codecs (torchscript.h).
#include "compression/torchscript.h"

#include <torch/script.h>

#include <cmath>
#include <cstring>

#include "compression/error.h"

namespace slowpipe::compression {
namespace {

class TorchScriptCodec : public Codec {
 public:
  TorchScriptCodec(std::string path, std::string params)
      : path_(std::move(path)), params_(std::move(params)) {
    try {
      module_ = torch::jit::load(path_);
    } catch (const std::exception& e) {
      throw CodecError("torchscript: cannot load '" + path_ + "': " + firstLine(e.what()) +
                       " (expected a module saved with torch.jit.script(m).save(path))");
    }
    module_.eval();
    for (const char* m : {"encode", "decode"})
      SP_REQUIRE(module_.find_method(m).has_value(),
                 "torchscript '" + path_ + "': the module has no method " + m +
                     " (export it with @torch.jit.export; see compression/torchscript.h for the "
                     "contract)");
    // encode(self, x, example_ids, epoch, step[, direction, micro_batch, key]) and decode(self,
    // payload, shape, example_ids, epoch, step[, direction, micro_batch, key]): the context in
    // full, or the older form without the last three.
    const size_t encodeArgs =
        module_.get_method("encode").function().getSchema().arguments().size();
    const size_t decodeArgs =
        module_.get_method("decode").function().getSchema().arguments().size();
    SP_REQUIRE((encodeArgs == 5 && decodeArgs == 6) || (encodeArgs == 8 && decodeArgs == 9),
               "torchscript '" + path_ + "': encode takes " + std::to_string(encodeArgs - 1) +
                   " arguments and decode " + std::to_string(decodeArgs - 1) +
                   "; expected encode(x, example_ids, epoch, step, direction, micro_batch, key) "
                   "and decode(payload, shape, example_ids, epoch, step, direction, micro_batch, "
                   "key), or both without the "
                   "last three (compression/torchscript.h)");
    fullContext_ = encodeArgs == 8;
    hasDigest_ = module_.find_method("state_digest").has_value();
    const bool hasConfigure = module_.find_method("configure").has_value();
    c10::Dict<std::string, std::string> dict;
    for (const auto& kv : splitParams(params_)) dict.insert(kv.first, kv.second);
    SP_REQUIRE(hasConfigure || dict.empty(),
               "torchscript '" + path_ + "': parameters '" + params_ +
                   "' given, but the module has no configure(params) method");
    if (hasConfigure) call("configure", {dict});
  }

  CodecId id() const override { return CodecId::kTorchScript; }
  std::string spec() const override {
    return "torchscript:path=" + path_ + (params_.empty() ? "" : "," + params_);
  }

  void encode(const float* x, const Shape& shape, const CodecContext& ctx, Bytes& out) override {
    const auto t = torch::from_blob(const_cast<float*>(x), shape, torch::kFloat32).clone();
    const auto r =
        call("encode", withContext({t, ids(ctx), static_cast<int64_t>(ctx.epoch), ctx.step}, ctx));
    SP_REQUIRE(r.isTensor(), "torchscript '" + path_ + "': encode returned " + r.tagKind() +
                                 ", expected a uint8 tensor");
    const auto p = r.toTensor().contiguous();
    SP_REQUIRE(p.scalar_type() == torch::kUInt8,
               "torchscript '" + path_ + "': encode returned a tensor of " +
                   std::string(c10::toString(p.scalar_type())) + ", expected uint8");
    SP_REQUIRE(static_cast<uint64_t>(p.numel()) <= maxPayloadBytes(shape),
               "torchscript '" + path_ + "': encode returned " + std::to_string(p.numel()) +
                   " bytes, more than the " + std::to_string(maxPayloadBytes(shape)) +
                   " a message of shape " + shapeString(shape) +
                   " may carry (8 bytes a value + 64 KiB)");
    ByteWriter(out).append(p.data_ptr<uint8_t>(), static_cast<size_t>(p.numel()));
  }

  // A module may encode as it likes, up to twice fp32 (+ 64 KiB): the receivers' message limit.
  uint64_t maxPayloadBytes(const Shape& shape) const override {
    return 8 * static_cast<uint64_t>(numelOf(shape)) + (64 << 10);
  }

  void decode(const uint8_t* payload, size_t size, const Shape& shape, const CodecContext& ctx,
              float* out) override {
    const auto p =
        torch::from_blob(const_cast<uint8_t*>(payload), {static_cast<int64_t>(size)}, torch::kUInt8)
            .clone();
    const auto r = call("decode", withContext({p, c10::List<int64_t>(shape), ids(ctx),
                                               static_cast<int64_t>(ctx.epoch), ctx.step},
                                              ctx));
    SP_REQUIRE(r.isTensor(), "torchscript '" + path_ + "': decode returned " + r.tagKind() +
                                 ", expected a float32 tensor");
    const auto y = r.toTensor().contiguous();
    const int64_t n = numelOf(shape);
    SP_REQUIRE(y.scalar_type() == torch::kFloat32 && y.numel() == n,
               "torchscript '" + path_ + "': decode returned " + std::to_string(y.numel()) +
                   " values of " + std::string(c10::toString(y.scalar_type())) + ", expected " +
                   std::to_string(n) + " float32 values for shape " + shapeString(shape));
    const float* v = y.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i)
      SP_REQUIRE(std::isfinite(v[i]),
                 "torchscript '" + path_ + "': decode produced a non-finite value at element " +
                     std::to_string(i) + " (a malformed payload must raise instead)");
    std::memcpy(out, v, 4 * static_cast<size_t>(n));
  }

  uint64_t stateDigest() const override {
    if (!hasDigest_) return 0;
    const auto r = const_cast<TorchScriptCodec*>(this)->call("state_digest", {});
    SP_REQUIRE(r.isInt(), "torchscript '" + path_ + "': state_digest returned " + r.tagKind() +
                              ", expected int");
    return static_cast<uint64_t>(r.toInt());
  }

 private:
  static std::string firstLine(const std::string& s) { return s.substr(0, s.find('\n')); }
  // A TorchScript error ends with the exception itself ("builtins.ValueError: ..." or
  // "RuntimeError: ...") after the traceback.
  static std::string lastLine(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    std::string line = s.substr(s.rfind('\n') == std::string::npos ? 0 : s.rfind('\n') + 1);
    if (line.rfind("builtins.", 0) == 0) line = line.substr(9);
    return line;
  }

  static std::vector<std::pair<std::string, std::string>> splitParams(const std::string& s) {
    std::vector<std::pair<std::string, std::string>> out;
    size_t at = 0;
    while (at < s.size()) {
      const size_t comma = s.find(',', at), end = comma == std::string::npos ? s.size() : comma;
      const std::string kv = s.substr(at, end - at);
      const size_t eq = kv.find('=');
      SP_REQUIRE(eq != std::string::npos && eq > 0,
                 "torchscript: parameter '" + kv + "' is not key=value");
      out.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
      at = end + 1;
    }
    return out;
  }

  static torch::Tensor ids(const CodecContext& ctx) {
    return torch::tensor(ctx.exampleIds.empty() ? std::vector<int64_t>{} : ctx.exampleIds,
                         torch::kInt64);
  }

  // The rest of the context for a module that takes it: direction (0 forward, 1 backward, 2
  // data-parallel), micro-batch and key, as plug-ins get them.
  std::vector<c10::IValue> withContext(std::vector<c10::IValue> args,
                                       const CodecContext& ctx) const {
    if (!fullContext_) return args;
    args.emplace_back(static_cast<int64_t>(ctx.direction));
    args.emplace_back(static_cast<int64_t>(ctx.microBatch));
    args.emplace_back(ctx.key);
    return args;
  }
  c10::IValue call(const char* method, std::vector<c10::IValue> args) {
    torch::NoGradGuard noGrad;
    try {
      return module_.get_method(method)(std::move(args));
    } catch (const std::exception& e) {
      throw CodecError("torchscript '" + path_ + "': " + method + " raised " + lastLine(e.what()));
    }
  }

  std::string path_, params_;
  torch::jit::Module module_;
  bool hasDigest_ = false;
  bool fullContext_ = false;
};

}  // namespace

std::unique_ptr<Codec> makeTorchScriptCodec(const std::string& path, const std::string& params) {
  return std::make_unique<TorchScriptCodec>(path, params);
}

void registerTorchScriptCodec() {
  registerCodecFactory("torchscript", [](const std::string& rest, const std::string&) {
    // path= first; everything after it is the module's own parameters.
    SP_REQUIRE(rest.rfind("path=", 0) == 0,
               "codec 'torchscript': expected torchscript:path=<codec.pt>[,key=value...], got '" +
                   rest + "'");
    const size_t comma = rest.find(',');
    const std::string path =
        rest.substr(5, comma == std::string::npos ? std::string::npos : comma - 5);
    SP_REQUIRE(!path.empty(), "codec 'torchscript': path= is empty");
    return makeTorchScriptCodec(path, comma == std::string::npos ? "" : rest.substr(comma + 1));
  });
}

}  // namespace slowpipe::compression
