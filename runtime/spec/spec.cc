// RunSpec JSON reading and validation.
#include "runtime/spec/spec.h"

#include <sched.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>

#include "compression/codec.h"
#include "emulator/link.h"
#include "emulator/link_model.h"
#include "emulator/nodes.h"
#include "emulator/tcp_settings.h"
#include "runtime/comm/link_table.h"
#include "runtime/dp/dp.h"
#include "runtime/exec/protocol.h"
#include "runtime/exec/schedule.h"
#include "runtime/model/model_size.h"
#include "runtime/records/result.h"
#include "runtime/spec/spec_schema.h"

namespace slowpipe::runtime {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& field, const std::string& what) {
  throw std::invalid_argument(field + ": " + what);
}

// Reads the fields of one JSON object, refusing unknown keys.
class Fields {
 public:
  // The fields of `section` ("pipeline"; "" the spec itself) of the spec at `where`: each one read
  // must be documented in runtime/spec/spec_schema.cc.
  Fields(const json& j, const std::string& where, const std::string& section)
      : j_(j),
        where_(section.empty() ? where : where + "." + section),
        prefix_(section.empty() ? "" : section + ".") {
    if (!j_.is_object()) fail(where_, "expected an object, got " + std::string(j_.type_name()));
  }
  ~Fields() noexcept(false) {
    if (std::uncaught_exceptions()) return;
    for (const auto& [k, v] : j_.items())
      if (!used_.count(k)) fail(where_ + "." + k, "unknown field; known: " + known());
  }
  template <typename T>
  void get(const std::string& key, T& out) {
    specField(prefix_ + key);  // documented, or a logic_error naming it
    used_.insert(key);
    if (!j_.contains(key)) return;
    const json& v = j_.at(key);
    try {
      if constexpr (std::is_same_v<T, bool>) {
        if (!v.is_boolean()) throw std::invalid_argument("");
      } else if constexpr (std::is_integral_v<T>) {
        if (!v.is_number_integer()) throw std::invalid_argument("");
        // Range check before narrowing: 3000000000 for an int must not wrap to a negative value.
        const bool fits =
            v.is_number_unsigned()
                ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                : v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                      (std::is_unsigned_v<T> ||
                       v.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max()));
        if (!fits)
          fail(where_ + "." + key, v.dump() + " is out of range (" +
                                       std::to_string(std::numeric_limits<T>::min()) + ".." +
                                       std::to_string(std::numeric_limits<T>::max()) + ")");
      } else if constexpr (std::is_floating_point_v<T>) {
        if (!v.is_number()) throw std::invalid_argument("");
      } else if constexpr (std::is_same_v<T, std::string>) {
        if (!v.is_string()) throw std::invalid_argument("");
      }
      out = v.get<T>();
    } catch (const std::invalid_argument& e) {
      if (*e.what()) throw;  // a complete message (out of range) passes through
      fail(where_ + "." + key, "wrong type: got " + v.dump() + ", expected " + typeName<T>());
    } catch (const std::exception&) {
      fail(where_ + "." + key, "wrong type: got " + v.dump() + ", expected " + typeName<T>());
    }
  }
  const json* raw(const std::string& key) {
    specField(prefix_ + key);
    used_.insert(key);
    return j_.contains(key) ? &j_.at(key) : nullptr;
  }
  std::string field(const std::string& key) const { return where_ + "." + key; }

 private:
  template <typename T>
  static std::string typeName() {
    if constexpr (std::is_same_v<T, bool>)
      return "true/false";
    else if constexpr (std::is_integral_v<T>)
      return "an integer";
    else if constexpr (std::is_floating_point_v<T>)
      return "a number";
    else if constexpr (std::is_same_v<T, std::string>)
      return "a string";
    else
      return "a list of strings";
  }
  std::string known() const {
    std::string s;
    for (const auto& k : used_) s += (s.empty() ? "" : ", ") + k;
    return s;
  }
  const json& j_;
  std::string where_, prefix_;
  std::set<std::string> used_;
};

void positive(const std::string& field, double v) {
  if (!(v > 0)) fail(field, std::to_string(v) + " must be > 0");
}

}  // namespace

namespace {

// A link model that bills rate and latency only (serial_fifo: one inbound FIFO per rank): a jitter,
// loss or trace it would silently ignore is refused, naming the field.
void refuseUnmodelled(const json& links, const std::string& where, const std::string& model,
                      bool modelsLoss) {
  auto check = [&](json link,
                   const std::string& at) {  // one link's JSON, read by the link parser itself
    if (!link.is_object()) return;
    for (const char* k : {"links", "src", "dst"}) link.erase(k);
    const emulator::LinkSpec l = emulator::linkSpecFromJson(link, at);
    const char* key = l.jitterS > 0 ? (link.contains("jitter") ? "jitter" : "jitter_s")
                      : l.loss > 0 && !modelsLoss ? "loss"
                      : !l.trace.empty()          ? "trace"
                                                  : nullptr;
    if (key)
      throw std::invalid_argument(at + "." + key + ": " + link[key].dump() +
                                  " with network.model " + model + ", which models rate" +
                                  (modelsLoss ? ", latency and loss" : " and latency") +
                                  " only; jitter" + (modelsLoss ? "" : ", loss") +
                                  " and traces need network.model pipelined");
  };
  check(links, where);
  if (links.is_object() && links.contains("links") && links["links"].is_array())
    for (size_t i = 0; i < links["links"].size(); ++i)
      check(links["links"][i], where + ".links[" + std::to_string(i) + "]");
}

// Layers are bounded, and a run's model with its gradients and AdamW state (16 bytes a parameter)
// must fit in this machine's memory: out-of-range sizes are refused before any process starts
// (model.layers = 100000000 made the workers allocate without bound). The simulator runs any
// size: it allocates nothing per parameter.
void checkModelFits(const RunSpec& s, const std::string& where, bool simulation) {
  constexpr int kMaxLayers = 4096;
  if (s.model.layers > kMaxLayers)
    throw std::invalid_argument(where + ".model.layers: " + std::to_string(s.model.layers) +
                                " is beyond " + std::to_string(kMaxLayers) +
                                ", the most layers accepted");
  if (simulation) return;
  const double params = stageParameters(s.model, s.model.layers, true, true);
  const double need = 16.0 * params * s.pipeline.replicas;
  const double have =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (have > 0 && need > have) {
    char text[256];
    std::snprintf(
        text, sizeof text,
        "%.4g parameters x %d replica(s) need %.3g GiB for weights, gradients and AdamW state "
        "(16 bytes a parameter); this machine has %.3g GiB",
        params, s.pipeline.replicas, need / (1 << 30), have / (1 << 30));
    throw std::invalid_argument(where + ".model: layers " + std::to_string(s.model.layers) +
                                " x width " + std::to_string(s.model.width) + ": " + text);
  }
}

}  // namespace

