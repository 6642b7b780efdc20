// `slowpipe model info|logits|generate|tokenize`: look at a Hugging Face checkpoint as slowpipe
// loads it, before spending hours fine-tuning it.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model/model.h"
#include "runtime/model/model_size.h"
#include "runtime/model/safetensors.h"
#include "runtime/model/tokenizer.h"
#include "runtime/spec/spec.h"
#include "tools/commands.h"

namespace slowpipe::tools {
namespace {

using nlohmann::json;

// The spec of DIR's model in `stages` even stages (seq_len: enough for `tokens`).
runtime::RunSpec specOf(const std::string& dir, int stages, int seqLen) {
  json j = {{"name", "model"},
            {"model", {{"checkpoint", dir}, {"seq_len", seqLen}}},
            {"pipeline", {{"stages", stages}}},
            {"compression", {{"forward", "none"}, {"backward", "none"}}},
            {"network", json::object()}};
  return runtime::runSpecFromJson(j, "model", false);
}

std::vector<int64_t> parseTokens(const std::string& text, int vocab) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t t = -1;
    try {
      t = std::stoll(item, &used);
    } catch (const std::exception&) {
    }
    if (used != item.size() || t < 0 || t >= vocab)
      throw std::invalid_argument("--tokens: '" + item + "' is not a token id in 0.." +
                                  std::to_string(vocab - 1));
    out.push_back(t);
  }
  if (out.empty())
    throw std::invalid_argument(
        "--tokens: give at least one token id, e.g. --tokens 464,2068,7586");
  return out;
}

// Activation bytes one micro-batch leaves on a stage of `layers` blocks for its backward:
// Korthikanti et al. 2022 (arXiv 2205.05198, eq. 2, no recomputation) give s*b*h*(34 + 5*a*s/h)
// bytes a transformer layer at 16 bits; at 32 bits twice that. An estimate: the MLP width and GQA
// change it by a few per cent.
double activationBytes(const runtime::ModelSpec& m, int layers, int microBatchSize,
                       int bytesPerValue) {
  const double s = m.seqLen, b = microBatchSize, h = m.width, a = m.heads;
  return layers * s * b * h * (34 + 5 * a * s / h) * bytesPerValue / 2.0;
}

void addInfo(CLI::App& model) {
  auto dir = std::make_shared<std::string>();
  auto stages = std::make_shared<int>(1), seqLen = std::make_shared<int>(1024),
       mbs = std::make_shared<int>(1), inFlight = std::make_shared<int>(0);
  auto* cmd = model.add_subcommand(
      "info", "family, parameters, layers, vocabulary and memory per stage of a checkpoint");
  cmd->add_option("dir", *dir, "Hugging Face folder (config.json; the weights may be absent)")
      ->required();
  cmd->add_option("--stages", *stages, "pipeline stages (even split of the layers)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--seq-len", *seqLen, "sequence length (default 1024)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--micro-batch-size", *mbs, "sequences a micro-batch (default 1)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--in-flight", *inFlight,
                  "micro-batches whose activations a stage holds at once (default: the stages, as "
                  "1F1B's first stage)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->callback([=] {
    runtime::ModelSpec base;
    base.seqLen = *seqLen;
    const runtime::ModelSpec m = runtime::modelFromHfConfig(*dir, base);
    runtime::RunSpec s;
    s.model = m;
    s.pipeline.stages = *stages;
    const int held = *inFlight > 0 ? *inFlight : *stages;
    std::printf("%s: family %s, %d layers, width %d, %d heads (%d kv), MLP %d, vocabulary %d%s\n",
                dir->c_str(), m.family.c_str(), m.layers, m.width, m.heads, m.kvHeadCount(),
                m.mlpWidth(), m.vocab, m.tiedHead ? ", tied head" : "");
    std::printf(
        "  memory a stage needs: fp32 weights, gradients and AdamW's two moments (16 B a "
        "parameter), and the activations of "
        "%d micro-batch(es) of %d x %d tokens (Korthikanti et al. 2022, fp32, an estimate)\n",
        held, *mbs, *seqLen);
    double total = 0;
    int stage = 0;
    for (const auto& [begin, end] : runtime::stageLayers(s)) {
      const bool first = stage == 0, last = stage == *stages - 1;
      const double params = runtime::stageParameters(m, end - begin, first, last);
      const double state = 16.0 * params, acts = held * activationBytes(m, end - begin, *mbs, 4);
      total += params;
      std::printf(
          "  stage %d: layers %d..%d, %.4g parameters, %.3g GiB state + %.3g GiB activations = "
          "%.3g GiB\n",
          stage, begin, end - 1, params, state / (1 << 30), acts / (1 << 30),
          (state + acts) / (1 << 30));
      ++stage;
    }
    std::string tensors = "no weights in the folder (config only)";
    if (std::filesystem::exists(std::filesystem::path(*dir) / "model.safetensors") ||
        std::filesystem::exists(std::filesystem::path(*dir) / "model.safetensors.index.json"))
      tensors =
          std::to_string(runtime::Checkpoint(*dir).names().size()) + " tensors in the checkpoint";
    std::printf(
        "  %.4g parameters in all%s; %s\n", total,
        m.tiedHead && *stages > 1
            ? " (the tied head counted on the first and the last stage: it trains as two copies)"
            : "",
        tensors.c_str());
  });
}

