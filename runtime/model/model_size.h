// The parameters of runtime/model/model.h's StageModel without torch, for every family (builtin,
// gpt2, llama): what `model info`, the memory check, the simulator's analytic FLOPs and its
// data-parallel message sizes count. ModelSizeTest checks the shapes against the torch model
// (tests/runtime/dp_test.cc) and the counts against the published sizes of GPT-2, TinyLlama,
// Llama-2-7B and Qwen2-0.5B (tests/runtime/spec_test.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

using ParamShape = std::vector<int64_t>;

// One block's parameters in the order of Block::parameters(). builtin / gpt2: ln1 w, b; qkv w, b;
// proj w, b; ln2 w, b; fc w, b; out w, b. llama: ln1; q, k, v (with biases where qkvBias); o (bias
// where oBias); ln2; gate, up, down.
std::vector<ParamShape> blockParameterShapes(const ModelSpec& m);
// A stage of blocks [layerBegin, layerEnd) in the order of StageModel::parameters(): the first
// stage's token embedding (and, but for llama, the position table), the blocks, and the last
// stage's final norm and head. A tied head trains as two copies, so it is on both ends.
std::vector<ParamShape> stageParameterShapes(const ModelSpec& m, int layerBegin, int layerEnd,
                                             bool first, bool last);
// Their values: a stage of `layers` blocks.
double stageParameters(const ModelSpec& m, int layers, bool first, bool last);
// Entries of one block's weight matrices (its linear layers): a token's forward through the block
// multiplies by each once, 2 FLOPs an entry.
double blockMatrixEntries(const ModelSpec& m);
// Forward FLOPs of one block for a micro-batch of b sequences of s tokens: 2 b s x the matrix
// entries, plus attention's two products 4 b s^2 x (heads x head width). The builtin block with a
// 4 x width MLP: 24 b s d^2 + 4 b s^2 d.
double blockForwardFlops(const ModelSpec& m, double b, double s);

}  // namespace slowpipe::runtime
