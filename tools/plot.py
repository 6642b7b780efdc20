#!/usr/bin/env python3
"""Figures of a slowpipe sweep folder (summary.json + runs/*.json), PNG and SVG, with matplotlib.

Usage: plot.py DIR   (normally through `slowpipe plot DIR`). Writes DIR/figures/.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVGs: a reader (and a test) can search it
import matplotlib.pyplot as plt  # noqa: E402


def fmt_bw(bps):
    return f"{bps / 1e9:g} Gbps" if bps >= 1e9 else f"{bps / 1e6:g} Mbps"


def save(fig, out, name):
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(out, f"{name}.{ext}"), dpi=120, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {name}.png/.svg")


def name_of(r, rows):
    """The codec's label, with what else tells points at one (pipeline) bandwidth apart in this
    sweep: the latency, the data-parallel links' bandwidth."""
    name = r["label"]
    if len({x["latency_s"] for x in rows}) > 1:
        name += f" @ {r['latency_s'] * 1e3:g} ms"
    if len({x.get("dp_bandwidth_bps") for x in rows}) > 1 and r.get("dp_bandwidth_bps"):
        name += f", DP {fmt_bw(r['dp_bandwidth_bps'])}"
    return name


def lines_by_label(rows, key, lo=None, hi=None):
    """{label: [(bandwidth, value, lo, hi)]} sorted by bandwidth; lo/hi = value without an interval."""
    series = {}
    for r in rows:
        if r.get("status") != "ok" or r.get(key) is None:
            continue
        name = name_of(r, rows)
        v = r[key]
        series.setdefault(name, []).append((r["bandwidth_bps"], v, r.get(lo, v) if lo else v, r.get(hi, v) if hi else v))
    return {k: sorted(v) for k, v in series.items()}