namespace {

// pipeline.virtual_stages > 1: an interleaving schedule, a ring of at least two stages, whole
// rounds of micro-batches (Megatron-LM's interleaved schedule takes them S at a time), the
// user-space links, and with replicas a compressor that synchronises every chunk (each named when
// refused).
void checkVirtualStages(const RunSpec& s, const std::string& field) {
  const int V = s.pipeline.virtualStages, S = s.pipeline.stages;
  if (V > 64) fail(field, std::to_string(V) + " is beyond 64");
  const bool interleaves = scheduleInfo(s.pipeline.schedule).interleaves;
  if (V == 1) return;
  if (!interleaves)
    fail(field,
         std::to_string(V) +
             " model chunks per stage need a schedule that interleaves them (interleaved_1f1b); '" +
             s.pipeline.schedule + "' runs one");
  if (S < 2)
    fail(field,
         std::to_string(V) + " model chunks on 1 stage: interleaving needs pipeline.stages >= 2");
  if (S * V > 256) fail(field, std::to_string(S * V) + " virtual stages; at most 256");
  if (s.pipeline.microBatches % S != 0)  // not a rank: rounds of micro-batches
    fail(field, "interleaving takes micro-batches in rounds of pipeline.stages: micro_batches = " +
                    std::to_string(s.pipeline.microBatches) + " is not a multiple of " +
                    std::to_string(S));
}

}  // namespace

namespace {

// model: sizes, the byte-level vocabulary (other sizes are simulated only).
void parseModel(const json& section, const std::string& where, [[maybe_unused]] bool simulation,
                RunSpec& s) {
  Fields f(section, where, "model");
  f.get("checkpoint", s.model.checkpoint);
  if (!s.model.checkpoint.empty()) {
    f.get("seq_len", s.model.seqLen);
    f.get("seed", s.model.seed);
    positive(f.field("seq_len"), s.model.seqLen);
    try {
      s.model = modelFromHfConfig(s.model.checkpoint, s.model);
    } catch (const std::invalid_argument& e) {
      fail(f.field("checkpoint"), e.what());
    }
    for (const char* k : {"vocab", "layers", "width",
                          "heads"})  // the checkpoint's own; a different value is a mistake
      if (const json* v = f.raw(k);
          v && !(v->is_number_integer() &&
                 v->get<int64_t>() == (k == std::string("vocab")    ? s.model.vocab
                                       : k == std::string("layers") ? s.model.layers
                                       : k == std::string("width")  ? s.model.width
                                                                    : s.model.heads)))
        fail(f.field(k), v->dump() +
                             " differs from the checkpoint's config.json; leave it out (the "
                             "checkpoint says it)");
    if (s.model.family == "gpt2" && s.model.seqLen > s.model.positionRows())
      fail(f.field("seq_len"), std::to_string(s.model.seqLen) +
                                   " exceeds the checkpoint's n_positions " +
                                   std::to_string(s.model.positionRows()));
    return;
  }
  f.get("vocab", s.model.vocab);
  f.get("seq_len", s.model.seqLen);
  f.get("layers", s.model.layers);
  f.get("width", s.model.width);
  f.get("heads", s.model.heads);
  f.get("seed", s.model.seed);
  positive(f.field("layers"), s.model.layers);
  positive(f.field("width"), s.model.width);
  positive(f.field("heads"), s.model.heads);
  positive(f.field("seq_len"), s.model.seqLen);
  if (s.model.vocab < 2) fail(f.field("vocab"), std::to_string(s.model.vocab) + " must be >= 2");
  if (s.model.width % s.model.heads != 0)
    fail(f.field("heads"),
         std::to_string(s.model.heads) + " does not divide width " + std::to_string(s.model.width));
}

}  // namespace

namespace {

// A Hugging Face config.json's fields, each read with its check (errors name the file and key).
struct HfConfig {
  std::string file;
  json c;
  int need(const char* key) const {
    if (!c.contains(key) || !c[key].is_number_integer() || c[key].get<int64_t>() < 1 ||
        c[key].get<int64_t>() > (1 << 24))
      throw std::invalid_argument("'" + file + "': " + key + " " +
                                  (c.contains(key) ? c[key].dump() : "missing") +
                                  "; expected a positive integer");
    return c[key].get<int>();
  }
  double number(const char* key, double dflt) const {
    if (!c.contains(key) || c[key].is_null()) return dflt;
    if (!c[key].is_number())
      throw std::invalid_argument("'" + file + "': " + key + " " + c[key].dump() +
                                  " is not a number");
    return c[key].get<double>();
  }
  bool flag(const char* key, bool dflt) const {
    if (!c.contains(key) || c[key].is_null()) return dflt;
    if (!c[key].is_boolean())
      throw std::invalid_argument("'" + file + "': " + key + " " + c[key].dump() +
                                  " is not true/false");
    return c[key].get<bool>();
  }
};

void gpt2FromConfig(const HfConfig& cfg, ModelSpec& m) {
  const json& c = cfg.c;
  const std::string& file = cfg.file;
  m.family = "gpt2";
  m.layers = cfg.need("n_layer");
  m.width = cfg.need("n_embd");
  m.heads = cfg.need("n_head");
  m.vocab = cfg.need("vocab_size");
  m.positions = cfg.need("n_positions");
  m.intermediate = c.contains("n_inner") && !c["n_inner"].is_null() ? cfg.need("n_inner") : 0;
  m.normEps = cfg.number("layer_norm_epsilon", 1e-5);
  m.tiedHead = cfg.flag("tie_word_embeddings", true);
  m.activation = c.value("activation_function", "gelu_new");
  if (m.activation != "gelu_new")
    throw std::invalid_argument("'" + file + "': activation_function '" + m.activation +
                                "'; slowpipe runs GPT-2's gelu_new");
}

// Llama, Mistral and Qwen2: RMSNorm, SwiGLU, RoPE, grouped-query attention.
void llamaFromConfig(const HfConfig& cfg, const std::string& type, ModelSpec& m) {
  const json& c = cfg.c;
  const std::string& file = cfg.file;
  m.family = "llama";
  m.layers = cfg.need("num_hidden_layers");
  m.width = cfg.need("hidden_size");
  m.heads = cfg.need("num_attention_heads");
  m.kvHeads = c.contains("num_key_value_heads") && !c["num_key_value_heads"].is_null()
                  ? cfg.need("num_key_value_heads")
                  : m.heads;
  m.intermediate = cfg.need("intermediate_size");
  m.vocab = cfg.need("vocab_size");
  m.normEps = cfg.number("rms_norm_eps", 1e-6);
  m.ropeTheta = cfg.number("rope_theta", 10000.0);
  m.tiedHead = cfg.flag("tie_word_embeddings", false);
  m.qkvBias = type == "qwen2" || cfg.flag("attention_bias", false);
  m.oBias = type == "llama" && cfg.flag("attention_bias", false);
  m.activation = c.value("hidden_act", "silu");
  if (m.activation != "silu")
    throw std::invalid_argument("'" + file + "': hidden_act '" + m.activation +
                                "'; slowpipe runs SwiGLU (silu)");
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null())
    throw std::invalid_argument("'" + file + "': rope_scaling " + c["rope_scaling"].dump() +
                                " is not supported (plain RoPE only)");
  if (c.contains("head_dim") && !c["head_dim"].is_null() && c["head_dim"] != m.width / m.heads)
    throw std::invalid_argument("'" + file + "': head_dim " + c["head_dim"].dump() +
                                " differs from hidden_size / num_attention_heads");
  if (m.heads % m.kvHeads != 0)
    throw std::invalid_argument("'" + file + "': num_key_value_heads " + std::to_string(m.kvHeads) +
                                " does not divide " + "num_attention_heads " +
                                std::to_string(m.heads));
  if (c.contains("sliding_window") && c["sliding_window"].is_number_integer() &&
      c["sliding_window"].get<int64_t>() < m.seqLen &&
      cfg.flag("use_sliding_window", type == "mistral"))
    throw std::invalid_argument("'" + file + "': sliding_window " + c["sliding_window"].dump() +
                                " is shorter than seq_len " + std::to_string(m.seqLen) +
                                " (sliding-window attention is not modelled)");
}

}  // namespace

