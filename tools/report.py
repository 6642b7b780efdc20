#!/usr/bin/env python3
"""Markdown report of a sweep folder: the summary table (medians with their intervals over repeats:
a 95% CI from 5 repeats on, the range below)
the paired comparisons, the sweep's own claims (its spec's "claims", judged by `slowpipe summarize`
at the bound of their intervals) and the checks every sweep gets.

Usage: report.py DIR [--baseline fp32] [--html FILE]
Every number printed is read from DIR/summary.json (made by `slowpipe sweep`). With --html (what
`slowpipe report DIR` runs) it writes one self-contained page instead: the table, the claims,
every figure of DIR/figures inline (SVG), the sweep as run, provenance and the link calibration.

A claim passes only if it holds for the whole interval: "speedup_at_least 2" needs the paired speed
ratio's lower bound >= 2. The ideal speed-up bounds the
achieved one by construction; what is checked is that no codec ran faster on a slower link than on
the fastest one, within the spread of the two step times.
"""
import argparse
import json
import os


def bw(bps):
    return f"{bps / 1e9:g} Gbps" if bps >= 1e9 else f"{bps / 1e6:g} Mbps"


def f(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def ci(r, key, lo, hi, digits=2):
    if r.get(key) is None:
        return "-"
    return f"{r[key]:.{digits}f} [{r.get(lo, r[key]):.{digits}f}, {r.get(hi, r[key]):.{digits}f}]"


def columns(summary):
    """The table's headers; the intervals named as the summary names them (a 95% CI only from 5
    repeats on, else the range over the repeats), with n."""
    reps = summary.get("repeats", 1)
    label = summary.get("interval_label", "95% CI" if reps >= 5 else "range")
    iv = f"[{label}, n={reps}]"
    return ["bandwidth", "codec", f"tokens/s {iv}", f"speed-up {iv}", f"ideal {iv}", f"efficiency {iv}",
            f"final val loss {iv}", f"gap vs baseline {iv}", f"time to target, s {iv}", "wire B/step",
            "wait share", "link ok"]


def table_cells(rows):
    """One list of cell texts per row (columns()), sorted by bandwidth then codec."""
    out = []
    for r in sorted(rows, key=lambda r: (r["bandwidth_bps"], r["label"])):
        g = r.get("val_loss_gap_vs_baseline")
        gap = "-" if g is None else (f"{100 * g:+.2f} [{100 * r.get('val_loss_gap_lo', g):+.2f}, "
                                     f"{100 * r.get('val_loss_gap_hi', g):+.2f}]")
        ttt = ci(r, "time_to_target_s", "time_to_target_lo", "time_to_target_hi", 1)
        if r.get("time_to_target_s") is None and r.get("target_reached") is not None:
            ttt = f"not reached ({r['target_reached']} of {r.get('repeats', '?')})"
        out.append([bw(r["bandwidth_bps"]), r["label"], ci(r, "throughput_tokens_per_s", "throughput_lo", "throughput_hi", 0),
                    ci(r, "speedup", "speedup_lo", "speedup_hi"), ci(r, "ideal_speedup", "ideal_lo", "ideal_hi"),
                    ci(r, "efficiency", "efficiency_lo", "efficiency_hi"),
                    ci(r, "final_val_loss", "final_val_loss_lo", "final_val_loss_hi", 4), gap if gap == "-" else gap + " %",
                    ttt, f"{r['wire_bytes_per_step']:.0f}" if r.get("wire_bytes_per_step") is not None else "-",
                    f"{r['wait_share']:.2f}" if r.get("wait_share") is not None else "-",
                    "-" if r.get("link_ok") is None else ("yes" if r["link_ok"] else "NO")])
    return out


def table(rows, summary):
    cols = columns(summary)
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for cells in table_cells(rows):
        print("| " + " | ".join(cells) + " |")


def seeds_text(summary):
    if summary.get("repeat_seeds") == "per_repeat":
        return ("Repeat k trains with training.seed + k: the loss intervals are over seeds, and each codec's "
                "quality gap is paired with the baseline on the same seed.")
    return ("Every repeat trains with the same seed: the loss intervals show only run-to-run nondeterminism "
            "(none where training is deterministic), not how the seed moves a loss; a sweep with "
            "\"repeat_seeds\": \"per_repeat\" judges quality against that.")


def declared(summary):
    """The sweep's own claims (its spec's "claims", judged by `slowpipe summarize` at their bounds):
    (text, pass) with pass True, False or None (no data to judge)."""
    out = []
    for c in summary.get("claims", []):
        parts = [f"{s['setting']}: " + "; ".join(x["text"] for x in s["checks"]) for s in c.get("settings", [])]
        out.append((c["text"] + (": " + " | ".join(parts) if parts else ": no setting of the sweep has data for it"), c.get("pass")))
    return out


def comparison_cells(c, summary):
    """One table row of a paired comparison (summary "comparisons")."""
    def ttt(side):
        t = c.get(side + "time_to_target_s")
        if t is not None:
            return f"{t:.1f} [{c.get(side + 'time_to_target_lo', t):.1f}, {c.get(side + 'time_to_target_hi', t):.1f}]"
        if c.get(side + "target_reached") is not None:
            return f"not reached ({c[side + 'target_reached']} of {c.get(side + 'repeats', '?')})"
        return "-"
    gap = c.get("val_loss_gap")
    gap_text = "-" if gap is None else f"{100 * gap:+.3f} [{100 * c['val_loss_gap_lo']:+.3f}, {100 * c['val_loss_gap_hi']:+.3f}] %"
    diff = c.get("val_loss_diff")
    diff_text = "-" if diff is None else f"{diff:+.4f} [{c['val_loss_diff_lo']:+.4f}, {c['val_loss_diff_hi']:+.4f}]"
    wa, wb = c.get("wire_bytes_per_step"), c.get("vs_wire_bytes_per_step")
    return [c["label"], c["vs"], c["setting"], str(c.get("pairs", 0)), ci(c, "speed_ratio", "speed_ratio_lo", "speed_ratio_hi", 3),
            gap_text, diff_text, ttt(""), ttt("vs_"), "-" if not (wa and wb) else f"{wa / wb:.3f}"]


def comparison_columns(summary):
    label = summary.get("interval_label", "range")
    return ["A", "B", "setting", "n (paired repeats)", f"speed ratio A/B [{label}]", f"val-loss gap A/B - 1 [{label}]",
            f"val-loss A - B [{label}]", f"time to target A, s [{label}]", f"time to target B, s [{label}]", "wire bytes A/B"]


def checks(rows):
    """Checks that hold for any sweep, whatever it claims: the physics of the speed-ups and the links."""
    checks = []
    # The ideal (the codec's fastest step over the links) bounds the achieved speed-up in every
    # round by construction. What is checked instead is the physics behind it: no codec runs faster
    # on a slower link, i.e. T_codec(fastest link) <= T_codec(here) up to the noise of the two step
    # times (tolerance: the relative widths of their own intervals).
    fastest = {}
    for r in rows:
        if r.get("mean_step_time_s") and (r["label"] not in fastest or r["bandwidth_bps"] > fastest[r["label"]]["bandwidth_bps"]):
            fastest[r["label"]] = r
    strict_over, elsewhere = 0, 0
    for r in sorted(rows, key=lambda r: (r["bandwidth_bps"], r["label"])):
        top = fastest.get(r["label"])
        if not r.get("mean_step_time_s") or top is None or top is r:
            continue
        width = lambda x: (x.get("step_time_hi", x["mean_step_time_s"]) - x.get("step_time_lo", x["mean_step_time_s"])) / x["mean_step_time_s"]
        tol = width(r) + width(top)
        ratio = top["mean_step_time_s"] / r["mean_step_time_s"]
        strict_over += top.get("step_time_lo", top["mean_step_time_s"]) > r.get("step_time_hi", r["mean_step_time_s"])
        checks.append((f"no faster on a slower link @ {bw(r['bandwidth_bps'])}, {r['label']}: step time at "
                       f"{bw(top['bandwidth_bps'])} / here = {ratio:.2f} <= 1 + step-time spread {tol:.3f}",
                       ratio <= 1.0 + tol))
    for r in rows:
        top = fastest.get(r["label"])
        elsewhere += top is not None and r.get("ideal_link_bps") not in (None, top["bandwidth_bps"])
    checks.append((f"strictly, {strict_over} row(s) have a step-time interval entirely below the fastest link's; "
                   f"{elsewhere} row(s) take their ideal from a slower link (where the codec's step was fastest)", None))
    not_ok = [r for r in rows if r.get("link_ok") is False]
    checks.append((f"every link reached its configured rate within 3% ({len(not_ok)} point(s) flagged)", not not_ok))
    return checks


def levels(rows, a):
    """Quality gaps of the reference (fixpoint) levels beside the symmetric variant, where a sweep
    has rows labelled '<label> symmetric'. Training is deterministic, so one value per codec."""
    base = {r["bandwidth_bps"]: r for r in rows if r["label"] == a.baseline and r.get("final_val_loss") is not None}
    if not base:
        return
    pairs = []
    for r in rows:
        sym = next((x for x in rows if x["label"] == r["label"] + " symmetric" and x["bandwidth_bps"] == r["bandwidth_bps"]), None)
        if sym and r["bandwidth_bps"] == min(base):
            pairs.append((r, sym))
    if not pairs:
        return
    b = base[min(base)]
    print(f"\nLevel mapping and quality (final val loss vs {a.baseline} {b['final_val_loss']:.4f}):\n")
    print("| codec | levels=fixpoint (reference) | levels=symmetric |")
    print("|---|---|---|")
    for r, sym in sorted(pairs, key=lambda p: p[0]["label"]):
        g1 = r["final_val_loss"] / b["final_val_loss"] - 1
        g2 = sym["final_val_loss"] / b["final_val_loss"] - 1
        print(f"| {r['label']} | {r['final_val_loss']:.4f} ({100 * g1:+.2f}%) | {sym['final_val_loss']:.4f} ({100 * g2:+.2f}%) |")


def target_text(summary, baseline):
    t = summary.get("target", {"tolerance": 0.01})
    if "val_loss" in t:
        return f"the first evaluation at or below validation loss {t['val_loss']:g}"
    return (f"the first evaluation at or below {baseline}'s final validation loss of the same round + "
            f"{100 * t.get('tolerance', 0.01):g}%")


def html_page(d, summary, rows, a):
    """The whole report as one HTML string: no file it needs besides itself."""
    import datetime
    import glob
    import html

    e = html.escape
    reps = summary.get("repeats", 1)
    runs = {}
    for r in rows:
        f = os.path.join(d, "runs", r["point"] + ".r0.json")
        if os.path.exists(f):
            runs[r["point"]] = json.load(open(f))
    sweep_file = os.path.join(d, "sweep.json")
    sweep = json.load(open(sweep_file)) if os.path.exists(sweep_file) else {}
    env = next((run.get("environment") for run in runs.values() if run.get("environment")), {}) or {}
    ident = next((run.get("sweep_identity") for run in runs.values() if run.get("sweep_identity")), {}) or {}
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>slowpipe report: {e(summary.get('sweep', os.path.basename(d)))}</title>",
           "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
           "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #bbb;padding:3px 6px;text-align:right}"
           "td:nth-child(2),th{text-align:left}.pass{color:#060}.fail{color:#a00;font-weight:bold}.note{color:#555}"
           "figure{margin:1em 0}figure svg{max-width:100%;height:auto}pre{background:#f6f6f6;padding:8px;overflow:auto;"
           "font-size:12px}</style></head><body>",
           f"<h1>Sweep <code>{e(summary.get('sweep', ''))}</code></h1>",
           f"<p>{len(rows)} point(s), {reps} repeat(s) each; every figure is the median over the repeats with its "
           f"{e(summary.get('interval', 'interval'))}. Speed-ups and quality gaps are paired by repeat against "
           f"<b>{e(a.baseline)}</b>. Time to target: {e(target_text(summary, a.baseline))} (null where a repeat never "
           f"reached it). {e(seeds_text(summary))}</p>",
           '<h2 id="summary">Summary</h2><table id="summary-table"><thead><tr>' +
           "".join(f"<th>{e(c)}</th>" for c in columns(summary)) + "</tr></thead><tbody>"]
    for cells, r in zip(table_cells(rows), sorted(rows, key=lambda r: (r["bandwidth_bps"], r["label"]))):
        out.append(f'<tr class="point" data-point="{e(r["point"])}">' + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    if summary.get("comparisons"):
        out.append('<h2 id="comparisons">Comparisons, paired by repeat</h2><table id="comparisons-table"><thead><tr>' +
                   "".join(f"<th>{e(c)}</th>" for c in comparison_columns(summary)) + "</tr></thead><tbody>")
        for c in summary["comparisons"]:
            out.append('<tr class="comparison">' + "".join(f"<td>{e(x)}</td>" for x in comparison_cells(c, summary)) + "</tr>")
        out.append("</tbody></table>")
    out.append('<h2 id="claims">Claims of the sweep, each judged at its interval\'s bound</h2><ul>')
    if not summary.get("claims"):
        out.append('<li class="claim note">The sweep declares no claims (a sweep spec\'s "claims").</li>')
    for text, ok in declared(summary):
        cls, word = ("note", "NOT JUDGED") if ok is None else ("pass", "PASS") if ok else ("fail", "FAIL")
        out.append(f'<li class="claim declared {cls}"><b>{word}</b>: {e(text)}</li>')
    out.append('</ul><h2 id="checks">Checks of every sweep</h2><ul>')
    for text, ok in checks(rows):
        cls, word = ("note", "NOTE") if ok is None else ("pass", "PASS") if ok else ("fail", "FAIL")
        out.append(f'<li class="check {cls}"><b>{word}</b>: {e(text)}</li>')
    out.append("</ul>")
    out.append('<h2 id="figures">Figures</h2>')
    figures = sorted(glob.glob(os.path.join(d, "figures", "*.svg")))
    if not figures:
        out.append("<p>No figures: run <code>slowpipe plot</code> first.</p>")
    for f in figures:
        svg = open(f, encoding="utf-8").read()
        svg = svg[svg.find("<svg"):]  # drop the XML prolog and doctype: inline SVG in HTML
        name = os.path.splitext(os.path.basename(f))[0]
        out.append(f'<figure class="figure" id="fig-{e(name)}">{svg}<figcaption>{e(name)}</figcaption></figure>')
    out.append('<h2 id="links">Link calibration (repeat 0 of each point)</h2><table><thead><tr><th>point</th><th>link</th>'
               "<th>configured</th><th>achieved bps</th><th>error</th><th>ok</th></tr></thead><tbody>")
    for r in rows:
        for c in (runs.get(r["point"], {}).get("calibration_links") or []):
            cal = c.get("calibration", {})
            err, got = cal.get("rate_error"), cal.get("achieved_bps")
            out.append(f"<tr><td>{e(r['point'])}</td><td>{c.get('src', '?')} &rarr; {c.get('dst', '?')}</td>"
                       f"<td>{e(str(c.get('link', '-')))}</td><td>{'-' if got is None else f'{got:.4g}'}</td>"
                       f"<td>{'-' if err is None else f'{100 * err:+.1f}%'}</td>"
                       f"<td>{e(str(c.get('link_ok', '-')))}</td></tr>")
    out.append("</tbody></table>")
    out.append('<h2 id="provenance">Provenance</h2><table>')
    prov = {"report written": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "slowpipe commit": ident.get("commit", env.get("git_commit", "-")),
            "working tree dirty": ident.get("dirty", env.get("git_dirty", "-")),
            "spec digest (repeat 0 of a point)": ident.get("spec_digest", "-"),
            "base checkpoint digest": ident.get("checkpoint_digest", "-") or "-"}
    for k, v in env.items():
        if not isinstance(v, (dict, list)) and k not in ("git_commit", "git_dirty"):
            prov[f"environment: {k}"] = v
    for k, v in prov.items():
        out.append(f"<tr><th>{e(k)}</th><td style='text-align:left'>{e(str(v))}</td></tr>")
    out.append("</table>")
    out.append('<h2 id="spec">The sweep as run (<code>sweep.json</code>)</h2>')
    out.append(f"<pre>{e(json.dumps(sweep, indent=2))}</pre></body></html>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--baseline", default="fp32")
    ap.add_argument("--html", help="write a self-contained HTML page here instead of Markdown on stdout")
    a = ap.parse_args()
    summary = json.load(open(os.path.join(a.dir, "summary.json")))
    rows = [r for r in summary["rows"] if r.get("status") == "ok"]
    if a.html:
        tmp = a.html + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(html_page(a.dir, summary, rows, a))
        os.replace(tmp, a.html)
        print(a.html)
        return
    print(f"{summary.get('repeats', 1)} repeats per point; intervals: {summary.get('interval', '-')}. {seeds_text(summary)}\n")
    table(rows, summary)
    levels(rows, a)
    if summary.get("comparisons"):
        print("\nComparisons, paired by repeat:\n")
        cols = comparison_columns(summary)
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for c in summary["comparisons"]:
            print("| " + " | ".join(comparison_cells(c, summary)) + " |")
    print("\nClaims of the sweep (its spec's \"claims\", each judged at its interval's bound):\n")
    if not summary.get("claims"):
        print("- NOTE: the sweep declares no claims")
    for text, ok in declared(summary):
        print(f"- {'NOT JUDGED' if ok is None else 'PASS' if ok else 'FAIL'}: {text}")
    print("\nChecks of every sweep:\n")
    for text, ok in checks(rows):
        print(f"- {'NOTE' if ok is None else 'PASS' if ok else 'FAIL'}: {text}")


if __name__ == "__main__":
    main()
