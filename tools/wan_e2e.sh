#!/usr/bin/env bash
# End to end under TCP (issue 25; results/README.md section 17): 2- and 4-stage fp32 runs at three
# WAN settings (MTU 1500), each with congestion control reno and bbr (2 stages also reno over 4
# streams per peer pair), on the kernel path (backend tc:
# the kernel's own TCP over the delay line where there is no netem), on the user backend with
# network.model tcp, and in the simulator with tcp (a profile measured here per stage count);
# 3 repeats of each emulated point, in rounds (below). Compares every step's time (median over repeats) of the model
# and the simulator with the kernel's: median and max |error|, written to OUT/e2e.json; per point
# also the compute a step on both emulated paths, the delay lines' share of the CPU and their
# wake-ups, and how often each stage was preempted on each path (runs that record them:
# network.forwarding_cpu_share, delay_lines[].stats.forwarding.wakeups_per_s, summary.stage_cpu).
#
#   sudo tools/wan_e2e.sh [OUT]     (default results/wan/e2e; needs build/slowpipe)
#   PARTS="kernel user sim" (the default) chooses what is run again (PARTS=none: only the comparison).
#   REPEATS=N (default 3): repeats per emulated point, one per round; with an even N,
#   tools/e2e_noise_floor.py OUT compares each tier with itself (even rounds against odd ones).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/wan/e2e}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
REPEATS=${REPEATS:-3}
mkdir -p "$OUT"
PARTS=${PARTS:-kernel user sim}
# The emulated runs go in rounds: each round adds one repeat of every point on the kernel path, then
# on the user backend, so that a host whose speed drifts over the half hour moves both alike (the
# sweeps resume: a call with --repeats r runs only repeat r - 1).
for stages in 2 4; do
  if [[ " $PARTS " == *" kernel "* ]]; then rm -rf "$OUT/${stages}stage_kernel"; fi
  if [[ " $PARTS " == *" user "* ]]; then rm -rf "$OUT/${stages}stage_user_tcp"; fi
done
for round in $(seq 1 "$REPEATS"); do
  for stages in 2 4; do
    if [[ " $PARTS " == *" kernel "* ]]; then
      "$BIN" sweep "experiments/wan_e2e_${stages}stage_tc.json" --out "$OUT/${stages}stage_kernel" --repeats "$round" --quiet
    fi
    if [[ " $PARTS " == *" user "* ]]; then
      "$BIN" sweep "experiments/wan_e2e_${stages}stage.json" --out "$OUT/${stages}stage_user_tcp" --repeats "$round" --quiet
    fi
  done
done
for stages in 2 4; do
  if [[ " $PARTS " == *" sim "* ]]; then
    "$BIN" profile "experiments/wan_e2e_${stages}stage.json" --host-from-run --out "$OUT/${stages}stage_profile.json" > /dev/null
    rm -rf "$OUT/${stages}stage_simulated_tcp"
    "$BIN" sweep "experiments/wan_e2e_${stages}stage.json" --simulate --profile "$OUT/${stages}stage_profile.json" \
      --out "$OUT/${stages}stage_simulated_tcp" --quiet
  fi
done
/usr/bin/python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
def repeats(kind, point):  # per step, every repeat's time
    docs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{kind}/runs/{point}.r*.json"))]
    if not docs:
        raise SystemExit(f"no runs for {kind} {point}")
    n = min(len(d["steps"]) for d in docs)
    return [[d["steps"][i]["time_s"] for d in docs] for i in range(n)]
def steps(kind, point):
    return [statistics.median(r) for r in repeats(kind, point)]
