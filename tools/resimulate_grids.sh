#!/usr/bin/env bash
# Re-simulates every committed validation grid with its committed profile and compares each step's
# simulated time with the committed simulated result: what a simulator change moved, grid by grid.
#
#   tools/resimulate_grids.sh [OUT]     (default /tmp/slowpipe-resim; needs build/slowpipe)
# Prints per grid: steps compared and the largest relative difference of a step's time_s.
# Known difference: the grids' AC-SGD points were simulated before 355e60f, which bills a replay's
# epoch-0 steps as the run has them (first sightings in full); they differ by up to 5.7x until the
# grids are re-simulated and their studies redone. Every other point re-simulates to 0.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/slowpipe-resim}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
for prof in results/simulator*/profile_*.json; do
  dir=$(dirname "$prof")
  grid=$(basename "$prof" .json)
  grid=${grid#profile_}
  rm -rf "$OUT/$grid"
  # As many steps as the committed replay has (the simulator replays the whole run by default now).
  steps=$(/usr/bin/python3 -c 'import glob, json, sys; print(len(json.load(open(sorted(glob.glob(sys.argv[1] + "/runs/*.json"))[0]))["steps"]))' "$dir/simulated_$grid")
  "$BIN" sweep "experiments/$grid.json" --simulate --profile "$prof" --out "$OUT/$grid" --quiet --sim-steps "$steps" > /dev/null
  /usr/bin/python3 - "$dir/simulated_$grid" "$OUT/$grid" <<'PY'
import glob, json, os, sys
committed, fresh = sys.argv[1], sys.argv[2]
steps, worst = 0, 0.0
for f in sorted(glob.glob(committed + "/runs/*.json")):
    a = json.load(open(f))["steps"]
    b = json.load(open(os.path.join(fresh, "runs", os.path.basename(f))))["steps"]
    if len(a) != len(b):
        sys.exit(f"{f}: {len(a)} committed steps, {len(b)} re-simulated")
    for x, y in zip(a, b):
        steps += 1
        worst = max(worst, abs(x["time_s"] - y["time_s"]) / x["time_s"])
print(f"{os.path.basename(fresh)}: {steps} steps, max relative difference {worst:.3g}")
PY
done
