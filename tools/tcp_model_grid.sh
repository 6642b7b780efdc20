#!/usr/bin/env bash
# The tcp link model against the kernel's TCP through the delay line, per message, on a grid fixed
# before looking (issue 25; results/README.md section 16): one-way delay {1, 10, 50, 125} ms (RTT 2,
# 20, 100, 250) x rate {100 Mbps, 1 Gbps} x congestion control {reno, cubic}, MTU 1500, no loss;
# per connection the messages 64 KiB, 1 MiB, 16 MiB, each after an idle of 0, 1 RTT and 5 RTO
# (RTO = RTT + 200 ms), in that order. Writes OUT/<rate>_<delay>_<cc>.json and OUT/summary.json.
#
#   sudo tools/tcp_model_grid.sh [OUT]     (default results/wan/tcp_model_grid; needs build/slowpipe)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/wan/tcp_model_grid}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
mkdir -p "$OUT"
for rate in 100Mbps 1Gbps; do
  for delay in 1 10 50 125; do
    rtt=$(/usr/bin/python3 -c "print(2 * $delay / 1000)")
    rto=$(/usr/bin/python3 -c "print(5 * (2 * $delay / 1000 + 0.2))")
    args=()
    for bytes in 65536 1048576 16777216; do
      for idle in 0 "$rtt" "$rto"; do args+=(--bytes "$bytes" --idle "$idle"); done
    done
    for cc in reno cubic; do
      "$BIN" emulator tcp-messages --rate "$rate" --delay "${delay}ms" --mtu 1500 --cc "$cc" "${args[@]}" > "$OUT/${rate}_${delay}ms_${cc}.json"
      echo "$rate ${delay}ms $cc"
    done
  done
done
/usr/bin/python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
rows = []
for f in sorted(glob.glob(out + "/*ms_*.json")):
    d = json.load(open(f))
    for m in d["messages"]:
        rows.append({"case": os.path.basename(f)[:-5], **m})
errs = [abs(r["error"]) for r in rows]
summary = {"messages": len(rows), "median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
           "within_10pct": sum(e <= 0.10 for e in errs), "within_25pct": sum(e <= 0.25 for e in errs),
           "worst": sorted(rows, key=lambda r: -abs(r["error"]))[:8]}
json.dump(summary, open(out + "/summary.json", "w"), indent=2)
print(f"{len(rows)} messages: median |error| {100 * summary['median_abs_error']:.1f}%, max {100 * summary['max_abs_error']:.1f}%, "
      f"{summary['within_10pct']} within 10%, {summary['within_25pct']} within 25%")
for r in summary["worst"]:
    print(f"  {r['case']} {r['bytes']} B after {r['idle_s']:.3g} s: measured {r['measured_s']:.4f} s, model {r['model_s']:.4f} s ({100 * r['error']:+.1f}%)")
PY
