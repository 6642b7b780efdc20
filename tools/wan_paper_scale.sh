#!/usr/bin/env bash
# The paper setting under TCP at paper scale (issue 25 part 4; results/README.md section 18):
# GPT2-XL on 8 stages (experiments/wan_paper_scale.json), fp32 / DirectQ fw2/bw4 / AC-SGD fw2/bw4,
# links 100 Mbps - 10 Gbps at RTT 2, 50 and 200 ms (MTU 1500), simulated with the analytic A100
# profile under the ideal pipe (network.model pipelined) and under the tcp model (cubic and bbr;
# 1 and 8 streams per peer pair). A projection: the simulator replays the tcp model, which
# results/wan/model_validation.json compares with the kernel per message. Writes OUT/ (the sweep)
# and OUT/wan.json: per setting and codec the steady step time under each transport, how far the
# ideal pipe is off, and AC-SGD's and DirectQ's speed-up over fp32 under each.
#
#   tools/wan_paper_scale.sh [OUT]     (default results/wan/paper_scale_a100; needs build/slowpipe)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/wan/paper_scale_a100}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
rm -rf "$OUT"
"$BIN" sweep experiments/wan_paper_scale.json --simulate --profile analytic:A100,dtype=fp16,mfu=0.4 --out "$OUT" --quiet
/usr/bin/python3 - "$OUT" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
spec = json.load(open("experiments/wan_paper_scale.json"))
transports = [v["label"] for v in spec["axes"][0]["values"]]
links = [v["label"] for v in spec["axes"][1]["values"]]
codecs = [v["label"] for v in spec["axes"][2]["values"]]
slug = lambda s: re.sub(r"[^A-Za-z0-9.]+", "-", s).strip("-")
def step(t, l, c):
    f = glob.glob(f"{out}/runs/network-{slug(t)}_links-{slug(l)}_compression-{slug(c)}.r0.json")
    if not f:
        raise SystemExit(f"no run for {t} / {l} / {c} in {out}/runs")
    return json.load(open(f[0]))["summary"]["mean_step_time_s"]
table = {l: {c: {t: step(t, l, c) for t in transports} for c in codecs} for l in links}
rows = []
for l in links:
    for c in codecs:
        r = {"link": l, "codec": c, "step_s": table[l][c]}
        r["pipe_error_vs"] = {t: table[l][c]["ideal pipe"] / table[l][c][t] - 1 for t in transports if t != "ideal pipe"}
        r["speedup_over_fp32"] = {t: table[l]["fp32"][t] / table[l][c][t] for t in transports}
        rows.append(r)
json.dump({"transports": transports, "rows": rows}, open(f"{out}/wan.json", "w"), indent=1)
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rates = ["100Mbps", "500Mbps", "1Gbps", "10Gbps"]
fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
for ax, rtt in zip(axes, ("2ms", "50ms", "200ms")):
    for t in transports:
        ys = [table[f"{r} RTT {rtt}"]["AC-SGD fw2/bw4"][t] for r in rates]
        fp = [table[f"{r} RTT {rtt}"]["fp32"][t] for r in rates]
        ax.plot(range(len(rates)), [a / b for a, b in zip(fp, ys)], marker="o", label=t)
    ax.set_xticks(range(len(rates)), rates)
    ax.set_title(f"RTT {rtt}")
    ax.set_xlabel("link rate")
    ax.grid(alpha=0.3)
axes[0].set_ylabel("AC-SGD fw2/bw4 speed-up over fp32 (same transport)")
axes[0].legend()
fig.suptitle("GPT2-XL, 8 stages, A100 (analytic): AC-SGD's speed-up under the ideal pipe and under TCP (tcp model)")
fig.tight_layout()
fig.savefig(f"{out}/speedup_vs_transport.png", dpi=110)
print("step time (s) per transport; ideal pipe's error against cubic x1; speed-up over fp32 under pipe -> cubic x1 -> bbr x1 -> cubic x8")
for r in rows:
    s = r["step_s"]
    print(f"{r['link']:>22} {r['codec']:>16}: " + " ".join(f"{t} {s[t]:.2f}" for t in transports)
          + f" | pipe {100 * r['pipe_error_vs']['cubic x1']:+.0f}% | speed-up "
          + " -> ".join(f"{r['speedup_over_fp32'][t]:.2f}" for t in ("ideal pipe", "cubic x1", "bbr x1", "cubic x8")))
PY
