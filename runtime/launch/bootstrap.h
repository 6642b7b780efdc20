// Bootstraps: how a worker learns who it is and whom to meet. The local launcher forks every worker
// itself (runtime/launch/launcher.h); on a cluster an existing launcher starts them (mpirun, srun,
// torchrun-style scripts) and each finds its rank and world size in the environment, then meets the
// others at a rendezvous (runtime/launch/rendezvous.h). Torch-free.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>

namespace slowpipe::runtime {

// What an external launcher told this process.
struct BootstrapEnv {
  std::string source;  // openmpi | pmix | pmi | slurm | torchrun
  int rank = -1, size = 0;
  std::string masterAddr;  // torchrun-style MASTER_ADDR / MASTER_PORT (empty / 0: not given)
  int masterPort = 0;
};

// Reads one environment variable (nullptr: unset). Tests pass their own.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup processEnv();

// Rank and world size from the first launcher whose variables are set, in this order:
//   openmpi   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
//   pmix      PMIX_RANK, with the size from PMI_SIZE or SLURM_NTASKS (PMIx exports no size)
//   pmi       PMI_RANK, PMI_SIZE
//   slurm     SLURM_PROCID, SLURM_NTASKS
//   torchrun  RANK, WORLD_SIZE (and MASTER_ADDR, MASTER_PORT when set)
// std::nullopt when none is set. Throws std::invalid_argument naming the variable and its value
// when one is malformed (not an integer, rank outside [0, size), a rank without its size).
std::optional<BootstrapEnv> bootstrapFromEnv(const EnvLookup& env);

// "HOST:PORT" (IPv4 address or host name, port 1..65535). Throws naming `where` and the value.
std::pair<std::string, int> parseHostPort(const std::string& text, const std::string& where);

// The run's shared secret: the contents of SLOWPIPE_SECRET_FILE (trailing whitespace removed), or
// SLOWPIPE_SECRET. At least 16 bytes. Throws saying how to make one when neither is set, naming
// the file when it cannot be read or is too short.
std::string loadSecret(const EnvLookup& env);

}  // namespace slowpipe::runtime
