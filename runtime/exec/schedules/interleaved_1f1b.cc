// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's interleaved schedule): every stage holds V
// model chunks (virtual stages s, s + S, ..., round-robin), so a micro-batch crosses the ring of
// stages V times. Micro-batches go in rounds of S: the k-th forward of a stage is micro-batch
// (k / SV) S + k mod S of chunk (k mod SV) / S, its k-th backward the same micro-batch of chunk
// V - 1 - (k mod SV) / S. Stage s runs 2 (S - 1 - s) + (V - 1) S warm-up forwards (all of them when
// M = S), then one forward / one backward, then the remaining backwards. The bubble shrinks to
// (S - 1) / (M V) of the step; point-to-point traffic grows about V-fold.
#include <algorithm>

#include "runtime/exec/schedule.h"

namespace slowpipe::runtime {

std::vector<Action> interleavedOneFOneBSchedule(int stages, int microBatches, int stage,
                                                int chunks) {
  const int S = stages, V = chunks, total = microBatches * V;
  auto mbOf = [&](int k) { return (k / (S * V)) * S + k % S; };
  auto chunkOf = [&](int k, bool forward) {
    const int c = (k % (S * V)) / S;
    return forward ? c : V - 1 - c;
  };
  const int warmup = microBatches == S ? total : std::min(total, 2 * (S - 1 - stage) + (V - 1) * S);
  std::vector<Action> a;
  int f = 0, b = 0;
  auto forward = [&] {
    appendForward(a, mbOf(f), S, stage, chunkOf(f, true), V);
    ++f;
  };
  auto backward = [&] {
    appendBackward(a, mbOf(b), S, stage, chunkOf(b, false), V);
    ++b;
  };
  while (f < warmup) forward();
  while (f < total) {
    forward();
    backward();
  }
  while (b < total) backward();
  appendStepEnd(a, S, stage);
  return a;
}

}  // namespace slowpipe::runtime
