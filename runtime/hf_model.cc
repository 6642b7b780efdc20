// Hugging Face checkpoints into slowpipe's stage models (model.h loadHfWeights).
#include <filesystem>
#include <stdexcept>

#include "runtime/model.h"
#include "runtime/safetensors.h"

namespace slowpipe::runtime {

std::pair<std::string, bool> hfNameOf(const ModelSpec& m, const std::string& ours, const std::string& prefix) {
  const bool llama = m.family == "llama";
  if (ours == "tok_emb.weight") return {llama ? "model.embed_tokens.weight" : prefix + "wte.weight", false};
  if (ours == "pos_emb.weight") return {prefix + "wpe.weight", false};
  if (ours == "lm_head.weight") return {"lm_head.weight", false};
  if (ours.rfind("ln_f.", 0) == 0) return {(llama ? "model.norm." : prefix + "ln_f.") + ours.substr(5), false};
  if (ours.rfind("block", 0) != 0) throw std::logic_error("no Hugging Face name for '" + ours + "'");
  const size_t dot = ours.find('.');
  const std::string layer = ours.substr(5, dot - 5), rest = ours.substr(dot + 1);
  const std::string part = rest.substr(0, rest.find('.')), leaf = rest.substr(rest.find('.') + 1);
  if (llama) {
    static const std::map<std::string, std::string> kLlama = {
        {"ln1", "input_layernorm"}, {"ln2", "post_attention_layernorm"}, {"q", "self_attn.q_proj"}, {"k", "self_attn.k_proj"},
        {"v", "self_attn.v_proj"},  {"o", "self_attn.o_proj"},          {"gate", "mlp.gate_proj"},   {"up", "mlp.up_proj"},
        {"down", "mlp.down_proj"}};
    return {"model.layers." + layer + "." + kLlama.at(part) + "." + leaf, false};
  }
  // GPT-2's Conv1D stores its weight [in, out] (x @ W + b): ours is the transpose.
  static const std::map<std::string, std::string> kGpt2 = {{"ln1", "ln_1"},          {"ln2", "ln_2"},     {"qkv", "attn.c_attn"},
                                                           {"proj", "attn.c_proj"}, {"fc", "mlp.c_fc"}, {"out", "mlp.c_proj"}};
  const bool conv = part != "ln1" && part != "ln2" && leaf == "weight";
  return {prefix + "h." + layer + "." + kGpt2.at(part) + "." + leaf, conv};
}

void loadHfWeights(StageModelImpl& model, const ModelSpec& m, int /*layerBegin*/, int /*layerEnd*/) {
  Checkpoint ckpt(m.checkpoint);
  // GPT-2 keys with or without the "transformer." prefix (GPT2LMHeadModel vs GPT2Model).
  const std::string prefix = m.family == "gpt2" && ckpt.has("transformer.wte.weight") ? "transformer." : "";
  torch::NoGradGuard guard;
  for (auto& p : model.named_parameters(true)) {
    auto [name, transposed] = hfNameOf(m, p.key(), prefix);
    if (p.key() == "lm_head.weight" && (m.tiedHead || !ckpt.has(name))) {
      if (!m.tiedHead)
        throw std::invalid_argument("checkpoint '" + m.checkpoint + "': has no tensor 'lm_head.weight' and config.json does not tie "
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
      throw std::invalid_argument("checkpoint '" + t.file + "': tensor '" + name + "' has shape [" + have + "], the model (config.json) "
                                  "expects [" + expect + "]");
    }
    const std::vector<float> values = t.toFloat();
    torch::Tensor src = torch::from_blob(const_cast<float*>(values.data()), t.shape, torch::kFloat);
    if (transposed) src = src.t();
    p.value().copy_(src);
  }
}

}  // namespace slowpipe::runtime
