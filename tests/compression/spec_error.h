// Test helper shared by the codec suites: the CodecError message makeCodec(spec) throws, or "".
#pragma once

#include <string>

#include "compression/codec.h"
#include "compression/error.h"

namespace slowpipe::compression {

inline std::string errorOf(const std::string& spec) {
  try {
    makeCodec(spec);
  } catch (const CodecError& e) {
    return e.what();
  }
  return "";
}

}  // namespace slowpipe::compression
