#!/usr/bin/env bash
# Toy scale over the consumer profile, emulated and simulated (issue 26; results/README.md section
# 20): 4 stages (1F1B, 16 steps) on experiments/networks/consumer_mixed.json with the tcp link
# model, fp32 / DirectQ fw2/bw4 / AC-SGD fw2/bw4, in rank order and in the placement `slowpipe
# place` finds with a profile measured here (--host-from-run). 3 repeats emulated on the user
# backend (access links shared through the workers' calendars), then simulated with that profile.
# Compares the mean step time of steps 1-15 of every point, emulated (median over repeats)
# against simulated, and each point's speed-up over fp32 and placement gain; writes
# OUT/networks_consumer.json.
#
#   tools/networks_consumer.sh [OUT]   (default results/networks/consumer; ~15 minutes)
#   PARTS="profile place emulated kernel sim" (default) chooses what is run again (PARTS=none: only the table);
#   kernel: the same sweep on backend tc (the node line: the kernel's TCP sharing the access links), root.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/networks/consumer}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
PARTS=${PARTS:-profile place emulated kernel sim}
mkdir -p "$OUT"
if [[ " $PARTS " == *" profile "* ]]; then
  "$BIN" profile experiments/networks_consumer.json --host-from-run --out "$OUT/profile.json" > /dev/null
fi
if [[ " $PARTS " == *" place "* ]]; then
  /usr/bin/python3 -c "import json; json.dump(json.load(open('experiments/networks_consumer.json'))['base'], open('$OUT/base.json', 'w'), indent=1)"
  "$BIN" place "$OUT/base.json" --profile "$OUT/profile.json" --out "$OUT/place.json"
  # The sweep: the placed axis value is place's best (fp32).
  /usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
sweep = json.load(open("experiments/networks_consumer.json"))
best = json.load(open(f"{out}/place.json"))["best"][0]["placement"]
for v in sweep["axes"][0]["values"]:
    if v["label"] == "placed":
        v["placement"] = best
json.dump(sweep, open(f"{out}/sweep.json", "w"), indent=1)
print("placed:", best)
PY
fi
if [[ " $PARTS " == *" emulated "* ]]; then
  rm -rf "$OUT/emulated"
  "$BIN" sweep "$OUT/sweep.json" --out "$OUT/emulated" --quiet
fi
if [[ " $PARTS " == *" kernel "* ]]; then  # the tier below: the kernel's TCP through the node line (root)
  rm -rf "$OUT/kernel"
  "$BIN" sweep "$OUT/sweep.json" --set 'network.backend="tc"' --set 'network.model="pipelined"' --out "$OUT/kernel" --quiet
fi
if [[ " $PARTS " == *" sim "* ]]; then
  rm -rf "$OUT/simulated"
  "$BIN" sweep "$OUT/sweep.json" --simulate --sim-steps all --profile "$OUT/profile.json" --out "$OUT/simulated" --quiet
fi
/usr/bin/python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
summary = json.load(open(f"{out}/emulated/summary.json"))
def mean_step(kind, point):
    docs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{kind}/runs/{point}.r*.json"))]
    if not docs:
        raise SystemExit(f"no runs for {kind} {point}")
    return statistics.median(statistics.mean(s["time_s"] for s in d["steps"][1:]) for d in docs)
kernel = os.path.isdir(f"{out}/kernel/runs")
rows = []
for r in summary["rows"]:
    p = r["point"]
    row = {"point": p, "placement": p.split("_compression-")[0], "codec": r["label"],
           "emulated_s": mean_step("emulated", p), "simulated_s": mean_step("simulated", p)}
    row["error"] = row["simulated_s"] / row["emulated_s"] - 1
    if kernel:
        row["kernel_s"] = mean_step("kernel", p)
        row["error_vs_kernel"] = {"user": row["emulated_s"] / row["kernel_s"] - 1, "sim": row["simulated_s"] / row["kernel_s"] - 1}
    rows.append(row)
kinds = ("emulated_s", "simulated_s") + (("kernel_s",) if kernel else ())
for r in rows:
    fp = next(x for x in rows if x["placement"] == r["placement"] and x["codec"] == "fp32")
    naive = next(x for x in rows if "rank-order" in x["placement"] and x["codec"] == r["codec"])
    r["speedup_over_fp32"] = {k: fp[k] / r[k] for k in kinds}
    r["placement_gain"] = {k: naive[k] / r[k] for k in kinds}
    k = (f"; kernel {r['kernel_s']:.3f} s (user {100 * r['error_vs_kernel']['user']:+.1f}%, sim {100 * r['error_vs_kernel']['sim']:+.1f}%)"
         if kernel else "")
    print(f"{r['placement']:>22} {r['codec']:>16}: emulated {r['emulated_s']:.3f} s, simulated {r['simulated_s']:.3f} s "
          f"({100 * r['error']:+.1f}%){k}; over fp32 {r['speedup_over_fp32']['emulated_s']:.2f}x (sim {r['speedup_over_fp32']['simulated_s']:.2f}x); "
          f"placement gain {r['placement_gain']['emulated_s']:.2f}x (sim {r['placement_gain']['simulated_s']:.2f}x)")
def stats(errs):
    return {"points": len(errs), "median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
            "within_10pct": sum(x <= 0.10 for x in errs)}
s = {"sim_vs_user": stats([abs(r["error"]) for r in rows])}
if kernel:
    s["user_vs_kernel"] = stats([abs(r["error_vs_kernel"]["user"]) for r in rows])
    s["sim_vs_kernel"] = stats([abs(r["error_vs_kernel"]["sim"]) for r in rows])
for k, v in s.items():
    print(f"{k}: {v['points']} points, median |error| {100 * v['median_abs_error']:.1f}%, max {100 * v['max_abs_error']:.1f}%, "
          f"{v['within_10pct']} within 10%")
json.dump({"summary": s, "rows": rows}, open(f"{out}/networks_consumer.json", "w"), indent=1)
PY
