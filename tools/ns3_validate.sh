#!/usr/bin/env bash
# The flow-level tcp model against ns-3 where the kernel path cannot go (issue 26 part 6;
# results/README.md section 21): 8-stage 1F1B pipelines with R data-parallel replicas (ring
# allreduce of every step's gradients, fp32), 64-512 ranks, two ranks on every home of a consumer
# network (500/110 Mbit/s, 20 ms one way between homes; generated into OUT), so each home's
# uplink and downlink carry two ranks' pipeline and replica traffic. Simulated twice with the
# analytic A100 profile: network.model tcp (with the access calendars) and ns3 (ns-3's TCP over
# the homes' access links); every message's completion time (arrival - sent) compared by its key.
# Writes OUT/ns3_validation.json and prints per size the median and 90th percentile |error|.
#
#   tools/ns3_validate.sh [OUT]   (default results/networks/ns3; needs a build with -DSLOWPIPE_NS3=ON)
#   SIZES="8 16 32 64" replicas (ranks = 8 x R); STEPS=2; MODELS="tcp" re-simulates the tcp side only
#   (the ns-3 runs already in OUT are compared again: ns-3's replay is deterministic).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/networks/ns3}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
SIZES=${SIZES:-8 16 32 64}
STEPS=${STEPS:-2}
MODELS=${MODELS:-tcp ns3}
mkdir -p "$OUT"
for R in $SIZES; do
  homes=$((8 * R / 2))
  /usr/bin/python3 - "$OUT/homes_$homes.json" "$homes" <<'PY'
import json, sys
json.dump({"name": f"consumer_{sys.argv[2]}_homes",
           "source": "experiments/networks/consumer_500_110.json with more homes: a profile, not a measurement",
           "nodes": [{"name": "home", "count": int(sys.argv[2]), "up": "110Mbps", "down": "500Mbps"}],
           "core": {"default": {"latency": "20ms"}}}, open(sys.argv[1], "w"), indent=1)
PY
  for m in $MODELS; do
    /usr/bin/time -f "%e s wall, %M KB" "$BIN" simulate experiments/networks_ns3.json --profile analytic:A100 --steps "$STEPS" --messages \
      --set "pipeline.replicas=$R" --set "network.model=\"$m\"" --set "network.nodes=\"$OUT/homes_$homes.json\"" \
      --out "$OUT/r${R}_$m" 2>&1 | tail -2
    # The messages apart, compressed (a 512-rank run records 138 thousand).
    /usr/bin/python3 - "$OUT/r${R}_$m" <<'PY'
import gzip, json, sys
d = json.load(open(f"{sys.argv[1]}/result.json"))
with gzip.open(f"{sys.argv[1]}/messages.json.gz", "wt") as g:
    json.dump(d.pop("messages"), g, separators=(",", ":"))
d["messages_file"] = "messages.json.gz"
json.dump(d, open(f"{sys.argv[1]}/result.json", "w"), indent=1)
PY
  done
done
/usr/bin/python3 - "$OUT" $SIZES <<'PY'
import gzip, json, statistics, sys
out, sizes = sys.argv[1], sys.argv[2:]
rows = []
for R in sizes:
    docs = {m: json.load(open(f"{out}/r{R}_{m}/result.json")) for m in ("tcp", "ns3")}
    def times(m):
        return {tuple(x[:7]): (x[7], x[9] - x[8]) for x in json.load(gzip.open(f"{out}/r{R}_{m}/messages.json.gz", "rt"))}
    t, n = times("tcp"), times("ns3")
    keys = [k for k in n if k in t]
    errs, big, kinds = [], [], {}
    for k in keys:
        b, ns = n[k]
        if ns <= 0:
            continue
        e = abs(t[k][1] / ns - 1)
        errs.append(e)
        kinds.setdefault(str(k[6]), []).append(t[k][1] / ns - 1)
        if b >= 100000:
            big.append(e)
    errs.sort()
    step = {m: statistics.mean(s["time_s"] for s in docs[m]["steps"][1:]) for m in docs}
    row = {"replicas": int(R), "ranks": 8 * int(R), "messages": len(errs), "median_abs_error": statistics.median(errs),
           "p90_abs_error": errs[int(0.9 * (len(errs) - 1))], "max_abs_error": errs[-1],
           "median_abs_error_100kB_plus": statistics.median(big) if big else None,
           "median_error_by_kind": {k: statistics.median(v) for k, v in sorted(kinds.items())},
           "step_s": step, "step_error": step["tcp"] / step["ns3"] - 1,
           "ns3_wall_s": docs["ns3"]["simulator"]["wall_s"], "tcp_wall_s": docs["tcp"]["simulator"]["wall_s"],
           "ns3": docs["ns3"]["network"]["packet_network"]}
    rows.append(row)
    print(f"{row['ranks']:>4} ranks: {row['messages']} messages, |error| median {100 * row['median_abs_error']:.1f}%, "
          f"p90 {100 * row['p90_abs_error']:.1f}%, max {100 * row['max_abs_error']:.1f}%; step tcp {step['tcp']:.3f} s vs ns3 "
          f"{step['ns3']:.3f} s ({100 * row['step_error']:+.1f}%); ns-3 {row['ns3_wall_s']:.1f} s wall, "
          f"{row['ns3']['packets_dropped']} packets dropped; median signed error by kind (1 activation, 2 gradient, "
          f"3-4 control, 5-6 replicas' reduce / gather): " + ", ".join(f"{k} {100 * v:+.0f}%" for k, v in row["median_error_by_kind"].items()))
json.dump({"rows": rows}, open(f"{out}/ns3_validation.json", "w"), indent=1)
PY
