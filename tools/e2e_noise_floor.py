#!/usr/bin/env python3
"""How well a tier of the end-to-end comparison (tools/wan_e2e.sh) agrees with itself: the floor
under any model's error on this host (results/README.md section 17, "The comparison's own floor").

Needs a run of the script with an even number of repeats (REPEATS=6 sudo tools/wan_e2e.sh OUT): its
rounds alternate the tiers, so repeats 0, 2, 4 and 1, 3, 5 are two runs of the same experiment
interleaved in time. Per tier (kernel path, user backend with the tcp model) and step, the median
of each half, compared as the script compares a tier with the kernel (|A / B - 1|, the second half
the reference): median and max, how many within 5% and 10%. Then each tier's first half against
the other tier's second half and the whole (median over all repeats) user backend and simulator
against the whole kernel path, for scale. Writes OUT/noise_floor.json and prints it.

    tools/e2e_noise_floor.py OUT
    tools/e2e_noise_floor.py --self-test   (ctest: the comparison on runs whose figures are known)
"""
import glob, json, os, re, statistics, sys

POINTS = [(stages, setting, cc) for stages in (2, 4) for setting in ("200Mbps-25ms", "1Gbps-50ms", "100Mbps-100ms")
          for cc in ("reno", "bbr") + (("reno-x4",) if stages == 2 else ())]


def repeats(out, tier, stages, point):
    """{repeat index: [step times]} of one point."""
    runs = {}
    for f in glob.glob(f"{out}/{stages}stage_{tier}/runs/{point}.r*.json"):
        runs[int(re.search(r"\.r(\d+)\.json$", f).group(1))] = [s["time_s"] for s in json.load(open(f))["steps"]]
    if not runs:
        raise SystemExit(f"{out}: no runs of {tier} {stages} stages {point}")
    return runs


def medians(out, runs, keep):
    chosen = [runs[r] for r in sorted(runs) if keep(r)]
    if not chosen:
        raise SystemExit(f"{out}: no repeats in this half (run the script with REPEATS=6)")
    n = min(len(x) for x in chosen)
    return [statistics.median(x[i] for x in chosen) for i in range(n)]


def summary(errors):
    e = [abs(x) for x in errors]
    return {"steps": len(e), "median_abs_error": statistics.median(e), "max_abs_error": max(e),
            "within_5pct": sum(x <= 0.05 for x in e), "within_10pct": sum(x <= 0.10 for x in e)}


EVEN, ODD, ALL = (lambda r: r % 2 == 0), (lambda r: r % 2 == 1), (lambda r: True)
PAIRS = {"kernel vs kernel": ("kernel", EVEN, "kernel", ODD), "user_tcp vs user_tcp": ("user_tcp", EVEN, "user_tcp", ODD),
         "user_tcp vs kernel (halves)": ("user_tcp", EVEN, "kernel", ODD), "kernel vs user_tcp (halves)": ("kernel", EVEN, "user_tcp", ODD),
         "user_tcp vs kernel (all repeats)": ("user_tcp", ALL, "kernel", ALL),
         "simulated_tcp vs kernel (all repeats)": ("simulated_tcp", ALL, "kernel", ALL)}


def floor(out):
    result = {"repeats": {}, "comparisons": {}}
    # Halves of equal size, or the "floor" would compare a median of n + 1 runs with one of n.
    for tier in ("kernel", "user_tcp"):
        counts = sorted({len(repeats(out, tier, s, f"links-{p}_tcp-{c}")) for s, p, c in POINTS})
        if len(counts) != 1 or counts[0] % 2:
            raise SystemExit(f"{out}: {tier} has {' or '.join(map(str, counts))} repeats a point; expected the same even "
                             "number at every point (REPEATS=6 sudo tools/wan_e2e.sh OUT)")
        result["repeats"][tier] = counts
    for name, (ta, ka, tb, kb) in PAIRS.items():
        errs, rows = [], []
        for stages, setting, cc in POINTS:
            point = f"links-{setting}_tcp-{cc}"
            a, b = medians(out, repeats(out, ta, stages, point), ka), medians(out, repeats(out, tb, stages, point), kb)
            for i, (x, y) in enumerate(zip(a, b)):
                errs.append(x / y - 1)
                rows.append({"stages": stages, "setting": setting, "cc": cc, "step": i, "a_s": x, "b_s": y, "error": x / y - 1})
        result["comparisons"][name] = summary(errs)
        result["comparisons"][name]["worst"] = sorted(rows, key=lambda r: -abs(r["error"]))[:5]
    return result