def docs(kind, point):
    return [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{kind}/runs/{point}.r*.json"))]
def compute(kind, point):  # a step's compute (the stages' mean), median over steps 1.. and repeats
    v = [s["breakdown_s"]["compute"] for d in docs(kind, point) for s in d["steps"][1:] if "breakdown_s" in s]
    return statistics.median(v) if v else None
def stage_cpu(kind, point):  # the stages' share of a core and preemptions a second (summary.stage_cpu), median over repeats
    v = [d["summary"]["stage_cpu"] for d in docs(kind, point) if "stage_cpu" in d.get("summary", {})]
    return {k: statistics.median(x[k] for x in v) for k in ("core_share", "preemptions_per_s")} if v else None
def wakeups(kind, point):  # the delay lines' wake-ups a second, summed over the run's lines, median over repeats
    v = [sum(l["stats"]["forwarding"]["wakeups_per_s"] for l in d["network"]["delay_lines"])
         for d in docs(kind, point) if all("wakeups_per_s" in l.get("stats", {}).get("forwarding", {}) for l in d.get("network", {}).get("delay_lines", [{}]))]
    return statistics.median(v) if v else None
def forwarding(kind, point):  # the delay lines' share of the machine's CPU (runs that record it)
    v = [d["network"]["forwarding_cpu_share"] for d in docs(kind, point) if "forwarding_cpu_share" in d.get("network", {})]
    return statistics.median(v) if v else None
rows, errs = [], {"user_tcp": [], "simulated_tcp": []}
by_cc = {}  # (kind, cc) -> |errors|
spread, outside = [], []  # the kernel's own spread per step (max / min of its repeats - 1); steps past 10%
for stages in (2, 4):
    for setting in ("200Mbps-25ms", "1Gbps-50ms", "100Mbps-100ms"):
        for cc in ("reno", "bbr") + (("reno-x4",) if stages == 2 else ()):
            point = f"links-{setting}_tcp-{cc}"
            kernel = steps(f"{stages}stage_kernel", point)
            kernelRepeats = repeats(f"{stages}stage_kernel", point)
            row = {"stages": stages, "setting": setting, "cc": cc, "kernel_s": kernel, "kernel_repeats_s": kernelRepeats}
            spread += [max(r) / min(r) - 1 for r in kernelRepeats]
            for kind in errs:
                mine = steps(f"{stages}stage_{kind}", point)
                e = [m / k - 1 for m, k in zip(mine, kernel)]
                row[kind + "_s"], row[kind + "_error"] = mine, e
                if kind == "user_tcp":
                    row[kind + "_repeats_s"] = repeats(f"{stages}stage_{kind}", point)
                for i, x in enumerate(e):
                    if abs(x) > 0.10:  # past the bound: beside the kernel's own repeats
                        outside.append({"kind": kind, "stages": stages, "setting": setting, "cc": cc, "step": i, "error": x,
                                        "model_s": mine[i], "kernel_repeats_s": kernelRepeats[i],
                                        "within_kernel_repeats": min(kernelRepeats[i]) <= mine[i] <= max(kernelRepeats[i])})
                errs[kind] += [abs(x) for x in e]
                by_cc.setdefault((kind, cc), []).extend(abs(x) for x in e)
            # On 2 cores the kernel path's compute is not the user backend's: the delay lines take CPU.
            row["compute_s"] = {"kernel": compute(f"{stages}stage_kernel", point), "user_tcp": compute(f"{stages}stage_user_tcp", point)}
            row["kernel_forwarding_cpu_share"] = forwarding(f"{stages}stage_kernel", point)
            # Why: each stage's process, its CPU and how often the scheduler took it away (the lines' wake-ups among them).
            row["stage_cpu"] = {"kernel": stage_cpu(f"{stages}stage_kernel", point), "user_tcp": stage_cpu(f"{stages}stage_user_tcp", point)}
            row["kernel_line_wakeups_per_s"] = wakeups(f"{stages}stage_kernel", point)
            rows.append(row)
            c, fw, sc = row["compute_s"], row["kernel_forwarding_cpu_share"], row["stage_cpu"]
            print(f"{stages} stages {setting} {cc}: kernel step 0 {kernel[0]:.3f} s, later {statistics.median(kernel[1:]):.3f} s; "
                  + "; ".join(f"{k} step 0 {100 * row[k + '_error'][0]:+.1f}%, later median {100 * statistics.median(row[k + '_error'][1:]):+.1f}%" for k in errs)
                  + (f"; compute a step: kernel {c['kernel']:.3f} s, user {c['user_tcp']:.3f} s" if c["kernel"] and c["user_tcp"] else "")
                  + (f"; delay lines {100 * fw:.1f}% of the CPU" if fw is not None else "")
                  + (f", {row['kernel_line_wakeups_per_s']:.0f} wake-ups/s" if row["kernel_line_wakeups_per_s"] is not None else "")
                  + (f"; stages preempted {sc['kernel']['preemptions_per_s']:.0f}/s (kernel) vs {sc['user_tcp']['preemptions_per_s']:.0f}/s (user)"
                     if sc["kernel"] and sc["user_tcp"] else ""))
summary = {k: {"steps": len(v), "median_abs_error": statistics.median(v), "max_abs_error": max(v),
               "within_5pct": sum(x <= 0.05 for x in v), "within_10pct": sum(x <= 0.10 for x in v)} for k, v in errs.items()}
for k, s in summary.items():
    print(f"{k} against the kernel: {s['steps']} steps, median |error| {100 * s['median_abs_error']:.1f}%, "
          f"max {100 * s['max_abs_error']:.1f}%, {s['within_5pct']} within 5%, {s['within_10pct']} within 10%")
for (kind, cc), v in sorted(by_cc.items()):
    print(f"  {kind} {cc}: {len(v)} steps, median |error| {100 * statistics.median(v):.1f}%, max {100 * max(v):.1f}%, "
          f"{sum(x <= 0.05 for x in v)} within 5%, {sum(x <= 0.10 for x in v)} within 10%")
print(f"the kernel's own repeats: spread per step (max / min - 1) median {100 * statistics.median(spread):.1f}%, "
      f"max {100 * max(spread):.1f}%, {sum(x > 0.10 for x in spread)} of {len(spread)} steps over 10%")
for o in outside:
    print(f"  past 10%: {o['kind']} {o['stages']} stages {o['setting']} {o['cc']} step {o['step']}: {100 * o['error']:+.1f}% "
          f"(model {o['model_s']:.3f} s; kernel repeats {', '.join(f'{x:.3f}' for x in o['kernel_repeats_s'])} s"
          f"{'; within them' if o['within_kernel_repeats'] else ''})")
summary["kernel_repeat_spread"] = {"steps": len(spread), "median": statistics.median(spread), "max": max(spread),
                                   "over_10pct": sum(x > 0.10 for x in spread)}
summary["past_10pct"] = outside
pre = {k: [r["stage_cpu"][k]["preemptions_per_s"] for r in rows if r["stage_cpu"][k]] for k in ("kernel", "user_tcp")}
if pre["kernel"] and pre["user_tcp"]:
    summary["stage_preemptions_per_s"] = {k: {"median": statistics.median(v), "min": min(v), "max": max(v)} for k, v in pre.items()}
    print("stages preempted a second (per stage, median over points): kernel path "
          f"{statistics.median(pre['kernel']):.0f} ({min(pre['kernel']):.0f}-{max(pre['kernel']):.0f}), user backend "
          f"{statistics.median(pre['user_tcp']):.0f} ({min(pre['user_tcp']):.0f}-{max(pre['user_tcp']):.0f})")
json.dump({"summary": summary, "rows": rows}, open(f"{out}/e2e.json", "w"), indent=1)
PY
