// TorchScript codecs: the example module (examples/codecs/torchscript/make_codec.py, written at
// build time) passes the conformance check through makeCodec; its parameters reach configure();
// what the module gets wrong is a CodecError naming the file.
#include "compression/torchscript.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "compression/conformance.h"
#include "compression/frame.h"

namespace slowpipe::compression {
namespace {

std::string errorOf(const std::string& spec) {
  try {
    makeCodec(spec);
  } catch (const CodecError& e) {
    return e.what();
  }
  return "";
}

class TorchScriptTest : public ::testing::Test {
 protected:
  void SetUp() override { registerTorchScriptCodec(); }
};

TEST_F(TorchScriptTest, TheExampleModulePassesTheConformanceCheck) {
  const std::string spec = std::string("torchscript:path=") + ROWINT8_PT + ",bits=6";
  ConformanceOptions o;
  o.speedElements = int64_t{1} << 16;
  o.speedSeconds = 0.01;
  const auto r = checkCodec([&] { return makeCodec(spec); }, o);
  EXPECT_TRUE(r["ok"].get<bool>()) << r.dump(1);
  EXPECT_EQ(makeCodec(spec)->spec(), spec);
  EXPECT_EQ(makeCodec(spec)->id(), CodecId::kTorchScript);
}

TEST_F(TorchScriptTest, ParametersReachTheModule) {
  // 2 bits keep 3 levels per sign, 8 bits 127: the error must differ by far.
  std::vector<float> x(4 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  auto err = [&](int bits) {
    const std::string spec = std::string("torchscript:path=") + ROWINT8_PT + ",bits=" + std::to_string(bits);
    auto tx = makeCodec(spec), rx = makeCodec(spec);
    Bytes p;
    tx->encode(x.data(), {4, 64}, {}, p);
    std::vector<float> y(x.size());
    rx->decode(p.data(), p.size(), {4, 64}, {}, y.data());
    EXPECT_EQ(tx->stateDigest(), rx->stateDigest());
    double m = 0;
    for (size_t i = 0; i < x.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(x[i] - y[i])));
    return m;
  };
  EXPECT_GT(err(2), 20 * err(8));
}

TEST_F(TorchScriptTest, ErrorsNameTheModuleAndTheProblem) {
  const std::string pt = ROWINT8_PT;
  EXPECT_NE(errorOf("torchscript:path=" + pt + ",bitz=3").find("unknown parameter 'bitz'"), std::string::npos);
  EXPECT_NE(errorOf("torchscript:path=" + pt + ",bits=9").find("bits=9 is out of range"), std::string::npos);
  EXPECT_NE(errorOf("torchscript:path=/nonexistent/codec.pt").find("cannot load '/nonexistent/codec.pt'"), std::string::npos);
  const std::string junk = ::testing::TempDir() + "/junk.pt";
  std::ofstream(junk) << "not a module";
  EXPECT_NE(errorOf("torchscript:path=" + junk).find("cannot load"), std::string::npos);
  EXPECT_NE(errorOf("torchscript:file=x.pt").find("expected torchscript:path="), std::string::npos);
  // A malformed payload raises in the module; the wrapper reports it, naming the file and method.
  auto rx = makeCodec("torchscript:path=" + pt);
  std::vector<float> y(8);
  const uint8_t bad[5] = {1, 2, 3, 4, 5};
  try {
    rx->decode(bad, sizeof bad, {2, 4}, {}, y.data());
    FAIL() << "decoded a 5-byte payload";
  } catch (const CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("decode raised ValueError: rowint8: payload is 5 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace slowpipe::compression