def bandwidth_text(bps):
    """100 Mbps, 1 Gbps, 2.5 Gbps: what a reader of a bandwidth axis expects (it read 10^8)."""
    for unit, scale in (("Tbps", 1e12), ("Gbps", 1e9), ("Mbps", 1e6), ("kbps", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g} {unit}"
    return f"{bps:g} bps"


def bandwidth_axis(ax, rows):
    """A log axis whose ticks are the sweep's bandwidths, in Mbps/Gbps."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter  # noqa: E402
    bws = sorted({r["bandwidth_bps"] for r in rows if r.get("bandwidth_bps")})
    ax.set_xscale("log")
    if bws:
        ax.xaxis.set_major_locator(FixedLocator(bws))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: bandwidth_text(x)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        if len(bws) == 1:
            ax.set_xlim(bws[0] / 2, bws[0] * 2)
    ax.set_xlabel("link bandwidth")


def versus_bandwidth(rows, key, ylabel, title, out, name, lo, hi, ideal=False, unreached=False):
    """One line per codec with its interval over repeats (the summary's: a 95% CI from 5 repeats, else the range) as error bars.
    Points whose link calibration failed (link_ok false) are drawn hollow, with a legend note;
    unreached: a completed point without a value (time to target: some repeat never reached it) is
    marked "not reached" at the top of the axis instead of being left out."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ideals = lines_by_label(rows, "ideal_speedup") if ideal else {}
    colours = {}
    hollow = False
    for label, pts in lines_by_label(rows, key, lo, hi).items():
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
        line = ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
        colours[label] = line[0].get_color()
        bad = [r for r in rows if r.get("status") == "ok" and r.get(key) is not None and name_of(r, rows) == label
               and r.get("link_ok") is False]
        if bad:
            hollow = True
            ax.plot([r["bandwidth_bps"] for r in bad], [r[key] for r in bad], linestyle="none", marker="o", markersize=9,
                    markerfacecolor="white", markeredgecolor=colours[label], zorder=5)
        # The codec's ideal (its speed-up bound), dotted in its colour; not drawn for the baseline.
        if label in ideals and any(abs(p[1] - 1.0) > 1e-9 for p in pts):
            ip = ideals[label]
            ax.plot([p[0] for p in ip], [p[1] for p in ip], linestyle=":", color=line[0].get_color(), alpha=0.8)
    if ideal:
        ax.axhline(1.0, color="black", linewidth=0.8)
    if unreached:
        missing = [r for r in rows if r.get("status") == "ok" and r.get(key) is None and r.get("target_val_loss") is not None]
        if missing:
            top = ax.get_ylim()[1] if colours else 1.0
            cycle = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"][len(colours):])
            named = set()
            for r in missing:
                label = name_of(r, rows)
                if label not in colours:
                    colours[label] = next(cycle, "black")
                legend = f"{label} (not reached)" if label not in named and not any(
                    name_of(q, rows) == label and q.get(key) is not None for q in rows) else None
                named.add(label)
                ax.plot([r["bandwidth_bps"]], [top], linestyle="none", marker="x", markersize=9, color=colours[label],
                        clip_on=False, label=legend)
                ax.annotate("not reached", (r["bandwidth_bps"], top), textcoords="offset points", xytext=(0, -14),
                            ha="center", fontsize=7, color=colours[label])
    bandwidth_axis(ax, rows)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if hollow:
        ax.plot([], [], linestyle="none", marker="o", markerfacecolor="white", markeredgecolor="black",
                label="hollow: link calibration failed (link_ok false)")
    ax.legend(fontsize=8)
    save(fig, out, name)


def losses(run):
    """A run's evaluations that have a loss (a simulated run's replayed evaluations have none)."""
    return [e for e in run.get("evals", []) if e.get("val_loss") is not None]


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def banded(ax, series, label):
    """series: one [(x, y), ...] per repeat. The median over repeats at each x, and the repeats'
    range as a band (x: the step, or a repeat's own wall time, matched by position)."""
    n = min(len(s) for s in series)
    if n == 0:
        return
    xs = [median([s[i][0] for s in series]) for i in range(n)]
    ys = [median([s[i][1] for s in series]) for i in range(n)]
    line = ax.plot(xs, ys, marker="o" if n <= 40 else None, markersize=3, label=label)
    if len(series) > 1:
        ax.fill_between(xs, [min(s[i][1] for s in series) for i in range(n)],
                        [max(s[i][1] for s in series) for i in range(n)], color=line[0].get_color(), alpha=0.2, linewidth=0)


def loss_curves(runs, rows, bandwidth, xkey, out, name):
    """Validation loss per codec at one bandwidth: the median over repeats, their range as a band."""
    if not any(losses(run) for r in rows for run in runs.get(r["point"], [])):
        print(f"skipped {name} (no evaluation losses: a simulated sweep)")
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in rows:
        if r["bandwidth_bps"] != bandwidth:
            continue
        series = [[(e["step"] if xkey == "step" else e["wall_s"], e["val_loss"]) for e in losses(run)]
                  for run in runs.get(r["point"], [])]
        series = [s for s in series if s]
        if series:
            banded(ax, series, name_of(r, rows))
    simulated = any(run.get("simulated") for r in rows for run in runs.get(r["point"], []))
    ax.set_xlabel("training step" if xkey == "step" else ("simulated wall-clock (s)" if simulated else "wall time (s)"))
    ax.set_ylabel("projected validation loss (quality curve)" if simulated else "validation loss")
    what = "projected validation loss" if simulated else "validation loss"
    ax.set_title(f"{what} vs {'step' if xkey == 'step' else 'wall-clock'} at {fmt_bw(bandwidth)}"
                 + (": each codec's emulated curve on simulated time" if simulated else " (band: repeats)"), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, out, name)


def quality(runs, rows, bandwidth, out, name):
    """Training loss per step and validation loss per evaluation, per codec side by side, each the
    median over repeats with the repeats' range as a band."""
    have = [r for r in rows if r["bandwidth_bps"] == bandwidth and
            any(st.get("loss") is not None for run in runs.get(r["point"], []) for st in run.get("steps", []))]
    if not have:
        print(f"skipped {name} (no training losses: a simulated sweep)")
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in have:
        train = [[(st["step"], st["loss"]) for st in run.get("steps", []) if st.get("loss") is not None]
                 for run in runs[r["point"]]]
        banded(left, [t for t in train if t], name_of(r, rows))
        val = [[(e["step"], e["val_loss"]) for e in losses(run)] for run in runs[r["point"]]]
        if any(val):
            banded(right, [v for v in val if v], name_of(r, rows))
    for ax, what in ((left, "training loss (per step)"), (right, "validation loss (per evaluation)")):
        ax.set_xlabel("training step")
        ax.set_ylabel(what)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"quality at {fmt_bw(bandwidth)}: median over repeats, band: their range")
    save(fig, out, name)


def quality_vs_bytes(rows, bandwidth, reps, ci, baseline, out):
    """Validation-loss gap against the baseline (paired by repeat, with its interval) over wire bytes
    per step, one point per codec at one bandwidth: what a codec costs in quality for what it saves."""
    have = [r for r in rows if r["bandwidth_bps"] == bandwidth and r.get("val_loss_gap_vs_baseline") is not None
            and r.get("wire_bytes_per_step")]
    if not have:
        print("skipped quality_vs_bytes (no quality gaps: a simulated sweep or no baseline)")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in sorted(have, key=lambda r: r["wire_bytes_per_step"]):
        g, lo, hi = (100 * r[k] for k in ("val_loss_gap_vs_baseline", "val_loss_gap_lo", "val_loss_gap_hi"))
        hollow = r.get("link_ok") is False
        ax.errorbar([r["wire_bytes_per_step"]], [g], yerr=[[g - lo], [hi - g]], fmt="o", capsize=3,
                    mfc="none" if hollow else None, label=name_of(r, rows))
        ax.annotate(name_of(r, rows), (r["wire_bytes_per_step"], g), textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.axhline(0, color="gray", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("wire bytes per step (both directions, every link)")
    ax.set_ylabel(f"final val loss / {baseline}'s - 1 (%)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"quality vs bytes at {fmt_bw(bandwidth)}: gap paired by repeat, median of n={reps}, {ci}", fontsize=9)
    save(fig, out, "quality_vs_bytes")


def breakdown(rows, bandwidths, out):
    parts = ["compute", "encode", "decode", "wait"]
    fig, axes = plt.subplots(1, len(bandwidths), figsize=(5.5 * len(bandwidths), 4.2), squeeze=False)
    for ax, bw in zip(axes[0], bandwidths):
        sel = [r for r in rows if r["bandwidth_bps"] == bw and r.get("breakdown_share")]
        bottom = [0.0] * len(sel)
        for part in parts:
            vals = [r["breakdown_share"][part] * r["mean_step_time_s"] for r in sel]
            ax.bar(range(len(sel)), vals, bottom=bottom, label=part)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_xticks(range(len(sel)))
        ax.set_xticklabels([name_of(r, rows) for r in sel], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("mean step time (s), per-stage average")
        ax.set_title(f"time breakdown at {fmt_bw(bw)}")
    axes[0][0].legend(fontsize=8)
    save(fig, out, "time_breakdown")


def timeline(runs, rows, bandwidth, out):
    """Gantt chart of one step per stage (simulated runs, and emulated ones: their last step)."""
    sel = [r for r in rows if r["bandwidth_bps"] == bandwidth and runs.get(r["point"], {}).get("timeline")]
    if not sel:
        return
    sel = [sel[0], sel[-1]] if len(sel) > 1 else sel
    # Simulated and emulated runs alike record one event per action (runtime/exec/executor.h): a send is
    # its encode and hand-off, a receive its wait and decode.
    colors = {"forward": "tab:blue", "backward": "tab:orange", "step": "tab:green", "recv": "silver", "send": "tab:purple",
              "dp_send": "tab:red", "dp_recv": "tab:brown", "dp": "black", "outer_step": "tab:olive"}
    stages = len(runs[sel[0]["point"]]["timeline"])
    fig, axes = plt.subplots(len(sel), 1, figsize=(9, (1.3 + 0.45 * stages) * len(sel) + 0.6), squeeze=False)
    for ax, r in zip(axes[:, 0], sel):
        tl = runs[r["point"]]["timeline"]
        t0 = min((e["start_s"] for st in tl for e in st["events"]), default=0)
        # One row per worker: stage, and with data parallelism (stage, replica).
        replicas = any("replica" in st for st in tl)
        for row, st in enumerate(tl):
            for e in st["events"]:
                ax.barh(row, e["end_s"] - e["start_s"], left=e["start_s"] - t0, color=colors.get(e["what"], "black"),
                        height=0.8, linewidth=0)
        ax.set_yticks(range(len(tl)))
        ax.set_yticklabels([f"{st['stage']}/{st['replica']}" if replicas else str(st["stage"]) for st in tl])
        ax.invert_yaxis()
        ax.set_ylabel("stage/replica" if replicas else "stage")
        ax.set_title(f"{name_of(r, rows)} at {fmt_bw(bandwidth)}: one step", fontsize=9)
    axes[-1][0].set_xlabel("time in the step (s)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    fig.legend(handles, list(colors), fontsize=7, ncol=len(colors), loc="lower center")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save(fig, out, "timeline_slowest")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: plot.py DIR")
    d = sys.argv[1]
    path = os.path.join(d, "summary.json")
    if not os.path.exists(path):
        sys.exit(f"plot: {path} does not exist (run `slowpipe sweep` first)")
    rows = json.load(open(path))["rows"]
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        sys.exit(f"plot: {path} has no completed points")
    summary_doc = json.load(open(path))
    reps = summary_doc.get("repeats", 1)
    # What the bars are: a 95% interval only from 5 repeats on; below, the range, said so.
    ci = "95% bootstrap CI" if summary_doc.get("interval_label", "95% CI" if reps >= 5 else "range") == "95% CI" \
        else "bars: range (under 5 repeats, no CI)"
    runs = {}  # every repeat of each point: loss curves with the repeats' band
    for r in ok:
        for k in range(reps):
            f = os.path.join(d, "runs", f"{r['point']}.r{k}.json")
            if os.path.exists(f):
                runs.setdefault(r["point"], []).append(json.load(open(f)))
    out = os.path.join(d, "figures")
    os.makedirs(out, exist_ok=True)
    versus_bandwidth(ok, "speedup", "speed-up over fp32 (throughput ratio)",
                     f"speed-up vs bandwidth, median of n={reps}, {ci} (dotted: ideal)",
                     out, "speedup_vs_bandwidth", "speedup_lo", "speedup_hi", ideal=True)
    versus_bandwidth(ok, "throughput_tokens_per_s", "throughput (tokens/s)",
                     f"throughput vs bandwidth, median of n={reps}, {ci}", out,
                     "throughput_vs_bandwidth", "throughput_lo", "throughput_hi")
    bws = sorted({r["bandwidth_bps"] for r in ok})
    for tag, bw in (("slowest", bws[0]), ("fastest", bws[-1])):
        loss_curves(runs, ok, bw, "step", out, f"loss_vs_step_{tag}")
        loss_curves(runs, ok, bw, "time", out, f"loss_vs_time_{tag}")
    quality(runs, ok, bws[0], out, "quality_slowest")
    if any(r.get("target_val_loss") is not None for r in ok):
        target = json.load(open(path)).get("target", {})
        what = (f"val loss <= {target['val_loss']:g}" if "val_loss" in target else
                f"baseline's final val loss + {100 * target.get('tolerance', 0.01):g}%")
        # A codec that never reached the target in every repeat is marked "not reached", not left out.
        versus_bandwidth(ok, "time_to_target_s", "time to target (s of wall time)",
                         f"time to target ({what}), median of n={reps}, {ci}", out,
                         "time_to_target_vs_bandwidth", "time_to_target_lo", "time_to_target_hi", unreached=True)
    else:
        print("skipped time_to_target_vs_bandwidth (no target: the runs have no evaluations)")
    if any(r.get("val_loss_gap_vs_baseline") is not None for r in ok):
        versus_bandwidth(ok, "val_loss_gap_vs_baseline", "final val loss / baseline's - 1",
                         f"quality gap vs the baseline, paired by repeat, median of n={reps}, {ci}", out,
                         "val_loss_gap_vs_bandwidth", "val_loss_gap_lo", "val_loss_gap_hi")
    quality_vs_bytes(ok, bws[0], reps, ci, summary_doc.get("baseline", {}).get("label", "baseline"), out)
    breakdown(ok, [bws[0], bws[-1]] if len(bws) > 1 else bws, out)
    timeline({p: rs[0] for p, rs in runs.items()}, ok, bws[0], out)


if __name__ == "__main__":
    main()
