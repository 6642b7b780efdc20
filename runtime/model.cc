// Model components, deterministic initialisation, checkpoints.
#include "runtime/model.h"

#include <cmath>
#include <stdexcept>

#include "runtime/weight_grad.h"

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

BlockImpl::BlockImpl(int width, int heads_) : heads(heads_) {
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  qkv = register_module("qkv", torch::nn::Linear(width, 3 * width));
  proj = register_module("proj", torch::nn::Linear(width, width));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  fc = register_module("fc", torch::nn::Linear(width, 4 * width));
  out = register_module("out", torch::nn::Linear(4 * width, width));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / heads;
  auto parts = splitLinear(qkv, ln1(x), store).chunk(3, -1);
  auto split = [&](const torch::Tensor& t) { return t.view({B, T, heads, D}).transpose(1, 2); };
  const auto q = split(parts[0]), k = split(parts[1]), v = split(parts[2]);
  auto att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(D));
  const auto mask = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
  att = torch::softmax(att.masked_fill(mask, -INFINITY), -1);
  const auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
  const auto h = x + splitLinear(proj, y, store);
  return h + splitLinear(out, torch::gelu(splitLinear(fc, ln2(h), store)), store);
}

StageModelImpl::StageModelImpl(const ModelSpec& m, int layerBegin, int layerEnd, bool first_, bool last_)
    : first(first_), last(last_) {
  if (first) {
    tokEmb = register_module("tok_emb", torch::nn::Embedding(m.vocab, m.width));
    posEmb = register_module("pos_emb", torch::nn::Embedding(m.seqLen, m.width));
    initComponent(*tokEmb, m.seed * 7919 + 1);
    initComponent(*posEmb, m.seed * 7919 + 2);
  }
  for (int i = layerBegin; i < layerEnd; ++i) {
    blocks.push_back(register_module("block" + std::to_string(i), Block(m.width, m.heads)));
    initComponent(*blocks.back(), m.seed * 7919 + 100 + static_cast<uint64_t>(i));
  }
  if (last) {
    lnF = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({m.width})));
    lmHead = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(m.width, m.vocab).bias(false)));
    initComponent(*lnF, m.seed * 7919 + 3);
    initComponent(*lmHead, m.seed * 7919 + 4);
  }
}

torch::Tensor StageModelImpl::forward(const torch::Tensor& x) {
  torch::Tensor h = x;
  if (first) {
    const auto pos = torch::arange(x.size(1), torch::TensorOptions().dtype(torch::kLong).device(x.device()));
    h = tokEmb(x) + posEmb(pos).unsqueeze(0);
  }
  for (auto& b : blocks) h = b(h);
  if (last) h = splitLinear(lmHead, lnF(h), store);
  return h;
}

void StageModelImpl::deferWeightGradients(WeightGradStore* s) {
  store = s;
  for (auto& b : blocks) b->store = s;
}

torch::Tensor lmLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

void saveCheckpoint(StageModel& model, const std::string& path) {
  torch::serialize::OutputArchive archive;
  // Host tensors, whatever the stage's device: a checkpoint written on a GPU loads on a CPU.
  for (const auto& p : model->named_parameters(true)) archive.write(p.key(), p.value().detach().to(torch::kCPU));
  const std::string tmp = path + ".tmp";
  archive.save_to(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot write checkpoint '" + path + "'");
}

void loadCheckpoint(StageModel& model, const std::string& path) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const std::exception& e) {
    throw std::runtime_error("training.init_checkpoint: cannot read '" + path + "': " + std::string(e.what()).substr(0, 200));
  }
  torch::NoGradGuard guard;
  for (auto& p : model->named_parameters(true)) {
    torch::Tensor t;
    if (!archive.try_read(p.key(), t))
      throw std::runtime_error("training.init_checkpoint: '" + path + "' has no parameter '" + p.key() + "'");
    if (t.sizes() != p.value().sizes())
      throw std::runtime_error("training.init_checkpoint: '" + p.key() + "' has shape " + c10::str(t.sizes()) +
                               " in '" + path + "', the model expects " + c10::str(p.value().sizes()));
    p.value().copy_(t);
  }
}

}  // namespace slowpipe::runtime
