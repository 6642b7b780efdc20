#!/usr/bin/env python3
"""Simulator validation: compares simulated sweeps with the emulated sweeps of the same specs.

Usage: validate_sim.py OUT_DIR EMULATED_DIR SIMULATED_DIR [EMULATED_DIR SIMULATED_DIR ...]

Each pair is one sweep (e.g. the 2-stage and the 4-stage grid), emulated here with repeats and
simulated with a profile measured here. Writes OUT_DIR/validation.json and
OUT_DIR/sim_vs_emulated.png/.svg (y = x line). Every number is read from the summary.json files.

Per point: emulated median step time with its 95% interval, simulated step time, relative error;
wait-share error; and how far the simulated time lies outside the emulated 95% interval (0 inside:
the simulator is as close as the emulation can tell). Per setting (every axis but the codec, e.g. link x schedule): the codec order by
emulated and by simulated step time. Two orders are compared two ways:
  strict   - the whole order is the same;
  resolved - every pair of codecs whose emulated 95% intervals do not overlap (the emulation tells
             them apart) is ordered the same way by the simulator. Pairs inside each other's noise
             carry no order to reproduce.
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


def sweep_name(d):
    return json.load(open(os.path.join(d, "summary.json"))).get("sweep", os.path.basename(os.path.normpath(d)))


def beyond(x, lo, hi):
    """How far x lies outside [lo, hi] (0 inside)."""
    return lo - x if x < lo else (x - hi if x > hi else 0.0)


def point_row(grid, name, e, s):
    """One point's comparison: emulated summary row e against simulated summary row s."""
    axes = e.get("axes", [])
    te, ts = e["mean_step_time_s"], s["mean_step_time_s"]
    lo, hi = e.get("step_time_lo", te), e.get("step_time_hi", te)
    return {"grid": grid, "point": name, "label": e["label"],
            "setting": " / ".join(a for a in axes if a != e["label"]) or "-",
            "emulated_step_s": te, "emulated_lo": lo, "emulated_hi": hi,
            "repeats": e.get("repeats"), "link_ok": e.get("link_ok", True),
            "simulated_step_s": ts, "step_error": ts / te - 1, "error_beyond_interval": beyond(ts, lo, hi) / te,
            "emulated_wait_share": e["wait_share"], "simulated_wait_share": s["wait_share"],
            "wait_share_error": s["wait_share"] - e["wait_share"],
            "emulated_speedup": e.get("speedup"), "simulated_speedup": s.get("speedup")}


def compare(emu_dir, sim_dir):
    emu, sim = rows(emu_dir), rows(sim_dir)
    grid = sweep_name(emu_dir)
    return [point_row(grid, name, e, sim[name]) for name, e in sorted(emu.items()) if name in sim]


def rankings(points):
    out = []
    for key in sorted({(p["grid"], p["setting"]) for p in points}):
        sel = [p for p in points if (p["grid"], p["setting"]) == key]
        by_e = [p["label"] for p in sorted(sel, key=lambda p: p["emulated_step_s"])]
        by_s = [p["label"] for p in sorted(sel, key=lambda p: p["simulated_step_s"])]
        resolved, disagree = 0, []
        for i, a in enumerate(sel):
            for b in sel[i + 1:]:
                if a["emulated_hi"] < b["emulated_lo"] or b["emulated_hi"] < a["emulated_lo"]:
                    resolved += 1
                    if (a["emulated_step_s"] < b["emulated_step_s"]) != (a["simulated_step_s"] < b["simulated_step_s"]):
                        disagree.append([a["label"], b["label"]])
        out.append({"grid": key[0], "setting": key[1], "emulated_order": by_e, "simulated_order": by_s,
                    "same": by_e == by_s, "resolved_pairs": resolved, "resolved_pairs_disagreeing": disagree})
    return out


