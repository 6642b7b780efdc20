#!/usr/bin/env python3
"""Simulator validation: compares a simulated sweep with the emulated sweep of the same spec.

Usage: validate_sim.py EMULATED_DIR SIMULATED_DIR OUT_DIR
Writes OUT_DIR/validation.json (per point: emulated median step time with its 95% interval,
simulated step time, relative error; wait-share error; codec ranking per link setting) and
OUT_DIR/sim_vs_emulated.png/.svg (y = x line). Every number is read from the two summary.json files.
"""
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(d):
    return {r["point"]: r for r in json.load(open(os.path.join(d, "summary.json")))["rows"] if r.get("status") == "ok"}


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: validate_sim.py EMULATED_DIR SIMULATED_DIR OUT_DIR")
    emu, sim, out = rows(sys.argv[1]), rows(sys.argv[2]), sys.argv[3]
    os.makedirs(out, exist_ok=True)
    points = []
    for name, e in sorted(emu.items()):
        s = sim.get(name)
        if not s:
            continue
        te, ts = e["mean_step_time_s"], s["mean_step_time_s"]
        points.append({"point": name, "label": e["label"], "link": e["axes"][0] if e.get("axes") else "",
                       "emulated_step_s": te, "emulated_lo": e.get("step_time_lo"), "emulated_hi": e.get("step_time_hi"),
                       "simulated_step_s": ts, "step_error": ts / te - 1,
                       "emulated_wait_share": e["wait_share"], "simulated_wait_share": s["wait_share"],
                       "wait_share_error": s["wait_share"] - e["wait_share"],
                       "emulated_speedup": e.get("speedup"), "simulated_speedup": s.get("speedup")})
    errs = [abs(p["step_error"]) for p in points]
    ranking = []
    for link in sorted({p["link"] for p in points}):
        sel = [p for p in points if p["link"] == link]
        by_e = [p["label"] for p in sorted(sel, key=lambda p: p["emulated_step_s"])]
        by_s = [p["label"] for p in sorted(sel, key=lambda p: p["simulated_step_s"])]
        ranking.append({"link": link, "emulated_order": by_e, "simulated_order": by_s, "same": by_e == by_s})
    doc = {"points": points, "median_abs_step_error": statistics.median(errs) if errs else None,
           "max_abs_step_error": max(errs) if errs else None,
           "median_abs_wait_share_error": statistics.median(abs(p["wait_share_error"]) for p in points) if points else None,
           "ranking": ranking, "same_ranking_everywhere": all(r["same"] for r in ranking)}
    json.dump(doc, open(os.path.join(out, "validation.json"), "w"), indent=2)
    fig, ax = plt.subplots(figsize=(5.2, 5.0))
    for label in sorted({p["label"] for p in points}):
        sel = [p for p in points if p["label"] == label]
        xs = [p["emulated_step_s"] for p in sel]
        err = [[p["emulated_step_s"] - (p["emulated_lo"] or p["emulated_step_s"]) for p in sel],
               [(p["emulated_hi"] or p["emulated_step_s"]) - p["emulated_step_s"] for p in sel]]
        ax.errorbar(xs, [p["simulated_step_s"] for p in sel], xerr=err, marker="o", linestyle="none", capsize=3, label=label)
    lim = [min(min(p["emulated_step_s"], p["simulated_step_s"]) for p in points) * 0.8,
           max(max(p["emulated_step_s"], p["simulated_step_s"]) for p in points) * 1.2]
    ax.plot(lim, lim, color="black", linewidth=0.8, label="y = x")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("emulated step time (s), median with 95% CI")
    ax.set_ylabel("simulated step time (s)")
    ax.set_title(f"simulator vs emulation: median |err| {100 * doc['median_abs_step_error']:.1f}%, "
                 f"max {100 * doc['max_abs_step_error']:.1f}%", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(out, f"sim_vs_emulated.{ext}"), dpi=120, bbox_inches="tight")
    print(json.dumps({k: doc[k] for k in ("median_abs_step_error", "max_abs_step_error", "median_abs_wait_share_error",
                                          "same_ranking_everywhere")}, indent=2))
    for p in points:
        print(f"{p['point']}: emulated {p['emulated_step_s']:.4f} s, simulated {p['simulated_step_s']:.4f} s, "
              f"error {100 * p['step_error']:+.1f}%")


if __name__ == "__main__":
    main()
