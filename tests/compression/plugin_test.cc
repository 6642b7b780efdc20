// Codec plug-ins: a C library loaded with dlopen passes the conformance check and round-trips
// frames; a library of another ABI version, a missing library and bad parameters are errors that
// name the library; `slowpipe codec check` survives a plug-in that crashes and names it.
#include <gtest/gtest.h>

#include <filesystem>

#include "compression/conformance.h"
#include "compression/frame.h"
#include "emulator/command.h"
#include "tests/compression/spec_error.h"

namespace slowpipe::compression {
namespace {

TEST(PluginTest, LoadsChecksAndRoundTrips) {
  const std::string spec = std::string("plugin:path=") + GOOD_PLUGIN + ",clip=8";
  auto tx = makeCodec(spec), rx = makeCodec(spec);
  EXPECT_EQ(tx->spec(), spec);
  EXPECT_EQ(tx->id(), CodecId::kPlugin);
  std::vector<float> x(2 * 3 * 5), y;
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f - 3;
  FrameHeader h;
  h.shape = {2, 3, 5};
  h.exampleIds = {4, 9};
  CodecContext ctx;
  ctx.exampleIds = h.exampleIds;
  const Bytes f = encodeFrame(*tx, x.data(), h, ctx);
  size_t at = 0;
  EXPECT_EQ(parseFrame(f.data(), f.size(), &at).payloadBytes, 4 + x.size())
      << "payload: 4-byte scale + one byte per value";
  decodeFrame(*rx, f.data(), f.size(), ctx, y);
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 4.5f / 127) << i;
  EXPECT_EQ(tx->stateDigest(), rx->stateDigest());
  EXPECT_NE(tx->stateDigest(), 0u);
  ConformanceOptions o;
  o.speedElements = int64_t{1} << 16;
  o.speedSeconds = 0.01;
  const auto r = checkCodec([&] { return makeCodec(spec); }, o);
  EXPECT_TRUE(r["ok"].get<bool>()) << r.dump(2);
}

// A plug-in may declare what it costs on a device (slowpipe_codec_device_cost): the codec passes
// the plug-in's JSON on; a built-in without a declaration has none, lowrank derives its FLOPs.
TEST(PluginTest, DeclaresItsDeviceCost) {
  const auto c = makeCodec(std::string("plugin:path=") + COSTED_PLUGIN);
  EXPECT_EQ(c->deviceCost(), "{\"encode_bytes_per_s\": 5e11, \"decode_bytes_per_s\": 7e11}");
  EXPECT_EQ(makeCodec(std::string("plugin:path=") + GOOD_PLUGIN)->deviceCost(),
            "");  // it declares nothing
  EXPECT_EQ(makeCodec("quant:bits=4")->deviceCost(), "");
  const std::string lr = makeCodec("lowrank:rank=16")->deviceCost();
  EXPECT_NE(lr.find("\"encode_flops_per_element\": 32,"), std::string::npos) << lr;
  EXPECT_NE(lr.find("\"decode_flops_per_element\": 32,"), std::string::npos) << lr;
}

TEST(PluginTest, BadLibrariesAndParametersAreNamed) {
  const std::string abi = errorOf(std::string("plugin:path=") + BAD_ABI_PLUGIN);
  EXPECT_NE(abi.find(BAD_ABI_PLUGIN), std::string::npos) << abi;
  EXPECT_NE(abi.find("ABI version 99"), std::string::npos) << abi;
  const std::string missing = errorOf("plugin:path=/nonexistent/libnothing.so");
  EXPECT_NE(missing.find("/nonexistent/libnothing.so"), std::string::npos) << missing;
  const std::string param = errorOf(std::string("plugin:path=") + GOOD_PLUGIN + ",clip=-1");
  EXPECT_NE(param.find("clip='-1' is not a positive number"), std::string::npos) << param;
  EXPECT_NE(param.find(GOOD_PLUGIN), std::string::npos) << param;
  EXPECT_NE(errorOf("plugin:clip=3").find("expected plugin:path="), std::string::npos);
}

#ifdef SLOWPIPE_BINARY
TEST(PluginTest, CodecCheckSurvivesACrashingPluginAndNamesIt) {
  const auto r = emulator::runCommand({SLOWPIPE_BINARY, "codec", "check", "--quick",
                                       std::string("plugin:path=") + CRASH_PLUGIN,
                                       std::string("plugin:path=") + GOOD_PLUGIN});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(CRASH_PLUGIN), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("crashed"), std::string::npos) << r.output;
  // The second codec was still checked, and passed.
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
}

// A decoder that reads past a truncated payload passed while the payload sat in a heap buffer (the
// bytes after it were readable): placed against a protected page it crashes, and the check fails
// naming the case. Rejected rows show the codec's own message.
TEST(PluginTest, CodecCheckFailsADecoderThatReadsPastItsPayload) {
  const auto r = emulator::runCommand(
      {SLOWPIPE_BINARY, "codec", "check", "--quick", std::string("plugin:path=") + OOB_PLUGIN});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("FAIL damage payload truncated by 1 byte"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("crashed (signal 11)"), std::string::npos) << r.output;
  const auto good = emulator::runCommand(
      {SLOWPIPE_BINARY, "codec", "check", "--quick", std::string("plugin:path=") + GOOD_PLUGIN});
  EXPECT_EQ(good.status, 0) << good.output;
  EXPECT_NE(good.output.find("rejected: codec plugin"), std::string::npos) << good.output;
  EXPECT_NE(good.output.find("(int8): payload of 1191 bytes, expected 1192"), std::string::npos)
      << good.output;
  EXPECT_NE(good.output.find("state (gradient)"), std::string::npos) << good.output;
}
#endif

}  // namespace
}  // namespace slowpipe::compression
