#!/usr/bin/env python3
"""Pipeline schedules side by side: throughput against bandwidth per (schedule, codec), emulated
here and simulated at paper scale, each schedule's ratio to 1F1B, and the datacenter projection
beside the published ordering. Reads sweep folders (summary.json), writes OUT/schedules.{png,svg}
and OUT/schedules.json.

Usage: plot_schedules.py OUT EMULATED_DIR SIMULATED_DIR PROJECTION_DIR
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Published (zero-bubble repo, issue 21): 8x H800, a 6.2B model, samples/s. Not measured here.
PUBLISHED = {"1F1B": 55, "interleaved": 66, "ZB-2P": 67, "ZB-V": 64}
SCHEDULES = ["gpipe", "1f1b", "zb_h1", "interleaved V=2"]
COLORS = {"gpipe": "tab:gray", "1f1b": "tab:blue", "zb_h1": "tab:green", "interleaved V=2": "tab:red"}


def rows_of(folder):
    with open(os.path.join(folder, "summary.json")) as f:
        return [r for r in json.load(f)["rows"] if r.get("status") == "ok"]


def schedule_of(row):
    """The pipeline axis value of a row (its label in the point's axes)."""
    for a in row["axes"]:
        if a in SCHEDULES:
            return a
    raise ValueError(f"row {row['point']}: no schedule among its axes {row['axes']}")


def table(rows):
    """{(codec, schedule): [(bandwidth, tokens/s, lo, hi)]} sorted by bandwidth."""
    out = {}
    for r in rows:
        t = r["throughput_tokens_per_s"]
        out.setdefault((r["label"], schedule_of(r)), []).append(
            (r["bandwidth_bps"], t, r.get("throughput_lo", t), r.get("throughput_hi", t)))
    return {k: sorted(v) for k, v in out.items()}


def ratios(tab):
    """Each schedule's throughput over 1F1B's at the same codec and bandwidth, with the bounds of
    the ratio from the two intervals (lo/hi over hi/lo)."""
    out = []
    for (codec, sched), pts in sorted(tab.items()):
        ref = {bw: (t, lo, hi) for bw, t, lo, hi in tab.get((codec, "1f1b"), [])}
        for bw, t, lo, hi in pts:
            if sched == "1f1b" or bw not in ref:
                continue
            rt, rlo, rhi = ref[bw]
            out.append({"codec": codec, "schedule": sched, "bandwidth_bps": bw, "ratio_to_1f1b": t / rt,
                        "ratio_lo": lo / rhi, "ratio_hi": hi / rlo})
    return out


def crossovers(rat):
    """Per codec: the bandwidths at which interleaving is resolved slower / faster than 1F1B."""
    out = {}
    for r in rat:
        if r["schedule"] != "interleaved V=2":
            continue
        c = out.setdefault(r["codec"], {"slower_at_bps": [], "faster_at_bps": [], "unresolved_at_bps": []})
        key = "slower_at_bps" if r["ratio_hi"] < 1 else "faster_at_bps" if r["ratio_lo"] > 1 else "unresolved_at_bps"
        c[key].append(r["bandwidth_bps"])
    return out


def panel(ax, tab, title, per_gpu_samples=False):
    styles = ["-", "--", ":"]
    codecs = sorted({c for c, _ in tab})
    for (codec, sched), pts in sorted(tab.items()):
        bw = [p[0] for p in pts]
        y = [p[1] for p in pts]
        err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
        ax.errorbar(bw, y, yerr=err, color=COLORS.get(sched, "k"), linestyle=styles[codecs.index(codec) % 3],
                    marker="o", ms=3, capsize=2, label=f"{sched}, {codec}")
    ax.set_xscale("log")
    ax.set_xlabel("link bandwidth (bps)")
    ax.set_ylabel("tokens / s")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)


def main():
    out, emu, sim, proj = sys.argv[1:5]
    os.makedirs(out, exist_ok=True)
    te, ts = table(rows_of(emu)), table(rows_of(sim))
    projection = {}
    with open(os.path.join(proj, "sweep.json")) as f:
        seq = json.load(f)["base"]["model"]["seq_len"]
    for r in rows_of(proj):
        projection[schedule_of(r)] = r["throughput_tokens_per_s"] / seq
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), gridspec_kw={"wspace": 0.45})
    panel(axes[0], te, "emulated here (2 stages, 4 layers; median of 3, 95% interval)")
    panel(axes[1], ts, "simulated: GPT2-XL, 8 stages, analytic A100")
    names = list(PUBLISHED) + [f"{k} (projected)" for k in ["1f1b", "interleaved V=2", "zb_h1", "gpipe"] if k in projection]
    vals = list(PUBLISHED.values()) + [projection[k] for k in ["1f1b", "interleaved V=2", "zb_h1", "gpipe"] if k in projection]
    colors = ["tab:olive"] * len(PUBLISHED) + [COLORS[k] for k in ["1f1b", "interleaved V=2", "zb_h1", "gpipe"] if k in projection]
    axes[2].barh(names, vals, color=colors)
    axes[2].invert_yaxis()
    axes[2].tick_params(axis="y", labelsize=7)
    axes[2].set_xlabel("samples / s")
    axes[2].set_title("8x H800, 6.2B: published (olive) vs the simulator's projection", fontsize=9)
    for i, v in enumerate(vals):
        axes[2].text(v, i, f" {v:.0f}", va="center", fontsize=7)
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(out, f"schedules.{ext}"), dpi=120, bbox_inches="tight")
    re_, rs = ratios(te), ratios(ts)
    doc = {"emulated_ratio_to_1f1b": re_, "simulated_ratio_to_1f1b": rs,
           "emulated_interleaving_vs_1f1b": crossovers(re_), "simulated_interleaving_vs_1f1b": crossovers(rs),
           "projection_h800_samples_per_s": projection, "published_h800_samples_per_s": PUBLISHED,
           "published_source": "zero-bubble repository (sail-sg/zero-bubble-pipeline-parallelism), issue 21: 8x H800, 6.2B"}
    with open(os.path.join(out, "schedules.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {out}/schedules.png/.svg and schedules.json")


if __name__ == "__main__":
    main()
