// Corpus preparation, example sets and epoch plans.
#include "runtime/model/data.h"

#include "runtime/model/tokenizer.h"
#include "runtime/records/result.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>

namespace slowpipe::runtime {
namespace fs = std::filesystem;
namespace {

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + p.string() + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Fortune files separate entries with lines holding only '%'; keep the text, one entry per
// paragraph.
std::string cleanText(const std::string& raw) {
  std::string out;
  std::istringstream in(raw);
  std::string line;
  while (std::getline(in, line)) {
    if (line == "%") {
      out += "\n";
      continue;
    }
    for (char c : line)
      out += (static_cast<unsigned char>(c) < 128 && (c >= 32 || c == '\t')) ? c : ' ';
    out += "\n";
  }
  return out;
}

void writeAtomically(const fs::path& p, const std::string& bytes) {
  writeFileAtomically(p.string(),
                      bytes);  // a temporary name of its own: workers may prepare it at once
}

}  // namespace

namespace {

// WordNet's glosses (Debian's wordnet-base, /usr/share/wordnet): the text after "| " on each synset
// line of data.noun, data.verb, data.adj and data.adv (the license header's lines start with a
// space), one gloss a line.
std::string wordnetGlosses(const fs::path& dir, nlohmann::json& inputs, const std::string& key) {
  std::string out;
  for (const char* part : {"data.noun", "data.verb", "data.adj", "data.adv"}) {
    const fs::path f = dir / part;
    if (!fs::is_regular_file(f))
      throw std::invalid_argument(
          "data." + key + ": 'wordnet:" + dir.string() + "' has no " + part +
          " (install the Debian package 'wordnet-base': /usr/share/wordnet)");
    const std::string raw = readFile(f);
    inputs[key].push_back({"wordnet:" + f.string(), raw.size(), fileDigest(f.string())});
    std::istringstream in(raw);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == ' ') continue;
      const size_t bar = line.find(" | ");
      if (bar == std::string::npos) continue;
      const size_t end = line.find_last_not_of(" \r");
      if (end > bar + 3) out += line.substr(bar + 3, end - bar - 2) + "\n";
    }
  }
  return out;
}

// Your own files (DataSpec::finetune, DataSpec::pretrain): every regular file under each path, in
// order (a folder's sorted); a .jsonl file contributes each record's text field, other files their
// bytes; "wordnet:DIR" WordNet's glosses.
std::string ownText(const std::vector<std::string>& paths, const DataSpec& data,
                    nlohmann::json& inputs, const std::string& key) {
  std::string out;
  for (const auto& path : paths) {
    if (path.rfind("wordnet:", 0) == 0) {
      out += wordnetGlosses(path.substr(8), inputs, key);
      continue;
    }
    std::vector<fs::path> files;
    if (fs::is_directory(path)) {
      for (const auto& e : fs::recursive_directory_iterator(path))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(path);
    }
    for (const auto& f : files) {
      const std::string raw = readFile(f);
      inputs[key].push_back({f.string(), raw.size(), fileDigest(f.string())});
      if (f.extension() != ".jsonl") {
        out += raw;
        if (!raw.empty() && raw.back() != '\n') out += '\n';
        continue;
      }
      std::istringstream in(raw);
      std::string line;
      for (size_t no = 1; std::getline(in, line); ++no) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        nlohmann::json rec;
        try {
          rec = parseJsonText(line, "record");
        } catch (const std::exception& e) {
          throw std::invalid_argument("data." + key + ": '" + f.string() + "' line " +
                                      std::to_string(no) + ": " + e.what());
        }
        if (!rec.is_object() || !rec.contains(data.textField) || !rec[data.textField].is_string())
          throw std::invalid_argument("data." + key + ": '" + f.string() + "' line " +
                                      std::to_string(no) + ": no string field '" + data.textField +
                                      "' (data.text_field)");
        out += rec[data.textField].get<std::string>() + "\n";
      }
    }
  }
  return out;
}

// Whether the token files in meta's folder were made from `inputs` (their counts into info).
bool cachedFor(const fs::path& meta, const nlohmann::json& inputs, CorpusInfo& info) {
  if (!fs::exists(meta)) return false;
  const auto m = nlohmann::json::parse(readFile(meta));
  if (m.value("inputs", nlohmann::json()) != inputs) return false;
  info.pretrainTokens = m["pretrain_tokens"];
  info.finetuneTokens = m["finetune_tokens"];
  return true;
}

