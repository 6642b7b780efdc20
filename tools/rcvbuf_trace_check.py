#!/usr/bin/env python3
"""Replays Linux's receive-buffer growth (tcp_rcvbuf_grow, the rule emulator/tcp_settings.cc's
receiveBufferAfterMeasure transcribes) over a saved trace of the kernel's tcp:tcp_rcvbuf_grow
tracepoint, one connection per file: every event's buffer must be what the previous event's
figures give (copied less inq after space, the scaling ratio, 32 MiB at most), to the byte.

  tools/rcvbuf_trace_check.py results/wan/mtu9000_validation/rcvbuf_grow_mtu*.txt
"""
import re
import sys


def grown(copied, space, ratio, cap=33554432):
    window = copied << 1
    window += (window * (copied - space) // space) << 1
    return min(window * 256 // ratio, cap)


def main(paths):
    bad = 0
    for path in paths:
        rows = [dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", line)) for line in open(path)]
        rows = [r for r in rows if "rcvbuf" in r]
        for a, b in zip(rows, rows[1:]):
            c = a["copied"] - a["inq"]
            want = max(a["rcvbuf"], grown(c, a["space"], a["scaling_ratio"])) if c > a["space"] else a["rcvbuf"]
            if want != b["rcvbuf"]:
                bad += 1
                print(f"{path}: {c} read after {a['space']}: the rule gives {want}, the kernel {b['rcvbuf']}")
        print(f"{path}: {len(rows)} events, {max(len(rows) - 1, 0)} steps replayed")
    print("every step to the byte" if bad == 0 else f"{bad} steps differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
