#!/usr/bin/env bash
# slowpipe on a CUDA machine, against that machine's CUDA libtorch (Debian's libtorch is CPU-only).
# The CUDA machine has nvcc, CMake, ninja and PyTorch but no package registry, so the libraries
# slowpipe needs travel as Debian packages fetched here and unpacked there into a private folder.
#
#   tools/gpu-build.sh fetch           here (Debian 12, as root): the .deb files of ZeroMQ, libsodium,
#                                      cppzmq, nlohmann-json, CLI11, GoogleTest and the fortunes
#                                      corpus (and what libzmq loads) into .gpu-deps/debs
#   tools/gpu-build.sh build [DIR]     there: dpkg -x each into .gpu-deps/root (never into /), then
#                                      configure DIR (default build-gpu) with -DSLOWPIPE_CUDA=ON against
#                                      the libtorch of `python3 -c 'import torch;
#                                      print(torch.utils.cmake_prefix_path)'` and build it; writes
#                                      DIR/env.sh (LD_LIBRARY_PATH for the unpacked libraries)
#
# Environment: TORCH_PREFIX (a libtorch CMake prefix instead of python3's), CUDA_ARCHS (default 90),
# NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc), CXX_STD (default 17, or 20 for
# PyTorch >= 2.12). .gpu-deps and build-gpu are git-ignored; the device tool carries the packages
# (`carry: [".gpu-deps/debs"]`).
set -euo pipefail
cd "$(dirname "$0")/.."
deps=.gpu-deps
packages=(
  libzmq3-dev libzmq5 libsodium-dev libsodium23 libpgm-5.3-0 libnorm1 libbsd0 libmd0
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2
  cppzmq-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
  fortunes fortunes-min
)

case "${1:-}" in
  fetch)
    mkdir -p "$deps/debs"
    (cd "$deps/debs" && apt-get download "${packages[@]}")
    echo "gpu-build.sh: $(ls "$deps/debs" | wc -l) packages in $deps/debs ($(du -sh "$deps/debs" | cut -f1))"
    ;;
  build)
    out=${2:-build-gpu}
    ls "$deps"/debs/*.deb > /dev/null 2>&1 || { echo "gpu-build.sh: no $deps/debs/*.deb; run 'tools/gpu-build.sh fetch' on a Debian machine first" >&2; exit 2; }
    root="$PWD/$deps/root"
    rm -rf "$root" && mkdir -p "$root"
    for f in "$deps"/debs/*.deb; do dpkg -x "$f" "$root"; done
    lib="$root/usr/lib/x86_64-linux-gnu"
    # Unversioned .so links of the -dev packages point at absolute /usr/lib paths: repoint them.
    for l in "$lib"/*.so; do
      [ -L "$l" ] && ln -sf "$(basename "$(readlink "$l")")" "$l"
    done
    torch_prefix=${TORCH_PREFIX:-$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)}
    [ -n "$torch_prefix" ] || { echo "gpu-build.sh: python3 has no torch here; set TORCH_PREFIX to a libtorch CMake prefix" >&2; exit 2; }
    nvcc_bin=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
    # ATen requires C++20 from PyTorch 2.12 on; 17 before (CXX_STD overrides).
    cxx_std=${CXX_STD:-$(python3 -c 'import torch; v = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]); print(20 if v >= (2, 12) else 17)' 2>/dev/null || echo 17)}
    # No pkg-config lookups: libzmq's and libsodium's .pc files name /usr; CMake finds the unpacked
    # headers and libraries on the prefix path instead (CMakeLists.txt, slowpipe_pkg).
    cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLOWPIPE_CUDA=ON -DCMAKE_CXX_STANDARD="$cxx_std" \
      -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" \
      -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DCMAKE_PREFIX_PATH="$torch_prefix;$root/usr" \
      -DCMAKE_FIND_PACKAGE_PREFER_CONFIG=ON
    cmake --build "$out"
    cat > "$out/env.sh" << EOF
# source this before running $out/slowpipe: the unpacked libraries. The fortunes corpus is at
# $root/usr/share/games/fortunes (--set data.source=...).
export LD_LIBRARY_PATH="$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
EOF
    echo "gpu-build.sh: built $out against libtorch at $torch_prefix; source $out/env.sh before running it"
    ;;
  *)
    echo "usage: tools/gpu-build.sh fetch | build [DIR]  (see the comment at its top)" >&2
    exit 2
    ;;
esac
