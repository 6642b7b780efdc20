// Codec spec strings: "name", "name:key=value,...", "ef(inner spec)". Every codec lists the keys it
// accepts; anything else is an error that names the key and lists the valid ones.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <stdexcept>

#include "compression/acsgd.h"
#include "compression/builtin.h"
#include "compression/codec.h"
#include "compression/hadamard.h"
#include "compression/lowrank.h"
#include "compression/plugin.h"
#include "compression/quant.h"
#include "compression/randk.h"
#include "compression/simple_codecs.h"
#include "compression/strict_int.h"

namespace slowpipe::compression {
namespace {

using Params = std::map<std::string, std::string>;

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

Params parseParams(const std::string& name, const std::string& text,
                   const std::vector<std::string>& valid) {
  Params p;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = trim(text.substr(start, comma - start));
    const size_t eq = item.find('=');
    SP_REQUIRE(eq != std::string::npos && eq > 0 && eq + 1 < item.size(),
               "codec '" + name + "': parameter '" + item + "' is not of the form key=value");
    const std::string key = trim(item.substr(0, eq));
    SP_REQUIRE(std::find(valid.begin(), valid.end(), key) != valid.end(),
               "codec '" + name + "': unknown parameter '" + key +
                   "'; valid: " + (valid.empty() ? std::string("(none)") : join(valid)));
    SP_REQUIRE(p.emplace(key, trim(item.substr(eq + 1))).second,
               "codec '" + name + "': parameter '" + key + "' given twice");
    start = comma + 1;
  }
  return p;
}

int64_t parseInt(const std::string& name, const std::string& key, const std::string& v) {
  const std::optional<int64_t> n = parseStrictInt(v);
  SP_REQUIRE(n.has_value(), "codec '" + name + "': " + key + "='" + v + "' is not an integer");
  return *n;
}

uint64_t parseBytes(const std::string& name, const std::string& key, const std::string& v) {
  static const std::vector<std::pair<std::string, uint64_t>> kUnits = {
      {"KiB", 1ull << 10}, {"MiB", 1ull << 20},   {"GiB", 1ull << 30}, {"KB", 1000ull},
      {"MB", 1000000ull},  {"GB", 1000000000ull}, {"B", 1ull}};
  for (const auto& [suffix, mult] : kUnits) {
    if (v.size() > suffix.size() &&
        v.compare(v.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const int64_t n = parseInt(name, key, v.substr(0, v.size() - suffix.size()));
      SP_REQUIRE(n >= 0, "codec '" + name + "': " + key + "='" + v + "' must be >= 0");
      return static_cast<uint64_t>(n) * mult;
    }
  }
  const int64_t n = parseInt(name, key, v);
  SP_REQUIRE(n >= 0,
             "codec '" + name + "': " + key + "='" + v + "' must be >= 0 (bytes, or 64MiB, 1GiB)");
  return static_cast<uint64_t>(n);
}

std::string pick(const std::string& name, const std::string& key, const std::string& v,
                 const std::vector<std::string>& choices) {
  SP_REQUIRE(std::find(choices.begin(), choices.end(), v) != choices.end(),
             "codec '" + name + "': " + key + "='" + v + "' is not valid; expected one of " +
                 join(choices));
  return v;
}

// ratio= of the sparsifiers (topk, randk): required, a number (the codec checks its range).
double requiredRatio(const std::string& name, const Params& p) {
  SP_REQUIRE(p.count("ratio"),
             "codec '" + name + "': missing parameter ratio (e.g. " + name + ":ratio=0.01)");
  double ratio = 0;
  size_t used = 0;
  try {
    ratio = std::stod(p.at("ratio"), &used);
  } catch (const std::exception&) {
  }
  SP_REQUIRE(used == p.at("ratio").size() && used > 0,
             "codec '" + name + "': ratio='" + p.at("ratio") + "' is not a number");
  return ratio;
}

const std::vector<std::string> kQuantKeys = {"bits", "scale", "group", "round", "seed", "levels"};

QuantOptions quantOptions(const std::string& name, const Params& p, int defaultBits) {
  QuantOptions q;
  q.bits = defaultBits;
  if (p.count("bits")) q.bits = static_cast<int>(parseInt(name, "bits", p.at("bits")));
  SP_REQUIRE(q.bits >= 1 && q.bits <= 8, "codec '" + name + "': bits=" + std::to_string(q.bits) +
                                             " is out of range; expected 1..8");
  const bool hasGroup = p.count("group") != 0;
  std::string scale = hasGroup ? "group" : "channel";
  if (p.count("scale")) scale = pick(name, "scale", p.at("scale"), {"channel", "group"});
  SP_REQUIRE(!(hasGroup && scale == "channel"),
             "codec '" + name + "': group= only applies to scale=group, not scale=channel");
  q.scale = scale == "group" ? QuantOptions::Scale::kGroup : QuantOptions::Scale::kChannel;
  if (hasGroup) q.group = parseInt(name, "group", p.at("group"));
  SP_REQUIRE(q.group >= 1,
             "codec '" + name + "': group=" + std::to_string(q.group) + " must be >= 1");
  if (p.count("round"))
    q.round = pick(name, "round", p.at("round"), {"nearest", "stochastic"}) == "nearest"
                  ? QuantOptions::Round::kNearest
                  : QuantOptions::Round::kStochastic;
  if (p.count("seed")) q.seed = static_cast<uint64_t>(parseInt(name, "seed", p.at("seed")));
  if (p.count("levels"))
    q.levels = pick(name, "levels", p.at("levels"), {"symmetric", "fixpoint"}) == "fixpoint"
                   ? QuantOptions::Levels::kFixpoint
                   : QuantOptions::Levels::kSymmetric;
  return q;
}

std::unique_ptr<Codec> makeAcsgd(const Params& p, const std::string& instance) {
  AcsgdOptions o;
  o.quant = quantOptions("acsgd", p, 2);
  if (p.count("warmup_epochs"))
    o.warmupEpochs = static_cast<int>(parseInt("acsgd", "warmup_epochs", p.at("warmup_epochs")));
  if (p.count("store")) {
    const std::string d = pick("acsgd", "store", p.at("store"), {"fp32", "fp16", "q8"});
    o.store.dtype = d == "fp32"   ? StoreOptions::Dtype::kFp32
                    : d == "fp16" ? StoreOptions::Dtype::kFp16
                                  : StoreOptions::Dtype::kQ8;
  }
  if (p.count("backing"))
    o.store.backing = pick("acsgd", "backing", p.at("backing"), {"ram", "mmap"}) == "ram"
                          ? StoreOptions::Backing::kRam
                          : StoreOptions::Backing::kMmap;
  if (p.count("path")) {
    SP_REQUIRE(o.store.backing == StoreOptions::Backing::kMmap,
               "codec 'acsgd': path= needs backing=mmap");
    o.store.path = p.at("path");
    if (!instance.empty()) o.store.path += "." + instance;
  }
  if (p.count("keep")) {
    SP_REQUIRE(p.count("path"), "codec 'acsgd': keep= needs backing=mmap,path=FILE");
    o.store.keepFile = pick("acsgd", "keep", p.at("keep"), {"true", "false"}) == "true";
  }
  if (p.count("budget")) o.store.budgetBytes = parseBytes("acsgd", "budget", p.at("budget"));
  return std::make_unique<AcsgdCodec>(o);
}

std::map<std::string, CodecFactory>& factories() {
  static std::map<std::string, CodecFactory> f;
  return f;
}

}  // namespace

void registerCodecFactory(const std::string& name, CodecFactory factory) {
  factories()[name] = std::move(factory);
}

// The built-ins in the registry's form, one line each (compression/builtin.h).
const std::vector<BuiltinCodec>& builtinCodecs() {
  static const std::vector<BuiltinCodec> all = [] {
    std::vector<BuiltinCodec> list = {
        randkCodec(),  // compression/randk.cc
    };
    for (size_t i = 0; i < list.size(); ++i) {
      const uint16_t id = list[i].wireId;
      if (id == 0 || isEnumCodecId(id))
        throw std::logic_error("codec '" + list[i].name + "': wire id " + std::to_string(id) +
                               " is taken");
      for (size_t j = 0; j < i; ++j)
        if (list[j].wireId == id || list[j].name == list[i].name)
          throw std::logic_error("codec '" + list[i].name + "': wire id or name registered twice");
    }
    return list;
  }();
  return all;
}

const BuiltinCodec* builtinCodecById(uint16_t wireId) {
  for (const BuiltinCodec& b : builtinCodecs())
    if (b.wireId == wireId) return &b;
  return nullptr;
}

int64_t intParam(const std::string& codec, const CodecParams& p, const std::string& key,
                 int64_t dflt) {
  return p.count(key) ? parseInt(codec, key, p.at(key)) : dflt;
}

double ratioParam(const std::string& codec, const CodecParams& p) {
  return requiredRatio(codec, p);
}

std::vector<std::string> codecNames() {
  std::vector<std::string> names = {"none", "fp16", "bf16", "quant", "topk", "lowrank", "acsgd"};
  for (const BuiltinCodec& b : builtinCodecs()) names.push_back(b.name);
  names.insert(
      names.end(),
      {"ef(<inner>[;store=fp32|bf16])", "hadamard(<inner>[;seed=S][;block=B])",
       "plugin:path=<lib.so>[,key=value...]", "torchscript:path=<codec.pt>[,key=value...]"});
  return names;
}

namespace {
// A wrapper codec's spec, NAME(INNER[;key=value]...): the options follow the inner spec, each after
// a ';' at the wrapper's own level (the inner spec uses ',' for its parameters, and a nested
// wrapper keeps its own ';' options: ef(hadamard(quant:bits=3;seed=4);store=bf16)).
struct Wrapper {
  std::string inner;
  Params opts;
};
Wrapper splitWrapper(const std::string& spec, const std::string& name,
                     const std::vector<std::string>& keys) {
  SP_REQUIRE(spec.back() == ')', "codec spec '" + spec + "': " + name + "( is not closed by ')'");
  const std::string body = spec.substr(name.size() + 1, spec.size() - name.size() - 2);
  size_t semi = std::string::npos;
  for (size_t i = 0, depth = 0; i < body.size() && semi == std::string::npos; ++i) {
    if (body[i] == '(')
      ++depth;
    else if (body[i] == ')' && depth > 0)
      --depth;
    else if (body[i] == ';' && depth == 0)
      semi = i;
  }
  Wrapper w{body.substr(0, semi), {}};
  if (semi != std::string::npos) {
    std::string opts = body.substr(semi + 1);
    for (char& ch : opts)
      if (ch == ';') ch = ',';
    w.opts = parseParams(name, opts, keys);
  }
  return w;
}
}  // namespace

std::unique_ptr<Codec> makeCodec(const std::string& rawSpec) { return makeCodec(rawSpec, ""); }

std::unique_ptr<Codec> makeCodec(const std::string& rawSpec, const std::string& instance) {
  const std::string spec = trim(rawSpec);
  if (spec.rfind("ef(", 0) == 0) {
    const Wrapper w = splitWrapper(spec, "ef", {"store"});
    auto store = ErrorFeedbackCodec::Store::kFp32;
    if (w.opts.count("store") &&
        pick("ef", "store", w.opts.at("store"), {"fp32", "bf16"}) == "bf16")
      store = ErrorFeedbackCodec::Store::kBf16;
    return std::make_unique<ErrorFeedbackCodec>(makeCodec(w.inner, instance), store);
  }
  if (spec.rfind("hadamard(", 0) == 0) {
    const Wrapper w = splitWrapper(spec, "hadamard", {"seed", "block"});
    const uint64_t seed =
        w.opts.count("seed")
            ? static_cast<uint64_t>(parseInt("hadamard", "seed", w.opts.at("seed")))
            : 1;
    const int64_t block =
        w.opts.count("block") ? parseInt("hadamard", "block", w.opts.at("block")) : 256;
    return std::make_unique<HadamardCodec>(makeCodec(w.inner, instance), seed, block);
  }
  const size_t colon = spec.find(':');
  const std::string name = trim(spec.substr(0, colon));
  const std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  for (const BuiltinCodec& b : builtinCodecs())
    if (b.name == name) return b.make(parseParams(name, rest, b.keys), instance);
  if (name == "none" || name == "fp32" || name == "fp16" || name == "bf16") {
    parseParams(name, rest, {});
    return std::make_unique<CastCodec>(name == "fp16"   ? CodecId::kFp16
                                       : name == "bf16" ? CodecId::kBf16
                                                        : CodecId::kNone);
  }
  if (name == "quant")
    return std::make_unique<QuantCodec>(quantOptions(name, parseParams(name, rest, kQuantKeys), 4));
  if (name == "topk") {
    const Params p = parseParams(name, rest, {"ratio", "bits"});
    const int bits = p.count("bits") ? static_cast<int>(parseInt(name, "bits", p.at("bits"))) : 16;
    return std::make_unique<TopkCodec>(requiredRatio(name, p), bits);
  }
  if (name == "lowrank") {
    const Params p = parseParams(name, rest, {"rank", "basis", "refresh", "iters", "seed"});
    SP_REQUIRE(p.count("rank"), "codec 'lowrank': missing parameter rank (e.g. lowrank:rank=8)");
    LowrankOptions o;
    o.rank = parseInt(name, "rank", p.at("rank"));
    if (p.count("basis")) o.pca = pick(name, "basis", p.at("basis"), {"random", "pca"}) == "pca";
    if (o.pca) o.refresh = 8;
    if (p.count("refresh")) o.refresh = parseInt(name, "refresh", p.at("refresh"));
    SP_REQUIRE(!o.pca || o.refresh >= 1,
               "codec 'lowrank': basis=pca needs refresh >= 1 (messages per basis)");
    if (p.count("iters")) {
      SP_REQUIRE(o.pca, "codec 'lowrank': iters= only applies to basis=pca");
      o.iters = static_cast<int>(parseInt(name, "iters", p.at("iters")));
    }
    if (p.count("seed")) o.seed = static_cast<uint64_t>(parseInt(name, "seed", p.at("seed")));
    return std::make_unique<LowrankCodec>(o);
  }
  if (name == "plugin") {
    // path= first; everything after it is the plug-in's own parameters, passed as written.
    SP_REQUIRE(rest.rfind("path=", 0) == 0,
               "codec 'plugin': expected plugin:path=<lib.so>[,key=value...], got '" + spec + "'");
    const size_t comma = rest.find(',');
    const std::string path =
        trim(rest.substr(5, comma == std::string::npos ? std::string::npos : comma - 5));
    SP_REQUIRE(!path.empty(), "codec 'plugin': path= is empty");
    return makePluginCodec(path, comma == std::string::npos ? "" : trim(rest.substr(comma + 1)));
  }
  if (name == "acsgd") {
    std::vector<std::string> keys = kQuantKeys;
    keys.insert(keys.end(), {"warmup_epochs", "store", "backing", "path", "keep", "budget"});
    return makeAcsgd(parseParams(name, rest, keys), instance);
  }
  if (const auto f = factories().find(name); f != factories().end())
    return f->second(rest, instance);
  SP_REQUIRE(name != "torchscript",
             "codec 'torchscript' needs libtorch, and this program was built without it "
             "(SLOWPIPE_WITH_TORCH=OFF); use the slowpipe binary of a libtorch build");
  throw CodecError("unknown codec '" + name + "' in spec '" + spec +
                   "'; valid codecs: " + join(codecNames()));
}

}  // namespace slowpipe::compression