ModelSpec modelFromHfConfig(const std::string& dir, const ModelSpec& base) {
  const std::string file = dir + "/config.json";
  const HfConfig cfg{file, readJsonFile(file, "model config")};
  if (!cfg.c.is_object()) throw std::invalid_argument("'" + file + "': expected a JSON object");
  ModelSpec m = base;
  const std::string type = cfg.c.value("model_type", "");
  if (type == "gpt2") {
    gpt2FromConfig(cfg, m);
  } else if (type == "llama" || type == "mistral" || type == "qwen2") {
    llamaFromConfig(cfg, type, m);
  } else {
    throw std::invalid_argument(
        "'" + file + "': model_type '" + type +
        "' is not a family slowpipe runs; expected gpt2, llama, mistral or qwen2");
  }
  if (m.width % m.heads != 0)
    throw std::invalid_argument("'" + file + "': " + std::to_string(m.heads) +
                                " heads do not divide width " + std::to_string(m.width));
  if ((m.width / m.heads) % 2 != 0 && m.family == "llama")
    throw std::invalid_argument("'" + file + "': head width " + std::to_string(m.width / m.heads) +
                                " is odd (RoPE rotates pairs)");
  m.checkpoint = dir;
  return m;
}

namespace {

// data: the corpus and its split.
void parseData(const json& section, const std::string& where, [[maybe_unused]] bool simulation,
               RunSpec& s) {
  Fields f(section, where, "data");
  f.get("source", s.data.source);
  f.get("finetune_files", s.data.finetuneFiles);
  f.get("cache_dir", s.data.cacheDir);
  f.get("val_fraction", s.data.valFraction);
  f.get("max_train_examples", s.data.maxTrainExamples);
  f.get("max_val_examples", s.data.maxValExamples);
  f.get("finetune", s.data.finetune);
  f.get("text_field", s.data.textField);
  f.get("tokenizer", s.data.tokenizer);
  f.get("pretrain", s.data.pretrain);
  for (const auto& p : s.data.finetune)
    if (!std::filesystem::exists(p))
      fail(f.field("finetune"),
           "'" + p + "' does not exist (a text file, a folder of them or a .jsonl file)");
  for (const auto& p : s.data.pretrain)
    if (const std::string path = p.rfind("wordnet:", 0) == 0 ? p.substr(8) : p;
        !std::filesystem::exists(path))
      fail(f.field("pretrain"),
           "'" + path +
               "' does not exist (a text file, a folder of them, a .jsonl file or wordnet:DIR)");
  if (!(s.data.valFraction > 0 && s.data.valFraction < 1))
    fail(f.field("val_fraction"), "must be in (0, 1)");
}

// pipeline: stages, replicas, schedule, micro-batches, model chunks, partition.
void parsePipeline(const json& section, const std::string& where, [[maybe_unused]] bool simulation,
                   RunSpec& s) {
  Fields f(section, where, "pipeline");
  f.get("stages", s.pipeline.stages);
  f.get("replicas", s.pipeline.replicas);
  f.get("schedule", s.pipeline.schedule);
  f.get("micro_batches", s.pipeline.microBatches);
  f.get("micro_batch_size", s.pipeline.microBatchSize);
  f.get("virtual_stages", s.pipeline.virtualStages);
  positive(f.field("virtual_stages"), s.pipeline.virtualStages);
  positive(f.field("stages"), s.pipeline.stages);
  positive(f.field("replicas"), s.pipeline.replicas);
  if (s.pipeline.replicas > 256)
    fail(f.field("replicas"), std::to_string(s.pipeline.replicas) + " is beyond 256");
  positive(f.field("micro_batches"), s.pipeline.microBatches);
  positive(f.field("micro_batch_size"), s.pipeline.microBatchSize);
  if (!isScheduleName(s.pipeline.schedule))
    fail(f.field("schedule"),
         "'" + s.pipeline.schedule + "' is not a schedule; expected one of " + scheduleNames());
  checkVirtualStages(s, f.field("virtual_stages"));
  if (const json* part = f.raw("partition")) {
    if (!part->is_array()) fail(f.field("partition"), "expected [[begin, end], ...] layer ranges");
    for (const auto& r : *part) {
      if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_number_integer())
        fail(f.field("partition"), "entry " + r.dump() + " is not [begin, end]");
      s.pipeline.partition.emplace_back(r[0].get<int>(), r[1].get<int>());
    }
  }
  if (const json* p = f.raw("placement"); p && !p->is_null())
    s.pipeline.placement = *p;  // checked against network.nodes
}

