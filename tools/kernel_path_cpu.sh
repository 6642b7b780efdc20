#!/usr/bin/env bash
# What the kernel path costs the stages on this machine (issue 25; results/README.md section 17):
# one 4-stage point of the end-to-end runs (fp32, 200 Mbps / 25 ms, MTU 1500; reno and bbr),
# alternately on the kernel path (backend tc: the kernel's TCP over the delay lines) and on the
# user backend with the tcp model, ROUNDS rounds. Per run: the step time and compute (medians of
# steps 1..), the stages' CPU (summary.stage_cpu: CPU-s a step, share of a core, preemptions a
# second per stage) and the delay lines' CPU and wake-ups. Writes OUT/<cc>_<path>_<round>/ and
# OUT/kernel_path_cpu.json (per path and cc: the medians over the rounds).
#
#   sudo tools/kernel_path_cpu.sh [OUT]    (default results/wan/kernel_path_cpu; needs build/slowpipe)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/wan/kernel_path_cpu}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
ROUNDS=${ROUNDS:-3}
SPEC=experiments/wan_e2e_4stage_tc.json
mkdir -p "$OUT"
base="$OUT/base.json"
/usr/bin/python3 -c "import json, sys; json.dump(json.load(open('$SPEC'))['base'], open('$base', 'w'), indent=1)"
for round in $(seq 1 "$ROUNDS"); do
  for cc in reno bbr; do
    for path in kernel user; do
      dir="$OUT/${cc}_${path}_${round}"
      rm -rf "$dir"
      if [ "$path" = kernel ]; then set=(--set network.backend=tc); else set=(--set network.backend=user --set network.model=tcp); fi
      "$BIN" run "$base" --out "$dir" --quiet --set "network.tcp.congestion_control=$cc" "${set[@]}" > /dev/null 2> "$dir.stderr" || {
        echo "run $dir failed: $(tail -3 "$dir.stderr")" >&2; exit 1; }
    done
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median
def one(d):
    st = d["steps"][1:]
    lines = d["network"].get("delay_lines", [])
    return {"step_s": med(s["time_s"] for s in st), "compute_s": med(s["breakdown_s"]["compute"] for s in st),
            **{k: d["summary"]["stage_cpu"][k] for k in ("cpu_s_per_step", "core_share", "preemptions_per_s")},
            "forwarding_cpu_share": d["network"].get("forwarding_cpu_share"),
            "line_wakeups_per_s": sum(l["stats"]["forwarding"]["wakeups_per_s"] for l in lines) if lines else None}
res = {}
for cc in ("reno", "bbr"):
    for path in ("kernel", "user"):
        runs = [one(json.load(open(f"{out}/{cc}_{path}_{r}/result.json"))) for r in range(1, rounds + 1)]
        res[f"{cc}_{path}"] = {"runs": runs, "median": {k: (med(r[k] for r in runs) if runs[0][k] is not None else None) for k in runs[0]}}
        m = res[f"{cc}_{path}"]["median"]
        print(f"{cc} {path:6}: step {m['step_s']:.3f} s, compute {m['compute_s']:.3f} s, stage CPU {m['cpu_s_per_step']:.3f} CPU-s a step "
              f"({100 * m['core_share']:.1f}% of a core), preempted {m['preemptions_per_s']:.0f}/s"
              + (f"; lines {100 * m['forwarding_cpu_share']:.1f}% of the CPU, {m['line_wakeups_per_s']:.0f} wake-ups/s" if m["forwarding_cpu_share"] else "")
              + "   [runs: " + ", ".join(f"{r['step_s']:.3f}/{r['compute_s']:.3f}/{r['preemptions_per_s']:.0f}" for r in runs) + " step/compute/preempted]")
    k, u = res[f"{cc}_kernel"]["median"], res[f"{cc}_user"]["median"]
    print(f"{cc}: kernel / user: step {k['step_s'] / u['step_s']:.3f}, compute {k['compute_s'] / u['compute_s']:.3f}, "
          f"stage CPU {k['cpu_s_per_step'] / u['cpu_s_per_step']:.3f}, preemptions {k['preemptions_per_s'] / u['preemptions_per_s']:.1f}x")
json.dump(res, open(f"{out}/kernel_path_cpu.json", "w"), indent=1)
PY