// DIR's model cut into `stages` even stages as a run cuts it, for sequences up to seqLen tokens.
class SplitModel {
 public:
  SplitModel(const std::string& dir, int stages, int seqLen) : spec_(specOf(dir, stages, seqLen)) {
    int stage = 0;
    for (const auto& [begin, end] : runtime::stageLayers(spec_)) {
      parts_.push_back(std::make_unique<runtime::StageModel>(spec_.model, begin, end, stage == 0,
                                                             stage == stages - 1));
      ++stage;
    }
  }
  // [T, vocab] logits of one sequence.
  torch::Tensor logits(const std::vector<int64_t>& ids) {
    torch::NoGradGuard guard;
    torch::Tensor h = torch::tensor(ids, torch::kLong).unsqueeze(0);
    for (auto& p : parts_) h = (*p)(h);
    return h[0].contiguous();
  }

 private:
  runtime::RunSpec spec_;
  std::vector<std::unique_ptr<runtime::StageModel>> parts_;
};

void addLogits(CLI::App& model) {
  auto dir = std::make_shared<std::string>(), tokens = std::make_shared<std::string>();
  auto stages = std::make_shared<int>(1);
  auto asJson = std::make_shared<bool>(false);
  auto* cmd = model.add_subcommand("logits",
                                   "the logits of a token sequence through the checkpoint, split "
                                   "over stages as a run splits it");
  cmd->add_option("dir", *dir, "Hugging Face folder")->required();
  cmd->add_option("--tokens", *tokens, "comma-separated token ids")->required();
  cmd->add_option("--stages", *stages, "pipeline stages the model is split into (default 1)")
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--json", *asJson,
                "every logit as JSON ({\"logits\": [[...] per position]}) instead of a summary");
  cmd->callback([=] {
    runtime::ModelSpec probe = runtime::modelFromHfConfig(*dir, runtime::ModelSpec{});
    const std::vector<int64_t> ids = parseTokens(*tokens, probe.vocab);
    SplitModel split(*dir, *stages, static_cast<int>(ids.size()));
    const torch::Tensor logits = split.logits(ids);
    if (*asJson) {
      json rows = json::array();
      for (int64_t t = 0; t < logits.size(0); ++t) {
        const auto row = logits[t];
        rows.push_back(
            std::vector<float>(row.data_ptr<float>(), row.data_ptr<float>() + row.numel()));
      }
      std::printf("%s\n",
                  json{{"tokens", ids}, {"stages", *stages}, {"logits", rows}}.dump().c_str());
      return;
    }
    for (int64_t t = 0; t < logits.size(0); ++t) {
      const auto top = logits[t].argmax().item<int64_t>();
      std::printf("position %lld (token %lld): argmax %lld (logit %.5f), mean %.5f, std %.5f\n",
                  static_cast<long long>(t), static_cast<long long>(ids[t]),
                  static_cast<long long>(top), logits[t][top].item<float>(),
                  logits[t].mean().item<float>(), logits[t].std().item<float>());
    }
  });
}