// training: epochs, steps, optimizer.
void parseTraining(const json& section, const std::string& where, [[maybe_unused]] bool simulation,
                   RunSpec& s) {
  Fields f(section, where, "training");
  f.get("epochs", s.training.epochs);
  f.get("max_steps", s.training.maxSteps);
  f.get("lr", s.training.lr);
  f.get("weight_decay", s.training.weightDecay);
  f.get("warmup_steps", s.training.warmupSteps);
  f.get("clip_norm", s.training.clipNorm);
  f.get("seed", s.training.seed);
  f.get("init_checkpoint", s.training.initCheckpoint);
  f.get("save_checkpoint", s.training.saveCheckpoint);
  f.get("eval_each_epoch", s.training.evalEachEpoch);
  f.get("eval_every_steps", s.training.evalEverySteps);
  if (s.training.evalEverySteps < 0)
    fail(f.field("eval_every_steps"),
         std::to_string(s.training.evalEverySteps) + " is negative (0: only at epoch ends)");
  positive(f.field("epochs"), s.training.epochs);
  positive(f.field("lr"), s.training.lr);
}

}  // namespace

void checkDeviceCost(const json& c, const std::string& w) {
  if (!c.is_object())
    fail(w,
         "expected an object of encode_/decode_ bytes_per_s, or flops_per_element and "
         "bytes_per_element");
  bool rate = false, perElement = false;
  for (const auto& [k, v] : c.items()) {
    if (k == "note" || k == "source") continue;
    const bool isRate = k == "encode_bytes_per_s" || k == "decode_bytes_per_s";
    const bool isElem = k == "encode_flops_per_element" || k == "encode_bytes_per_element" ||
                        k == "decode_flops_per_element" || k == "decode_bytes_per_element";
    if (!isRate && !isElem)
      fail(w + "." + k,
           "unknown field; expected encode_bytes_per_s, decode_bytes_per_s, "
           "encode_flops_per_element, "
           "encode_bytes_per_element, decode_flops_per_element, decode_bytes_per_element, note");
    if (!v.is_number() || !(v.get<double>() >= 0) || (isRate && !(v.get<double>() > 0)) ||
        !std::isfinite(v.get<double>()))
      fail(w + "." + k, v.dump() + (isRate ? " must be a rate > 0" : " must be a number >= 0"));
    rate |= isRate;
    perElement |= isElem;
  }
  if (rate == perElement)
    fail(w,
         "give either encode_bytes_per_s and decode_bytes_per_s, or FLOPs and bytes per element");
  if (rate && !(c.contains("encode_bytes_per_s") && c.contains("decode_bytes_per_s")))
    fail(w, "give both encode_bytes_per_s and decode_bytes_per_s");
}

