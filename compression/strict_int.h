// The one strict integer parser: every integer that comes from a user (codec parameters, DP
// compressor parameters, bootstrap environment variables) goes through it, so "4x", " 4", "" and
// out-of-range values are refused the same way everywhere.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

namespace slowpipe::compression {

// The whole of `text` as a base-10 int64 (optional leading '-' or '+', digits only, no spaces);
// nullopt when it is not exactly that or does not fit in int64.
inline std::optional<int64_t> parseStrictInt(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const size_t digitsFrom = (text[0] == '-' || text[0] == '+') ? 1 : 0;
  if (digitsFrom == text.size()) return std::nullopt;
  for (size_t i = digitsFrom; i < text.size(); ++i)
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE || end != text.c_str() + text.size()) return std::nullopt;
  return static_cast<int64_t>(n);
}

// "WHERE='TEXT' is not an integer" / "WHERE=TEXT is out of range; expected LO..HI", thrown as E.
template <typename E>
int64_t parseStrictIntIn(const std::string& where, const std::string& text, int64_t lo,
                         int64_t hi) {
  const std::optional<int64_t> n = parseStrictInt(text);
  if (!n) throw E(where + "='" + text + "' is not an integer");
  if (*n < lo || *n > hi)
    throw E(where + "=" + text + " is out of range; expected " + std::to_string(lo) + ".." +
            std::to_string(hi));
  return *n;
}

}  // namespace slowpipe::compression
