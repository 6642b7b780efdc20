// The torch sides of the registered gradient compressors (runtime/dp/grad_sync.h): one file each,
// registered by the compressor's line in runtime/dp/compressor_list.h.
#include <stdexcept>

#include "runtime/dp/compressor_list.h"
#include "runtime/dp/grad_sync.h"

namespace slowpipe::runtime {

#define SLOWPIPE_DECLARE_SYNC(name, named, parse, make)                                         \
  std::unique_ptr<GradientSync> make(const RunSpec&, const GradientCompressor&, const Runners&, \
                                     int);
SLOWPIPE_GRADIENT_COMPRESSORS(SLOWPIPE_DECLARE_SYNC)
#undef SLOWPIPE_DECLARE_SYNC

const std::vector<GradientSyncInfo>& gradientSyncs() {
#define SLOWPIPE_SYNC_ENTRY(name, named, parse, make) {name, make},
  static const std::vector<GradientSyncInfo> all = {
      SLOWPIPE_GRADIENT_COMPRESSORS(SLOWPIPE_SYNC_ENTRY)};
#undef SLOWPIPE_SYNC_ENTRY
  return all;
}

std::vector<torch::Tensor> parametersOf(const Runners& runners) {
  std::vector<torch::Tensor> out;
  for (StageRunner* r : runners)
    for (auto& p : r->model()->parameters()) out.push_back(p);
  return out;
}

std::unique_ptr<GradientSync> makeGradientSync(const RunSpec& spec, const Runners& runners,
                                               int stage) {
  const std::unique_ptr<GradientCompressor> c = gradientCompressor(spec.dp);
  for (const auto& s : gradientSyncs())
    if (std::string(s.name) == c->name()) return s.make(spec, *c, runners, stage);
  throw std::logic_error(std::string("gradient compressor '") + c->name() +
                         "' has no torch side in runtime/dp/grad_syncs/registry.cc");
}

}  // namespace slowpipe::runtime
