// What every worker shares: the allocator settings and the run's frame bound. The worker itself is
// runtime/pipeline_worker.cc; its bootstraps worker_local.cc (slowpipe run) and worker_external.cc
// (mpirun, srun, torchrun); the single-process trainer single_process.cc.
#include "runtime/worker.h"

#include <malloc.h>

#include <algorithm>

#include "compression/codec.h"
#include "runtime/dp.h"
#include "runtime/grad_sync.h"

namespace slowpipe::runtime {

// Per-message buffers (frames, tensors) are 0.1-10 MB. With glibc's default, dynamic mmap
// threshold they were often mmap'ed and munmap'ed for every message, page-faulting on each reuse,
// and whether that happened depended on unrelated allocations (an AC-SGD buffer store raised the
// threshold as a side effect): fp32 runs measured ~8% more compute time than AC-SGD runs at 10 Gbps.
// Fixing the thresholds gives every codec the same allocator behaviour.
void tuneAllocator() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest value glibc accepts on 64-bit
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

int64_t largestFrameBytes(const RunSpec& spec) {
  const int64_t mb = spec.pipeline.microBatchSize;
  const compression::Shape act = {mb, spec.model.seqLen, spec.model.width};
  // Each codec's own bound on its payload (topk's indices, lowrank's basis and plug-ins may
  // exceed fp32), with the frame header and one example id per row.
  uint64_t payload = 4 * static_cast<uint64_t>(compression::numelOf(act));
  for (const std::string& c : {spec.compression.forward, spec.compression.backward})
    payload = std::max(payload, compression::makeCodec(c, "frame-bound")->maxPayloadBytes(act) + 8 * static_cast<uint64_t>(mb));
  if (spec.pipeline.replicas > 1) {
    const auto none = compression::makeCodec("none"),
               message = compression::makeCodec(gradientCompressor(spec.dp)->messageCodec(), "frame-bound");
    for (int s = 0; s < spec.pipeline.stages; ++s)
      for (int round = 0; round < dpShape(spec).rounds; ++round) {
        const compression::Shape chunk = {dpRoundValues(spec, s, round) / spec.pipeline.replicas + 1};
        payload = std::max({payload, none->maxPayloadBytes(chunk), message->maxPayloadBytes(chunk)});
      }
  }
  return static_cast<int64_t>(payload) + (64 << 10);
}

}  // namespace slowpipe::runtime
