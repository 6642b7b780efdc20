// Rank arithmetic lives in RankLayout (runtime/exec/ranks.h) and the message protocol
// (runtime/exec/protocol.h): this test reads the source tree and fails on a stage, replica or
// model-chunk index computed by hand anywhere else (x / R, x % R, x / replicas, chunk * S + stage,
// ...). A schedule's own ordering of micro-batches (runtime/exec/schedules/) is not rank
// arithmetic, and a line whose arithmetic is about something else says so ("// not a rank: the mean
// over replicas").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// Divisions and remainders by a replica or stage count (R, R_, replicas, x.stages, ...), and
// chunk * stages + anything, stage * replicas + anything.
const char* const kRankArithmetic =
    R"((?:[/%]\s*\(?\s*(?:R_?|S_?|replicas|stages|(?:\w+(?:\.|->))+(?:replicas|stages))\b(?!\s*[*(]))|)"
    R"((?:\*\s*(?:S_?|stages|(?:\w+(?:\.|->))+stages)\s*\+\s*\w+\b)|)"
    R"((?:\*\s*(?:R_?|replicas|(?:\w+(?:\.|->))+replicas)\s*\+\s*\w+\b))";

// Reads every source file of the layers above compression (but `allowed`) and returns each line
// matching `rule` as "file:line: text"; `files` counts the files read.
std::string linesMatching(const std::regex& rule, const std::set<std::string>& allowed,
                          size_t* files) {
  const fs::path src = SLOWPIPE_SOURCE_DIR;
  std::string found;
  for (const char* dir :
       {"runtime", "simulator", "experiments", "tools", "emulator", "compression"})
    for (const auto& e : fs::recursive_directory_iterator(src / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cc" && ext != ".h" && ext != ".inc") continue;
      const std::string rel = fs::relative(e.path(), src).string();
      if (allowed.count(rel) || rel.rfind("runtime/exec/schedules/", 0) == 0) continue;
      ++*files;
      std::ifstream in(e.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        const std::string code = line.substr(0, line.find("//"));  // comments may say it
        // An arithmetic that is not about ranks says so on its line ("// not a rank: why").
        if (line.find("// not a rank: ") != std::string::npos) continue;
        if (std::regex_search(code, rule))
          found += rel + ":" + std::to_string(n) + ": " + line + "\n";
      }
    }
  return found;
}

TEST(LayoutRulesTest, RankArithmeticLivesInRankLayoutAndProtocolOnly) {
  size_t files = 0;
  const std::string found = linesMatching(
      std::regex(kRankArithmetic), {"runtime/exec/ranks.h", "runtime/exec/protocol.h"}, &files);
  EXPECT_GT(files, 100u) << "the source tree was not found under " << SLOWPIPE_SOURCE_DIR;
  EXPECT_EQ(found, "")
      << "rank arithmetic outside runtime/exec/ranks.h and runtime/exec/protocol.h (use "
         "RankLayout):\n"
      << found;
}

// What a message carries, which codec and which side encodes it, its key on a link: decided in
// runtime/exec/protocol.h only (the worker, the transports and the simulator ask it).
const char* const kMessageQuestion =
    R"((?:compression\.(?:forward|backward)\s*:\s*[\w.>-]*compression\.(?:forward|backward))|)"
    R"((?:Message::kActivation\s*\|\|)|(?:MessageKind::kEval\s*\|\|)|)"
    R"((?:MessageKind::kControl\s*\?)|(?:isDataParallel\(\)\s*\?\s*[\w.]*(?:shard|round)\b)|)"
    R"((?:<<\s*16\)\s*\|))";

TEST(LayoutRulesTest, MessageQuestionsAreAnsweredByTheProtocolOnly) {
  size_t files = 0;
  const std::string found =
      linesMatching(std::regex(kMessageQuestion), {"runtime/exec/protocol.h"}, &files);
  EXPECT_GT(files, 100u);
  EXPECT_EQ(found, "") << "a message question answered outside runtime/exec/protocol.h:\n" << found;
  const std::regex rule(kMessageQuestion);
  for (const char* bad :
       {"const std::string& c = fwd ? spec.compression.forward : spec.compression.backward;",
        "return m == Action::Message::kActivation || m == Action::Message::kGradient;",
        "bool plain = k == MessageKind::kEval || k == MessageKind::kControl;",
        "return kind == MessageKind::kControl ? toNext : true;",
        "int slot = a.isDataParallel() ? a.shard : a.microBatch;",
        "return ((round * 4 + kind) << 16) | chunk;"})
    EXPECT_TRUE(std::regex_search(std::string(bad), rule)) << bad;
  for (const char* ok : {"protocol::codecOf(spec.compression, a.message)",
                         "if (a.message == Action::Message::kActivation) check(ids);"})
    EXPECT_FALSE(std::regex_search(std::string(ok), rule)) << ok;
}

// The rule itself: it finds the shapes it is meant to find.
TEST(LayoutRulesTest, TheRuleSeesTheShapesItForbids) {
  const std::regex rule(kRankArithmetic);
  for (const char* bad :
       {"int s = i / R;", "int r = i % R;", "x = rank % spec.pipeline.replicas;",
        "v = chunk * S + stage;", "k = c * layout.stages + stage;", "q = i / layout.replicas;",
        "key = stage * replicas + replica;", "int s = i / R_;",
        "c.peer = opt_.stage * opt_.replicas + q;", "v = c * S_ + id_.stage;"})
    EXPECT_TRUE(std::regex_search(std::string(bad), rule)) << bad;
  for (const char* ok :
       {"double mean = sum / n;", "int x = a / 2;", "RankLayout{S, R, 1}", "y = l / Rate;"})
    EXPECT_FALSE(std::regex_search(std::string(ok), rule)) << ok;
}

}  // namespace

// The layers' arrows run one way: compression <- emulator <- runtime <- simulator <- experiments
// <- tools. No file of a lower layer includes a higher one (the profiler once read sweeps:
// simulator -> experiments).
TEST(LayoutRulesTest, NoLayerIncludesALayerAboveIt) {
  const fs::path src = SLOWPIPE_SOURCE_DIR;
  const std::vector<std::string> layers = {"compression", "emulator",    "runtime",
                                           "simulator",   "experiments", "tools"};
  std::string found;
  size_t files = 0;
  for (size_t i = 0; i < layers.size(); ++i)
    for (const auto& e : fs::recursive_directory_iterator(src / layers[i])) {
      const std::string ext = e.path().extension().string();
      if (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh") continue;
      ++files;
      std::ifstream in(e.path());
      int n = 0;
      for (std::string line; std::getline(in, line);) {
        ++n;
        for (size_t j = i + 1; j < layers.size(); ++j)
          if (line.rfind("#include \"" + layers[j] + "/", 0) == 0)
            found +=
                fs::relative(e.path(), src).string() + ":" + std::to_string(n) + ": " + line + "\n";
      }
    }
  EXPECT_GT(files, 150u);
  EXPECT_EQ(found, "") << "includes of a layer above:\n" << found;
}
