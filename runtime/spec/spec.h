// RunSpec: everything one training run needs, read from JSON and validated before any process
// starts. Errors name the field ("pipeline.stages"), the value and what was expected.
#pragma once

#include "runtime/exec/ranks.h"
#include "runtime/exec/slowdown.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace slowpipe::runtime {

struct ModelSpec {
  int vocab = 256;  // byte-level tokens
  int seqLen = 32;
  int layers = 4;
  int width = 64;
  int heads = 4;
  uint64_t seed = 1;
  // A Hugging Face checkpoint folder (config.json + model.safetensors or its shards): the family
  // and sizes below come from its config, the weights from its tensors (runtime/hf_model.h).
  std::string checkpoint;
  std::string family =
      "builtin";  // builtin (slowpipe's GPT-2-style) | gpt2 | llama (Llama, Mistral, Qwen2 shapes)
  int kvHeads = 0;       // llama: num_key_value_heads (grouped-query attention); 0: heads
  int intermediate = 0;  // the MLP's hidden width; 0: 4 x width
  int positions = 0;     // gpt2: rows of the learned position table (n_positions); 0: seq_len
  double ropeTheta = 10000.0;
  double normEps = 1e-5;  // LayerNorm / RMSNorm epsilon
  bool tiedHead = false;  // the LM head is the token embedding (tie_word_embeddings)
  bool qkvBias =
      false;  // llama family: q/k/v projections have biases (Qwen2; Llama's attention_bias)
  bool oBias = false;  // llama family: the output projection too (Llama's attention_bias)
  std::string activation =
      "gelu";  // builtin: gelu (erf); gpt2: gelu_new (tanh); llama: silu (SwiGLU)
  int mlpWidth() const { return intermediate > 0 ? intermediate : 4 * width; }
  int kvHeadCount() const { return kvHeads > 0 ? kvHeads : heads; }
  int positionRows() const { return positions > 0 ? positions : seqLen; }
};
// The model section a Hugging Face config.json describes (family, sizes, options), on top of
// `base` (seq_len, seed). Throws naming the file and field for a family or option it cannot run.
ModelSpec modelFromHfConfig(const std::string& dir, const ModelSpec& base);

struct DataSpec {
  std::string source =
      "/usr/share/games/fortunes";  // folder of text files (Debian package fortunes)
  std::vector<std::string> finetuneFiles = {"literature", "songs-poems"};
  std::string cacheDir = "data/fortunes";  // prepared token files
  double valFraction = 0.1;
  int64_t maxTrainExamples = 0;  // 0: all
  int64_t maxValExamples = 256;
  // Your own data: UTF-8 text files, folders of them, or JSONL files (.jsonl: one object per line,
  // its `textField` the text) as the fine-tune split instead of source's finetune_files; source (if
  // any) is then the pretrain split. Tokens are packed into seq_len blocks in file order: example i
  // is block i, so ids are stable while the files are; the last val_fraction is validation.
  std::vector<std::string> finetune;
  // The pretrain split from paths of the same kinds (or "wordnet:DIR": WordNet's glosses, Debian's
  // wordnet-base in /usr/share/wordnet) instead of source's other files.
  std::vector<std::string> pretrain;
  std::string textField = "text";
  // The tokenizer folder (tokenizer.json, vocab.json + merges.txt, encoder.json + vocab.bpe;
  // runtime/model/tokenizer.h); empty: byte-level (one byte a token).
  std::string tokenizer;
};

struct PipelineSpec {
  int stages = 2;
  // Data-parallel replicas of every stage (S x R worker processes). Replica r of each stage trains
  // on its shard of every global batch: a step's R x micro_batches micro-batches (of the seeded
  // epoch permutation, runtime/model/data.h) are cut in R consecutive runs and replica r takes run
  // r, so a run is equivalent to one process with micro_batches x R micro-batches per step.
  int replicas = 1;
  std::string schedule = "gpipe";
  int microBatches = 4;
  int microBatchSize = 4;
  // Model chunks per stage (interleaved schedules): the model is cut into stages x virtual_stages
  // virtual stages, and stage s holds virtual stages s, s + S, s + 2S, ... (Megatron-LM's
  // round-robin assignment). 1: one contiguous slice per stage.
  int virtualStages = 1;
  // Explicit [begin, end) layer ranges, one per virtual stage; empty: balanced.
  std::vector<std::pair<int, int>> partition;
  // Which node of network.nodes hosts each stage: one entry per stage, a node (name or index) for
  // all its replicas or a list of one node per replica. Null: rank r on node r mod N (rank order).
  nlohmann::json placement;
};

