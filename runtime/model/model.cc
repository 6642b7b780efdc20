// Model components, deterministic initialisation, checkpoints.
#include "runtime/model/model.h"

#include <cmath>
#include <stdexcept>

#include "runtime/exec/weight_grad.h"

namespace slowpipe::runtime {
namespace {

// GPT-2 initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm; seeded per component.
void initComponent(torch::nn::Module& m, uint64_t seed) {
  torch::NoGradGuard guard;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& p : m.named_parameters(true)) {
    const std::string& name = p.key();
    if (name.find("ln") != std::string::npos) {
      p.value().fill_(name.find("weight") != std::string::npos ? 1.0 : 0.0);
    } else if (name.find("bias") != std::string::npos) {
      p.value().zero_();
    } else {
      p.value().normal_(0.0, 0.02, gen);
    }
  }
}

}  // namespace

RMSNormImpl::RMSNormImpl(int width, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({width}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  const auto h = x.to(torch::kFloat);
  return weight * (h * torch::rsqrt(h.pow(2).mean(-1, true) + eps)).to(x.scalar_type());
}

BlockImpl::BlockImpl(const ModelSpec& m)
    : heads(m.heads),
      kvHeads(m.kvHeadCount()),
      ropeTheta(m.ropeTheta),
      llama(m.family == "llama"),
      geluTanh(m.activation == "gelu_new") {
  const int C = m.width, D = C / m.heads, F = m.mlpWidth();
  if (llama) {
    rms1 = register_module("ln1", RMSNorm(C, m.normEps));
    q = register_module("q",
                        torch::nn::Linear(torch::nn::LinearOptions(C, heads * D).bias(m.qkvBias)));
    k = register_module(
        "k", torch::nn::Linear(torch::nn::LinearOptions(C, kvHeads * D).bias(m.qkvBias)));
    v = register_module(
        "v", torch::nn::Linear(torch::nn::LinearOptions(C, kvHeads * D).bias(m.qkvBias)));
    o = register_module("o",
                        torch::nn::Linear(torch::nn::LinearOptions(heads * D, C).bias(m.oBias)));
    rms2 = register_module("ln2", RMSNorm(C, m.normEps));
    gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(C, F).bias(false)));
    up = register_module("up", torch::nn::Linear(torch::nn::LinearOptions(C, F).bias(false)));
    down = register_module("down", torch::nn::Linear(torch::nn::LinearOptions(F, C).bias(false)));
    return;
  }
  ln1 =
      register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C}).eps(m.normEps)));
  qkv = register_module("qkv", torch::nn::Linear(C, 3 * C));
  proj = register_module("proj", torch::nn::Linear(C, C));
  ln2 =
      register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C}).eps(m.normEps)));
  fc = register_module("fc", torch::nn::Linear(C, F));
  out = register_module("out", torch::nn::Linear(F, C));
}

// Causal attention of q [B, H, T, D] over k, v [B, Hkv, T, D] (kv heads repeated to H).
torch::Tensor BlockImpl::attention(const torch::Tensor& qh, const torch::Tensor& kh,
                                   const torch::Tensor& vh, int64_t T) {
  const int64_t D = qh.size(-1);
  torch::Tensor kk = kh, vv = vh;
  if (kvHeads != heads) {
    kk = kh.repeat_interleave(heads / kvHeads, 1);
    vv = vh.repeat_interleave(heads / kvHeads, 1);
  }
  auto att = torch::matmul(qh, kk.transpose(-2, -1)) / std::sqrt(static_cast<double>(D));
  const auto mask =
      torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(qh.device())).triu(1);
  att = torch::softmax(att.masked_fill(mask, -INFINITY), -1);
  return torch::matmul(att, vv);
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / heads;
  if (llama) {
    const auto hx = rms1(x);
    auto split = [&](const torch::Tensor& t, int n) {
      return t.view({B, T, n, D}).transpose(1, 2);
    };
    auto qh = split(splitLinear(q, hx, store), heads),
         kh = split(splitLinear(k, hx, store), kvHeads);
    const auto vh = split(splitLinear(v, hx, store), kvHeads);
    // Rotary embeddings as Hugging Face's Llama computes them (fp32 inverse frequencies, the two
    // halves of a head rotated together).
    const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(x.device());
    const auto inv =
        1.0 /
        torch::pow(ropeTheta, torch::arange(0, D, 2, opts.dtype(torch::kLong)).to(torch::kFloat) /
                                  static_cast<double>(D));
    const auto freqs = torch::outer(torch::arange(T, opts), inv);
    const auto emb = torch::cat({freqs, freqs}, -1);
    const auto cos = emb.cos().to(x.scalar_type()), sin = emb.sin().to(x.scalar_type());
    auto rotate = [&](const torch::Tensor& t) {
      const auto halves = t.chunk(2, -1);
      return t * cos + torch::cat({-halves[1], halves[0]}, -1) * sin;
    };
    qh = rotate(qh);
    kh = rotate(kh);
    const auto y = attention(qh, kh, vh, T).transpose(1, 2).contiguous().view({B, T, heads * D});
    const auto h = x + splitLinear(o, y, store);
    const auto m = rms2(h);
    return h + splitLinear(down,
                           torch::silu(splitLinear(gate, m, store)) * splitLinear(up, m, store),
                           store);
  }
  auto parts = splitLinear(qkv, ln1(x), store).chunk(3, -1);
  auto split = [&](const torch::Tensor& t) { return t.view({B, T, heads, D}).transpose(1, 2); };
  const auto y = attention(split(parts[0]), split(parts[1]), split(parts[2]), T)
                     .transpose(1, 2)
                     .contiguous()
                     .view({B, T, C});
  const auto h = x + splitLinear(proj, y, store);
  const auto a = splitLinear(fc, ln2(h), store);
  return h + splitLinear(out, geluTanh ? torch::gelu(a, "tanh") : torch::gelu(a), store);
}

