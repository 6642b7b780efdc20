#!/usr/bin/env python3
"""Summary of a grid of `slowpipe emulator tcp-messages` runs (tools/tcp_model_grid.sh, both
grids): OUT/<case>_seed<s>.json, the runs of one case (its seeds or repeats)
averaged per message; writes OUT.json (median and max |error| of the model per message, the
worst messages, splits by loss, congestion control, rate and receive buffer) and prints it.

    tools/tcp_grid_summary.py OUT
"""
import collections, glob, json, os, statistics, sys
out = sys.argv[1]
cases = collections.defaultdict(list)  # case (without seed) -> runs
for f in sorted(glob.glob(out + "/*ms_*_seed*.json")):
    cases[os.path.basename(f).rsplit("_seed", 1)[0]].append(json.load(open(f)))
rows = []
for case, runs in sorted(cases.items()):
    for k, m in enumerate(runs[0]["messages"]):
        measured = statistics.mean(r["messages"][k]["measured_s"] for r in runs)
        model = statistics.mean(r["messages"][k]["model_s"] for r in runs)
        rows.append({"case": case, "seeds": len(runs), "bytes": m["bytes"], "idle_s": m["idle_s"], "measured_s": measured,
                     "model_s": model, "error": model / measured - 1,
                     "retrans": [r["messages"][k]["kernel"]["retrans"] for r in runs],
                     # the receiver's window at the message's start, and the time the kernel said it limited the sender
                     "snd_wnd_before": [r["messages"][k]["kernel"].get("snd_wnd_before") for r in runs],
                     "rwnd_limited_s": [r["messages"][k]["kernel"].get("rwnd_limited_s") for r in runs]})
errs = [abs(r["error"]) for r in rows]
summary = {"messages": len(rows), "median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
           "within_10pct": sum(e <= 0.10 for e in errs), "within_25pct": sum(e <= 0.25 for e in errs),
           "worst": sorted(rows, key=lambda r: -abs(r["error"]))[:8], "by": {}}
parts = [("loss 0", lambda r: r["case"].endswith("loss0")), ("loss 0.1%", lambda r: not r["case"].endswith("loss0")),
         ("cubic", lambda r: "_cubic_" in r["case"]), ("bbr", lambda r: "_bbr_" in r["case"]),
         ("100Mbps", lambda r: r["case"].startswith("100Mbps")), ("1Gbps", lambda r: r["case"].startswith("1Gbps"))]
for rmem in sorted({t for r in rows for t in r["case"].split("_") if t.startswith(("rmem", "streams"))}):  # GRID=rwnd's buffers, GRID=streams' N
    parts.append((rmem, lambda r, t=rmem: f"_{t}_" in r["case"]))
for part, keep in parts:
    e = [abs(r["error"]) for r in rows if keep(r)]
    if not e:
        continue
    summary["by"][part] = {"messages": len(e), "median_abs_error": statistics.median(e), "max_abs_error": max(e),
                           "within_10pct": sum(x <= 0.10 for x in e), "within_25pct": sum(x <= 0.25 for x in e)}
summary["rows"] = rows
json.dump(summary, open(out + ".json", "w"), indent=1)
print(f"{len(rows)} messages: median |error| {100 * summary['median_abs_error']:.1f}%, max {100 * summary['max_abs_error']:.1f}%, "
      f"{summary['within_10pct']} within 10%, {summary['within_25pct']} within 25%")
for part, b in summary["by"].items():
    print(f"  {part}: {b['messages']} messages, median |error| {100 * b['median_abs_error']:.1f}%, max {100 * b['max_abs_error']:.1f}%, "
          f"{b['within_10pct']} within 10%, {b['within_25pct']} within 25%")
for r in summary["worst"]:
    print(f"  {r['case']} {r['bytes']} B after {r['idle_s']:.3g} s: measured {r['measured_s']:.4f} s, model {r['model_s']:.4f} s "
          f"({100 * r['error']:+.1f}%), retransmits {r['retrans']}, receive window {r['snd_wnd_before']} B, "
          f"receive-window-limited {r['rwnd_limited_s']} s")
rw = [r for r in rows if any(x for x in r["rwnd_limited_s"] if x)]
print(f"  receive-window-limited in some seed: {len(rw)} messages, "
      f"{sum(abs(r['error']) > 0.05 for r in rw)} of them off by more than 5%")
