#!/usr/bin/env python3
"""Draws a run of `make demo-global` (test/lab/demoglobal writes WORLD_JSON): the shares
lb-ams1 applies and the origins' loads against their capacities over time
(world-shares.png), and each region's latency to web (world-latency.png), the acts'
starts as dotted lines.

usage: world_plot.py WORLD_JSON OUT_DIR
"""
import json
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402


def acts(ax, run, labels):
    for a in run["acts"]:
        ax.axvline(a["t"], color="#bbbbbb", linewidth=0.8, linestyle=":")
        if labels:
            ax.text(a["t"], 1.0, " " + a["title"], rotation=90, va="top", fontsize=7,
                    color="#777777", transform=ax.get_xaxis_transform())


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        run = json.load(f)
    out = sys.argv[2]

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    shares = defaultdict(lambda: ([], []))
    for s in run["shares"] or []:
        if s["service"] == "web":
            t, v = shares["%s → %s" % (s["site"], s["origin"])]
            t.append(s["t"])
            v.append(100 * s["share"])
    for name, (t, v) in sorted(shares.items()):
        top.plot(t, v, linewidth=1.3, label=name)
    top.set_ylabel("web: share of the site (%)")
    top.legend(fontsize=7, ncol=3, loc="center right")
    acts(top, run, True)
    loads = defaultdict(lambda: ([], [], []))
    for s in run["loads"] or []:
        t, v, c = loads["%s %s" % (s["service"], s["origin"])]
        t.append(s["t"])
        v.append(s["load"])
        c.append(s["capacity"])
    for i, (name, (t, v, c)) in enumerate(sorted(loads.items())):
        color = "C%d" % i
        bottom.plot(t, v, color=color, linewidth=1.3, label="%s load" % name)
        if name.startswith("web"):
            bottom.plot(t, c, color=color, linewidth=0.8, linestyle="--", label="%s capacity" % name)
    bottom.set_ylabel("new flows/s")
    bottom.set_xlabel("time (s)")
    bottom.legend(fontsize=7, ncol=2, loc="upper left")
    acts(bottom, run, False)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "world-shares.png"), dpi=110)

    fig, ax = plt.subplots(figsize=(11, 4))
    lat = defaultdict(lambda: ([], [], [], []))
    for s in run["latency"] or []:
        t, v, ft, fv = lat[s["region"]]
        if s["ms"] >= 0:
            t.append(s["t"])
            v.append(s["ms"])
        else:
            ft.append(s["t"])
    for i, (region, (t, v, ft, _)) in enumerate(sorted(lat.items())):
        ax.plot(t, v, color="C%d" % i, linewidth=1, marker=".", markersize=3, label=region)
        if ft:
            # at the bottom of the axes: a failure has no time to draw on the log scale
            ax.plot(ft, [0.03] * len(ft), color="C%d" % i, linestyle="none", marker="x",
                    transform=ax.get_xaxis_transform(), label="%s failed" % region)
    ax.set_ylabel("request on a new connection (ms)")
    ax.set_xlabel("time (s)")
    ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=3)
    acts(ax, run, True)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "world-latency.png"), dpi=110)


if __name__ == "__main__":
    main()
