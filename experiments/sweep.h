// Sweeps: a base experiment plus axes, expanded into points that each are one real run.
//
// Spec (JSON):
//   {"name": "...", "base": {<RunSpec>} or "path/to/spec.json",
//    "axes": [{"path": "network.links.bandwidth", "values": ["100Mbps", "1Gbps"]},
//             {"path": "compression", "values": [{"label": "fp32", "forward": "none", "backward":
//             "none"}, ...]}],
//    "baseline": "fp32",                        // label of the compression value that is the
//    baseline "pretrain": {"checkpoint": "base.pt", "max_steps": 300, "epochs": 1},   // optional
//    "repeats": 3,                              // optional: real runs per point, interleaved
//    "repeat_seeds": "per_repeat",              // optional: repeat k trains with training.seed + k
//    ("same": default) "target": {"tolerance": 0.01} | {"val_loss": 3.1},   // optional: what
//    time_to_target reaches "claims": [{"label": "AC-SGD fw2/bw4", "vs": "fp32", "at": "100Mbps",
//    "speedup_at_least": 2}]}  // optional
// Object values are merged into the base at `path`; others replace it. Every point gets a stable
// name from its axis values, e.g. "bandwidth-100Mbps_compression-ac-sgd-fw2-bw4".
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace slowpipe::experiments {

struct SweepPoint {
  std::string name;
  nlohmann::json spec;                  // full RunSpec JSON of this point
  std::vector<std::string> axisLabels;  // one per axis, e.g. "100Mbps", "AC-SGD fw2/bw4"
};

struct SweepSpec {
  std::string name;
  nlohmann::json base;
  std::vector<std::pair<std::string, std::vector<nlohmann::json>>> axes;
  std::string baseline;     // compression label
  nlohmann::json pretrain;  // null if none
  std::string sourceDir;    // folder of the sweep file (relative paths resolve against the cwd)
  int repeats =
      1;  // runs per point; round-robin over all points (repeat k of every point before k+1)
  bool simulation =
      false;  // points are simulated, not run: validated as simulator specs (any vocab)
  // "repeat_seeds": "per_repeat": repeat k of every point trains with training.seed + k (the order
  // of the examples), so the repeats' spread of a loss is the seeds' and a quality gap paired by
  // repeat compares codecs on the same seed; "same" (default): every repeat trains alike and only
  // the timings differ.
  bool seedPerRepeat = false;
  // What time_to_target is measured against ("target": {"val_loss": L} or {"tolerance": r}): a
  // fixed validation loss (valLoss > 0), else the baseline's final validation loss at the same
  // link settings times 1 + tolerance (default 1%, paired by repeat).
  struct Target {
    double valLoss = 0;
    double tolerance = 0.01;
  } target;
  // "claims": what the sweep is run to show, each a comparison of two compression labels judged at
  // its interval's bound (experiments/compare.h): validated objects, kept as given.
  nlohmann::json claims = nlohmann::json::array();
  // Pairs (A, B) compared besides the claims' (`summarize --vs A B`, `report --vs A B`); not
  // recorded.
  std::vector<std::pair<std::string, std::string>> compare;
};
// "target" of a sweep spec (where: for errors); the default when absent.
SweepSpec::Target targetFromJson(const nlohmann::json& j, const std::string& where);
nlohmann::json toJson(const SweepSpec::Target& t);

// "claims" of a sweep spec, checked against its axes (labels of the compression axis, "at" a value
// of another axis); returned as given.
nlohmann::json claimsFromJson(const nlohmann::json& j, const SweepSpec& s,
                              const std::string& where);

// The spec of one (point, repeat): the point's, with training.seed + repeat under "per_repeat".
nlohmann::json repeatSpec(const SweepSpec& s, const nlohmann::json& pointSpec, int repeat);
// `sets`: command-line `--set PATH=VALUE` assignments applied to the base (runtime::applySet); one
// naming a field an axis varies is an error.
SweepSpec loadSweepSpec(const std::string& path, bool simulation = false,
                        const std::vector<std::string>& sets = {});
SweepSpec sweepSpecFromJson(const nlohmann::json& j, const std::string& where,
                            bool simulation = false);
// Cartesian product in axis order; names are unique (an error says which points collide).
std::vector<SweepPoint> expandSweep(const SweepSpec& s);
std::string slug(const std::string& text);
// Label of one axis value: "label" of an object, the string itself, or the compact JSON.
std::string valueLabel(const nlohmann::json& v);

}  // namespace slowpipe::experiments
