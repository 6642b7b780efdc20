#!/usr/bin/env bash
# Paper scale over measured and profiled networks (issue 26; results/README.md section 20):
# GPT2-XL, 8 stages (GPipe, 32 micro-batches, analytic A100), network.model tcp, over DT-FM's
# 8-city worldwide matrix and two consumer profiles; fp32, DirectQ fw2/bw4, AC-SGD fw2/bw4; for
# each, `slowpipe place` (local search, seeded) against rank order. Writes OUT/<network>__<codec>.json
# (the search) and OUT/networks_paper.json (the table), and prints the table.
#
#   tools/networks_paper.sh [OUT]   (default results/networks/paper; needs build/slowpipe; ~10 minutes)
#   PARTS=none: only the table from the searches already there.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/networks/paper}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
PARTS=${PARTS:-search}
NETS=${NETS:-yuan2022_worldwide_8 consumer_500_110 consumer_mixed}
mkdir -p "$OUT"
declare -A FW=([fp32]=none [directq]=quant:bits=2,levels=fixpoint [acsgd]=acsgd:bits=2,levels=fixpoint)
declare -A BW=([fp32]=none [directq]=quant:bits=4,levels=fixpoint [acsgd]=quant:bits=4,levels=fixpoint)
if [[ " $PARTS " == *" search "* ]]; then
  for net in $NETS; do
    for codec in fp32 directq acsgd; do
      "$BIN" place experiments/networks_paper.json --network "experiments/networks/$net.json" --profile analytic:A100 \
        --set "compression.forward=\"${FW[$codec]}\"" --set "compression.backward=\"${BW[$codec]}\"" \
        --method local --budget "${BUDGET:-1500}" --restarts 4 --seed 1 --top 3 --out "$OUT/${net}__$codec.json" | head -3
    done
  done
fi
/usr/bin/python3 - "$OUT" $NETS <<'PY'
import json, sys
out, nets = sys.argv[1], sys.argv[2:]
labels = {"fp32": "fp32", "directq": "DirectQ fw2/bw4", "acsgd": "AC-SGD fw2/bw4"}
rows = []
for net in nets:
    r = {c: json.load(open(f"{out}/{net}__{c}.json")) for c in labels}
    for c, lab in labels.items():
        naive, best = r[c]["naive"]["step_s"], r[c]["best"][0]["step_s"]
        row = {"network": net, "codec": lab, "naive_step_s": naive, "best_step_s": best, "placement_gain": naive / best,
               "speedup_over_fp32": {"naive": r["fp32"]["naive"]["step_s"] / naive, "best": r["fp32"]["best"][0]["step_s"] / best},
               "best_placement": r[c]["best"][0]["placement"], "evaluated": r[c]["evaluated"]}
        rows.append(row)
        print(f"{net:>22} {lab:>16}: rank order {naive:8.2f} s, placed {best:8.2f} s (gain {naive / best:.2f}x); "
              f"over fp32 {row['speedup_over_fp32']['naive']:.2f}x -> {row['speedup_over_fp32']['best']:.2f}x; {row['evaluated']} replayed")
json.dump({"rows": rows, "model": "GPT2-XL, 8 stages, GPipe 32 x 1, analytic A100, network.model tcp"},
          open(f"{out}/networks_paper.json", "w"), indent=1)
PY
