#!/usr/bin/env python3
"""Per-step medians of repeated runs of one point, model tier against the kernel path.

    tools/e2e_point_compare.py KERNEL_DIR... -- MODEL_DIR...     (each DIR holds a result.json)
Prints each step's kernel and model repeats, the medians' error, and median / max |error|.
"""
import json
import statistics
import sys

if "--" not in sys.argv:
    sys.exit("usage: e2e_point_compare.py KERNEL_DIR... -- MODEL_DIR...")
cut = sys.argv.index("--")
tiers = [[[s["time_s"] for s in json.load(open(d + "/result.json"))["steps"]] for d in dirs]
         for dirs in (sys.argv[1:cut], sys.argv[cut + 1:])]
if not tiers[0] or not tiers[1]:
    sys.exit("e2e_point_compare.py: give at least one run on each side of --")
errors = []
for step in range(min(len(r) for tier in tiers for r in tier)):
    kernel, model = ([r[step] for r in tier] for tier in tiers)
    errors.append(statistics.median(model) / statistics.median(kernel) - 1)
    print(f"step {step}: kernel {', '.join(f'{x:.3f}' for x in kernel)} s; model {', '.join(f'{x:.3f}' for x in model)} s; "
          f"medians {100 * errors[-1]:+.1f}%")
print(f"{len(errors)} steps: median |error| {100 * statistics.median(abs(e) for e in errors):.1f}%, "
      f"max {100 * max(abs(e) for e in errors):.1f}%")
