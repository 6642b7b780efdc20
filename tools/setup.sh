#!/usr/bin/env bash
# Installs everything slowpipe needs on Debian 12 (as root), then configures and builds Release.
# Idempotent: rerunning skips nothing harmful and rebuilds only what changed.
#   tools/setup.sh [--build-dir DIR] [--no-build] [--main-job] [--cmake-arg ARG]... [--target T]...
# --target: build only these targets (the quickstart: the CLI, slowpipe); default: everything.
# --main-job: only the packages the main job needs (build, CLI, figures, corpus) and no test
# suites (-DSLOWPIPE_TESTS=OFF); without it everything, tests included (-DSLOWPIPE_TESTS=ON).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
do_build=1
cmake_args=()
targets=()
main_job=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --cmake-arg) cmake_args+=("$2"); shift 2 ;;
    --target) targets+=(--target "$2"); shift 2 ;;
    --main-job) main_job=1; shift ;;
    *) echo "setup.sh: unknown argument '$1' (expected --build-dir DIR, --no-build, --main-job, --cmake-arg ARG, --target T)" >&2; exit 2 ;;
  esac
done

# libopenblas0-openmp: without it libtorch falls back to the reference BLAS (20x slower here).
# libsodium-dev: CURVE keys derived from a run's shared secret (runtime/launch/security.h); openmpi-bin:
# mpirun, which the multi-host tests launch workers with; slurmctld, slurmd, slurm-client, munge: a
# one-node Slurm the multi-host test starts itself to run srun (no daemon is started by installing).
# python3-torch: writes TorchScript codecs (examples/codecs/torchscript, the torchscript codec tests).
# python3-jsonschema: validates the shipped specs against `slowpipe spec schema` (spec_schema_test).
# libsentencepiece-dev, sentencepiece: tokenizer.model files and spm_encode, their check.
# fortunes, wordnet-base: the default corpus and the quality benchmark's pretraining text (glosses).
# libhwy-dev: Google Highway, the kernels `slowpipe bench kernels` compares with the hand-written ones.
# The main job (the quickstart sweep, its figures and report) needs the first list only.
packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libopenblas0-openmp
  libzmq3-dev libsodium-dev cppzmq-dev nlohmann-json3-dev libcli11-dev libsentencepiece-dev
  libhwy-dev
  python3 python3-matplotlib fortunes
)
if [ "$main_job" = 0 ]; then
  packages+=(
    libgtest-dev libgmock-dev libbenchmark-dev
    openmpi-bin slurmctld slurmd slurm-client munge sentencepiece
    iproute2 ethtool iperf3 procps
    python3-torch python3-jsonschema wordnet-base
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: missing packages: ${missing[*]}; run as root (or: sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Check what the build will look for, and name the piece that is missing.
check() { [ -e "$2" ] || { echo "setup.sh: $1 not found at $2 (package $3)" >&2; exit 1; }; }
check "libtorch CMake config" /usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake libtorch-dev
check "cppzmq header" /usr/include/zmq.hpp cppzmq-dev
check "nlohmann/json" /usr/include/nlohmann/json.hpp nlohmann-json3-dev
check "CLI11" /usr/include/CLI/CLI.hpp libcli11-dev
[ "$main_job" = 1 ] || check "GoogleTest" /usr/include/gtest/gtest.h libgtest-dev
# libtorch must run on the OpenMP build of OpenBLAS. A fresh machine also gets the pthread build
# (through libopenblas-dev), and the alternatives system may pick it: torch's OpenMP threads and
# OpenBLAS's pthreads then oversubscribe the cores (we measured pretraining 5x slower). Pin it.
arch_lib=/usr/lib/x86_64-linux-gnu
for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
  target=$arch_lib/openblas-openmp/$lib
  [ -e "$target" ] || { echo "setup.sh: $target missing (package libopenblas0-openmp)" >&2; exit 1; }
  current=$(readlink -f "$arch_lib/$lib" || true)
  if [ "$current" != "$(readlink -f "$target")" ]; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "setup.sh: $lib points to $current, not the OpenMP OpenBLAS; as root run: update-alternatives --set $lib-x86_64-linux-gnu $target" >&2
      exit 1
    fi
    update-alternatives --set "$lib-x86_64-linux-gnu" "$target" >/dev/null
    echo "setup.sh: $lib now uses the OpenMP build of OpenBLAS (was $current)"
  fi
done

[ "$do_build" = 1 ] || exit 0
tests=ON
[ "$main_job" = 1 ] && tests=OFF
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLOWPIPE_TESTS=$tests "${cmake_args[@]}"
cmake --build "$build_dir" -j"$(nproc)" "${targets[@]}"
echo "setup.sh: built $build_dir"
