// Hugging Face checkpoints into slowpipe's stage models (model.h loadHfWeights).
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "runtime/model/model.h"
#include "runtime/model/safetensors.h"
#include "runtime/records/result.h"

namespace slowpipe::runtime {

std::pair<std::string, bool> hfNameOf(const ModelSpec& m, const std::string& ours,
                                      const std::string& prefix) {
  const bool llama = m.family == "llama";
  if (ours == "tok_emb.weight")
    return {llama ? "model.embed_tokens.weight" : prefix + "wte.weight", false};
  if (ours == "pos_emb.weight") return {prefix + "wpe.weight", false};
  if (ours == "lm_head.weight") return {"lm_head.weight", false};
  if (ours.rfind("ln_f.", 0) == 0)
    return {(llama ? "model.norm." : prefix + "ln_f.") + ours.substr(5), false};
  if (ours.rfind("block", 0) != 0)
    throw std::logic_error("no Hugging Face name for '" + ours + "'");
  const size_t dot = ours.find('.');
  const std::string layer = ours.substr(5, dot - 5), rest = ours.substr(dot + 1);
  const std::string part = rest.substr(0, rest.find('.')), leaf = rest.substr(rest.find('.') + 1);
  if (llama) {
    static const std::map<std::string, std::string> kLlama = {
        {"ln1", "input_layernorm"}, {"ln2", "post_attention_layernorm"},
        {"q", "self_attn.q_proj"},  {"k", "self_attn.k_proj"},
        {"v", "self_attn.v_proj"},  {"o", "self_attn.o_proj"},
        {"gate", "mlp.gate_proj"},  {"up", "mlp.up_proj"},
        {"down", "mlp.down_proj"}};
    return {"model.layers." + layer + "." + kLlama.at(part) + "." + leaf, false};
  }
  // GPT-2's Conv1D stores its weight [in, out] (x @ W + b): ours is the transpose.
  static const std::map<std::string, std::string> kGpt2 = {
      {"ln1", "ln_1"},         {"ln2", "ln_2"},    {"qkv", "attn.c_attn"},
      {"proj", "attn.c_proj"}, {"fc", "mlp.c_fc"}, {"out", "mlp.c_proj"}};
  const bool conv = part != "ln1" && part != "ln2" && leaf == "weight";
  return {prefix + "h." + layer + "." + kGpt2.at(part) + "." + leaf, conv};
}

void loadHfWeights(StageModelImpl& model, const ModelSpec& m, int /*layerBegin*/,
                   int /*layerEnd*/) {
  Checkpoint ckpt(m.checkpoint);
  // GPT-2 keys with or without the "transformer." prefix (GPT2LMHeadModel vs GPT2Model).
  const std::string prefix =
      m.family == "gpt2" && ckpt.has("transformer.wte.weight") ? "transformer." : "";
  torch::NoGradGuard guard;
  for (auto& p : model.named_parameters(true)) {
    auto [name, transposed] = hfNameOf(m, p.key(), prefix);
    if (p.key() == "lm_head.weight" && (m.tiedHead || !ckpt.has(name))) {
      if (!m.tiedHead)
        throw std::invalid_argument(
            "checkpoint '" + m.checkpoint +
            "': has no tensor 'lm_head.weight' and config.json does not tie "
            "the head to the embedding (tie_word_embeddings)");
      name = hfNameOf(m, "tok_emb.weight", prefix).first;
    }
    const TensorView& t = ckpt.tensor(name);
    std::vector<int64_t> want(p.value().sizes().begin(), p.value().sizes().end());
    if (transposed) std::swap(want[0], want[1]);
    if (t.shape != want) {
      std::string have, expect;
      for (int64_t d : t.shape) have += (have.empty() ? "" : ", ") + std::to_string(d);
      for (int64_t d : want) expect += (expect.empty() ? "" : ", ") + std::to_string(d);
      throw std::invalid_argument("checkpoint '" + t.file + "': tensor '" + name + "' has shape [" +
                                  have +
                                  "], the model (config.json) "
                                  "expects [" +
                                  expect + "]");
    }
    const std::vector<float> values = t.toFloat();
    torch::Tensor src = torch::from_blob(const_cast<float*>(values.data()), t.shape, torch::kFloat);
    if (transposed) src = src.t();
    p.value().copy_(src);
  }
}

namespace {

// Our parameter names of a stage, in the order StageModelImpl registers them.
std::vector<std::string> stageParameterNames(const ModelSpec& m, int begin, int end, bool first,
                                             bool last) {
  const bool llama = m.family == "llama";
  std::vector<std::string> out;
  if (first) {
    out.push_back("tok_emb.weight");
    if (!llama) out.push_back("pos_emb.weight");
  }
  for (int i = begin; i < end; ++i) {
    const std::string b = "block" + std::to_string(i) + ".";
    if (llama) {
      out.push_back(b + "ln1.weight");
      for (const char* x : {"q", "k", "v"}) {
        out.push_back(b + x + ".weight");
        if (m.qkvBias) out.push_back(b + x + ".bias");
      }
      out.push_back(b + "o.weight");
      if (m.oBias) out.push_back(b + "o.bias");
      for (const char* x : {"ln2.weight", "gate.weight", "up.weight", "down.weight"})
        out.push_back(b + x);
    } else {
      for (const char* x : {"ln1", "qkv", "proj", "ln2", "fc", "out"})
        for (const char* leaf : {".weight", ".bias"}) out.push_back(b + x + leaf);
    }
  }
  if (last) {
    out.push_back("ln_f.weight");
    if (!llama) out.push_back("ln_f.bias");
    if (!m.tiedHead) out.push_back("lm_head.weight");
  }
  return out;
}

std::string shardName(int v, int V) {
  char b[64];
  std::snprintf(b, sizeof b, "model-%05d-of-%05d.safetensors", v + 1, V);
  return b;
}

}  // namespace

void saveHfStage(StageModelImpl& model, const ModelSpec& m, const std::string& dir, int v,
                 const std::vector<std::pair<int, int>>& ranges) {
  namespace fs = std::filesystem;
  const int V = static_cast<int>(ranges.size());
  const std::string prefix = m.family == "gpt2" ? "transformer." : "";
  fs::create_directories(dir);
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors;
  for (const auto& p : model.named_parameters(true)) {
    if (p.key() == "lm_head.weight" && m.tiedHead)
      continue;  // the first stage's embedding is the head
    const auto [name, transposed] = hfNameOf(m, p.key(), prefix);
    torch::Tensor t = p.value().detach().to(torch::kCPU, torch::kFloat);
    if (transposed) t = t.t();
    t = t.contiguous();
    tensors[name] = {std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
                     std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel())};
  }
  writeSafetensors((fs::path(dir) / shardName(v, V)).string(), tensors,
                   {{"format", "pt"}, {"written_by", "slowpipe"}});
  if (v != 0) return;
  nlohmann::json map = nlohmann::json::object();
  for (int s = 0; s < V; ++s)
    for (const auto& ours :
         stageParameterNames(m, ranges[s].first, ranges[s].second, s == 0, s == V - 1))
      map[hfNameOf(m, ours, prefix).first] = shardName(s, V);
  writeJsonAtomically((fs::path(dir) / "model.safetensors.index.json").string(),
                      {{"metadata", {{"written_by", "slowpipe"}}}, {"weight_map", map}});
  const fs::path config = fs::path(dir) / "config.json";
  fs::copy_file(fs::path(m.checkpoint) / "config.json", config,
                fs::copy_options::overwrite_existing);
}

}  // namespace slowpipe::runtime
