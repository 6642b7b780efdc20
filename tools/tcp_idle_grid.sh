#!/usr/bin/env bash
# The tcp link model against the kernel's TCP through the delay line after idle gaps between one
# and two RTOs, where the kernel's window after restart has two outcomes (issue 43): a message
# after such a gap took 0.50-0.56 s in one run and 0.61 s in another on the same path.
#
# Fixed before measuring: 75 Mbps, one-way delay {25, 50, 100} ms (RTT 50, 100, 200 ms) x
# congestion control {cubic, reno, bbr} x idle gap {1.25, 1.75} x RTO (RTO = RTT + 200 ms, Linux's
# minimum added to the path's RTT); per connection a 4 MiB message after 0 s, then three more
# 4 MiB messages each after the gap; every case RUNS times (default 10), round k of every case
# before round k+1 (drift spreads over the cases). Writes
# OUT/<delay>ms_<cc>_gap<f>_run<k>.json (OUT: results/wan/idle_gap_validation), then the summary
# (tools/tcp_idle_summary.py: each case's kernel min / median / max per message beside the
# model's figure, OUT.json and OUT_printout.txt).
#
#   sudo [RUNS=10] tools/tcp_idle_grid.sh [OUT]     (needs build/slowpipe)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/wan/idle_gap_validation}
RUNS=${RUNS:-10}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
mkdir -p "$OUT"
if [ "${SKIP_MEASURE:-0}" != 1 ]; then
for k in $(seq 1 "$RUNS"); do
  for delay in 25 50 100; do
    for cc in cubic reno bbr; do
      for f in 1.25 1.75; do
        gap=$(/usr/bin/python3 -c "print(round($f * (2 * $delay / 1000 + 0.2), 4))")
        file="$OUT/${delay}ms_${cc}_gap${f}_run${k}.json"
        [ "${MISSING_ONLY:-0}" = 1 ] && [ -s "$file" ] && continue
        "$BIN" emulator tcp-messages --rate 75Mbps --delay "${delay}ms" --cc "$cc" --seed "$k" \
          --bytes 4194304 --idle 0 --bytes 4194304 --idle "$gap" --bytes 4194304 --idle "$gap" \
          --bytes 4194304 --idle "$gap" > "$file.tmp"
        mv "$file.tmp" "$file"
        echo "run $k: ${delay}ms $cc gap ${f} RTO ($gap s)"
      done
    done
  done
done
fi
/usr/bin/python3 tools/tcp_idle_summary.py "$OUT"
