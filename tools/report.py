#!/usr/bin/env python3
"""Markdown report of a sweep folder: the summary table and the AC-SGD claims checked against it.

Usage: report.py DIR [--baseline fp32] [--acsgd "AC-SGD fw2/bw4"] [--directq "DirectQ fw2/bw4"]
Every number printed is read from DIR/summary.json (made by `slowpipe sweep`).
"""
import argparse
import json
import os


def bw(bps):
    return f"{bps / 1e9:g} Gbps" if bps >= 1e9 else f"{bps / 1e6:g} Mbps"


def f(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--baseline", default="fp32")
    ap.add_argument("--acsgd", default="AC-SGD fw2/bw4")
    ap.add_argument("--directq", default="DirectQ fw2/bw4")
    a = ap.parse_args()
    rows = [r for r in json.load(open(os.path.join(a.dir, "summary.json")))["rows"] if r.get("status") == "ok"]
    print("| bandwidth | codec | tokens/s | speed-up | ideal | efficiency | final val loss | vs fp32 | wire B/step | wait share | time to fp32 loss (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["bandwidth_bps"], r["label"])):
        print(f"| {bw(r['bandwidth_bps'])} | {r['label']} | {r['throughput_tokens_per_s']:.0f} | {f(r.get('speedup'), 2)} | "
              f"{f(r.get('ideal_speedup'), 2)} | {f(r.get('efficiency'), 2)} | {r['final_val_loss']:.4f} | "
              f"{f(100 * r['val_loss_gap_vs_baseline'] if r.get('val_loss_gap_vs_baseline') is not None else None, 2)}% | "
              f"{r['wire_bytes_per_step']:.0f} | {r['wait_share']:.2f} | {f(r.get('time_to_target_s'), 1)} |")
    by = {(r["label"], r["bandwidth_bps"]): r for r in rows}
    bws = sorted({r["bandwidth_bps"] for r in rows})
    print("\nClaims (thresholds from the issue):\n")
    checks = []
    for b in bws:
        ac, dq, base = by.get((a.acsgd, b)), by.get((a.directq, b)), by.get((a.baseline, b))
        if not (ac and dq and base):
            continue
        gap_ac = ac["final_val_loss"] / base["final_val_loss"] - 1
        gap_dq = dq["final_val_loss"] / base["final_val_loss"] - 1
        checks.append((f"quality @ {bw(b)}: AC-SGD within 2% of fp32 ({100 * gap_ac:+.2f}%)", abs(gap_ac) <= 0.02))
        checks.append((f"quality @ {bw(b)}: DirectQ gap ({100 * gap_dq:+.2f}%) >= 2x AC-SGD's ({100 * gap_ac:+.2f}%)",
                       gap_dq >= 2 * max(gap_ac, 0)))
    sp = [(b, by[(a.acsgd, b)]["speedup"]) for b in bws if (a.acsgd, b) in by]
    if sp:
        checks.append((f"speed @ {bw(sp[0][0])}: AC-SGD speed-up {sp[0][1]:.2f} >= 2", sp[0][1] >= 2))
        mono = all(sp[i + 1][1] <= sp[i][1] for i in range(len(sp) - 1))
        checks.append(("speed: AC-SGD speed-up not increasing with bandwidth (" + ", ".join(f"{s:.2f}" for _, s in sp) + ")", mono))
        checks.append((f"speed @ {bw(sp[-1][0])}: AC-SGD speed-up {sp[-1][1]:.2f} >= 0.97", sp[-1][1] >= 0.97))
        slow = by[(a.acsgd, sp[0][0])]
        if slow.get("efficiency") is not None:
            checks.append((f"efficiency @ {bw(sp[0][0])}: achieved/ideal = {slow['speedup']:.2f}/{slow['ideal_speedup']:.2f} = "
                           f"{slow['efficiency']:.2f} >= 0.9", slow["efficiency"] >= 0.9))
    for text, ok in checks:
        print(f"- {'PASS' if ok else 'FAIL'}: {text}")


if __name__ == "__main__":
    main()
