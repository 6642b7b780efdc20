// The specs' fields, documented once (see spec_schema.h).
#include "runtime/spec/spec_schema.h"

#include <map>
#include <sstream>
#include <stdexcept>

#include "emulator/link_model.h"
#include "runtime/exec/schedule.h"
#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

using nlohmann::json;

namespace {

const std::optional<double> kNone;
std::optional<double> num(double v) { return v; }

// The run spec itself, its model and its data.
std::vector<SpecField> specAndModelFields() {
  const std::optional<double> none = kNone;
  return {
      // The run spec.
      {"$schema", "string",
       "The JSON Schema this file follows (editors read it; slowpipe ignores it)."},
      {"name", "string", "The run's name: result files and plots carry it."},
      {"model", "object", "The model: the built-in GPT (its sizes) or a Hugging Face checkpoint."},
      {"model.checkpoint", "string",
       "A Hugging Face checkpoint folder (config.json, *.safetensors; GPT-2 or Llama family); its "
       "config sets vocab, layers, width and heads. Empty: the built-in model."},
      {"model.vocab", "integer", "Vocabulary size (256 with the byte-level tokenizer).", "tokens",
       num(2)},
      {"model.seq_len", "integer", "Tokens per example.", "tokens", num(1)},
      {"model.layers", "integer", "Transformer blocks.", "", num(1)},
      {"model.width", "integer", "Hidden size (d_model); a multiple of heads.", "", num(1)},
      {"model.heads", "integer", "Attention heads.", "", num(1)},
      {"model.seed", "integer", "Seed of the built-in model's initial weights.", "", num(0)},
      {"data", "object", "The corpus, its split and the tokenizer."},
      {"data.source", "string",
       "A folder of text files (default: Debian's fortunes, /usr/share/games/fortunes)."},
      {"data.finetune_files",
       "array",
       "The files of data.source fine-tuned on.",
       "",
       none,
       none,
       {},
       "string"},
      {"data.cache_dir", "string", "Where prepared token files are kept (spec-relative)."},
      {"data.val_fraction", "number", "The share of examples held out for validation.", "", num(0),
       num(1)},
      {"data.max_train_examples", "integer", "At most this many training examples (0: all).",
       "examples", num(0)},
      {"data.max_val_examples", "integer", "At most this many validation examples (0: all).",
       "examples", num(0)},
      {"data.finetune",
       "array",
       "Your fine-tuning data instead of data.source: text files, folders of them or .jsonl files.",
       "",
       none,
       none,
       {},
       "string"},
      {"data.text_field", "string", "The field of a .jsonl line that holds the text."},
      {"data.tokenizer", "string",
       "A tokenizer: a Hugging Face tokenizer.json, a SentencePiece .model or GPT-2's BPE files; "
       "empty: bytes (vocab 256)."},
      {"data.pretrain",
       "array",
       "Text the sweep's base model is pretrained on (files, folders, .jsonl or wordnet:DIR).",
       "",
       none,
       none,
       {},
       "string"},
  };
}

// Pipeline, training and compression.
std::vector<SpecField> pipelineAndTrainingFields() {
  const std::optional<double> none = kNone;
  return {
      {"pipeline", "object", "Pipeline and data parallelism: stages, replicas and the schedule."},
      {"pipeline.stages", "integer", "Pipeline stages (one worker process each).", "", num(1)},
      {"pipeline.replicas", "integer",
       "Data-parallel replicas of the pipeline (workers = stages x replicas).", "", num(1),
       num(256)},
      {"pipeline.schedule", "string", "The pipeline schedule: " + scheduleNames() + "."},
      {"pipeline.micro_batches", "integer", "Micro-batches per step and replica.", "", num(1)},
      {"pipeline.micro_batch_size", "integer", "Examples per micro-batch.", "examples", num(1)},
      {"pipeline.virtual_stages", "integer",
       "Model chunks per stage (interleaved schedules; 1 otherwise).", "", num(1)},
      {"pipeline.partition",
       "array",
       "Layer ranges [begin, end) per (virtual) stage; empty: layers split evenly.",
       "",
       none,
       none,
       {},
       "array"},
      {"pipeline.placement", "object|array|null",
       "Which node of network.nodes runs each stage (checked against the network)."},
      {"training", "object", "Epochs, steps, the optimizer and evaluation."},
      {"training.epochs", "integer", "Passes over the training set.", "", num(1)},
      {"training.max_steps", "integer", "Stop after this many steps (0: no limit).", "steps",
       num(0)},
      {"training.lr", "number", "AdamW's peak learning rate.", "", num(0)},
      {"training.weight_decay", "number", "AdamW's weight decay.", "", num(0)},
      {"training.warmup_steps", "integer", "Linear learning-rate warm-up.", "steps", num(0)},
      {"training.clip_norm", "number", "Global gradient-norm clip (0: none).", "", num(0)},
      {"training.seed", "integer", "Seed of the epochs' example order.", "", num(0)},
      {"training.init_checkpoint", "string",
       "A base checkpoint (slowpipe pretrain) to start from; empty: model.seed's weights."},
      {"training.save_checkpoint", "string",
       "Write the fine-tuned model here as a Hugging Face checkpoint (needs model.checkpoint)."},
      {"training.eval_each_epoch", "boolean", "Evaluate on the validation set after every epoch."},
      {"training.eval_every_steps", "integer",
       "Also evaluate after every N-th step (0: only at epoch ends).", "steps", num(0)},
      {"compression", "object", "The codecs of the pipeline's messages."},
      {"compression.forward", "string",
       "Codec of activations: a codec spec (slowpipe codec list), e.g. acsgd:bits=2."},
      {"compression.backward", "string", "Codec of activation gradients, e.g. quant:bits=4."},
      {"compression.label", "string",
       "Display name in tables and plots (default: forward/backward)."},
      {"compression.threads", "integer|string",
       "Threads a codec may split a large message over: 1..256, or \"auto\" (the cores the stages "
       "do not use)."},
      {"compression.device_costs", "object",
       "Declared device encode/decode costs for the simulator: {\"forward\": {...}, \"backward\": "
       "{...}}."},
  };
}

// Data parallelism, the network (and a link object) and the runtime section.
std::vector<SpecField> dpNetworkAndRuntimeFields() {
  const std::optional<double> none = kNone;
  return {
      {"dp", "object", "The replicas' gradient exchange (pipeline.replicas > 1)."},
      {"dp.algorithm", "string", "Exchange algorithm: " + dpAlgorithmNames() + "."},
      {"dp.codec", "string",
       "Gradient codec or compressor: a codec spec, powersgd:rank=r or qadam:bits=B."},
      {"dp.local_steps", "integer", "DiLoCo: inner steps between outer steps (1: every step).",
       "steps", num(1)},
      {"dp.outer_lr", "number", "DiLoCo's outer learning rate.", "", num(0)},
      {"dp.outer_momentum", "number", "DiLoCo's outer Nesterov momentum, in [0, 1).", "", num(0),
       num(1)},
      {"network", "object", "How the links between workers are emulated or simulated."},
      {"network.backend",
       "string",
       "user (shaped in user space), tc (the kernel's TCP in namespaces, root) or tc-dev (a real "
       "interface, root).",
       "",
       none,
       none,
       {"user", "tc", "tc-dev"}},
      {"network.model", "string", "The link model: " + emulator::linkModelNames() + "."},
      {"network.dev", "string", "tc-dev: the interface shaped (default: the worker's)."},
      {"network.links", "$link", "The pipeline's links: a default link and per-pair overrides."},
      {"network.dp_links", "$link|null",
       "The replicas' links (default: network.links' default link)."},
      {"network.tcp", "object|null",
       "TCP settings of the kernel path or the tcp link model (docs/links.md)."},
      {"network.nodes", "object|string|null",
       "A network of nodes, access links and a core: inline or a file (experiments/networks)."},
      {"network.moderation_us", "number|string",
       "tc backend: interrupt moderation of the delay lines, 0..10000 us or \"auto\".", "us"},
      {"runtime", "object", "Timeouts, threads, device and what the result records."},
      {"runtime.step_timeout_s", "number", "A step taking longer fails the run.", "s", num(0)},
      {"runtime.threads_per_worker", "integer", "libtorch threads per worker.", "", num(1)},
      {"runtime.pin_cores", "boolean", "Pin each worker to its own cores."},
      {"runtime.device", "string", "cpu, cuda or cuda:N."},
      {"runtime.timeline",
       "string",
       "Events of the last step or of all steps.",
       "",
       none,
       none,
       {"last", "all"}},
      {"runtime.slowdown", "object|array",
       "Stragglers: a rank's compute speed, constant or over steps (runtime/exec/slowdown.h)."},
      // A link (network.links, network.dp_links, their overrides): emulator/link.cc reads it.
      {"link.bandwidth", "string|number", "Rate, with units (\"100Mbps\", \"1Gbps\").", "bits/s"},
      {"link.bandwidth_bps", "number", "Rate in bits/s (as results write it).", "bits/s", num(0)},
      {"link.latency", "string|number", "One-way delay, with units (\"5ms\").", "s"},
      {"link.latency_s", "number", "One-way delay in seconds.", "s", num(0)},
      {"link.jitter", "string|number", "Standard deviation of the delay, with units.", "s"},
      {"link.jitter_s", "number", "Jitter in seconds.", "s", num(0)},
      {"link.loss", "number|object",
       "Loss probability per message, or Gilbert-Elliott {p, r, loss_good, loss_bad}."},
      {"link.queue_bytes", "integer", "The link's queue limit.", "bytes", num(0)},
      {"link.trace", "string|object", "A bandwidth trace file, or {file, format, ...}."},
      {"link.mtu", "integer", "Packet size of the tc path.", "bytes", num(576), num(65535)},
      {"link.tcp", "object", "This link's own TCP settings."},
      {"link.links",
       "array",
       "Per-pair overrides: {\"src\", \"dst\", fields of a link} (stages; replicas in dp_links).",
       "",
       none,
       none,
       {},
       "object"},
  };
}

// The sweep spec.
std::vector<SpecField> sweepFields() {
  const std::optional<double> none = kNone;
  return {
      {"sweep.$schema", "string", "The JSON Schema this file follows."},
      {"sweep.name", "string", "The sweep's name."},
      {"sweep.base", "object|string", "The run spec every point starts from, or a path to one."},
      {"sweep.axes",
       "array",
       "What varies: each axis a path into the run spec and its values.",
       "",
       none,
       none,
       {},
       "object"},
      {"sweep.axes[].path", "string",
       "A field of the run spec (\"network.links.bandwidth\"), or \"compression\" (whole "
       "sections)."},
      {"sweep.axes[].values", "array",
       "The values the axis takes (an object sets several fields)."},
      {"sweep.baseline", "string", "The compression label speed-ups are measured against."},
      {"sweep.repeats", "integer", "Runs per point.", "", num(1), num(1000)},
      {"sweep.repeat_seeds",
       "string",
       "same: every repeat trains alike; per_repeat: repeat k trains with training.seed + k.",
       "",
       none,
       none,
       {"same", "per_repeat"}},
      {"sweep.target", "object",
       "The quality target: {\"val_loss\": L} or {\"tolerance\": r} relative to the baseline."},
      {"sweep.target.val_loss", "number", "A validation loss to reach.", "", num(0)},
      {"sweep.target.tolerance", "number", "Relative gap to the baseline's final loss.", "",
       num(0)},
      {"sweep.pretrain", "object",
       "Pretrain a base model first on data.pretrain (once per content, cached)."},
      {"sweep.pretrain.epochs", "integer", "Pretraining epochs.", "", num(1)},
      {"sweep.pretrain.max_steps", "integer", "Pretraining steps at most (0: no limit).", "steps",
       num(0)},
      {"sweep.pretrain.lr", "number", "Pretraining learning rate.", "", num(0)},
      {"sweep.pretrain.warmup_steps", "integer", "Pretraining warm-up.", "steps", num(0)},
      {"sweep.pretrain.micro_batches", "integer", "Pretraining micro-batches per step.", "",
       num(1)},
      {"sweep.pretrain.max_train_examples", "integer", "Pretraining examples (0: all).", "examples",
       num(0)},
      {"sweep.pretrain.threads", "integer", "Threads the pretraining process uses.", "", num(1)},
      {"sweep.pretrain.checkpoint", "string", "Where the base is written (in the sweep's folder)."},
      {"sweep.claims",
       "array",
       "Claims the report judges at their bounds.",
       "",
       none,
       none,
       {},
       "object"},
      {"sweep.claims[].label", "string", "The compression label the claim is about."},
      {"sweep.claims[].vs", "string", "Compared with this label (default: the baseline)."},
      {"sweep.claims[].at", "string", "At this value of another axis (default: every value)."},
      {"sweep.claims[].note", "string", "Free text shown with the verdict."},
      {"sweep.claims[].speedup_at_least", "number", "Speed-up over vs at least this."},
      {"sweep.claims[].speedup_at_most", "number", "Speed-up over vs at most this."},
      {"sweep.claims[].val_loss_gap_at_most", "number",
       "Relative validation-loss gap to vs at most this."},
      {"sweep.claims[].val_loss_gap_at_least", "number",
       "Relative validation-loss gap to vs at least this."},
      {"sweep.claims[].reaches_target", "boolean", "Whether the label reaches sweep.target."},
  };
}

std::vector<SpecField> makeFields() {
  std::vector<SpecField> all;
  for (auto part :
       {specAndModelFields, pipelineAndTrainingFields, dpNetworkAndRuntimeFields, sweepFields}) {
    std::vector<SpecField> fields = part();
    all.insert(all.end(), fields.begin(), fields.end());
  }
  return all;
}

// The parent object of a path ("sweep.axes[].path" -> "sweep.axes[]") and its last name.
std::pair<std::string, std::string> split(const std::string& path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos) return {"", path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

json typeOf(const std::string& t) {
  std::vector<std::string> parts;
  std::stringstream in(t);
  for (std::string p; std::getline(in, p, '|');) parts.push_back(p);
  if (parts.size() == 1) return parts[0];
  return parts;
}

// A default at `path` of a run spec, from RunSpec{}'s own JSON (none where it has none).
const json* defaultAt(const json& defaults, const std::string& path) {
  const json* at = &defaults;
  std::stringstream in(path);
  for (std::string k; std::getline(in, k, '.');) {
    if (!at->is_object() || !at->contains(k)) return nullptr;
    at = &(*at)[k];
  }
  return at;
}

// The schema of the object whose fields are under `object` (recursively).
json objectSchema(const std::string& object, const json& defaults, bool refuseOthers);

json fieldSchema(const SpecField& f, const json& defaults) {
  json s = json::object();
  if (f.type == "$link" || f.type == "$link|null") {
    s["$ref"] = "#/$defs/link";
    if (f.type != "$link") s = {{"anyOf", {{{"$ref", "#/$defs/link"}}, {{"type", "null"}}}}};
  } else {
    s["type"] = typeOf(f.type);
  }
  s["description"] = f.description + (f.unit.empty() ? "" : " Unit: " + f.unit + ".");
  if (f.minimum) s["minimum"] = *f.minimum;
  if (f.maximum) s["maximum"] = *f.maximum;
  if (!f.values.empty()) s["enum"] = f.values;
  if (!f.items.empty()) {
    s["items"] = f.items == "object" && !specFieldNames(f.path + "[]").empty()
                     ? objectSchema(f.path + "[]", defaults, true)
                     : json{{"type", f.items}};
  }
  const std::vector<std::string> inner = specFieldNames(f.path);
  if (f.type == "object" && !inner.empty()) {
    json o = objectSchema(f.path, defaults, true);
    for (auto& [k, v] : o.items()) s[k] = v;
  }
  if (const json* d = f.path.rfind("sweep.", 0) == 0 || f.path.rfind("link.", 0) == 0
                          ? nullptr
                          : defaultAt(defaults, f.path);
      d && !d->is_null() && !d->is_object())
    s["default"] = *d;
  return s;
}

json objectSchema(const std::string& object, const json& defaults, bool refuseOthers) {
  json props = json::object();
  for (const SpecField& f : specFields())
    if (split(f.path).first == object) props[split(f.path).second] = fieldSchema(f, defaults);
  json s = {{"type", "object"}, {"properties", props}};
  if (refuseOthers) s["additionalProperties"] = false;
  return s;
}

}  // namespace

const std::vector<SpecField>& specFields() {
  static const std::vector<SpecField> fields = makeFields();
  return fields;
}

const SpecField& specField(const std::string& path) {
  for (const SpecField& f : specFields())
    if (f.path == path) return f;
  throw std::logic_error(
      "spec field '" + path +
      "' is read but not documented: describe it in runtime/spec/spec_schema.cc");
}

std::vector<std::string> specFieldNames(const std::string& object) {
  std::vector<std::string> out;
  for (const SpecField& f : specFields())
    if (split(f.path).first == object) out.push_back(split(f.path).second);
  return out;
}

json specSchema(const std::string& which) {
  if (which != "run" && which != "sweep")
    throw std::invalid_argument("spec schema: '" + which + "'; expected run or sweep");
  const json defaults = toJson(RunSpec{});
  json run = objectSchema("", defaults, true);
  run["required"] = {"name", "model", "pipeline", "compression", "network"};
  run["title"] = "slowpipe run spec";
  json link = objectSchema("link", defaults, true);
  // A per-pair override: the pair and any field of a link.
  link["properties"]["links"]["items"] = {
      {"type", "object"},
      {"required", {"src", "dst"}},
      {"properties", {{"src", {{"type", "integer"}}}, {"dst", {{"type", "integer"}}}}}};
  const std::string id = "https://slowpipe.invalid/schema/";
  if (which == "run") {
    run["$schema"] = "https://json-schema.org/draft/2020-12/schema";
    run["$id"] = id + "run.json";
    run["$defs"] = {{"link", link}};
    return run;
  }
  json sweep = objectSchema("sweep", defaults, true);
  sweep["$schema"] = "https://json-schema.org/draft/2020-12/schema";
  sweep["$id"] = id + "sweep.json";
  sweep["title"] = "slowpipe sweep spec";
  sweep["required"] = {"base", "axes"};
  sweep["properties"]["base"] = {{"description", specField("sweep.base").description},
                                 {"anyOf", {{{"$ref", "#/$defs/run"}}, {{"type", "string"}}}}};
  sweep["properties"]["axes"]["minItems"] = 1;
  sweep["properties"]["axes"]["items"]["required"] = {"path", "values"};
  sweep["properties"]["axes"]["items"]["properties"]["values"]["minItems"] = 1;
  sweep["properties"]["claims"]["items"]["required"] = {"label"};
  run.erase("title");
  sweep["$defs"] = {{"run", run}, {"link", link}};
  return sweep;
}

std::string specReferenceMarkdown(const std::string& which) {
  const json defaults = toJson(RunSpec{});
  std::ostringstream out;
  out << "# " << (which == "run" ? "Run spec" : "Sweep spec") << " reference\n\n"
      << "Generated by `slowpipe spec reference " << which
      << "` from runtime/spec/spec_schema.cc, the table the readers check every field against; do "
         "not "
         "edit. `slowpipe spec schema "
      << which << "` prints the same as a JSON Schema.\n\n"
      << "| field | type | unit | range | default | what it is |\n|---|---|---|---|---|---|\n";
  for (const SpecField& f : specFields()) {
    const bool sweepField = f.path.rfind("sweep.", 0) == 0;
    if ((which == "run") == sweepField) continue;
    std::string range;
    auto number = [](double v) {  // 2, not 2.0
      return v == static_cast<double>(static_cast<int64_t>(v))
                 ? std::to_string(static_cast<int64_t>(v))
                 : json(v).dump();
    };
    if (f.minimum) range += ">= " + number(*f.minimum);
    if (f.maximum) range += (range.empty() ? "" : ", ") + std::string("<= ") + number(*f.maximum);
    if (!f.values.empty()) range = json(f.values).dump();
    std::string def;
    if (!sweepField)
      if (const json* d = defaultAt(defaults, f.path); d && !d->is_null() && !d->is_object())
        def = "`" + d->dump() + "`";
    std::string type = f.type == "$link"        ? "link"
                       : f.type == "$link|null" ? "link or null"
                                                : f.type;
    for (auto& c : type)
      if (c == '|') c = '/';
    out << "| `" << f.path << "` | " << type << " | " << f.unit << " | " << range << " | " << def
        << " | " << f.description << " |\n";
  }
  if (which == "run")
    out << "\nA link (`link.*`) is the object of `network.links` and `network.dp_links`, and of "
           "each per-pair override in their `links` (which adds `src` and `dst`).\n";
  return out.str();
}

}  // namespace slowpipe::runtime
