// The registered link models (emulator/link_model.h): one file each, one line here.
#include <stdexcept>

#include "emulator/link_model.h"

namespace slowpipe::emulator {

LinkModelInfo pipelinedModel();
LinkModelInfo serialFifoModel();
LinkModelInfo tcpModel();
LinkModelInfo ns3Model();

const std::vector<LinkModelInfo>& linkModels() {
  static const std::vector<LinkModelInfo> models = {
      pipelinedModel(),
      serialFifoModel(),
      tcpModel(),
      ns3Model(),
  };
  return models;
}

std::string linkModelNames() {
  std::string s;
  for (const auto& m : linkModels()) s += (s.empty() ? "" : ", ") + std::string(m.name);
  return s;
}

const LinkModelInfo& linkModel(const std::string& name) {
  for (const auto& m : linkModels())
    if (name == m.name) return m;
  throw std::invalid_argument("'" + name + "' is not a link model; expected one of " +
                              linkModelNames());
}

}  // namespace slowpipe::emulator