// `slowpipe model generate DIR --prompt TEXT | --tokens IDS`: greedy continuation (the whole
// sequence through the model at each new token: a check, not a server).
void addGenerate(CLI::App& model) {
  auto dir = std::make_shared<std::string>(), prompt = std::make_shared<std::string>(),
       tokens = std::make_shared<std::string>(), tokenizer = std::make_shared<std::string>();
  auto maxNew = std::make_shared<int>(32), stages = std::make_shared<int>(1);
  auto asJson = std::make_shared<bool>(false);
  auto* cmd = model.add_subcommand("generate",
                                   "greedy continuation of a prompt through the checkpoint (to "
                                   "check a loaded or fine-tuned model)");
  cmd->add_option("dir", *dir, "Hugging Face folder")->required();
  auto* p = cmd->add_option("--prompt", *prompt,
                            "prompt text (encoded with the folder's tokenizer, or --tokenizer's)");
  auto* t =
      cmd->add_option("--tokens", *tokens, "prompt as comma-separated token ids instead of text");
  p->excludes(t);
  cmd->add_option("--tokenizer", *tokenizer, "tokenizer folder or .model file (default: DIR)");
  cmd->add_option("--max-new", *maxNew, "tokens to generate (default 32)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--stages", *stages, "pipeline stages the model is split into (default 1)")
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--json", *asJson,
                "{\"prompt\": ids, \"generated\": ids, \"text\": ...} instead of the text");
  cmd->callback([=] {
    if (prompt->empty() == tokens->empty())
      throw std::invalid_argument("model generate: give --prompt TEXT or --tokens IDS");
    const runtime::ModelSpec probe = runtime::modelFromHfConfig(*dir, runtime::ModelSpec{});
    std::unique_ptr<runtime::Tokenizer> tok;
    if (!prompt->empty() || !tokenizer->empty())
      tok = runtime::loadTokenizer(tokenizer->empty() ? *dir : *tokenizer);
    std::vector<int64_t> ids;
    if (!prompt->empty()) {
      for (int32_t id : tok->encode(*prompt)) ids.push_back(id);
      if (ids.empty()) throw std::invalid_argument("--prompt: encodes to no tokens");
      for (int64_t id : ids)
        if (id >= probe.vocab)
          throw std::invalid_argument(
              "--prompt: token " + std::to_string(id) + " is beyond the model's vocabulary (" +
              std::to_string(probe.vocab) + "): tokenizer and checkpoint do not match");
    } else {
      ids = parseTokens(*tokens, probe.vocab);
    }
    const int total = static_cast<int>(ids.size()) + *maxNew;
    if (probe.family != "llama" && total > probe.positionRows())
      throw std::invalid_argument("--max-new: " + std::to_string(ids.size()) + " prompt + " +
                                  std::to_string(*maxNew) + " new tokens exceed the model's " +
                                  std::to_string(probe.positionRows()) + " positions");
    SplitModel split(*dir, *stages, total);
    const size_t promptLen = ids.size();
    for (int i = 0; i < *maxNew; ++i) ids.push_back(split.logits(ids)[-1].argmax().item<int64_t>());
    const std::vector<int64_t> fresh(ids.begin() + static_cast<std::ptrdiff_t>(promptLen),
                                     ids.end());
    std::string text;
    if (tok) text = tok->decode(std::vector<int32_t>(fresh.begin(), fresh.end()));
    if (*asJson) {
      json out = {
          {"prompt",
           std::vector<int64_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(promptLen))},
          {"generated", fresh}};
      if (tok) out["text"] = text;
      std::printf("%s\n", out.dump().c_str());
    } else if (tok) {
      std::printf("%s%s\n", prompt->c_str(), text.c_str());
    } else {
      std::string line;
      for (int64_t id : fresh) line += (line.empty() ? "" : ",") + std::to_string(id);
      std::printf("%s\n", line.c_str());
    }
  });
}

// `slowpipe model tokenize DIR --lines FILE`: every line's token ids (comma-separated), one line
// each.
void addTokenize(CLI::App& model) {
  auto dir = std::make_shared<std::string>(), lines = std::make_shared<std::string>();
  auto* cmd = model.add_subcommand(
      "tokenize", "token ids of each line of a text file, with a checkpoint folder's tokenizer");
  cmd->add_option("dir", *dir,
                  "folder with tokenizer.json, vocab.json + merges.txt, encoder.json + vocab.bpe "
                  "or tokenizer.model; or a .model file")
      ->required();
  cmd->add_option("--lines", *lines, "UTF-8 text file: one output line of ids per input line")
      ->required();
  cmd->callback([=] {
    const auto tok = runtime::loadTokenizer(*dir);
    std::ifstream in(*lines);
    if (!in) throw std::invalid_argument("--lines: cannot read '" + *lines + "'");
    std::string line, out;
    while (std::getline(in, line)) {
      out.clear();
      for (int32_t id : tok->encode(line)) out += (out.empty() ? "" : ",") + std::to_string(id);
      std::printf("%s\n", out.c_str());
    }
  });
}

}  // namespace

void addModelCommands(CLI::App& app) {
  auto* model =
      app.add_subcommand("model", "look at a Hugging Face checkpoint as slowpipe loads it");
  model->require_subcommand(1);
  addInfo(*model);
  addLogits(*model);
  addGenerate(*model);
  addTokenize(*model);
}

}  // namespace slowpipe::tools