namespace {

// compression: the two pipeline codecs (each built once to check it).
void parseCompression(const json& section, const std::string& where,
                      [[maybe_unused]] bool simulation, RunSpec& s) {
  Fields f(section, where, "compression");
  f.get("forward", s.compression.forward);
  f.get("backward", s.compression.backward);
  f.get("label", s.compression.label);
  if (const json* t = f.raw("threads")) {
    if (t->is_string() && t->get<std::string>() == "auto")
      s.compression.threads = 0;
    else if (t->is_number_integer() && t->get<int64_t>() >= 1 && t->get<int64_t>() <= 256)
      s.compression.threads = t->get<int>();
    else
      fail(f.field("threads"),
           t->dump() + ": expected a number of threads from 1 to 256, or \"auto\"");
  }
  if (const json* costs = f.raw("device_costs")) {
    const std::string w = f.field("device_costs");
    if (!costs->is_object()) fail(w, "expected {\"forward\": {...}, \"backward\": {...}}");
    for (const auto& [dir, c] : costs->items()) {
      if (dir != "forward" && dir != "backward")
        fail(w + "." + dir, "unknown direction; expected forward or backward");
      checkDeviceCost(c, w + "." + dir);
    }
    s.compression.deviceCosts = *costs;
  }
  for (const auto& [key, spec] : {std::pair{"forward", s.compression.forward},
                                  std::pair{"backward", s.compression.backward}}) {
    try {
      compression::makeCodec(spec);
    } catch (const std::exception& e) {
      fail(f.field(key), e.what());
    }
  }
}

// dp: the data-parallel algorithm and gradient compressor (pipeline parsed first).
void parseDp(const json& section, const std::string& where, [[maybe_unused]] bool simulation,
             RunSpec& s) {
  Fields f(section, where, "dp");
  f.get("algorithm", s.dp.algorithm);
  f.get("codec", s.dp.codec);
  f.get("local_steps", s.dp.localSteps);
  f.get("outer_lr", s.dp.outerLr);
  f.get("outer_momentum", s.dp.outerMomentum);
  try {
    dpAlgorithm(s.dp.algorithm);
  } catch (const std::invalid_argument&) {
    fail(f.field("algorithm"),
         "'" + s.dp.algorithm + "' is not an algorithm; expected one of " + dpAlgorithmNames());
  }
  positive(f.field("local_steps"), s.dp.localSteps);
  positive(f.field("outer_lr"), s.dp.outerLr);
  if (!(s.dp.outerMomentum >= 0 && s.dp.outerMomentum < 1))
    fail(f.field("outer_momentum"), "must be in [0, 1)");
  // The compressor's own check (runtime/dp/gradient_compressor.h): its parameters; DiLoCo's outer
  // gradient takes a plain codec (qadam and powersgd compress each step's gradient).
  try {
    gradientCompressor(s.dp);
  } catch (const std::exception& e) {
    fail(f.field("codec"), e.what());
  }
  // Settings that only replicas use must not be silently ignored (a forgotten replicas field
  // would measure no gradient compression at all).
  if (s.pipeline.replicas == 1 &&
      (s.dp.codec != "none" || s.dp.localSteps != 1 || s.dp.algorithm != "allreduce"))
    fail(where + ".dp",
         "is set but pipeline.replicas is 1 (no data-parallel exchange to apply it to)");
}

// network.nodes: the network (read from its file, held inline) and what may go with it.
void parseNodes(const json& given, const std::string& field, bool simulation,
                const emulator::LinkModelInfo& model, RunSpec& s) {
  s.network.nodes = emulator::NodeNetwork::fromJson(given, field)
                        .document();  // throws naming the field (and file)
  if (s.network.backend == "tc-dev" && !simulation)
    fail(field,
         "access links are emulated in user space (backend user), by the node line (backend tc) "
         "and in the simulator; "
         "backend 'tc-dev' shapes real interfaces and does not carry them");
  if (!model.stampsAtSender)
    fail(field, "network.model " + s.network.model +
                    " bills at the receiver; access links need a model the sender stamps (" +
                    "pipelined or tcp)");
  if (s.network.links.is_object() && s.network.links.contains("links"))
    fail(field,
         "with nodes every link comes from the nodes and their core; network.links.links (per-pair "
         "overrides) is set too");
  if (!s.network.dpLinks.is_null())
    fail(field, "with nodes the replicas' links come from the nodes too; network.dp_links is set");
}

// network: backend, link model, links and the replicas' links.
void parseNetwork(const json& section, const std::string& where, [[maybe_unused]] bool simulation,
                  RunSpec& s) {
  Fields f(section, where, "network");
  f.get("backend", s.network.backend);
  f.get("model", s.network.model);
  f.get("dev", s.network.dev);
  if (s.network.backend != "user" && s.network.backend != "tc" && s.network.backend != "tc-dev")
    fail(f.field("backend"),
         "'" + s.network.backend + "' is not a backend; expected user, tc or tc-dev");
  const emulator::LinkModelInfo* model = nullptr;
  try {
    model = &emulator::linkModel(s.network.model);
  } catch (const std::invalid_argument& e) {
    fail(f.field("model"), e.what());
  }
  if (model->simulatorOnly && !simulation) {
    std::string runs;
    for (const auto& m : emulator::linkModels())
      if (!m.simulatorOnly) runs += (runs.empty() ? "" : ", ") + std::string(m.name);
    fail(f.field("model"), s.network.model +
                               " is one of the simulator's tiers (slowpipe simulate, sweep "
                               "--simulate); a run emulates with " +
                               runs);
  }
  if (!model->kernelBackends && !simulation && s.network.backend != "user")
    fail(f.field("model"), s.network.model +
                               " is a user-space (or simulated) link model; backend '" +
                               s.network.backend + "' shapes with the kernel");
  if (const json* l = f.raw("links")) s.network.links = *l;
  emulator::topologyFromJson(s.network.links, where + ".network.links");  // validates units
  if (!model->modelsVariation)
    refuseUnmodelled(s.network.links, where + ".network.links", s.network.model, model->modelsLoss);
  // The model checks the settings it runs (the tcp model: network.tcp) where it runs them.
  const bool modelRunsSettings =
      model->checkSettings && (s.network.backend == "user" || simulation);
  if (modelRunsSettings) model->checkSettings(section, where + ".network");  // names the field
  if (const json* t = f.raw("tcp"); t && !t->is_null()) {
    const emulator::TcpSettings tcp =
        emulator::tcpSettingsFromJson(*t, where + ".network.tcp");  // validates
    s.network.tcp = *t;
    if (!modelRunsSettings && s.network.backend != "tc" && !simulation && !tcp.empty())
      fail(f.field("tcp"),
           "sets the kernel's TCP of the run's own namespaces (backend tc) or a link model's that "
           "runs TCP (network.model tcp); backend '" +
               s.network.backend + "' with network.model " + s.network.model + " has neither");
  }
  if (const json* l = f.raw("dp_links"); l && !l->is_null()) {
    s.network.dpLinks = *l;
    emulator::topologyFromJson(s.network.dpLinks, where + ".network.dp_links");
    if (s.network.backend != "user" && !simulation)
      fail(f.field("dp_links"), "data-parallel links are shaped in user space; backend '" +
                                    s.network.backend + "' is not supported with them yet");
  }
  if (const json* n = f.raw("nodes"); n && !n->is_null())
    parseNodes(*n, f.field("nodes"), simulation, *model, s);
  if (const json* m = f.raw("moderation_us"); m && !m->is_null()) {
    if (m->is_string() && *m == "auto")
      s.network.moderationUs = -1;
    else if (m->is_number() && m->get<double>() >= 0 && m->get<double>() <= 10000)
      s.network.moderationUs = m->get<double>();
    else
      fail(f.field("moderation_us"),
           m->dump() + " is not a moderation; expected microseconds from 0 to 10000, or \"auto\"");
    if (s.network.moderationUs != 0 && s.network.backend != "tc" && !simulation)
      fail(f.field("moderation_us"),
           "moderates the tc backend's delay lines; backend '" + s.network.backend + "' has none");
  }
}

// runtime: timeouts, threads, pinning, device, timeline.
void parseRuntime(const json& section, const std::string& where, [[maybe_unused]] bool simulation,
                  RunSpec& s) {
  Fields f(section, where, "runtime");
  f.get("step_timeout_s", s.runtime.stepTimeoutS);
  f.get("threads_per_worker", s.runtime.threadsPerWorker);
  f.get("pin_cores", s.runtime.pinCores);
  f.get("device", s.runtime.device);
  f.get("timeline", s.runtime.timeline);
  if (const json* slowdown = f.raw("slowdown"))
    s.runtime.slowdown =
        slowdownFromJson(*slowdown, f.field("slowdown"), s.pipeline.stages * s.pipeline.replicas);
  if (s.runtime.timeline != "last" && s.runtime.timeline != "all")
    fail(where + ".runtime.timeline", "'" + s.runtime.timeline + "'; expected \"last\" or \"all\"");
  positive(f.field("step_timeout_s"), s.runtime.stepTimeoutS);
  const std::string& d = s.runtime.device;
  const bool cudaN = d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.size() < 9 &&
                     d.find_first_not_of("0123456789", 5) == std::string::npos;
  if (d != "cpu" && d != "cuda" && !cudaN)
    fail(where + ".runtime.device",
         "'" + d + "' is not a device; expected \"cpu\", \"cuda\" or \"cuda:N\"");
  if (d != "cpu" && s.pipeline.replicas > 1)
    fail(where + ".runtime.device",
         "'" + d + "' with pipeline.replicas = " + std::to_string(s.pipeline.replicas) +
             ": data parallelism runs on CPU stages only so far");
}

// What one section cannot check alone: backends against replicas and model chunks, link
// overrides against the stages and replicas that exist, message sizes.
// network.nodes: every link the ranks use has a path (a rate that limits it); the node line
// (backend tc) runs one rank a node and constant rates.
void checkNodes(const std::string& where, bool simulation, const RunSpec& s) {
  if (s.network.nodes.is_null()) return;
  const LinkTable table(s, {});
  for (int r = 0; r < s.pipeline.stages * s.pipeline.replicas && r < 4096; ++r) table.ofRank(r);
  if (s.network.backend == "tc" && !simulation) {  // the node line: one rank a node, no traces
    const std::vector<int>& nodes = table.rankNodes();
    for (size_t r = 0; r < nodes.size(); ++r)
      for (size_t q = 0; q < r; ++q)
        if (nodes[q] == nodes[r])
          fail(where + ".pipeline.placement", "ranks " + std::to_string(q) + " and " +
                                                  std::to_string(r) +
                                                  " on one node: backend tc runs one rank a node "
                                                  "(its namespace); use backend user");
    for (size_t r = 0; r < nodes.size(); ++r)
      for (const auto& e : table.ofRank(static_cast<int>(r)))
        if (!e.spec.trace.empty())
          fail(where + ".network.nodes",
               "a core pair with a trace: the node line carries constant rates");
  }
}

// Per-link overrides name links that exist: replicas (network.dp_links), neighbouring stages
// (network.links).
void checkLinkOverrides(const std::string& where, const RunSpec& s) {
  // DP overrides name replicas that exist.
  if (s.network.dpLinks.is_object() && s.network.dpLinks.contains("links")) {
    const json& links = s.network.dpLinks["links"];
    for (size_t i = 0; i < links.size(); ++i) {
      const std::string w = where + ".network.dp_links.links[" + std::to_string(i) + "]";
      for (const char* key : {"src", "dst"}) {
        const int v = links[i][key];
        if (v < 0 || v >= s.pipeline.replicas)
          fail(w + "." + key, std::to_string(v) + " names no replica; pipeline.replicas is " +
                                  std::to_string(s.pipeline.replicas));
      }
      if (links[i]["src"] == links[i]["dst"]) fail(w, "src and dst are the same replica");
    }
  }
  // Per-link overrides must name a link the pipeline has: neighbouring stages that exist.
  if (s.network.links.is_object() && s.network.links.contains("links")) {
    const json& links = s.network.links["links"];
    for (size_t i = 0; i < links.size(); ++i) {
      const std::string w = where + ".network.links.links[" + std::to_string(i) + "]";
      const int src = links[i]["src"], dst = links[i]["dst"];
      for (const auto& [key, v] : {std::pair{"src", src}, std::pair{"dst", dst}})
        if (v < 0 || v >= s.pipeline.stages)
          fail(w + "." + key, std::to_string(v) + " names no stage; the pipeline has stages 0.." +
                                  std::to_string(s.pipeline.stages - 1));
      const RankLayout layout = rankLayout(s);  // with model chunks the ring closes S-1 <-> 0
      if (protocol::neighbourStage(layout, src, Action::Peer::kNext) != dst &&
          protocol::neighbourStage(layout, dst, Action::Peer::kNext) != src)
        fail(w,
             "src " + std::to_string(src) + " and dst " + std::to_string(dst) +
                 " are not neighbouring stages; only stage s and s+1 exchange messages" +
                 (s.pipeline.virtualStages > 1 ? " (and S-1 and 0 around the ring of model chunks)"
                                               : ""));
    }
  }
}

// Sizes whose products overflow a message (micro-batch x sequence x width fp32 values).
void checkMessageSize(const std::string& where, const RunSpec& s) {
  constexpr int64_t kMaxSeq = int64_t{1} << 20, kMaxMessage = int64_t{1} << 30;
  if (s.model.seqLen > kMaxSeq)
    fail(where + ".model.seq_len",
         std::to_string(s.model.seqLen) + " is beyond 2^20 tokens, the longest sequence accepted");
  const int64_t elems = int64_t{s.model.seqLen} * s.model.width * s.pipeline.microBatchSize;
  if (s.model.width > kMaxMessage || s.pipeline.microBatchSize > kMaxMessage || elems > kMaxMessage)
    fail(where + ".model.seq_len",
         "micro_batch_size " + std::to_string(s.pipeline.microBatchSize) + " x seq_len " +
             std::to_string(s.model.seqLen) + " x width " + std::to_string(s.model.width) +
             " values per message is beyond 2^30, the largest message accepted");
}

void crossCheck(const std::string& where, bool simulation, RunSpec& s) {
  if (s.model.family == "builtin" && s.model.vocab != 256 && s.data.tokenizer.empty() &&
      !simulation)
    fail(where + ".model.vocab",
         std::to_string(s.model.vocab) +
             " is not supported with the byte-level tokenizer (256); give "
             "data.tokenizer (other sizes can also be simulated: slowpipe simulate)");
  if (!s.training.saveCheckpoint.empty() && s.model.checkpoint.empty())
    fail(where + ".training.save_checkpoint",
         "writes a Hugging Face checkpoint; it needs model.checkpoint (the built-in model's "
         "checkpoints are `slowpipe pretrain --out`)");
  if (!s.training.saveCheckpoint.empty() &&
      std::filesystem::weakly_canonical(s.training.saveCheckpoint) ==
          std::filesystem::weakly_canonical(s.model.checkpoint))
    fail(where + ".training.save_checkpoint",
         "'" + s.training.saveCheckpoint + "' is model.checkpoint itself; write elsewhere");
  if (!s.pipeline.placement.is_null() && s.network.nodes.is_null())
    fail(where + ".pipeline.placement", "places stages on nodes, but network.nodes is not set");
  if (emulator::linkModel(s.network.model).buildsFromNodes && s.network.nodes.is_null())
    fail(where + ".network.model",
         s.network.model + " builds its network from network.nodes, which is not set");
  checkNodes(where, simulation, s);
  if (s.pipeline.replicas > 1 && s.network.backend != "user" && !simulation)
    fail(where + ".pipeline.replicas",
         std::to_string(s.pipeline.replicas) + " replicas need network.backend user; the '" +
             s.network.backend + "' backend builds one namespace chain per pipeline");
  if (s.pipeline.virtualStages > 1 && s.pipeline.replicas > 1 &&
      gradientCompressor(s.dp)->name() == std::string("qadam"))
    fail(
        where + ".dp.codec",
        "qadam with " + std::to_string(s.pipeline.virtualStages) +
            " model chunks per rank: its Adam state is one model chunk's (use a codec, powersgd or "
            "dp.local_steps)");
  checkLinkOverrides(where, s);
  checkMessageSize(where, s);
}

}  // namespace

