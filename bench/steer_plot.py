#!/usr/bin/env python3
"""Draws a steering simulation (`manifold steer simulate --json`): each origin's load
against its capacity over time, one panel per algorithm side by side, the scenario's
changes as dotted lines.

usage: steer_plot.py RUNS_JSON OUT_PNG
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def panel(ax, run):
    s = run["series"]
    for i, o in enumerate(s["origins"]):
        color = COLORS[i % len(COLORS)]
        ax.plot(s["t"], o["load"], color=color, linewidth=1.4, label="%s load" % o["name"])
        capacity = [c if h else 0 for c, h in zip(o["capacity"], o["healthy"])]
        ax.plot(s["t"], capacity, color=color, linewidth=1, linestyle="--",
                label="%s capacity" % o["name"])
    for c in s["changes"][1:]:
        ax.axvline(c, color="#bbbbbb", linewidth=0.8, linestyle=":")
    m = run["summary"]
    ax.set_title("%s — converged %.0f s, max overload %.1f %%, %d oscillations\n"
                 "excess %.0f flows, mean RTT %.1f ms, served %.1f %%" % (
                     run["algorithm"], m["converged_s"], m["max_overload_pct"], m["oscillations"],
                     m["excess_flows"], m["mean_rtt_ms"], m["served_pct"]), fontsize=9)
    ax.set_xlabel("simulated time (s)")
    ax.grid(alpha=0.3)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        report = json.load(f)
    runs = report["runs"]
    fig, axes = plt.subplots(1, len(runs), figsize=(6.5 * len(runs), 4.6), sharey=True, squeeze=False)
    for ax, run in zip(axes[0], runs):
        panel(ax, run)
    axes[0][0].set_ylabel("new flows/s (capacity dashed: 0 when unhealthy)")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.suptitle("Global steering, scenario %s: load vs capacity" % report["scenario"], fontsize=11)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
