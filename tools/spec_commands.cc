// slowpipe spec: the specs' JSON Schema and reference, from the table the readers check
// (runtime/spec/spec_schema.h).
#include <cstdio>
#include <memory>

#include "runtime/spec/spec_schema.h"
#include "tools/commands.h"

namespace slowpipe::tools {

void addSpecCommands(CLI::App& app) {
  auto* spec = app.add_subcommand(
      "spec",
      "the run and sweep specs: their JSON Schema and reference, from the definitions "
      "that validate them");
  spec->require_subcommand(1);
  auto which = std::make_shared<std::string>("sweep");
  auto* schema = spec->add_subcommand(
      "schema",
      "print the JSON Schema (draft 2020-12) of a sweep spec (the shipped experiments/*.json) or "
      "a run spec; editors validate a spec with it through its \"$schema\"");
  schema->add_option("which", *which, "sweep (default) or run")
      ->check(CLI::IsMember({"run", "sweep"}));
  schema->callback([which] { std::printf("%s\n", runtime::specSchema(*which).dump(2).c_str()); });
  auto ref = std::make_shared<std::string>("run");
  auto* reference = spec->add_subcommand(
      "reference", "print the Markdown reference of a run or sweep spec (docs/reference/)");
  reference->add_option("which", *ref, "run (default) or sweep")
      ->check(CLI::IsMember({"run", "sweep"}));
  reference->callback([ref] { std::printf("%s", runtime::specReferenceMarkdown(*ref).c_str()); });
}

}  // namespace slowpipe::tools