RunSpec runSpecFromJson(const json& j, const std::string& where, bool simulation) {
  RunSpec s;
  s.source = j;
  Fields top(j, where, "");
  top.raw("$schema");  // for editors
  for (const char* required : {"name", "model", "pipeline", "compression", "network"})
    if (!j.contains(required))
      fail(where + "." + required,
           "missing; a spec needs name, model, pipeline, compression and network "
           "(see experiments/smoke.json)");
  top.get("name", s.name);
  using Parser = void (*)(const json&, const std::string&, bool, RunSpec&);
  for (const auto& [key, parse] : {std::pair<const char*, Parser>{"model", parseModel},
                                   {"data", parseData},
                                   {"pipeline", parsePipeline},
                                   {"training", parseTraining},
                                   {"compression", parseCompression},
                                   {"dp", parseDp},
                                   {"network", parseNetwork},
                                   {"runtime", parseRuntime}})
    if (const json* section = top.raw(key)) parse(*section, where, simulation, s);
  if (s.compression.label.empty())
    s.compression.label = s.compression.forward + "/" + s.compression.backward;
  crossCheck(where, simulation, s);

  checkModelFits(s, where, simulation);
  if (s.pipeline.stages * s.pipeline.virtualStages > s.model.layers)
    fail(where + ".pipeline.stages",
         std::to_string(s.pipeline.stages * s.pipeline.virtualStages) +
             (s.pipeline.virtualStages > 1 ? " virtual stages for " : " stages for ") +
             std::to_string(s.model.layers) + " layers; expected stages" +
             (s.pipeline.virtualStages > 1 ? " x virtual_stages" : "") + " <= model.layers");
  stageLayers(s);  // validates an explicit partition
  return s;
}

