// Errors of the compression library. Configuration mistakes (bad spec string) and malformed
// frames/payloads both throw CodecError; the message names the field, the value and what was
// expected, so a caller can show it to a user as is.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace slowpipe::compression {

class CodecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A message to encode holds NaN or +-Inf. index = position of the first such value (row-major).
class NonFiniteError : public CodecError {
 public:
  NonFiniteError(int64_t index, float value)
      : CodecError("non-finite value " + std::to_string(value) + " at element " +
                   std::to_string(index)),
        index_(index) {}
  int64_t index() const { return index_; }

 private:
  int64_t index_;
};

// Throws CodecError(what) when `ok` is false. A macro so that the message, which usually
// concatenates strings, is only built on failure: validation runs on the decode hot path.
#define SP_REQUIRE(ok, what)                                    \
  do {                                                          \
    if (!(ok)) throw ::slowpipe::compression::CodecError(what); \
  } while (0)

}  // namespace slowpipe::compression
