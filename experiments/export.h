// `slowpipe export DIR`: a sweep folder's runs as one table a notebook loads, one row per
// (point, repeat, step) and per (point, repeat, evaluation). Columns (README "Exporting results"):
//   kind            "step" or "eval"
//   point, label    the point's name and its compression label
//   axis:<path>     one column per sweep axis: the point's value label on it
//   repeat, status, link_ok, simulated
//   step, epoch, time_s, wall_s                      both kinds (an eval's step: the steps done
//   before it) loss, lr, grad_norm, tokens, tokens_per_s,       steps forward_wire_bytes,
//   backward_wire_bytes, compute_s, wait_s, encode_s, decode_s val_loss evals
// A value a run does not have (a simulated run's loss) is empty in CSV and absent in JSON lines.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace slowpipe::experiments {

struct ExportTable {
  std::vector<std::string> columns;
  nlohmann::json rows = nlohmann::json::array();  // objects keyed by column
  int runs = 0, missing = 0;                      // run files read; (point, repeat)s without one
};

// Reads DIR/sweep.json and every DIR/runs/<point>.r<k>.json it names; throws naming the file
// that is not what it should be.
ExportTable exportSweep(const std::string& dir);
// "csv" (a header row, RFC 4180 quoting) or "jsonl" (one object per line).
std::string formatExport(const ExportTable& t, const std::string& format);

}  // namespace slowpipe::experiments
