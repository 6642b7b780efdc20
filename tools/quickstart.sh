#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine (as root): install, build, then the quickstart sweep
# (pretraining a small base model first; every point a real run, 3 interleaved repeats) and its
# figures and report, into out/quickstart/. out/ is ignored by git: the committed results/ change only when
# someone reruns the commands in results/README.md.
#   tools/quickstart.sh [--repeats N] [--spec SWEEP.json] [--out DIR] [--no-setup] [--dry-run]
# SLOWPIPE_BIN overrides the CLI binary (default ./build/slowpipe).
set -euo pipefail
cd "$(dirname "$0")/.."
spec=experiments/quickstart.json
out=out/quickstart
setup=1
dry=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) extra=(--repeats "$2"); shift 2 ;;
    --spec) spec=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-setup) setup=0; shift ;;
    --dry-run) dry=1; shift ;;
    *) echo "quickstart.sh: unknown argument '$1' (expected --repeats N, --spec F, --out DIR, --no-setup, --dry-run)" >&2; exit 2 ;;
  esac
done
bin=${SLOWPIPE_BIN:-./build/slowpipe}
run() { if [ "$dry" = 1 ]; then echo "$*"; else "$@"; fi; }
# The main job's packages and the CLI only (with the libraries it loads): the tests and what they
# need are installed and built by tools/test.sh.
[ "$setup" = 1 ] && run tools/setup.sh --build-dir build --main-job --target slowpipe
run "$bin" sweep "$spec" --out "$out" "${extra[@]}"
run "$bin" report "$out"  # draws the figures, then one page with them, the table, the claims
[ "$dry" = 1 ] || echo "quickstart: $out/summary.csv, $out/figures/ and the report: $out/report.html"