// The token file of a split: one byte a token (byte-level), else little-endian int32.
std::string tokenBytes(const Tokenizer& tok, const std::string& text, bool wide) {
  const std::vector<int32_t> ids = tok.encode(text);
  if (!wide) {
    std::string out(ids.size(), '\0');
    for (size_t i = 0; i < ids.size(); ++i) out[i] = static_cast<char>(ids[i]);
    return out;
  }
  std::string out(4 * ids.size(), '\0');
  std::memcpy(out.data(), ids.data(), out.size());
  return out;
}

}  // namespace

CorpusInfo prepareCorpus(const DataSpec& data, bool force) {
  if (!data.finetune.empty() || !data.pretrain.empty() || !data.tokenizer.empty())
    return prepareOwnCorpus(data, force);
  if (!fs::is_directory(data.source))
    throw std::invalid_argument("data.source: '" + data.source +
                                "' is not a folder (install the Debian package "
                                "'fortunes', or point data.source at a folder of text files)");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(data.source)) {
    if (!e.is_regular_file() || e.is_symlink()) continue;
    const std::string ext = e.path().extension().string();
    if (ext == ".dat" || ext == ".u8" || ext == ".gz") continue;
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : data.finetuneFiles)
    if (std::none_of(files.begin(), files.end(),
                     [&](const fs::path& p) { return p.filename() == f; }))
      throw std::invalid_argument("data.finetune_files: '" + f + "' is not a file in " +
                                  data.source);
  nlohmann::json inputs = {{"source", data.source},
                           {"finetune_files", data.finetuneFiles},
                           {"files", nlohmann::json::array()}};
  for (const auto& f : files) inputs["files"].push_back({f.filename().string(), fs::file_size(f)});
  const fs::path dir = data.cacheDir, meta = dir / "meta.json";
  CorpusInfo info;
  info.dir = dir.string();
  if (!force && cachedFor(meta, inputs, info)) {
    for (const auto& f : files) info.files.push_back(f.filename().string());
    return info;
  }
  std::string pre, fine;
  for (const auto& f : files) {
    const bool isFine = std::find(data.finetuneFiles.begin(), data.finetuneFiles.end(),
                                  f.filename()) != data.finetuneFiles.end();
    (isFine ? fine : pre) += cleanText(readFile(f));
    info.files.push_back(f.filename().string());
  }
  if (pre.empty() || fine.empty())
    throw std::invalid_argument("data.source: '" + data.source + "' gives an empty " +
                                (pre.empty() ? "pretrain" : "fine-tune") + " split");
  fs::create_directories(dir);
  writeAtomically(dir / "pretrain.bin", pre);
  writeAtomically(dir / "finetune.bin", fine);
  writeAtomically(meta,
                  nlohmann::json{{"inputs", inputs},
                                 {"pretrain_tokens", pre.size()},
                                 {"finetune_tokens", fine.size()},
                                 {"tokenizer", "byte-level (one byte = one token, vocab 256)"}}
                      .dump(2));
  info.pretrainTokens = static_cast<int64_t>(pre.size());
  info.finetuneTokens = static_cast<int64_t>(fine.size());
  return info;
}

CorpusInfo prepareOwnCorpus(const DataSpec& data, bool force) {
  const std::unique_ptr<Tokenizer> tok =
      data.tokenizer.empty() ? std::make_unique<ByteTokenizer>() : loadTokenizer(data.tokenizer);
  const bool wide = !data.tokenizer.empty();
  nlohmann::json inputs = {{"tokenizer", tok->describe()},
                           {"finetune", nlohmann::json::array()},
                           {"text_field", data.textField},
                           {"source", data.source},
                           {"finetune_files", data.finetuneFiles}};
  std::string fine =
      data.finetune.empty() ? std::string() : ownText(data.finetune, data, inputs, "finetune");
  std::string pre;
  if (!data.pretrain.empty()) {
    inputs["pretrain"] = nlohmann::json::array();
    pre = ownText(data.pretrain, data, inputs, "pretrain");
  }
  CorpusInfo info;
  if (fs::is_directory(data.source) && (data.finetune.empty() || data.pretrain.empty())) {
    // the pretrain split (unless data.pretrain gives it); with no own files, also the fine-tune
    // files
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(data.source)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && !e.is_symlink() && ext != ".dat" && ext != ".u8" && ext != ".gz")
        files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const bool isFine = std::find(data.finetuneFiles.begin(), data.finetuneFiles.end(),
                                    f.filename()) != data.finetuneFiles.end();
      if ((isFine && !data.finetune.empty()) || (!isFine && !data.pretrain.empty())) continue;
      (isFine ? fine : pre) += cleanText(readFile(f));
      inputs["files"].push_back({f.filename().string(), fs::file_size(f)});
      info.files.push_back(f.filename().string());
    }
  }
  if (fine.empty())
    throw std::invalid_argument(
        "data: the fine-tune split is empty (data.finetune, or data.finetune_files of "
        "data.source)");
  const fs::path dir = data.cacheDir, meta = dir / "meta.json";
  info.dir = dir.string();
  if (!force && cachedFor(meta, inputs, info)) return info;
  const std::string fineTokens = tokenBytes(*tok, fine, wide),
                    preTokens = tokenBytes(*tok, pre, wide);
  fs::create_directories(dir);
  writeAtomically(dir / "pretrain.bin", preTokens);
  writeAtomically(dir / "finetune.bin", fineTokens);
  info.pretrainTokens = static_cast<int64_t>(preTokens.size() / (wide ? 4 : 1));
  info.finetuneTokens = static_cast<int64_t>(fineTokens.size() / (wide ? 4 : 1));
  writeAtomically(meta, nlohmann::json{{"inputs", inputs},
                                       {"pretrain_tokens", info.pretrainTokens},
                                       {"finetune_tokens", info.finetuneTokens},
                                       {"token_bytes", wide ? 4 : 1},
                                       {"vocab", tok->vocabSize()},
                                       {"tokenizer", tok->describe()}}
                            .dump(2));
  return info;
}