StageModelImpl::StageModelImpl(const ModelSpec& m, int layerBegin, int layerEnd, bool first_,
                               bool last_)
    : first(first_), last(last_) {
  const bool llama = m.family == "llama";
  if (first) {
    tokEmb = register_module("tok_emb", torch::nn::Embedding(m.vocab, m.width));
    initComponent(*tokEmb, m.seed * 7919 + 1);
    if (!llama) {
      posEmb = register_module("pos_emb", torch::nn::Embedding(m.positionRows(), m.width));
      initComponent(*posEmb, m.seed * 7919 + 2);
    }
  }
  for (int i = layerBegin; i < layerEnd; ++i) {
    blocks.push_back(register_module("block" + std::to_string(i), Block(m)));
    initComponent(*blocks.back(), m.seed * 7919 + 100 + static_cast<uint64_t>(i));
  }
  if (last) {
    if (llama) {
      rmsF = register_module("ln_f", RMSNorm(m.width, m.normEps));
    } else {
      lnF = register_module(
          "ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({m.width}).eps(m.normEps)));
      initComponent(*lnF, m.seed * 7919 + 3);
    }
    lmHead = register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(m.width, m.vocab).bias(false)));
    initComponent(*lmHead, m.seed * 7919 + 4);
  }
  if (!m.checkpoint.empty()) loadHfWeights(*this, m, layerBegin, layerEnd);
}

torch::Tensor StageModelImpl::forward(const torch::Tensor& x) {
  torch::Tensor h = x;
  if (first) {
    h = tokEmb(x);
    if (posEmb)
      h = h + posEmb(torch::arange(x.size(1),
                                   torch::TensorOptions().dtype(torch::kLong).device(x.device())))
                  .unsqueeze(0);
  }
  for (auto& b : blocks) h = b(h);
  if (last) h = splitLinear(lmHead, rmsF ? rmsF(h) : lnF(h), store);
  return h;
}

void StageModelImpl::deferWeightGradients(WeightGradStore* s) {
  store = s;
  for (auto& b : blocks) b->store = s;
}

torch::Tensor lmLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

void saveCheckpoint(StageModel& model, const std::string& path) {
  torch::serialize::OutputArchive archive;
  // Host tensors, whatever the stage's device: a checkpoint written on a GPU loads on a CPU.
  for (const auto& p : model->named_parameters(true))
    archive.write(p.key(), p.value().detach().to(torch::kCPU));
  const std::string tmp = path + ".tmp";
  archive.save_to(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot write checkpoint '" + path + "'");
}

void loadCheckpoint(StageModel& model, const std::string& path) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const std::exception& e) {
    throw std::runtime_error("training.init_checkpoint: cannot read '" + path +
                             "': " + std::string(e.what()).substr(0, 200));
  }
  torch::NoGradGuard guard;
  for (auto& p : model->named_parameters(true)) {
    torch::Tensor t;
    if (!archive.try_read(p.key(), t))
      throw std::runtime_error("training.init_checkpoint: '" + path + "' has no parameter '" +
                               p.key() + "'");
    if (t.sizes() != p.value().sizes())
      throw std::runtime_error("training.init_checkpoint: '" + p.key() + "' has shape " +
                               c10::str(t.sizes()) + " in '" + path + "', the model expects " +
                               c10::str(p.value().sizes()));
    p.value().copy_(t);
  }
}

}  // namespace slowpipe::runtime
