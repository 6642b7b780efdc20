// Corpus -> byte-level token files -> fixed-length examples with stable ids -> per-epoch batches.
//
// prepareCorpus reads every regular text file of DataSpec::source (the Debian package `fortunes`
// by default), drops the '%' separator lines, and writes two token files (one byte = one token):
// pretrain.bin (all files not named in finetune_files) and finetune.bin (those files). Example i of
// a split is tokens [i*T, i*T + T + 1): inputs are the first T, targets the last T. The fine-tune
// split's last val_fraction of examples is the validation set. Example ids are stable: train
// example i has id i; validation example i has id kValIdBase + i.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

constexpr int64_t kValIdBase = int64_t{1} << 40;

struct CorpusInfo {
  std::string dir;
  int64_t pretrainTokens = 0, finetuneTokens = 0;
  std::vector<std::string> files;
};

// Builds the token files in data.cacheDir unless they exist for the same inputs. Returns what is
// there.
CorpusInfo prepareCorpus(const DataSpec& data, bool force = false);
// prepareCorpus with data.finetune or data.tokenizer: your files and the tokenizer's ids (int32
// token files, meta.json "token_bytes": 4, where the tokenizer is not byte-level).
CorpusInfo prepareOwnCorpus(const DataSpec& data, bool force = false);

class ExampleSet {
 public:
  // split: "pretrain" or "finetune"; part: "train" or "val".
  ExampleSet(const DataSpec& data, const std::string& split, const std::string& part, int seqLen);
  int64_t size() const { return count_; }
  int64_t id(int64_t i) const { return idBase_ + i; }
  // Copies inputs (T) and targets (T) of example i into the given spans.
  void example(int64_t i, int64_t* inputs, int64_t* targets) const;

 private:
  std::vector<int32_t> tokens_;
  int32_t maxToken_ = 0;

 public:
  int32_t maxToken() const { return maxToken_; }

 private:
  int64_t first_ = 0, count_ = 0, idBase_ = 0;
  int seqLen_;
};

// Which examples make up each step of an epoch: a seeded permutation per epoch, cut into steps of
// microBatches x microBatchSize examples (a last partial step is dropped).
class EpochPlan {
 public:
  EpochPlan(int64_t examples, int microBatches, int microBatchSize, uint64_t seed);
  int64_t stepsPerEpoch() const { return steps_; }
  // Example indices of micro-batch mb of step s (0-based within the epoch) in epoch e.
  std::vector<int64_t> microBatch(int epoch, int64_t step, int mb) const;

 private:
  const std::vector<int64_t>& order(int epoch) const;
  int64_t examples_, steps_;
  int m_, b_;
  uint64_t seed_;
  mutable int cachedEpoch_ = -1;
  mutable std::vector<int64_t> cached_;
};

}  // namespace slowpipe::runtime
