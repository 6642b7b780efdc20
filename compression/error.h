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

// Throws CodecError(what) when `ok` is false. Keeps validation code one line per check.
inline void require(bool ok, const std::string& what) {
  if (!ok) throw CodecError(what);
}

}  // namespace slowpipe::compression
