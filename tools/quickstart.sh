#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine (as root): install, build, then the quickstart sweep
# (pretraining a small base model first) and its plots, into results/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --build-dir build
./build/slowpipe sweep experiments/quickstart.json --out results/quickstart
./build/slowpipe plot results/quickstart
echo "quickstart: results/quickstart/summary.csv and results/quickstart/figures/"
