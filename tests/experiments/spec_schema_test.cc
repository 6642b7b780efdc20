// The specs' fields are documented once (runtime/spec/spec_schema.cc) and everything else follows
// from that table: the readers refuse undocumented fields, `slowpipe spec schema` and
// docs/reference are generated from it, and every shipped spec passes both our readers and a JSON
// Schema validator.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "emulator/command.h"
#include "emulator/link.h"
#include "experiments/sweep.h"
#include "runtime/spec/spec.h"
#include "runtime/spec/spec_schema.h"

namespace fs = std::filesystem;
using nlohmann::json;
using slowpipe::runtime::specField;
using slowpipe::runtime::specFields;

namespace {

const fs::path kSource = SLOWPIPE_SOURCE_DIR;

std::string readFile(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<fs::path> shippedSpecs() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kSource / "experiments"))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// Every field has a description, a known type, and a path under an object that exists.
TEST(SpecSchemaTest, EveryFieldIsDescribed) {
  std::set<std::string> paths;
  for (const auto& f : specFields()) {
    EXPECT_TRUE(paths.insert(f.path).second) << f.path << " twice";
    EXPECT_GE(f.description.size(), 10u) << f.path << ": no description";
    std::stringstream types(f.type);
    for (std::string t; std::getline(types, t, '|');)
      EXPECT_TRUE((std::set<std::string>{"string", "number", "integer", "boolean", "object",
                                         "array", "null", "$link"}
                       .count(t)))
          << f.path << ": type " << t;
  }
  for (const auto& f : specFields()) {
    const size_t dot = f.path.rfind('.');
    if (dot == std::string::npos) continue;
    std::string parent = f.path.substr(0, dot);
    if (parent.size() > 2 && parent.substr(parent.size() - 2) == "[]")
      parent = parent.substr(0, parent.size() - 2);
    if (parent == "sweep" || parent == "link") continue;
    EXPECT_TRUE(paths.count(parent)) << f.path << ": its object " << parent << " is not described";
  }
  EXPECT_THROW(specField("pipeline.stagez"), std::logic_error);
}

// Every field runtime/spec/spec.cc reads (f.get / f.raw after `Fields f(section, where, "S")`) is
// in the table: a field added to a reader without a description fails here, also on a path no other
// test takes.
TEST(SpecSchemaTest, EveryFieldTheReaderReadsIsDocumented) {
  const std::string src = readFile(kSource / "runtime" / "spec" / "spec.cc");
  const std::regex section(R"re(Fields (\w+)\([^,]+, [^,]+, "(\w*)"\))re");
  const std::regex read(R"re(\b(\w+)\.(?:get|raw)\("([$\w]+)")re");
  std::map<std::string, std::string> sectionOf;  // Fields variable -> its section, as declared
  size_t reads = 0, sections = 0;
  std::istringstream lines(src);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, section)) {
      sectionOf[m[1]] = m[2];
      ++sections;
    }
    for (auto it = std::sregex_iterator(line.begin(), line.end(), read);
         it != std::sregex_iterator(); ++it) {
      const auto var = (*it)[1].str();
      if (!sectionOf.count(var)) continue;
      const std::string path =
          (sectionOf[var].empty() ? "" : sectionOf[var] + ".") + (*it)[2].str();
      EXPECT_NO_THROW(specField(path)) << path << " is read by runtime/spec/spec.cc: " << line;
      ++reads;
    }
  }
  EXPECT_GE(sections, 9u);  // the spec and its 8 sections
  EXPECT_GE(reads, 60u);    // the readers' fields, all found
}

// A link's fields in the table are the ones the link parser (emulator/link.cc) accepts, and a
// field it does not know is refused by both.
TEST(SpecSchemaTest, LinkFieldsAreTheLinkParsers) {
  for (const std::string& k : slowpipe::runtime::specFieldNames("link")) {
    if (k == "links") continue;  // the topology's overrides, read by topologyFromJson
    try {
      slowpipe::emulator::linkSpecFromJson(json{{k, nullptr}}, "l");
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).find("unknown field"), std::string::npos)
          << k << ": " << e.what();
    }
  }
  EXPECT_THROW(slowpipe::emulator::linkSpecFromJson(json{{"bandwidthz", "1Gbps"}}, "l"),
               std::invalid_argument);
}

