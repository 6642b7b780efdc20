// The result document of one run (schema "slowpipe.result/1"; fields in README "Result JSON") and
// the summary math shared by the launcher and the sweep.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace slowpipe::runtime {

constexpr const char* kResultSchema = "slowpipe.result/1";

// Steady state: steps of epochs >= 1 when there is more than one epoch (AC-SGD's first epoch is
// full precision), else every step but the first. Returns the summary object.
nlohmann::json summarizeSteps(const nlohmann::json& steps, const nlohmann::json& evals);
// Host, cores, compiler, libtorch version, git commit of the source tree.
nlohmann::json environmentInfo(const std::string& torchVersion);
// Reads a JSON file; a missing or malformed file is std::invalid_argument "<what> '<path>' cannot
// be read" / "... is not valid JSON: <parser message>".
nlohmann::json readJsonFile(const std::string& path, const std::string& what);
// This machine's host name (recorded with a launcher's pid: a pid means something on its host only).
std::string hostName();
// Writes `doc` to path via a temporary file and rename, so readers never see a partial file.
void writeJsonAtomically(const std::string& path, const nlohmann::json& doc);

}  // namespace slowpipe::runtime
