// The conformance check: every built-in codec passes it, and codecs that break one rule of the
// contract each fail exactly the check for that rule.
#include "compression/conformance.h"

#include <gtest/gtest.h>

#include <cstring>

namespace slowpipe::compression {
namespace {

using nlohmann::json;

ConformanceOptions quick() {
  ConformanceOptions o;
  o.speedElements = int64_t{1} << 16;
  o.speedSeconds = 0.01;
  return o;
}

std::vector<std::string> failed(const json& r) {
  std::vector<std::string> out;
  for (const auto& c : r["checks"])
    if (!c["ok"].get<bool>())
      out.push_back(c["name"].get<std::string>() + ": " + c["detail"].get<std::string>());
  return out;
}

TEST(ConformanceTest, EveryBuiltInCodecPasses) {
  for (const char* spec : {"none",
                           "fp16",
                           "bf16",
                           "quant:bits=2",
                           "quant:bits=4,levels=fixpoint",
                           "quant:bits=8,scale=group,group=64",
                           "quant:bits=3,round=stochastic,seed=5",
                           "topk:ratio=0.1",
                           "acsgd:bits=2",
                           "acsgd:bits=4,levels=fixpoint,store=fp16",
                           "acsgd:bits=2,store=q8,warmup_epochs=1",
                           "ef(quant:bits=4)",
                           "ef(quant:bits=4;store=bf16)",
                           "ef(topk:ratio=0.05)",
                           "ef(topk:ratio=0.05,bits=2)",
                           "randk:ratio=0.1",
                           "ef(randk:ratio=0.25,seed=3)",
                           "hadamard(quant:bits=3,scale=group,group=64)",
                           "hadamard(acsgd:bits=2;seed=3)",
                           "ef(hadamard(quant:bits=4))",
                           "lowrank:rank=8",
                           "lowrank:rank=4,basis=pca,refresh=2",
                           "ef(lowrank:rank=16,refresh=3)"}) {
    const json r = checkCodec([&] { return makeCodec(spec); }, quick());
    EXPECT_TRUE(r["ok"].get<bool>()) << spec << "\n" << ::testing::PrintToString(failed(r));
    EXPECT_GE(r["checks"].size(), 20u) << spec;
    EXPECT_TRUE(r["figures"]["speed"]["encode_gbps"].get<double>() > 0) << spec;
  }
}

// A fp32 pass-through whose faults are switched on one at a time.
struct Faults {
  bool noSizeCheck = false;       // decode() accepts any payload size
  bool nondeterministic = false;  // encode() writes a counter shared by all instances
  bool digestPerEnd = false;      // the receiver's digest counts differently
  bool crashOnFlip = false;       // decode() dereferences null when its trailing tag is damaged
  bool lossy = false;             // claims to be lossless (CodecId none) but rounds
};

class FaultyCodec : public Codec {
 public:
  explicit FaultyCodec(Faults f) : f_(f) {}
  CodecId id() const override { return CodecId::kNone; }
  std::string spec() const override { return "faulty"; }
  void encode(const float* x, const Shape& shape, const CodecContext&, Bytes& out) override {
    const size_t n = static_cast<size_t>(numelOf(shape)), at = out.size();
    out.resize(at + 4 * n + 4);
    std::memcpy(out.data() + at, x, 4 * n);
    static uint32_t counter = 0;
    const uint32_t tag = f_.nondeterministic ? ++counter : 0x5AFEu;
    std::memcpy(out.data() + at + 4 * n, &tag, 4);
    if (f_.lossy)
      for (size_t i = 0; i < n; ++i) out[at + 4 * i] = 0;  // clears the low mantissa byte
    ++sent_;
  }
  void decode(const uint8_t* p, size_t size, const Shape& shape, const CodecContext&,
              float* out) override {
    const size_t n = static_cast<size_t>(numelOf(shape));
    if (!f_.noSizeCheck && size != 4 * n + 4)
      throw CodecError("faulty: payload of " + std::to_string(size) + " bytes");
    uint32_t tag = 0;
    if (size >= 4) std::memcpy(&tag, p + size - 4, 4);
    if (f_.crashOnFlip && !f_.nondeterministic && tag != 0x5AFEu) {
      volatile int* null = nullptr;
      *null = 1;
    }
    std::memcpy(out, p, std::min(size, 4 * n));
    ++received_;
  }
  uint64_t stateDigest() const override {
    return f_.digestPerEnd ? sent_ * 3 + received_ : sent_ + received_;
  }

 private:
  Faults f_;
  uint64_t sent_ = 0, received_ = 0;
};

json checkFaulty(Faults f) {
  return checkCodec([&] { return std::make_unique<FaultyCodec>(f); }, quick());
}

bool failedCheck(const json& r, const std::string& prefix) {
  for (const auto& c : r["checks"])
    if (c["name"].get<std::string>().rfind(prefix, 0) == 0 && !c["ok"].get<bool>()) return true;
  return false;
}

TEST(ConformanceTest, EachBrokenRuleFailsItsCheck) {
  {
    const json r = checkFaulty({});
    EXPECT_TRUE(r["ok"].get<bool>())
        << ::testing::PrintToString(failed(r));  // the faultless baseline passes
  }
  {
    Faults f;
    f.noSizeCheck = true;
    const json r = checkFaulty(f);
    EXPECT_FALSE(r["ok"].get<bool>());
    EXPECT_TRUE(failedCheck(r, "damage payload truncated")) << ::testing::PrintToString(failed(r));
    EXPECT_TRUE(failedCheck(r, "damage payload extended")) << ::testing::PrintToString(failed(r));
  }
  {
    Faults f;
    f.nondeterministic = true;
    const json r = checkFaulty(f);
    EXPECT_TRUE(failedCheck(r, "determinism")) << ::testing::PrintToString(failed(r));
  }
  {
    Faults f;
    f.digestPerEnd = true;
    const json r = checkFaulty(f);
    EXPECT_TRUE(failedCheck(r, "state")) << ::testing::PrintToString(failed(r));
  }
  {
    Faults f;
    f.crashOnFlip = true;
    const json r = checkFaulty(f);  // the crash happens in a forked child: reported, not fatal here
    EXPECT_TRUE(failedCheck(r, "damage payload bit flips")) << ::testing::PrintToString(failed(r));
    // A plain build reports the signal; under AddressSanitizer the child ends with its report
    // instead.
    EXPECT_TRUE(r.dump().find("crashed (signal") != std::string::npos ||
                r.dump().find("ended with exit status") != std::string::npos)
        << r.dump(2);
  }
  {
    Faults f;
    f.lossy = true;
    const json r = checkFaulty(f);
    EXPECT_TRUE(failedCheck(r, "round_trip")) << ::testing::PrintToString(failed(r));
    EXPECT_TRUE(failedCheck(r, "error bound")) << ::testing::PrintToString(failed(r));
  }
}

}  // namespace
}  // namespace slowpipe::compression