ExampleSet::ExampleSet(const DataSpec& data, const std::string& split, const std::string& part,
                       int seqLen)
    : seqLen_(seqLen) {
  if (split != "pretrain" && split != "finetune")
    throw std::invalid_argument("split '" + split + "': expected pretrain or finetune");
  if (part != "train" && part != "val")
    throw std::invalid_argument("part '" + part + "': expected train or val");
  const fs::path file = fs::path(data.cacheDir) / (split + ".bin");
  if (!fs::exists(file))
    throw std::runtime_error("'" + file.string() +
                             "' is missing: run `slowpipe data prepare` first");
  const std::string bytes = readFile(file);
  const fs::path meta = fs::path(data.cacheDir) / "meta.json";
  const int width =
      fs::exists(meta) ? nlohmann::json::parse(readFile(meta)).value("token_bytes", 1) : 1;
  if (width == 4) {
    tokens_.resize(bytes.size() / 4);
    std::memcpy(tokens_.data(), bytes.data(), 4 * tokens_.size());
  } else {
    tokens_.assign(bytes.begin(), bytes.end());
  }
  for (int32_t t : tokens_) maxToken_ = std::max(maxToken_, t);
  const int64_t all = (static_cast<int64_t>(tokens_.size()) - 1) / seqLen;
  const int64_t val =
      std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(all) * data.valFraction));
  if (all - val < 1)
    throw std::runtime_error("'" + file.string() + "' is too small for seq_len " +
                             std::to_string(seqLen));
  if (part == "train") {
    count_ = all - val;
    if (data.maxTrainExamples > 0) count_ = std::min(count_, data.maxTrainExamples);
  } else {
    first_ = all - val;
    count_ = data.maxValExamples > 0 ? std::min(val, data.maxValExamples) : val;
    idBase_ = kValIdBase;
  }
}

void ExampleSet::example(int64_t i, int64_t* inputs, int64_t* targets) const {
  const int32_t* p = tokens_.data() + (first_ + i) * seqLen_;
  for (int t = 0; t < seqLen_; ++t) {
    inputs[t] = p[t];
    targets[t] = p[t + 1];
  }
}

EpochPlan::EpochPlan(int64_t examples, int microBatches, int microBatchSize, uint64_t seed)
    : examples_(examples),
      steps_(examples / (int64_t{microBatches} * microBatchSize)),
      m_(microBatches),
      b_(microBatchSize),
      seed_(seed) {
  if (steps_ < 1)
    throw std::invalid_argument(
        "data: " + std::to_string(examples) + " training examples do not fill one step of " +
        std::to_string(microBatches) + " x " + std::to_string(microBatchSize));
}

const std::vector<int64_t>& EpochPlan::order(int epoch) const {
  if (epoch == cachedEpoch_) return cached_;
  std::vector<int64_t> o(examples_);
  for (int64_t i = 0; i < examples_; ++i) o[i] = i;
  std::mt19937_64 rng(seed_ * 1000003ull + static_cast<uint64_t>(epoch));
  for (int64_t i = examples_ - 1; i > 0;
       --i) {  // Fisher-Yates with our own draws: same on every libstdc++
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(o[i], o[j]);
  }
  cachedEpoch_ = epoch;
  cached_ = std::move(o);
  return cached_;
}

std::vector<int64_t> EpochPlan::microBatch(int epoch, int64_t step, int mb) const {
  const auto& o = order(epoch);
  const int64_t start = (step * m_ + mb) * b_;
  return std::vector<int64_t>(o.begin() + start, o.begin() + start + b_);
}

}  // namespace slowpipe::runtime
