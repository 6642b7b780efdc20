#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine (as root): install, build, run.
# Today it runs the codec benchmark and writes results/quickstart/bench_codecs.json; it becomes the
# quickstart sweep with its plots once the training runtime lands (see README "Status").
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --build-dir build
mkdir -p results/quickstart
./build/slowpipe bench codecs
./build/slowpipe bench codecs --json > results/quickstart/bench_codecs.json.tmp
mv results/quickstart/bench_codecs.json.tmp results/quickstart/bench_codecs.json
echo "quickstart: wrote results/quickstart/bench_codecs.json"
