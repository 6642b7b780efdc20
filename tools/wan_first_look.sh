#!/usr/bin/env bash
# First look at the ideal pipe against TCP (results/README.md section 15): a 2-stage fp32 run at
# three WAN settings, emulated under network.model pipelined and tcp (user backend) and on the tc
# backend (the kernel's own TCP over the delay line where there is no netem), 3 repeats each; the
# user-backend grid simulated with a profile measured here. Prints step 0 and the steady step per
# point.
#
#   sudo tools/wan_first_look.sh [OUT]     (default results/wan/first_look; needs build/slowpipe)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/wan/first_look}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
mkdir -p "$OUT"
"$BIN" sweep experiments/wan_first_look.json --out "$OUT/emulated_user" --repeats 3 --quiet
"$BIN" sweep experiments/wan_first_look_tc.json --out "$OUT/emulated_tc" --repeats 3 --quiet
"$BIN" profile experiments/wan_first_look.json --host-from-run --out "$OUT/profile.json" > /dev/null
rm -rf "$OUT/simulated"
"$BIN" sweep experiments/wan_first_look.json --simulate --profile "$OUT/profile.json" --out "$OUT/simulated" --quiet
/usr/bin/python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
def runs(kind, point):
    return [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{kind}/runs/{point}.r*.json"))]
def row(docs):
    s0 = statistics.median(d["steps"][0]["time_s"] for d in docs)
    later = statistics.median(statistics.median(s["time_s"] for s in d["steps"][1:]) for d in docs)
    return s0, later
table = {}
for setting in ["200Mbps-25ms", "1Gbps-50ms", "100Mbps-100ms"]:
    pipe = row(runs("emulated_user", f"links-{setting}_model-pipelined"))
    tcp = row(runs("emulated_user", f"links-{setting}_model-tcp"))
    bbr = row(runs("emulated_tc", f"links-{setting}_tcp-bbr"))
    reno = row(runs("emulated_tc", f"links-{setting}_tcp-reno"))
    sim = row(runs("simulated", f"links-{setting}_model-tcp"))
    table[setting] = {"ideal_pipe": pipe, "tcp_model": tcp, "kernel_bbr": bbr, "kernel_reno": reno, "simulated_tcp": sim}
    print(f"{setting}: step 0 (s) pipe {pipe[0]:.3f} tcp {tcp[0]:.3f} sim-tcp {sim[0]:.3f} kernel reno {reno[0]:.3f} bbr {bbr[0]:.3f}; "
          f"median later step (s) pipe {pipe[1]:.3f} tcp {tcp[1]:.3f} sim-tcp {sim[1]:.3f} kernel reno {reno[1]:.3f} bbr {bbr[1]:.3f}")
json.dump({"medians_s": {k: {m: {"step0": v[0], "later_step": v[1]} for m, v in r.items()} for k, r in table.items()}},
          open(f"{out}/first_look.json", "w"), indent=2)
PY
