// The run and sweep specs' fields, written down once: what each one is, its JSON type, unit, range
// and allowed values. The readers ask this table for every field they read (runtime/spec/spec.cc's
// Fields, experiments/sweep.cc), so a field added to a reader without a line here fails the first
// time it is read, and `slowpipe spec schema` prints a JSON Schema built from it, with the defaults
// of a RunSpec{} (runtime/spec/spec.h). docs/reference/ is generated from the same table.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace slowpipe::runtime {

struct SpecField {
  // Where the field is: "pipeline.stages" in a run spec, "sweep.repeats" in a sweep,
  // "sweep.axes[].path" for a field of each element of an array, "link.bandwidth" for a field of
  // every link object (network.links, network.dp_links and their per-pair overrides).
  std::string path;
  // JSON Schema type, or types joined by '|' ("string|number"); "$link": a link object.
  std::string type;
  std::string description;
  std::string unit = "";
  std::optional<double> minimum = std::nullopt, maximum = std::nullopt;
  std::vector<nlohmann::json> values = {};  // the allowed values, if a fixed set
  std::string items = "";                   // an array's element type ("string", "object")
};

// Every documented field of both specs, in document order.
const std::vector<SpecField>& specFields();
// The field at `path` (as specFields names it); throws std::logic_error naming the path and this
// file when it is not documented: a reader must not accept a field nobody described.
const SpecField& specField(const std::string& path);
// The names of the fields directly under `object` ("pipeline", "sweep", "sweep.axes[]", "link").
std::vector<std::string> specFieldNames(const std::string& object);

// A JSON Schema (draft 2020-12) of a run spec ("run") or a sweep spec ("sweep", whose base is a
// run spec): types, units, ranges, allowed values, defaults and descriptions; unknown fields are
// refused (additionalProperties false) where the readers refuse them.
nlohmann::json specSchema(const std::string& which);
// The reference page of a spec (Markdown), from the same table: docs/reference/*.md.
std::string specReferenceMarkdown(const std::string& which);

}  // namespace slowpipe::runtime