// Every shipped spec passes our readers and the JSON Schema (Debian's python3-jsonschema, draft
// 2020-12); a typo'd field fails both, naming it.
TEST(SpecSchemaTest, ShippedSpecsPassTheReadersAndTheSchema) {
  const fs::path dir = fs::temp_directory_path() / ("slowpipe-schema-" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const char* w : {"run", "sweep"})
    std::ofstream(dir / (std::string(w) + ".schema.json"))
        << slowpipe::runtime::specSchema(w).dump(2);
  std::vector<std::string> files;
  for (const fs::path& p : shippedSpecs()) {
    const json j = json::parse(std::ifstream(p));
    EXPECT_TRUE(j.contains("$schema")) << p;
    files.push_back(p.string());
    if (j.contains("axes")) {  // as `slowpipe sweep --simulate` reads it: corpora need not be here
      EXPECT_NO_THROW(slowpipe::experiments::loadSweepSpec(p.string(), true)) << p;
    } else {
      EXPECT_NO_THROW(slowpipe::runtime::runSpecFromJson(
          slowpipe::runtime::readSpecFile(p.string(), "spec"), "spec", true))
          << p;
    }
  }
  ASSERT_GE(files.size(), 30u);
  // The typo'd copies: a sweep's base and a run spec.
  json sweep = json::parse(std::ifstream(kSource / "experiments" / "quickstart.json"));
  sweep["base"]["pipeline"]["stagez"] = 2;
  std::ofstream(dir / "typo_sweep.json") << sweep.dump();
  json run = json::parse(std::ifstream(kSource / "experiments" / "smoke.json"));
  run["training"]["lr_typo"] = 0.1;
  std::ofstream(dir / "typo_run.json") << run.dump();
  try {
    slowpipe::experiments::loadSweepSpec((dir / "typo_sweep.json").string(), true);
    ADD_FAILURE() << "a typo'd field was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline.stagez: unknown field"), std::string::npos)
        << e.what();
  }
  if (std::system((std::string(SLOWPIPE_PYTHON3) + " -c 'import jsonschema' 2>/dev/null").c_str()))
    GTEST_SKIP() << "python3-jsonschema is not installed (tools/setup.sh installs it)";
  const std::string script =
      "import json, sys, jsonschema\n"
      "d = sys.argv[1]\n"
      "v = {w: jsonschema.Draft202012Validator(json.load(open(d + '/' + w + '.schema.json')))\n"
      "     for w in ('run', 'sweep')}\n"
      "for w in v: jsonschema.Draft202012Validator.check_schema(v[w].schema)\n"
      "for f in sys.argv[2:]:\n"
      "    s = json.load(open(f))\n"
      "    errs = list(v['sweep' if 'axes' in s else 'run'].iter_errors(s))\n"
      "    print(f, len(errs), '; '.join(e.message for e in errs[:3]))\n";
  std::ofstream(dir / "validate.py") << script;
  std::vector<std::string> argv = {SLOWPIPE_PYTHON3, (dir / "validate.py").string(), dir.string()};
  argv.insert(argv.end(), files.begin(), files.end());
  argv.push_back((dir / "typo_sweep.json").string());
  argv.push_back((dir / "typo_run.json").string());
  const auto r = slowpipe::emulator::runCommand(argv);
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream out(r.output);
  size_t valid = 0;
  for (std::string line; std::getline(out, line);) {
    const bool typo = line.find("typo_") != std::string::npos;
    std::istringstream words(line);
    std::string file;
    int errors = -1;
    words >> file >> errors;
    if (typo) {
      EXPECT_GE(errors, 1) << line;
      const char* field = line.find("typo_run") != std::string::npos ? "lr_typo" : "stagez";
      EXPECT_NE(line.find(field), std::string::npos) << line;
    } else {
      EXPECT_EQ(errors, 0) << line;
      valid += errors == 0;
    }
  }
  EXPECT_EQ(valid, files.size()) << r.output;
  std::printf("%zu shipped specs valid against the schema\n", valid);
  fs::remove_all(dir);
}

// docs/reference is what `slowpipe spec schema` and `spec reference` print (regenerate with the
// commands in docs/reference/README.md).
TEST(SpecSchemaTest, CommittedReferenceIsGenerated) {
  for (const char* w : {"run", "sweep"}) {
    EXPECT_EQ(readFile(kSource / "docs" / "reference" / (std::string(w) + ".schema.json")),
              slowpipe::runtime::specSchema(w).dump(2) + "\n")
        << w << ": run `build/slowpipe spec schema " << w << " > docs/reference/" << w
        << ".schema.json`";
    EXPECT_EQ(readFile(kSource / "docs" / "reference" / (std::string(w) + ".md")),
              slowpipe::runtime::specReferenceMarkdown(w))
        << w << ": run `build/slowpipe spec reference " << w << " > docs/reference/" << w << ".md`";
  }
}
