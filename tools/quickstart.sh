#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine (as root): install, build, then the quickstart sweep
# (pretraining a small base model first) and its plots, into out/quickstart/ (ignored by git; the
# committed results/ change only when someone reruns the commands in results/README.md).
#   tools/quickstart.sh [--repeats N]   (default: the spec's repeats)
set -euo pipefail
cd "$(dirname "$0")/.."
extra=()
if [ "${1:-}" = "--repeats" ]; then extra=(--repeats "$2"); fi
tools/setup.sh --build-dir build
./build/slowpipe sweep experiments/quickstart.json --out out/quickstart "${extra[@]}"
./build/slowpipe plot out/quickstart
echo "quickstart: out/quickstart/summary.csv and out/quickstart/figures/"
