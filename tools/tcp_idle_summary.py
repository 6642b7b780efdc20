#!/usr/bin/env python3
"""The idle-gap grid (tools/tcp_idle_grid.sh) summarized: per case and per message after a gap,
the kernel's min / median / max over its runs beside the tcp model's figure, and where the kernel
has two modes, which one the model follows and what decided it in the kernel's runs.

  tools/tcp_idle_summary.py DIR      -> DIR.json and DIR_printout.txt (DIR: results/wan/idle_gap_validation)

Definitions (fixed before the grid was measured):
  error          model / kernel median - 1, per (case, message after a gap)
  outside        how far the model's figure lies outside the kernel's [min, max]: 0 inside,
                 else the distance over the nearer bound
  two modes      the kernel's sorted times of a message have a gap of more than 5% of their median
                 between two neighbours, with at least 2 runs on each side; the modes are the runs
                 below and above the widest such gap
  decided by     the first message's window at its end (cwnd_after, segments: where slow start
                 left off, HyStart's exit point) and the window the message after the gap started
                 with (cwnd_before), each side's range
  exits          per (RTT, cc), over both gaps' runs (their first message is the same): the first
                 message's cwnd_after, grouped within 2% of each other, with counts
Done when (issue 43): median |error| <= 5% and no outside above 10%.
"""
import glob
import json
import os
import re
import statistics
import sys


def load(d):
    cases = {}
    for f in sorted(glob.glob(os.path.join(d, "*_run*.json"))):
        m = re.match(r"(\d+)ms_(\w+)_gap([\d.]+)_run(\d+)\.json$", os.path.basename(f))
        if not m:
            continue
        with open(f) as fh:
            run = json.load(fh)
        cases.setdefault((int(m.group(1)), m.group(2), float(m.group(3))), []).append(run)
    return cases