def summary(points):
    errs = [abs(p["step_error"]) for p in points]
    outside = [p["error_beyond_interval"] for p in points]
    return {"points": len(points),
            "median_abs_step_error": statistics.median(errs) if errs else None,
            "max_abs_step_error": max(errs) if errs else None,
            "points_within_10pct": sum(e <= 0.10 for e in errs),
            "points_inside_emulated_interval": sum(o == 0 for o in outside),
            "max_error_beyond_emulated_interval": max(outside) if outside else None,
            "median_abs_wait_share_error": statistics.median(abs(p["wait_share_error"]) for p in points) if points else None}


def plot(points, doc, out):
    fig, ax = plt.subplots(figsize=(5.6, 5.2))
    markers = {g: m for g, m in zip(sorted({p["grid"] for p in points}), "os^D")}
    colors = {}
    for p in points:
        colors.setdefault(p["label"], f"C{len(colors)}")
    for (grid, label) in sorted({(p["grid"], p["label"]) for p in points}):
        sel = [p for p in points if (p["grid"], p["label"]) == (grid, label)]
        xs = [p["emulated_step_s"] for p in sel]
        err = [[p["emulated_step_s"] - p["emulated_lo"] for p in sel], [p["emulated_hi"] - p["emulated_step_s"] for p in sel]]
        ax.errorbar(xs, [p["simulated_step_s"] for p in sel], xerr=err, marker=markers[grid], color=colors[label],
                    linestyle="none", capsize=2, markersize=4, label=f"{label} ({grid})")
    lim = [min(min(p["emulated_step_s"], p["simulated_step_s"]) for p in points) * 0.8,
           max(max(p["emulated_step_s"], p["simulated_step_s"]) for p in points) * 1.2]
    ax.plot(lim, lim, color="black", linewidth=0.8, label="y = x")
    ax.fill_between(lim, [v * 0.9 for v in lim], [v * 1.1 for v in lim], color="grey", alpha=0.15, label="±10%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("emulated step time (s), median with 95% CI")
    ax.set_ylabel("simulated step time (s)")
    s = doc["all"]
    ax.set_title(f"simulator vs emulation, {s['points']} points: median |err| {100 * s['median_abs_step_error']:.1f}%, "
                 f"max {100 * s['max_abs_step_error']:.1f}%", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(out, f"sim_vs_emulated.{ext}"), dpi=120, bbox_inches="tight")


def main():
    args = sys.argv[1:]
    if len(args) < 3 or len(args) % 2 != 1:
        sys.exit("usage: validate_sim.py OUT_DIR EMULATED_DIR SIMULATED_DIR [EMULATED_DIR SIMULATED_DIR ...]")
    out = args[0]
    os.makedirs(out, exist_ok=True)
    points = []
    for emu_dir, sim_dir in zip(args[1::2], args[2::2]):
        points += compare(emu_dir, sim_dir)
    if not points:
        sys.exit("validate_sim: no point is ok in both an emulated and a simulated sweep")
    ranking = rankings(points)
    doc = {"all": summary(points),
           "by_grid": {g: summary([p for p in points if p["grid"] == g]) for g in sorted({p["grid"] for p in points})},
           "same_ranking_everywhere": all(r["same"] for r in ranking),
           "resolved_ranking_everywhere": all(not r["resolved_pairs_disagreeing"] for r in ranking),
           "ranking": ranking, "points": points}
    json.dump(doc, open(os.path.join(out, "validation.json"), "w"), indent=2)
    plot(points, doc, out)
    print(json.dumps({k: doc[k] for k in ("all", "by_grid", "same_ranking_everywhere", "resolved_ranking_everywhere")}, indent=2))
    for r in ranking:
        flag = "same" if r["same"] else ("resolved pairs agree" if not r["resolved_pairs_disagreeing"] else "DIFFERS")
        print(f"{r['grid']} {r['setting']}: emulated {r['emulated_order']}, simulated {r['simulated_order']} -> {flag}"
              f" ({r['resolved_pairs']} resolved pairs)")
    for p in points:
        print(f"{p['grid']} {p['point']}: emulated {p['emulated_step_s']:.4f} s [{p['emulated_lo']:.4f}, {p['emulated_hi']:.4f}], "
              f"simulated {p['simulated_step_s']:.4f} s, error {100 * p['step_error']:+.1f}%")


if __name__ == "__main__":
    main()
