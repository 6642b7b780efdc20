#!/usr/bin/env python3
"""Figures of results/networks (results/README.md section 20): step time in rank order and placed,
per network and codec, at paper scale (simulated) and at toy scale (user backend, simulator, kernel).
   /usr/bin/python3 tools/plot_networks.py [results/networks]"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

out = sys.argv[1] if len(sys.argv) > 1 else "results/networks"
paper = json.load(open(f"{out}/paper/networks_paper.json"))["rows"]
toy = json.load(open(f"{out}/consumer/networks_consumer.json"))["rows"]
fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
ax = axes[0]
short = {"yuan2022_worldwide_8": "8 cities", "consumer_500_110": "500/110", "consumer_mixed": "mixed"}
labels = [f"{short.get(r['network'], r['network'])}\n{r['codec'].split(' ')[0]}" for r in paper]
x = range(len(paper))
ax.bar([i - 0.2 for i in x], [r["naive_step_s"] for r in paper], 0.4, label="rank order")
ax.bar([i + 0.2 for i in x], [r["best_step_s"] for r in paper], 0.4, label="slowpipe place")
ax.set_yscale("log")
ax.set_xticks(list(x))
ax.set_xticklabels(labels, fontsize=7)
ax.set_ylabel("simulated step time (s)")
ax.set_title("GPT2-XL, 8 stages, analytic A100, tcp model")
ax.legend()
ax = axes[1]
labels = [f"{r['placement'].replace('pipeline-', '')}\n{r['codec'].split(' ')[0]}" for r in toy]
x = range(len(toy))
for k, (key, name) in enumerate([("emulated_s", "user backend"), ("simulated_s", "simulator"), ("kernel_s", "kernel (node line)")]):
    ax.bar([i + (k - 1) * 0.27 for i in x], [r[key] for r in toy], 0.27, label=name)
ax.set_xticks(list(x))
ax.set_xticklabels(labels, fontsize=8)
ax.set_ylabel("mean step time, steps 1-15 (s)")
ax.set_title("4 stages on consumer_mixed, tcp model (median of 3)")
ax.legend()
fig.tight_layout()
fig.savefig(f"{out}/networks.png", dpi=110)
print(f"{out}/networks.png")
