// Gradient compressors: what the replicas' rounds carry and when (dp.codec, dp.local_steps).
// Torch-free: the schedules (DpShape), the spec check, the frame bound, the DP transport and the
// simulator ask it; its torch side (runtime/dp/grad_sync.h: pack, unpack, the outer step) is
// GradientSync. One file each in runtime/dp/compressors/ (this description) and
// runtime/dp/grad_syncs/ (its torch side), both registered by one line in
// runtime/dp/compressor_list.h:
//   codec     dp.codec is a plain codec spec: each step's gradients, averaged before GradNorm.
//   powersgd  powersgd:rank=r: two rounds, P then Q, of every matrix's rank-r factors.
//   qadam     qadam:bits=4|8,bucket=B,warmup_steps=N: exact gradients during the warm-up, then
//             the momentum after Step through the reference's quantizer.
//   diloco    dp.local_steps H > 1: every H-th step after Step, the outer gradient through
//   dp.codec.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

class GradientCompressor {
 public:
  virtual ~GradientCompressor() = default;
  virtual const char* name() const = 0;
  // Exchanges per synchronisation (powersgd: P, then Q).
  virtual int rounds() const { return 1; }
  // What each DP message is encoded with once the compressor is in its steady state.
  virtual std::string messageCodec() const { return codec_; }
  // Whether the rounds of `step` travel uncompressed (qadam's warm-up: its codec is for momenta).
  virtual bool exactRound(int64_t /*step*/) const { return false; }
  std::string roundCodec(int64_t step) const { return exactRound(step) ? "none" : messageCodec(); }
  // Values of round `round`'s flat buffer on a stage whose parameters have `shapes` (default:
  // every parameter, in round 0).
  virtual int64_t roundValues(const std::vector<std::vector<int64_t>>& shapes, int round) const;
  // From this step on the rounds follow Step and OuterStep ends the step; -1: always before
  // GradNorm.
  virtual int64_t afterStepFrom() const { return -1; }
  // Steps before the steady state (the simulator replays them first): qadam's warm-up.
  virtual int64_t warmupSteps() const { return 0; }
  // A parameter its spec set or defaulted ("rank", "bits", ...), for its torch side; throws
  // std::logic_error naming one it does not have.
  int64_t param(const std::string& key) const;

 protected:
  // Sends every message through the codec spec `codec` (throws a CodecError naming a bad one).
  void useCodec(const std::string& codec);
  std::string codec_ = "none";
  std::map<std::string, int64_t> params_;
};

struct GradientCompressorInfo {
  const char* name;
  // Whether it takes dp.codec (its name as the codec spec's prefix: "qadam:bits=4"); else it is
  // chosen otherwise (codec: any other spec; diloco: dp.local_steps > 1).
  bool namedInCodec;
  // Parses dp; throws std::invalid_argument naming the parameter.
  std::unique_ptr<GradientCompressor> (*parse)(const DpSpec& dp);
};
const std::vector<GradientCompressorInfo>& gradientCompressors();
// The compressor of a run's dp section: dp.local_steps > 1 is diloco, a dp.codec that starts with
// a registered name (qadam, powersgd) is that one, any other dp.codec a plain codec. Throws
// std::invalid_argument naming the problem.
std::unique_ptr<GradientCompressor> gradientCompressor(const DpSpec& dp);

// "name:k=v,k=v" -> {k: v} (a compressor file's parameters); keys must be among `known`; values
// are strict integers in [lo, hi] where read with paramInt. Throws std::invalid_argument.
std::map<std::string, std::string> compressorParams(const std::string& spec,
                                                    const std::string& name,
                                                    const std::vector<std::string>& known);
int64_t paramInt(const std::map<std::string, std::string>& p, const std::string& name,
                 const std::string& key, int64_t fallback, int64_t lo, int64_t hi);

}  // namespace slowpipe::runtime