void setJsonPath(json& doc, const std::string& path, const json& value) {
  json* at = &doc;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string key =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) throw std::invalid_argument("'" + path + "': empty field name in the path");
    if (!at->is_object() && !at->is_null())
      throw std::invalid_argument("'" + path + "': '" + path.substr(0, start ? start - 1 : 0) +
                                  "' is " + at->dump() + ", not an object");
    if (dot == std::string::npos) {
      if (value.is_object() && at->contains(key) && (*at)[key].is_object()) {
        for (const auto& [k, v] : value.items()) (*at)[key][k] = v;
      } else {
        (*at)[key] = value;
      }
      return;
    }
    at = &(*at)[key];
    start = dot + 1;
  }
}

void applySet(json& doc, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw std::invalid_argument("--set '" + assignment +
                                "': expected PATH=VALUE, e.g. compression.forward=quant:bits=4");
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value;
  try {
    value = parseJsonText(text, "--set " + path);
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).find("nested more than") != std::string::npos) throw;
    value = text;  // not JSON: a string
  }
  try {
    setJsonPath(doc, path, value);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("--set " + std::string(e.what()));
  }
}

namespace {

// `p` against `dir` when it names something there (resolveSpecPaths).
std::string specRelative(const std::string& p, const std::filesystem::path& dir) {
  if (p.empty() || dir.empty() || std::filesystem::path(p).is_absolute()) return p;
  const std::filesystem::path there = (dir / p).lexically_normal();
  std::error_code ec;
  return std::filesystem::exists(there, ec) ? there.string() : p;
}

// A codec name's path=FILE values (plugin:path=x.so, ef(torchscript:path=c.pt;store=bf16)).
std::string codecPaths(const std::string& codec, const std::filesystem::path& dir) {
  std::string out;
  size_t at = 0;
  for (size_t k; (k = codec.find("path=", at)) != std::string::npos;) {
    const size_t begin = k + 5, end = std::min(codec.find_first_of(",;)", begin), codec.size());
    out += codec.substr(at, begin - at) + specRelative(codec.substr(begin, end - begin), dir);
    at = end;
  }
  return out + codec.substr(std::min(at, codec.size()));
}

void resolveIn(json& obj, const char* key, const std::filesystem::path& dir) {
  if (!obj.is_object() || !obj.contains(key)) return;
  json& v = obj[key];
  auto one = [&](json& x) {
    if (!x.is_string()) return;
    const std::string p = x;
    x = p.rfind("wordnet:", 0) == 0 ? "wordnet:" + specRelative(p.substr(8), dir)
                                    : specRelative(p, dir);
  };
  if (v.is_array()) {
    for (json& x : v) one(x);
  } else {
    one(v);
  }
}

// Every "trace" under a network section (links, per-link entries, nodes): a path or {"file": ...}.
void resolveTraces(json& j, const std::filesystem::path& dir) {
  if (j.is_array()) {
    for (json& x : j) resolveTraces(x, dir);
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "trace" && it->is_string())
        *it = specRelative(it->get<std::string>(), dir);
      else if (it.key() == "trace" && it->is_object())
        resolveIn(*it, "file", dir);
      else
        resolveTraces(*it, dir);
    }
  }
}

}  // namespace

void resolveSpecPaths(json& spec, const std::string& specDir) {
  const std::filesystem::path dir = specDir;
  if (!spec.is_object() || dir.empty()) return;
  if (spec.contains("model")) resolveIn(spec["model"], "checkpoint", dir);
  if (spec.contains("training")) resolveIn(spec["training"], "init_checkpoint", dir);
  if (spec.contains("data"))
    for (const char* k : {"source", "tokenizer", "finetune", "pretrain"})
      resolveIn(spec["data"], k, dir);
  if (spec.contains("network") && spec["network"].is_object()) {
    resolveIn(spec["network"], "nodes", dir);
    resolveTraces(spec["network"], dir);
  }
  for (const auto& [section, key] :
       {std::pair{"compression", "forward"}, std::pair{"compression", "backward"},
        std::pair{"dp", "codec"}})
    if (spec.contains(section) && spec[section].is_object() && spec[section].contains(key) &&
        spec[section][key].is_string())
      spec[section][key] = codecPaths(spec[section][key].get<std::string>(), dir);
}

json readSpecFile(const std::string& path, const std::string& what) {
  json j = readJsonFile(path, what);
  resolveSpecPaths(j, std::filesystem::path(path).parent_path().string());
  return j;
}

RunSpec loadRunSpec(const std::string& path, const std::vector<std::string>& sets) {
  json j = readSpecFile(path);
  for (const auto& a : sets) applySet(j, a);
  try {
    return runSpecFromJson(j, "spec");
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("'" + path + "'" + (sets.empty() ? "" : " with --set") + ": " +
                                e.what());
  }
}

