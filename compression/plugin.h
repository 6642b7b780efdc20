// Codecs from shared libraries (compression/plugin_abi.h): `plugin:path=libx.so[,key=value...]`.
#pragma once

#include <memory>
#include <string>

#include "compression/codec.h"

namespace slowpipe::compression {

// Loads the library at `path` (dlopen; one handle per path for the process), checks its ABI
// version and builds a codec with `params` ("key=value,..."). Errors name the library.
std::unique_ptr<Codec> makePluginCodec(const std::string& path, const std::string& params);

// The plug-in whose code runs now ("codec plug-in '<path>' (<name>), in its encode"), or nullptr:
// a crash handler reads it (one pointer, async-signal-safe) to name the plug-in that crashed.
const char* pluginInUse();

}  // namespace slowpipe::compression