struct TrainingSpec {
  int epochs = 2;
  int64_t maxSteps = 0;  // 0: no limit
  double lr = 1e-3;
  double weightDecay = 0.01;
  int64_t warmupSteps = 5;
  double clipNorm = 1.0;
  uint64_t seed = 1;
  std::string initCheckpoint;  // pretrained base; empty: random init from model.seed
  // A folder the fine-tuned model is written to at the run's end in the Hugging Face layout of
  // model.checkpoint (config.json, one safetensors shard per stage, model.safetensors.index.json):
  // each stage writes its own shard on its host. Only with model.checkpoint.
  std::string saveCheckpoint;
  bool evalEachEpoch = true;
  int64_t evalEverySteps = 0;  // > 0: also evaluate after every N-th step (a validation-loss curve)
  // Whether the run evaluates after `done` steps (>= 1), the last of which ended an epoch or the
  // run (epochEnd): at every epoch's end with eval_each_epoch, every eval_every_steps steps; once
  // where both fall on the same step. The worker, the single process and the simulator ask this.
  bool evaluatesAfter(int64_t done, bool epochEnd) const {
    return (evalEachEpoch && epochEnd) || (evalEverySteps > 0 && done % evalEverySteps == 0);
  }
};

struct CompressionSpec {
  std::string forward = "none";
  std::string backward = "none";
  std::string label;  // display name, e.g. "AC-SGD fw2/bw4"
  // "device_costs": {"forward"|"backward": cost}: what a direction's codec costs on the device an
  // analytic profile describes (simulator/profile.h addCodecPlaces), either as rates of the fp32
  // message ({"encode_bytes_per_s", "decode_bytes_per_s"}) or per element against the device's
  // peak and memory bandwidth ({"encode_flops_per_element", "encode_bytes_per_element",
  // "decode_flops_per_element", "decode_bytes_per_element"}). Null: none declared.
  nlohmann::json deviceCosts;
  // "threads": the codec threads of a stage (compression/parallel.h): a number >= 1, or "auto" (0
  // here, the default): the cores this process may run on, shared by the ranks beside it, less
  // runtime.threads_per_worker; at least 1. 1 runs every codec on the stage's own thread.
  int threads = 0;
};

// Throws std::invalid_argument naming `where` when `cost` is not one direction's device cost
// (CompressionSpec::deviceCosts).
void checkDeviceCost(const nlohmann::json& cost, const std::string& where);

// Data parallelism between the replicas of each stage (runtime/dp/dp.h).
struct DpSpec {
  std::string algorithm = "allreduce";  // allreduce (ring) | sharded_ps
  // Per message: any codec spec (ef(...) keeps its residual at each sender: the workers' pushes and
  // the servers' averages are the two sides under sharded_ps), or a gradient compressor with
  // optimizer-side state: qadam:bits=8|4,bucket=512,warmup_steps=N / powersgd:rank=r.
  std::string codec = "none";
  int localSteps = 1;  // H > 1: DiLoCo (inner AdamW steps, outer Nesterov step every H steps)
  double outerLr = 0.7, outerMomentum = 0.9;
};

struct NetworkSpec {
  // user (user-space shaping) | tc (namespaces + veths + tc on one host) | tc-dev (tc on a real
  // interface per destination, runs across hosts: see emulator/devshaper.h)
  std::string backend = "user";
  std::string dev =
      "auto";  // tc-dev: the interface to shape; auto: the one holding the worker's address
  // Link arrival model: "pipelined" (per directed link; latency overlaps back-to-back messages) or
  // "serial_fifo" (one inbound FIFO per receiving rank for both directions; see
  // simulator/simulate.h).
  std::string model = "pipelined";
  // Pipeline links (emulator::Topology JSON): the default link and per-link overrides whose src and
  // dst are neighbouring *stages* (the same for every replica's pipeline).
  nlohmann::json links = {{"bandwidth", "10Gbps"}, {"latency", "0ms"}};
  // Data-parallel links between the replicas of a stage, configured apart from the pipeline's:
  // overrides name replicas (src, dst), the same within every stage. Null: links' default link.
  nlohmann::json dpLinks;
  // The kernel's TCP in the run's namespaces (backend tc only: namespace sysctls, never the
  // host's): congestion_control, slow_start_after_idle, wmem_max, rmem_max
  // (emulator/tcp_settings.h).
  nlohmann::json tcp = nlohmann::json::object();
  // Nodes and access links (emulator/nodes.h): null, or the network (a file named here is read and
  // held inline with "file": its path). With it every link of the run comes from the nodes the
  // ranks sit on (pipeline.placement).
  nlohmann::json nodes;
  // The delay lines' interrupt moderation (backend tc without netem; emulator::DelayLineOptions::
  // batchS): 0, the default, writes every packet at its time; N writes streaming packets in batches
  // at most N us apart; -1 ("auto" in JSON) min(delay / 50, 100 us) per line. Cuts the lines' CPU
  // by a quarter to a half at 100 us, and changes the kernel's TCP at 1 Gbps (results/README.md
  // section 14).
  double moderationUs = 0;
};

