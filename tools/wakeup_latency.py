#!/usr/bin/env python3
# Wake-up delay of a process blocked on a socket while n busy processes hold the CPUs (a check of
# one explanation of the simulator's under-predicted waits, results/README.md section 7):
#   /usr/bin/python3 tools/wakeup_latency.py
# Round trip of a 1-byte ping-pong between two processes over a socket pair, median and p90 over
# 300 trips, with 0-3 busy-looping processes beside them.
import os, socket, time, statistics, multiprocessing as mp
def busy(stop):
    x = 0
    while not stop.is_set():
        for _ in range(20000): x += 1
def echo(sock):
    while True:
        d = sock.recv(1)
        if not d or d == b'q': return
        sock.send(d)
def trial(n):
    stop = mp.Event()
    ps = [mp.Process(target=busy, args=(stop,)) for _ in range(n)]
    for p in ps: p.start()
    a, b = socket.socketpair()
    e = mp.Process(target=echo, args=(b,)); e.start()
    time.sleep(0.5)
    rt = []
    for _ in range(300):
        t0 = time.monotonic(); a.send(b'x'); a.recv(1); rt.append(time.monotonic() - t0)
        time.sleep(0.002)  # the echo process blocks again between trips
    a.send(b'q'); e.join(); stop.set()
    for p in ps: p.join()
    rt.sort()
    return statistics.median(rt), rt[int(0.9 * len(rt))]
for n in (0, 1, 2, 3):
    m, p90 = trial(n)
    print(f"{n} busy processes: round trip median {m*1e3:.3f} ms, p90 {p90*1e3:.3f} ms")
