#!/usr/bin/env bash
# A straggler, emulated and simulated (issue 26; results/README.md section 19): 4 stages (1F1B,
# 100 Mbps / 5 ms links, 16 steps) with and without stage 1 at half speed from step 8 on
# (runtime.slowdown; the other point lists speed 1 from step 8, so both replay every step in the
# simulator), fp32 / DirectQ fw2/bw4 / AC-SGD fw2/bw4 (experiments/straggler.json),
# 3 repeats emulated on the user backend, then simulated with a profile measured here from a real
# run of the same spec (--host-from-run). Compares the mean step time of steps 1-7 and 9-15 of
# every point, emulated (median over repeats) against simulated, and each codec's speed-up over
# fp32 before and after the straggler; writes OUT/straggler.json.
#
#   tools/straggler.sh [OUT]     (default results/straggler; needs build/slowpipe; about 10 minutes)
#   PARTS="emulated sim" (the default) chooses what is run again (PARTS=none: only the comparison).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/straggler}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
PARTS=${PARTS:-emulated sim}
mkdir -p "$OUT"
if [[ " $PARTS " == *" emulated "* ]]; then
  rm -rf "$OUT/emulated"
  "$BIN" sweep experiments/straggler.json --out "$OUT/emulated" --quiet
fi
if [[ " $PARTS " == *" sim "* ]]; then
  "$BIN" profile experiments/straggler.json --host-from-run --out "$OUT/profile.json" > /dev/null
  rm -rf "$OUT/simulated"
  "$BIN" sweep experiments/straggler.json --simulate --profile "$OUT/profile.json" --out "$OUT/simulated" --quiet
fi
/usr/bin/python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
summary = json.load(open(f"{out}/emulated/summary.json"))
def phases(kind, point):
    docs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{kind}/runs/{point}.r*.json"))]
    if not docs:
        raise SystemExit(f"no runs for {kind} {point}")
    def mean(d, lo, hi):
        return statistics.mean(s["time_s"] for s in d["steps"][lo:hi])
    before = statistics.median(mean(d, 1, 8) for d in docs)
    after = statistics.median(mean(d, 9, 16) for d in docs)
    speed = statistics.median(d.get("slowdown", {}).get("1", {}).get("effective_speed", 1.0) for d in docs)
    return before, after, speed
rows, errs = [], []
for r in summary["rows"]:
    p = r["point"]
    eb, ea, es = phases("emulated", p)
    sb, sa, ss = phases("simulated", p)
    row = {"point": p, "label": r["label"], "straggler": r["axes"][0] if "axes" in r else p.split("_")[0],
           "emulated_s": [eb, ea], "simulated_s": [sb, sa], "error": [sb / eb - 1, sa / ea - 1],
           "rank1_effective_speed": {"emulated": es, "simulated": ss}}
    errs += [abs(x) for x in row["error"]]
    rows.append(row)
for r in rows:
    fp = next(x for x in rows if x["straggler"] == r["straggler"] and x["label"] == "fp32")
    r["speedup_over_fp32"] = {kind: [fp[kind][i] / r[kind][i] for i in (0, 1)] for kind in ("emulated_s", "simulated_s")}
    print(f"{r['straggler']:>36} {r['label']:>16}: steps 1-7 {r['emulated_s'][0]:.3f} s (sim {100 * r['error'][0]:+.1f}%), "
          f"steps 9-15 {r['emulated_s'][1]:.3f} s (sim {100 * r['error'][1]:+.1f}%); speed-up over fp32 "
          f"{r['speedup_over_fp32']['emulated_s'][0]:.2f}x -> {r['speedup_over_fp32']['emulated_s'][1]:.2f}x "
          f"(sim {r['speedup_over_fp32']['simulated_s'][0]:.2f}x -> {r['speedup_over_fp32']['simulated_s'][1]:.2f}x); "
          f"rank 1 effective speed {r['rank1_effective_speed']['emulated']:.3f} (sim {r['rank1_effective_speed']['simulated']:.3f})")
s = {"phases": 2 * len(rows), "median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
     "within_10pct": sum(x <= 0.10 for x in errs)}
print(f"simulated against emulated: {s['phases']} phase means, median |error| {100 * s['median_abs_error']:.1f}%, "
      f"max {100 * s['max_abs_error']:.1f}%, {s['within_10pct']} within 10%")
json.dump({"summary": s, "rows": rows}, open(f"{out}/straggler.json", "w"), indent=1)
PY