struct RuntimeSpec {
  double stepTimeoutS = 120;  // a step taking longer than this fails the run
  int threadsPerWorker = 1;
  // Pin worker r to the r-th CPU this process may use, when there are at least as many CPUs as
  // workers (otherwise the run is not pinned and says so). The placement is recorded in
  // result.json.
  bool pinCores = false;
  // Where the stages compute: "cpu", or "cuda" / "cuda:N" with a libtorch built with CUDA (Debian's
  // is CPU-only; tools/gpu-build.sh builds against one). Messages leave and enter a stage in host
  // memory, where the codecs run; the copies count as the stage's compute time.
  std::string device = "cpu";
  // What result.json's "timeline" holds: "last", the last step's events of every rank; "all", every
  // step's (each event with its "step"): what `slowpipe profile --host-from-run` fits speeds to.
  std::string timeline = "last";
  // Stragglers: ranks that compute slower, constant or over steps (runtime/exec/slowdown.h).
  SlowdownSpec slowdown;
};

struct RunSpec {
  std::string name = "run";
  ModelSpec model;
  DataSpec data;
  PipelineSpec pipeline;
  TrainingSpec training;
  CompressionSpec compression;
  DpSpec dp;
  NetworkSpec network;
  RuntimeSpec runtime;
  nlohmann::json source;  // the JSON it was read from (recorded in results)
};
// The codec threads a rank runs with (CompressionSpec::threads): `ranksSharingCores` ranks share
// the cores this process may run on (its CPU affinity mask).
int codecThreadsFor(const RunSpec& spec, int ranksSharingCores);

// Parses and validates; unknown fields are errors (a typo must not silently fall back to a
// default). simulation=true accepts what only the simulator can run (any vocab size: no tokenizer
// runs).
RunSpec runSpecFromJson(const nlohmann::json& j, const std::string& where = "spec",
                        bool simulation = false);
RunSpec loadRunSpec(const std::string& path);
// Relative input paths of a spec (model.checkpoint, training.init_checkpoint, data.source,
// data.tokenizer, data.finetune, data.pretrain, network.nodes, a link's trace, a plug-in's or
// TorchScript codec's path=) are the spec's: a path that exists next to the spec (under `specDir`)
// becomes specDir/path; one that does not is left as written, for the current folder (so a spec
// written for the folder it is run from still runs). Outputs (data.cache_dir,
// training.save_checkpoint) stay relative to the current folder, as --out does.
void resolveSpecPaths(nlohmann::json& spec, const std::string& specDir);
// A spec file read with its relative paths resolved (resolveSpecPaths against the file's folder).
nlohmann::json readSpecFile(const std::string& path, const std::string& what = "spec file");
// `--set PATH=VALUE` (command line): sets the field at the dotted PATH of `doc`, creating objects
// on the way; an object VALUE is merged into an object there. VALUE is JSON when it parses as JSON
// (4, true, "x", {"a": 1}) and a string otherwise (100Mbps, plugin:path=x.so). A malformed
// assignment or a path through a non-object is an error naming it.
void setJsonPath(nlohmann::json& doc, const std::string& path, const nlohmann::json& value);
void applySet(nlohmann::json& doc, const std::string& assignment);
// loadRunSpec with `--set` assignments applied (recorded in the spec's source, so results and
// resume identities see them).
RunSpec loadRunSpec(const std::string& path, const std::vector<std::string>& sets);
nlohmann::json toJson(const RunSpec& s);
// Layer ranges per stage: the explicit partition or a balanced one (stage 0 also holds the
// embeddings, the last stage the head, so they get fewer blocks when layers do not divide).
std::vector<std::pair<int, int>> stageLayers(const RunSpec& s);
// The run's ranks: stages x replicas, with pipeline.virtual_stages model chunks each.
RankLayout rankLayout(const RunSpec& s);

}  // namespace slowpipe::runtime
