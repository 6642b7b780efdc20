#!/usr/bin/env bash
# Simulator validation against emulation on this machine (results/README.md section 7).
#
#   tools/validate_sim.sh [OUT]        (default results/simulator; needs build/slowpipe)
#   GRIDS="sim_validation_dp" tools/validate_sim.sh results/simulator_dp   (one grid: data parallelism)
#   EMULATE=0 tools/validate_sim.sh    (keep the emulated sweeps in OUT: re-measure the profiles only,
#                                      REPEATS + 1 snapshots back to back, and compare again)
#
# This machine's compute speed drifts by up to +-20% over minutes, so the profile is measured the
# way the emulation is: spread over the same time. For each grid, repeat round k (every point once,
# resumable) alternates with a profile snapshot; the profile used is the per-field median of the
# snapshots (`slowpipe profile --merge`). Each snapshot fits host_speed to a real pipelined run of
# the grid's base spec (`--host-from-run`): how fast a stage computes while n stages do, as the
# workers of a pipeline feel it; one calibration run and fit per schedule the grid uses
# (host_speed_by_schedule: on 2 shared cores 1F1B's order computes faster than GPipe's). Then
# every point is simulated and tools/validate_sim.py compares the two (validation.json: the profile as measured). tools/validate_sim_cv.py then compares them
# again with the machine's CPU speed during the grid calibrated out, leave one point out
# (validation_cv.json: one factor on every CPU cost, chosen on the grid's other points).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/simulator}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
REPEATS=${REPEATS:-3}
mkdir -p "$OUT/profiles"
pairs=()
triples=()
for grid in ${GRIDS:-sim_validation sim_validation_4stages}; do
  spec=experiments/$grid.json
  snaps=()
  for ((k = 0; k <= REPEATS; k++)); do
    "$BIN" profile "$spec" --host-from-run --out "$OUT/profiles/$grid.s$k.json" > /dev/null
    snaps+=("$OUT/profiles/$grid.s$k.json")
    if [ "${EMULATE:-1}" = 1 ] && ((k < REPEATS)); then
      "$BIN" sweep "$spec" --out "$OUT/emulated_$grid" --repeats $((k + 1)) --quiet
    fi
  done
  "$BIN" profile --merge "${snaps[@]}" --out "$OUT/profile_$grid.json"
  rm -rf "$OUT/simulated_$grid"
  "$BIN" sweep "$spec" --simulate --profile "$OUT/profile_$grid.json" --out "$OUT/simulated_$grid" --quiet
  pairs+=("$OUT/emulated_$grid" "$OUT/simulated_$grid")
  triples+=("$spec" "$OUT/profile_$grid.json" "$OUT/emulated_$grid")
done
"$PY" tools/validate_sim.py "$OUT" "${pairs[@]}"
SLOWPIPE_BIN="$BIN" "$PY" tools/validate_sim_cv.py "$OUT" "${triples[@]}"
