// The device codecs (device_codec.h) measured on one large activation tensor against the device's
// own copy bandwidth in the same run (a device-to-device cudaMemcpy of the tensor): per codec,
// encode into device memory (what the kernels cost), encode with the payload copied to the host,
// decode from a host payload; medians of `rounds`, GB/s counted in raw fp32 bytes, as `slowpipe
// bench codecs` does on the CPU. Each codec's payload is compared byte for byte with the host
// codec's for the same message (matches_host). acsgd is timed on its delta messages (the first
// message of each example goes in full precision, untimed). `bench_device_codecs` prints it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace slowpipe::compression::cuda {

struct DeviceBenchOptions {
  int64_t sizeMib = 256;           // the tensor: [16, S, 1024] fp32 of this many MiB
  int rounds = 5;                  // timed repetitions per measurement (median)
  std::vector<std::string> specs;  // empty: defaultDeviceBenchCodecs()
  std::function<void(const std::string&)> onCodec;  // called before each codec is measured
};

std::vector<std::string> defaultDeviceBenchCodecs();

// {"benchmark": "device_codecs", "device", "shape", "rounds", "copy_GBps", "unit", "results":
// [{"codec", "raw_bytes", "wire_bytes", "matches_host", "encode_device_GBps",
// "encode_device_vs_copy", "encode_to_host_GBps", "decode_from_host_GBps",
// "decode_from_host_vs_copy"}]}. Throws std::invalid_argument on bad options and std::runtime_error
// naming a CUDA call that failed or why no device is available.
nlohmann::json benchDeviceCodecs(const DeviceBenchOptions& opt);

}  // namespace slowpipe::compression::cuda
