#include "runtime/model/model_size.h"

namespace slowpipe::runtime {

std::vector<ParamShape> blockParameterShapes(const ModelSpec& m) {
  const int64_t C = m.width, F = m.mlpWidth(), D = m.width / m.heads, H = m.heads,
                K = m.kvHeadCount();
  if (m.family != "llama")
    return {{C}, {C}, {3 * C, C}, {3 * C}, {C, C}, {C}, {C}, {C}, {F, C}, {F}, {C, F}, {C}};
  std::vector<ParamShape> out = {{C}};
  for (const int64_t rows : {H * D, K * D, K * D}) {
    out.push_back({rows, C});
    if (m.qkvBias) out.push_back({rows});
  }
  out.push_back({C, H * D});
  if (m.oBias) out.push_back({C});
  for (const ParamShape& p : std::vector<ParamShape>{{C}, {F, C}, {F, C}, {C, F}}) out.push_back(p);
  return out;
}

std::vector<ParamShape> stageParameterShapes(const ModelSpec& m, int layerBegin, int layerEnd,
                                             bool first, bool last) {
  const int64_t C = m.width, V = m.vocab;
  const bool llama = m.family == "llama";
  std::vector<ParamShape> out;
  if (first) {
    out.push_back({V, C});
    if (!llama) out.push_back({m.positionRows(), C});
  }
  const std::vector<ParamShape> block = blockParameterShapes(m);
  for (int i = layerBegin; i < layerEnd; ++i) out.insert(out.end(), block.begin(), block.end());
  if (last) {
    out.push_back({C});
    if (!llama) out.push_back({C});
    out.push_back({V, C});
  }
  return out;
}

namespace {
double values(const ParamShape& s) {
  double n = 1;
  for (const int64_t d : s) n *= static_cast<double>(d);
  return n;
}
}  // namespace

double stageParameters(const ModelSpec& m, int layers, bool first, bool last) {
  double n = 0;
  for (const ParamShape& s : stageParameterShapes(m, 0, layers, first, last)) n += values(s);
  return n;
}

double blockMatrixEntries(const ModelSpec& m) {
  double n = 0;
  for (const ParamShape& s : blockParameterShapes(m))
    if (s.size() == 2) n += values(s);
  return n;
}

double blockForwardFlops(const ModelSpec& m, double b, double s) {
  const double attentionWidth = static_cast<double>(m.width / m.heads) * m.heads;
  return 2 * b * s * blockMatrixEntries(m) + 4 * b * s * s * attentionWidth;
}

}  // namespace slowpipe::runtime