RunSpec loadRunSpec(const std::string& path) {
  const json j = readSpecFile(path);
  try {
    return runSpecFromJson(j, "spec");
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("'" + path + "': " + e.what());
  }
}

namespace {
// "device" only off the CPU and "timeline" only when not "last": other specs keep the digests
// (sweep identities) they had before these fields.
json runtimeJson(const RuntimeSpec& r) {
  json j = {{"step_timeout_s", r.stepTimeoutS},
            {"threads_per_worker", r.threadsPerWorker},
            {"pin_cores", r.pinCores}};
  if (r.device != "cpu") j["device"] = r.device;
  if (r.timeline != "last") j["timeline"] = r.timeline;
  if (!r.slowdown.empty()) j["slowdown"] = toJson(r.slowdown);
  return j;
}
}  // namespace

// Only what a spec set: a default left out keeps the JSON (and so every sweep point's identity) of
// specs written before the field existed.
static json compressionJson(const CompressionSpec& c) {
  json j = {{"forward", c.forward}, {"backward", c.backward}, {"label", c.label}};
  if (!c.deviceCosts.is_null()) j["device_costs"] = c.deviceCosts;
  if (c.threads != 0) j["threads"] = c.threads;
  return j;
}

int codecThreadsFor(const RunSpec& spec, int ranksSharingCores) {
  if (spec.compression.threads > 0) return spec.compression.threads;
  cpu_set_t set;
  const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  return std::max(1, cores / std::max(1, ranksSharingCores) - spec.runtime.threadsPerWorker);
}

json toJson(const RunSpec& s) {
  json part = json::array();
  for (const auto& [b, e] : s.pipeline.partition) part.push_back({b, e});
  json out = {{"name", s.name},
              {"model", s.model.checkpoint.empty() ? json{{"vocab", s.model.vocab},
                                                          {"seq_len", s.model.seqLen},
                                                          {"layers", s.model.layers},
                                                          {"width", s.model.width},
                                                          {"heads", s.model.heads},
                                                          {"seed", s.model.seed}}
                                                   : json{{"checkpoint", s.model.checkpoint},
                                                          {"seq_len", s.model.seqLen},
                                                          {"seed", s.model.seed}}},
              {"data",
               {{"source", s.data.source},
                {"finetune_files", s.data.finetuneFiles},
                {"cache_dir", s.data.cacheDir},
                {"val_fraction", s.data.valFraction},
                {"max_train_examples", s.data.maxTrainExamples},
                {"max_val_examples", s.data.maxValExamples}}},
              {"pipeline",
               {{"stages", s.pipeline.stages},
                {"replicas", s.pipeline.replicas},
                {"schedule", s.pipeline.schedule},
                {"micro_batches", s.pipeline.microBatches},
                {"micro_batch_size", s.pipeline.microBatchSize},
                {"virtual_stages", s.pipeline.virtualStages},
                {"partition", part},
                {"placement", s.pipeline.placement}}},
              {"training",
               {{"epochs", s.training.epochs},
                {"max_steps", s.training.maxSteps},
                {"lr", s.training.lr},
                {"weight_decay", s.training.weightDecay},
                {"warmup_steps", s.training.warmupSteps},
                {"clip_norm", s.training.clipNorm},
                {"seed", s.training.seed},
                {"init_checkpoint", s.training.initCheckpoint},
                {"eval_each_epoch", s.training.evalEachEpoch},
                {"eval_every_steps", s.training.evalEverySteps}}},
              {"compression", compressionJson(s.compression)},
              {"dp",
               {{"algorithm", s.dp.algorithm},
                {"codec", s.dp.codec},
                {"local_steps", s.dp.localSteps},
                {"outer_lr", s.dp.outerLr},
                {"outer_momentum", s.dp.outerMomentum}}},
              {"network",
               {{"backend", s.network.backend},
                {"dev", s.network.dev},
                {"model", s.network.model},
                {"links", s.network.links},
                {"dp_links", s.network.dpLinks},
                {"tcp", s.network.tcp},
                {"nodes", s.network.nodes},
                {"moderation_us",
                 s.network.moderationUs < 0 ? json("auto") : json(s.network.moderationUs)}}},
              {"runtime", runtimeJson(s.runtime)}};
  if (!s.training.saveCheckpoint.empty())
    out["training"]["save_checkpoint"] = s.training.saveCheckpoint;
  if (!s.data.finetune.empty()) out["data"]["finetune"] = s.data.finetune;
  if (!s.data.pretrain.empty()) out["data"]["pretrain"] = s.data.pretrain;
  if (s.data.textField != "text") out["data"]["text_field"] = s.data.textField;
  if (!s.data.tokenizer.empty()) out["data"]["tokenizer"] = s.data.tokenizer;
  return out;
}

RankLayout rankLayout(const RunSpec& s) {
  return {s.pipeline.stages, s.pipeline.replicas, s.pipeline.virtualStages};
}

std::vector<std::pair<int, int>> stageLayers(const RunSpec& s) {
  const int S = s.pipeline.stages * s.pipeline.virtualStages, L = s.model.layers;
  if (!s.pipeline.partition.empty()) {
    const auto& p = s.pipeline.partition;
    if (static_cast<int>(p.size()) != S)
      fail("pipeline.partition",
           std::to_string(p.size()) + " ranges for " + std::to_string(S) +
               (s.pipeline.virtualStages > 1 ? " virtual stages (stages x virtual_stages)"
                                             : " stages"));
    int next = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i].first != next || p[i].second <= p[i].first)
        fail("pipeline.partition", "range " + std::to_string(i) + " [" +
                                       std::to_string(p[i].first) + ", " +
                                       std::to_string(p[i].second) + ") must start at " +
                                       std::to_string(next) + " and be non-empty");
      next = p[i].second;
    }
    if (next != L)
      fail("pipeline.partition",
           "ranges end at layer " + std::to_string(next) + ", model has " + std::to_string(L));
    return p;
  }
  // Balanced by parameter count: blocks are equal, so spread L blocks evenly; extra blocks go to
  // the middle stages first because the first and last stages also hold embeddings / the head.
  std::vector<int> count(S, L / S);  // not a rank: layers per stage
  int extra = L % S;                 // not a rank: layers left over
  for (int k = 0; extra > 0; ++k, --extra) count[ringIndex(1 + k, S)]++;
  std::vector<std::pair<int, int>> out;
  int at = 0;
  for (int c : count) {
    out.emplace_back(at, at + c);
    at += c;
  }
  return out;
}

}  // namespace slowpipe::runtime
