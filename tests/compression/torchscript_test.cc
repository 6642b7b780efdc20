// TorchScript codecs: the example module (examples/codecs/torchscript/make_codec.py, written at
// build time) passes the conformance check through makeCodec; its parameters reach configure();
// what the module gets wrong is a CodecError naming the file.
#include "compression/torchscript.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "compression/codec_template.h"
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

// `slowpipe codec new x --lang torchscript`: the skeleton saves a module that passes the
// conformance check as generated, with and without error feedback; its byte views are the
// IEEE-754 bytes memcpy gives (the scale leads the payload), and the full context reaches it:
// with ef=1 the residual is kept per key, so the same message under a new key encodes as the
// first one did, and again under its old key it does not.
TEST_F(TorchScriptTest, TheGeneratedSkeletonPassesTheCheckWithItsContext) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("slowpipe-codec-new-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const auto files = writeCodecSkeleton("my_codec", "torchscript", dir.string());
  ASSERT_EQ(files.size(), 1u);
  const std::string text =
      std::string(std::istreambuf_iterator<char>(std::ifstream(files[0]).rdbuf()), {});
  EXPECT_EQ(text.find("@NAME@"), std::string::npos);
  EXPECT_NE(text.find("class MyCodec(torch.nn.Module)"), std::string::npos);
  const std::string pt = (dir / "my_codec.pt").string();
  ASSERT_EQ(
      std::system((std::string(TORCH_PYTHON) + " " + files[0] + " " + pt + " > /dev/null").c_str()),
      0);
  ConformanceOptions o;
  o.speedElements = int64_t{1} << 16;
  o.speedSeconds = 0.01;
  for (const char* params : {",bits=8", ",bits=4,ef=1"}) {
    const std::string spec = "torchscript:path=" + pt + params;
    const auto r = checkCodec([&] { return makeCodec(spec); }, o);
    EXPECT_TRUE(r["ok"].get<bool>()) << spec << r.dump(1);
  }
  // Byte views: the scale (max |x|, here a subnormal-free value with a full mantissa) as memcpy
  // writes it.
  std::vector<float> x = {0.0f, -1.2345678f, 3.0e-3f, -0.0f, 2.5f, 1.0e-40f};
  auto tx = makeCodec("torchscript:path=" + pt + ",bits=8");
  Bytes p;
  CodecContext ctx;
  tx->encode(x.data(), {6}, ctx, p);
  ASSERT_EQ(p.size(), 4u + 6u);
  const float scale = 2.5f;
  uint8_t want[4];
  std::memcpy(want, &scale, 4);
  EXPECT_EQ(std::vector<uint8_t>(p.begin(), p.begin() + 4), std::vector<uint8_t>(want, want + 4));
  std::vector<float> y(6);
  makeCodec("torchscript:path=" + pt + ",bits=8")->decode(p.data(), p.size(), {6}, ctx, y.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 2.5 / 127 / 2 + 1e-7) << i;
  // Error feedback per key.
  auto ef = makeCodec("torchscript:path=" + pt + ",bits=2,ef=1");
  std::vector<float> z = {0.3f, -0.7f, 0.55f, 1.0f};
  Bytes a, b, c;
  ctx.key = "fwd/mb0";
  ef->encode(z.data(), {4}, ctx, a);
  ef->encode(z.data(), {4}, ctx, b);
  ctx.key = "fwd/mb1";
  ctx.microBatch = 1;
  ef->encode(z.data(), {4}, ctx, c);
  EXPECT_NE(a, b) << "the residual of fwd/mb0 was not added to its next message";
  EXPECT_EQ(a, c) << "fwd/mb1 started from another key's residual";
  // The helpers against eager PyTorch's own byte view, over every class of float (normal,
  // subnormal, both zeros, infinities, NaN) and random bits, scripted as the module uses them.
  const std::string check =
      std::string(TORCH_PYTHON) +
      " -c \"import importlib.util, sys, torch\n"
      "s = importlib.util.spec_from_file_location('m', '" +
      files[0] +
      "'); m = importlib.util.module_from_spec(s); s.loader.exec_module(m)\n"
      "g = torch.Generator().manual_seed(1)\n"
      "bits = torch.randint(0, 2**32, (100000,), generator=g, dtype=torch.int64)\n"
      "x = torch.tensor(((bits + 2**31) % 2**32 - 2**31).tolist(), "
      "dtype=torch.int32).view(torch.float32)\n"
      "x = torch.cat([x, torch.tensor([0.0, -0.0, 1e-45, -1e-40, 1.17549435e-38, 3.4028235e38, "
      "float('inf'), -float('inf'), 1.0, -2.5])])\n"
      "fin = torch.isfinite(x)\n"
      "want = x.view(torch.uint8)\n"
      "got = torch.jit.script(m.f32_to_bytes)(x)\n"
      "back = torch.jit.script(m.bytes_to_f32)(want)\n"
      "nan = torch.isnan(x)\n"
      "ok = torch.equal(got.reshape(-1, 4)[~nan], want.reshape(-1, 4)[~nan]) and "
      "torch.equal(back[~nan].view(torch.int32), x[~nan].view(torch.int32)) and "
      "bool(torch.isnan(back[nan]).all())\n"
      "sys.exit(0 if ok else 1)\"";
  EXPECT_EQ(std::system(check.c_str()), 0)
      << "f32_to_bytes / bytes_to_f32 differ from eager PyTorch's view";
  EXPECT_THROW(writeCodecSkeleton("my_codec", "torchscript", dir.string()),
               std::invalid_argument);  // no overwrite
  EXPECT_THROW(writeCodecSkeleton("My-Codec", "c", dir.string()), std::invalid_argument);
  EXPECT_THROW(writeCodecSkeleton("other", "rust", dir.string()), std::invalid_argument);
  std::filesystem::remove_all(dir);
}

TEST_F(TorchScriptTest, ParametersReachTheModule) {
  // 2 bits keep 3 levels per sign, 8 bits 127: the error must differ by far.
  std::vector<float> x(4 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  auto err = [&](int bits) {
    const std::string spec =
        std::string("torchscript:path=") + ROWINT8_PT + ",bits=" + std::to_string(bits);
    auto tx = makeCodec(spec), rx = makeCodec(spec);
    Bytes p;
    tx->encode(x.data(), {4, 64}, {}, p);
    std::vector<float> y(x.size());
    rx->decode(p.data(), p.size(), {4, 64}, {}, y.data());
    EXPECT_EQ(tx->stateDigest(), rx->stateDigest());
    double m = 0;
    for (size_t i = 0; i < x.size(); ++i)
      m = std::max(m, static_cast<double>(std::fabs(x[i] - y[i])));
    return m;
  };
  EXPECT_GT(err(2), 20 * err(8));
}

TEST_F(TorchScriptTest, ErrorsNameTheModuleAndTheProblem) {
  const std::string pt = ROWINT8_PT;
  EXPECT_NE(errorOf("torchscript:path=" + pt + ",bitz=3").find("unknown parameter 'bitz'"),
            std::string::npos);
  EXPECT_NE(errorOf("torchscript:path=" + pt + ",bits=9").find("bits=9 is out of range"),
            std::string::npos);
  EXPECT_NE(
      errorOf("torchscript:path=/nonexistent/codec.pt").find("cannot load '/nonexistent/codec.pt'"),
      std::string::npos);
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
    EXPECT_NE(std::string(e.what()).find("decode raised ValueError: rowint8: payload is 5 bytes"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace slowpipe::compression
