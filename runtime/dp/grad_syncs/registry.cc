// The torch sides of the registered gradient compressors (runtime/dp/grad_sync.h): one file each,
// one line here, by the compressor's name (runtime/dp/compressors/registry.cc).
#include <stdexcept>

#include "runtime/dp/grad_sync.h"

namespace slowpipe::runtime {

std::unique_ptr<GradientSync> makeMeanGradients(const RunSpec&, const GradientCompressor&,
                                                const Runners&, int);
std::unique_ptr<GradientSync> makePowerSgdSync(const RunSpec&, const GradientCompressor&,
                                               const Runners&, int);
std::unique_ptr<GradientSync> makeQadamSync(const RunSpec&, const GradientCompressor&,
                                            const Runners&, int);
std::unique_ptr<GradientSync> makeDilocoSync(const RunSpec&, const GradientCompressor&,
                                             const Runners&, int);

const std::vector<GradientSyncInfo>& gradientSyncs() {
  static const std::vector<GradientSyncInfo> all = {
      {"codec", makeMeanGradients},
      {"powersgd", makePowerSgdSync},
      {"qadam", makeQadamSync},
      {"diloco", makeDilocoSync},
  };
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
