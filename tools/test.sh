#!/usr/bin/env bash
# Installs, builds and runs every test: the Release suite through ctest, then the compression and
# emulator tests again under AddressSanitizer + UndefinedBehaviorSanitizer (no libtorch, so fast).
#   tools/test.sh [--no-sanitize]
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=1
[ "${1:-}" = "--no-sanitize" ] && sanitize=0

tools/setup.sh --build-dir build
ctest --test-dir build --output-on-failure -j2 --timeout 900

# The codec SDK as a user meets it: install, build the out-of-tree example plug-in against the
# installed package, and pass the conformance check with the installed CLI (the C++ plug-in and
# the TorchScript codec).
rm -rf build/sdk build/example-rowquant
cmake --install build --prefix "$PWD/build/sdk" > /dev/null
cmake -S examples/codecs/cpp -B build/example-rowquant -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/sdk" > /dev/null
cmake --build build/example-rowquant
build/sdk/bin/slowpipe codec check --quick "plugin:path=$PWD/build/example-rowquant/librowquant.so,bits=4"
# The TorchScript example: written by its Python script, checked by the installed CLI.
/usr/bin/python3 examples/codecs/torchscript/make_codec.py build/example-rowint8.pt  # Debian's, with python3-torch
build/sdk/bin/slowpipe codec check --quick "torchscript:path=$PWD/build/example-rowint8.pt,bits=6"
# The installed package without the source tree: `slowpipe plot` runs the plot.py installed beside
# the binary (a copy of the package elsewhere, on a copy of a committed sweep folder).
rm -rf build/sdk-moved build/plot-check
cp -r build/sdk build/sdk-moved
mkdir -p build/plot-check && cp -r results/quickstart/summary.json results/quickstart/sweep.json results/quickstart/runs build/plot-check/
build/sdk-moved/bin/slowpipe plot build/plot-check > /dev/null
ls build/plot-check/figures/*.png > /dev/null
# ... and in a real run, as a user sets it: every worker loads the module.
rm -rf build/example-rowint8-run
build/sdk/bin/slowpipe run experiments/smoke.json --out build/example-rowint8-run \
  --set "compression.forward=torchscript:path=$PWD/build/example-rowint8.pt,bits=6" > /dev/null
grep -q '"status": "ok"' build/example-rowint8-run/result.json

# The CUDA build (-DSLOWPIPE_CUDA=ON): compiled wherever nvcc is (these machines have it, no GPU);
# its GPU tests run on a device and skip, saying so, without one.
nvcc_bin=$(command -v nvcc || true)
[ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc_bin=/usr/local/cuda/bin/nvcc
if [ -n "$nvcc_bin" ]; then
  cmake -S . -B build-cuda -G Ninja -DSLOWPIPE_CUDA=ON -DSLOWPIPE_WITH_TORCH=OFF -DCMAKE_CUDA_COMPILER="$nvcc_bin" > /dev/null
  cmake --build build-cuda --target compression_cuda_test bench_device_codecs
  build-cuda/tests/compression_cuda_test
  # The device checks' script and build script parse (they run where a GPU is: tools/gpu_device_check.sh).
  bash -n tools/gpu_device_check.sh && bash -n tools/gpu-build.sh
else
  echo "test.sh: no nvcc here: the CUDA build (-DSLOWPIPE_CUDA=ON) was not compiled"
fi

if [ "$sanitize" = 1 ]; then
  tools/setup.sh --build-dir build-asan --cmake-arg -DSLOWPIPE_SANITIZE=ON \
    --cmake-arg -DSLOWPIPE_WITH_TORCH=OFF --cmake-arg -DCMAKE_BUILD_TYPE=Debug
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j2 --timeout 900
fi
