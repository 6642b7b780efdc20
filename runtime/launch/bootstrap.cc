// Bootstraps from the environment (see bootstrap.h).
#include "runtime/launch/bootstrap.h"

#include "compression/strict_int.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace slowpipe::runtime {

namespace {

int64_t integerVar(const EnvLookup& env, const char* name, int64_t lo, int64_t hi) {
  const char* v = env(name);
  return compression::parseStrictIntIn<std::invalid_argument>(std::string("environment: ") + name,
                                                              v ? v : "", lo, hi);
}

}  // namespace

EnvLookup processEnv() {
  return [](const char* name) { return std::getenv(name); };
}

std::optional<BootstrapEnv> bootstrapFromEnv(const EnvLookup& env) {
  struct Source {
    const char* name;
    const char* rankVar;
    std::vector<const char*> sizeVars;  // the first one set
  };
  static const std::vector<Source> kSources = {
      {"openmpi", "OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE"}},
      {"pmix", "PMIX_RANK", {"PMI_SIZE", "SLURM_NTASKS"}},
      {"pmi", "PMI_RANK", {"PMI_SIZE"}},
      {"slurm", "SLURM_PROCID", {"SLURM_NTASKS"}},
      {"torchrun", "RANK", {"WORLD_SIZE"}},
  };
  constexpr int64_t kMaxRanks = 1 << 20;
  for (const Source& s : kSources) {
    if (!env(s.rankVar)) continue;
    const char* sizeVar = nullptr;
    for (const char* v : s.sizeVars)
      if (env(v)) {
        sizeVar = v;
        break;
      }
    if (!sizeVar) {
      std::string names;
      for (const char* v : s.sizeVars) names += (names.empty() ? "" : " or ") + std::string(v);
      throw std::invalid_argument(std::string("environment: ") + s.rankVar + " is set (" + s.name +
                                  ") but not " + names + " (the world size)");
    }
    BootstrapEnv b;
    b.source = s.name;
    b.size = static_cast<int>(integerVar(env, sizeVar, 1, kMaxRanks));
    b.rank = static_cast<int>(integerVar(env, s.rankVar, 0, kMaxRanks));
    if (b.rank >= b.size)
      throw std::invalid_argument(std::string("environment: ") + s.rankVar + "=" +
                                  std::to_string(b.rank) + " is not below " + sizeVar + "=" +
                                  std::to_string(b.size));
    if (env("MASTER_ADDR")) b.masterAddr = env("MASTER_ADDR");
    if (env("MASTER_PORT"))
      b.masterPort = static_cast<int>(integerVar(env, "MASTER_PORT", 1, 65535));
    return b;
  }
  return std::nullopt;
}

std::pair<std::string, int> parseHostPort(const std::string& text, const std::string& where) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw std::invalid_argument(where + ": '" + text + "' is not HOST:PORT");
  const std::string host = text.substr(0, colon), port = text.substr(colon + 1);
  size_t used = 0;
  long p = 0;
  try {
    p = std::stol(port, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != port.size() || p < 1 || p > 65535)
    throw std::invalid_argument(where + ": port '" + port + "' of '" + text +
                                "' is not a port number 1..65535");
  for (char c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'))
      throw std::invalid_argument(where + ": host '" + host + "' of '" + text +
                                  "' is not a host name or IPv4 address");
  return {host, static_cast<int>(p)};
}

namespace {

// The secret file's bytes: a regular file only (a FIFO would block for ever, a directory is no
// secret), at most 64 KiB, opened without blocking; a file others may read draws a warning (ssh
// refuses such keys).
std::string readSecretFile(const std::string& path, const std::string& from) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw std::invalid_argument(from + " cannot be opened: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode), fifo = S_ISFIFO(st.st_mode);
    ::close(fd);
    throw std::invalid_argument(from + " is " +
                                (dir    ? "a directory"
                                 : fifo ? "a FIFO"
                                        : "not a regular file") +
                                "; expected a regular file holding the secret");
  }
  if (st.st_size > (64 << 10)) {
    ::close(fd);
    throw std::invalid_argument(from + " holds " + std::to_string(st.st_size) +
                                " bytes; a secret file holds at most 64 KiB");
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    std::fprintf(stderr,
                 "slowpipe: warning: %s is accessible to others (mode %03o): anyone who can read "
                 "it can join "
                 "or disturb the run; chmod 600 it\n",
                 from.c_str(), static_cast<unsigned>(st.st_mode & 0777));
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace

std::string loadSecret(const EnvLookup& env) {
  constexpr size_t kMinBytes = 16;
  std::string secret, from;
  if (const char* path = env("SLOWPIPE_SECRET_FILE")) {
    from = std::string("SLOWPIPE_SECRET_FILE '") + path + "'";
    secret = readSecretFile(path, from);
    while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back())))
      secret.pop_back();
  } else if (const char* v = env("SLOWPIPE_SECRET")) {
    from = "SLOWPIPE_SECRET";
    secret = v;
  } else {
    throw std::invalid_argument(
        "a multi-process run started by an external launcher needs a shared secret: set "
        "SLOWPIPE_SECRET_FILE to a file "
        "every rank can read (e.g. `head -c 32 /dev/urandom | base64 > secret; chmod 600 secret`)");
  }
  if (secret.size() < kMinBytes)
    throw std::invalid_argument(from + " holds " + std::to_string(secret.size()) +
                                " bytes; a secret needs at least " + std::to_string(kMinBytes));
  return secret;
}

}  // namespace slowpipe::runtime
