#!/usr/bin/env bash
# Installs, builds and runs every test: the Release suite through ctest, then the compression and
# emulator tests again under AddressSanitizer + UndefinedBehaviorSanitizer (no libtorch, so fast).
#   tools/test.sh [--no-sanitize]
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=1
[ "${1:-}" = "--no-sanitize" ] && sanitize=0

# What only the tests need: Debian's chromium renders `slowpipe report`'s page headless;
# libns3-dev builds the simulator's ns-3 tier (-DSLOWPIPE_NS3=ON), tested here.
# nodejs (and its npm): the GPT-2 BPE reference (gpt-3-encoder from the npm registry); a nodejs that
# bundles npm (nodesource) conflicts with Debian's npm package, so npm is installed only if missing.
# clang-format: the tree is formatted by its .clang-format, checked first (a diff fails the run).
need=(chromium libns3-dev nodejs clang-format)
command -v npm > /dev/null || need+=(npm)
for pkg in "${need[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    [ "$(id -u)" -eq 0 ] || { echo "test.sh: the tests need $pkg; run as root (or: sudo apt-get install $pkg)" >&2; exit 1; }
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" > /dev/null
  fi
done
if ! git ls-files '*.cc' '*.h' '*.cu' '*.cuh' '*.c' '*.inc' | xargs clang-format --dry-run --Werror; then
  echo "test.sh: the files above are not formatted; run: git ls-files '*.cc' '*.h' '*.cu' '*.cuh' '*.c' '*.inc' | xargs clang-format -i" >&2
  exit 1
fi
tools/setup.sh --build-dir build --cmake-arg -DSLOWPIPE_NS3=ON
# A test that fails is run once more (--repeat until-pass:2): the timing tests measure a shared
# 2-core VM whose hiccups (steal, a late wake-up) fail one run in many; a real fault fails both.
ctest --test-dir build --output-on-failure -j2 --timeout 900 --repeat until-pass:2

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
# `slowpipe codec new`: each skeleton as generated builds against the installed package (out of
# tree) and passes the conformance check; the TorchScript one with error feedback per key too.
rm -rf build/codec-new
for lang in c cpp; do
  build/sdk/bin/slowpipe codec new "new_$lang" --lang "$lang" --dir build/codec-new > /dev/null
  cmake -S "build/codec-new/new_$lang" -B "build/codec-new/new_$lang/build" -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/sdk" > /dev/null
  cmake --build "build/codec-new/new_$lang/build" > /dev/null
  build/sdk/bin/slowpipe codec check --quick "plugin:path=$PWD/build/codec-new/new_$lang/build/libnew_$lang.so,bits=8"
done
# As a user follows it: `codec new` from the build folder (no install) and from the installed
# prefix, then exactly the commands it printed, nothing else.
for cli in build/slowpipe build/sdk/bin/slowpipe; do
  tag=$(basename "$(dirname "$cli")")
  "$cli" codec new "printed_$tag" --lang c --dir build/codec-new | sed -n '/^next:/,$p' | grep '^  ' > "build/codec-new/printed_$tag.sh"
  bash -e "build/codec-new/printed_$tag.sh" > /dev/null
done
build/sdk/bin/slowpipe codec new new_ts --lang torchscript --dir build/codec-new > /dev/null
/usr/bin/python3 build/codec-new/new_ts/new_ts.py build/codec-new/new_ts.pt > /dev/null
build/sdk/bin/slowpipe codec check --quick "torchscript:path=$PWD/build/codec-new/new_ts.pt,bits=8" \
  "torchscript:path=$PWD/build/codec-new/new_ts.pt,bits=4,ef=1"
# The installed package without the source tree: `slowpipe plot` runs the plot.py installed beside
# the binary (a copy of the package elsewhere, on a copy of a committed sweep folder).
rm -rf build/sdk-moved build/plot-check
cp -r build/sdk build/sdk-moved
mkdir -p build/plot-check && cp -r results/quickstart/summary.json results/quickstart/sweep.json results/quickstart/runs build/plot-check/
build/sdk-moved/bin/slowpipe plot build/plot-check > /dev/null
ls build/plot-check/figures/*.png > /dev/null
build/sdk-moved/bin/slowpipe report build/plot-check > /dev/null  # and its report.py
grep -q 'class="point"' build/plot-check/report.html
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
    ctest --test-dir build-asan --output-on-failure -j2 --timeout 900 --repeat until-pass:2
fi