def self_test():
    """Six repeats of two steps a point, every step 1 s, but one: 2 stages 200Mbps-25ms reno's step
    1 on the kernel path, 1.25 s in the odd rounds. The user backend 1.08 s, the simulator 0.85 s."""
    import tempfile
    with tempfile.TemporaryDirectory() as out:
        for stages, setting, cc in POINTS:
            point = f"links-{setting}_tcp-{cc}"
            for tier, n in (("kernel", 6), ("user_tcp", 6), ("simulated_tcp", 1)):
                os.makedirs(f"{out}/{stages}stage_{tier}/runs", exist_ok=True)
                for r in range(n):
                    t = {"kernel": 1.0, "user_tcp": 1.08, "simulated_tcp": 0.85}[tier]
                    steps = [t, 1.25 if tier == "kernel" and r % 2 and (stages, setting, cc) == (2, "200Mbps-25ms", "reno") else t]
                    json.dump({"steps": [{"time_s": x} for x in steps]}, open(f"{out}/{stages}stage_{tier}/runs/{point}.r{r}.json", "w"))
        c = floor(out)["comparisons"]
        def check(name, median, largest, within10):
            s = c[name]
            got = (round(s["median_abs_error"], 9), round(s["max_abs_error"], 9), s["within_10pct"], s["steps"])
            if got != (median, largest, within10, 30):
                raise SystemExit(f"e2e_noise_floor self-test: {name}: got {got}, expected {(median, largest, within10, 30)}")
        check("kernel vs kernel", 0.0, 0.2, 29)                  # 1.0 / 1.25 - 1 at the one step
        check("user_tcp vs user_tcp", 0.0, 0.0, 30)
        check("user_tcp vs kernel (halves)", 0.08, 0.136, 29)    # 1.08 / 1.25 - 1 there, 1.08 / 1 elsewhere
        check("kernel vs user_tcp (halves)", 0.074074074, 0.074074074, 30)  # 1 / 1.08 - 1: the kernel's odd rounds unused
        check("user_tcp vs kernel (all repeats)", 0.08, 0.08, 30)  # the median of 1, 1, 1, 1.25 x 3 is 1.125: 1.08 / 1.125 - 1 = -4%
        check("simulated_tcp vs kernel (all repeats)", 0.15, 0.244444444, 0)  # 0.85 / 1.125 - 1 there
        # An odd number of repeats (the script's default, 3) has no equal halves: refused by name.
        os.remove(f"{out}/4stage_user_tcp/runs/links-1Gbps-50ms_tcp-bbr.r5.json")
        try:
            floor(out)
            raise SystemExit("e2e_noise_floor self-test: 5 repeats at one point were accepted")
        except SystemExit as e:
            if "user_tcp has 5 or 6 repeats a point" not in str(e):
                raise
    print("e2e_noise_floor self-test: PASS")


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = sys.argv[1]
    result = floor(out)
    json.dump(result, open(f"{out}/noise_floor.json", "w"), indent=1)
    print(f"repeats per point: kernel {result['repeats']['kernel']}, user backend {result['repeats']['user_tcp']} "
          "(halves: even and odd rounds, each a median of its repeats)")
    for name, s in result["comparisons"].items():
        w = s["worst"][0]
        print(f"{name}: {s['steps']} steps, median |error| {100 * s['median_abs_error']:.1f}%, max {100 * s['max_abs_error']:.1f}%, "
              f"{s['within_5pct']} within 5%, {s['within_10pct']} within 10% (largest: {w['stages']} stages {w['setting']} {w['cc']} "
              f"step {w['step']}, {w['a_s']:.3f} s against {w['b_s']:.3f} s)")


if __name__ == "__main__":
    main()
