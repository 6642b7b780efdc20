// A codec's encode and decode cost on this host, timed with the frame code the workers run
// (torch-free: plug-ins and built-ins alike; TorchScript codecs where the program registered them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "simulator/profile.h"

namespace slowpipe::simulator {

// Median encode / decode seconds of one message of `shape` (normal(0, 1) values, one example id
// per row) in steady state (acsgd: a delta, after the first sighting), as a cost per fp32 byte.
CodecCost measureCodecOnHost(const std::string& spec, const std::vector<int64_t>& shape);

}  // namespace slowpipe::simulator
