// `slowpipe export DIR`: every step and evaluation of a sweep folder's runs, one row each.
#include "experiments/export.h"

#include <stdexcept>

#include "experiments/runner.h"
#include "experiments/summary.h"

namespace slowpipe::experiments {
using nlohmann::json;

namespace {

// `from[key]` copied to `row[column]` when the run has it.
void copyIf(json& row, const std::string& column, const json& from, const char* key) {
  if (from.is_object() && from.contains(key) && !from[key].is_null()) row[column] = from[key];
}

// The columns every row shares: the point, its axis values, the repeat and the run's outcome.
json runColumns(const SweepSpec& spec, const SweepPoint& p, int repeat, const json& run) {
  json row = {{"point", p.name}, {"repeat", repeat}};
  copyIf(row, "label", p.spec.value("compression", json::object()), "label");
  for (size_t a = 0; a < spec.axes.size(); ++a)
    row["axis:" + spec.axes[a].first] = p.axisLabels.at(a);
  copyIf(row, "status", run, "status");
  copyIf(row, "link_ok", run, "link_ok");
  row["simulated"] = run.value("simulated", false);
  return row;
}

json stepRow(json row, const json& s) {
  row["kind"] = "step";
  for (const char* k :
       {"step", "epoch", "time_s", "wall_s", "loss", "lr", "grad_norm", "tokens", "tokens_per_s"})
    copyIf(row, k, s, k);
  const json bytes = s.value("bytes", json::object());
  copyIf(row, "forward_wire_bytes", bytes.value("forward", json::object()), "wire");
  copyIf(row, "backward_wire_bytes", bytes.value("backward", json::object()), "wire");
  const json breakdown = s.value("breakdown_s", json::object());
  for (const char* k : {"compute", "wait", "encode", "decode"})
    copyIf(row, std::string(k) + "_s", breakdown, k);
  return row;
}

json evalRow(json row, const json& e) {
  row["kind"] = "eval";
  for (const char* k : {"step", "epoch", "time_s", "wall_s", "val_loss"}) copyIf(row, k, e, k);
  return row;
}

}  // namespace

ExportTable exportSweep(const std::string& dir) {
  const SweepSpec spec = sweepOfFolder(dir);
  ExportTable t;
  t.columns = {"kind", "point", "label"};
  for (const auto& [path, values] : spec.axes) t.columns.push_back("axis:" + path);
  for (const char* c : {"repeat",
                        "status",
                        "link_ok",
                        "simulated",
                        "step",
                        "epoch",
                        "time_s",
                        "wall_s",
                        "loss",
                        "lr",
                        "grad_norm",
                        "tokens",
                        "tokens_per_s",
                        "forward_wire_bytes",
                        "backward_wire_bytes",
                        "compute_s",
                        "wait_s",
                        "encode_s",
                        "decode_s",
                        "val_loss"})
    t.columns.push_back(c);
  for (const SweepPoint& p : expandSweep(spec))
    for (int k = 0; k < spec.repeats; ++k) {
      const json run = readRunCopy(dir, p.name, k);
      if (!run.is_object()) {
        ++t.missing;
        continue;
      }
      ++t.runs;
      const json shared = runColumns(spec, p, k, run);
      for (const auto& s : run.value("steps", json::array())) t.rows.push_back(stepRow(shared, s));
      for (const auto& e : run.value("evals", json::array())) t.rows.push_back(evalRow(shared, e));
    }
  return t;
}

std::string formatExport(const ExportTable& t, const std::string& format) {
  if (format == "csv") return csvTable(t.columns, t.rows);
  if (format != "jsonl")
    throw std::invalid_argument("export --format: '" + format + "' (expected csv or jsonl)");
  std::string out;
  for (const auto& r : t.rows) out += r.dump() + "\n";
  return out;
}

}  // namespace slowpipe::experiments