def modes(values):
    """Indices split at the widest gap > 5% of the median with >= 2 on each side, or None."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    med = statistics.median(values)
    best = None
    for k in range(2, len(order) - 1):
        gap = values[order[k]] - values[order[k - 1]]
        if gap > 0.05 * med and (best is None or gap > best[0]):
            best = (gap, k)
    if best is None:
        return None
    return order[:best[1]], order[best[1]:]


def span(xs):
    return [min(xs), max(xs)] if xs else None


def summarize(d):
    rows = []
    for (delay, cc, gap), runs in sorted(load(d).items()):
        n_msgs = len(runs[0]["messages"])
        for i in range(1, n_msgs):
            kernel = [r["messages"][i]["measured_s"] for r in runs]
            model = [r["messages"][i]["model_s"] for r in runs]
            kmin, kmed, kmax = min(kernel), statistics.median(kernel), max(kernel)
            mfig = statistics.median(model)
            outside = 0.0 if kmin <= mfig <= kmax else (kmin - mfig) / kmin if mfig < kmin else (mfig - kmax) / kmax
            row = {"delay_ms": delay, "rtt_ms": 2 * delay, "cc": cc, "gap_rto": gap,
                   "idle_s": runs[0]["messages"][i]["idle_s"], "message": i, "runs": len(runs),
                   "kernel_s": {"min": kmin, "median": kmed, "max": kmax}, "model_s": mfig,
                   "model_spread_s": [min(model), max(model)],
                   "error": mfig / kmed - 1, "outside": outside}
            split = modes(kernel)
            if split:
                lo, hi = split
                side = lambda idx: {  # noqa: E731
                    "runs": len(idx), "s": span([kernel[j] for j in idx]),
                    "first_cwnd_after": span([runs[j]["messages"][0]["kernel"]["cwnd_after"] for j in idx]),
                    "cwnd_before": span([runs[j]["messages"][i]["kernel"]["cwnd_before"] for j in idx])}
                lo_max, hi_min = max(kernel[j] for j in lo), min(kernel[j] for j in hi)
                follows = "fast" if abs(mfig - statistics.median([kernel[j] for j in lo])) < \
                    abs(mfig - statistics.median([kernel[j] for j in hi])) else "slow"
                row["two_modes"] = {"fast": side(lo), "slow": side(hi), "model_follows": follows,
                                    "gap_s": hi_min - lo_max}
            rows.append(row)
    exits = []
    groups = {}
    for (delay, cc, gap), runs in load(d).items():
        groups.setdefault((delay, cc), []).extend(r["messages"][0]["kernel"]["cwnd_after"] for r in runs)
    for (delay, cc), values in sorted(groups.items()):
        clusters = []
        for v in sorted(values):
            if clusters and v <= 1.02 * clusters[-1][0]:
                clusters[-1].append(v)
            else:
                clusters.append([v])
        exits.append({"rtt_ms": 2 * delay, "cc": cc, "connections": len(values),
                      "exits": [{"cwnd": [c[0], c[-1]], "connections": len(c)} for c in clusters]})
    errs = [abs(r["error"]) for r in rows]
    out = {"rows": rows, "cases": len({(r["delay_ms"], r["cc"], r["gap_rto"]) for r in rows}),
           "median_abs_error": statistics.median(errs) if errs else None,
           "max_abs_error": max(errs) if errs else None,
           "max_outside": max((r["outside"] for r in rows), default=None),
           "two_mode_messages": sum(1 for r in rows if "two_modes" in r),
           "first_slow_start_exits": exits,
           "done_when": {"median_abs_error_le": 0.05, "outside_le": 0.10}}
    out["holds"] = out["median_abs_error"] is not None and out["median_abs_error"] <= 0.05 and out["max_outside"] <= 0.10
    return out


def printout(s):
    lines = ["case (RTT, cc, gap)           msg  kernel min / median / max (s)   model (s)  error  outside  modes"]
    for r in s["rows"]:
        k = r["kernel_s"]
        m = ""
        if "two_modes" in r:
            t = r["two_modes"]
            m = "two: fast %d runs %s (first cwnd_after %s), slow %d runs %s (%s); model follows %s" % (
                t["fast"]["runs"], "%.3f-%.3f" % tuple(t["fast"]["s"]), t["fast"]["first_cwnd_after"],
                t["slow"]["runs"], "%.3f-%.3f" % tuple(t["slow"]["s"]), t["slow"]["first_cwnd_after"], t["model_follows"])
        lines.append("%3d ms %-5s %.2f RTO (%.3f s)  %d   %.3f / %.3f / %.3f  (n=%d)   %.3f   %+6.1f%%  %5.1f%%  %s" % (
            r["rtt_ms"], r["cc"], r["gap_rto"], r["idle_s"], r["message"], k["min"], k["median"], k["max"], r["runs"],
            r["model_s"], 100 * r["error"], 100 * r["outside"], m))
    lines.append("")
    lines.append("Where the first slow start ended (the first message's cwnd_after, segments; connections):")
    for e in s["first_slow_start_exits"]:
        lines.append("  RTT %3d ms %-5s %s" % (e["rtt_ms"], e["cc"], ", ".join(
            "%s: %d" % (("%d" % x["cwnd"][0]) if x["cwnd"][0] == x["cwnd"][1] else "%d-%d" % tuple(x["cwnd"]), x["connections"])
            for x in e["exits"])))
    lines.append("")
    lines.append("%d cases, %d messages after a gap: median |error| %.1f%%, max |error| %.1f%%, max outside the kernel's range %.1f%%; "
                 "%d messages with two kernel modes; done-when (median <= 5%%, outside <= 10%%) %s" % (
                     s["cases"], len(s["rows"]), 100 * s["median_abs_error"], 100 * s["max_abs_error"], 100 * s["max_outside"],
                     s["two_mode_messages"], "holds" if s["holds"] else "does NOT hold"))
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1].rstrip("/")
    s = summarize(d)
    with open(d + ".json", "w") as fh:
        json.dump(s, fh, indent=1)
    text = printout(s)
    with open(d + "_printout.txt", "w") as fh:
        fh.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
