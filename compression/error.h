// Errors of the compression library. Configuration mistakes (bad spec string) and malformed
// frames/payloads both throw CodecError; the message names the field, the value and what was
// expected, so a caller can show it to a user as is.
#pragma once

#include <stdexcept>
#include <string>

namespace slowpipe::compression {

class CodecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws CodecError(what) when `ok` is false. A macro so that the message, which usually
// concatenates strings, is only built on failure: validation runs on the decode hot path.
#define SP_REQUIRE(ok, what)                                          \
  do {                                                                \
    if (!(ok)) throw ::slowpipe::compression::CodecError(what);       \
  } while (0)

}  // namespace slowpipe::compression
