#!/usr/bin/env python3
"""Draws the benchmark plots from bench/results/latest.json (written by
`manifold-bench report`): ns/packet by path, packets/s by data path, requests/s by
load balancer. Bars are medians over the runs, whiskers min and max.

usage: plot.py LATEST_JSON OUT_DIR
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402


def figures(report, section, metric):
    """Figures of one section and metric, in report order."""
    out = []
    for part in report["parts"]:
        for f in part["figures"]:
            if f["section"] == section and f["metric"] == metric:
                out.append(f)
    return out


def whiskers(figs):
    """Error bars (below, above) from min/median/max."""
    return [
        [f["value"]["median"] - f["value"]["min"] for f in figs],
        [f["value"]["max"] - f["value"]["median"] for f in figs],
    ]


def subtitle(report):
    m = report["machine"]
    return "%s, %d cores, Linux %s — median of runs, whiskers min–max" % (
        m.get("cpu", "?"), m.get("cores", 0), m.get("kernel", "?"))


REFERENCES = ("reference", "minimal", "kernel", "nftables", "HAProxy", "nginx", "direct")


def is_manifold(name):
    """manifold's own paths are drawn in colour, the references in grey."""
    return not any(r in name for r in REFERENCES)


def hbar(ax, figs, unit):
    names = [f["name"] for f in figs]
    vals = [f["value"]["median"] for f in figs]
    colors = ["#1f77b4" if is_manifold(n) else "#aaaaaa" for n in names]
    ax.barh(range(len(figs)), vals, xerr=whiskers(figs), color=colors, capsize=3)
    ax.set_yticks(range(len(figs)), names)
    if not ax.yaxis_inverted():  # panels that share the axis share its inversion
        ax.invert_yaxis()
    ax.set_xlabel(unit)
    for i, f in enumerate(figs):  # the median, written past the whisker
        ax.text(f["value"]["max"], i, "  %s" % fmt(f["value"]["median"]), va="center", fontsize=8)


def fmt(v):
    if v >= 1000:
        return "{:,.0f}".format(v)
    if v >= 10:
        return "%.0f" % v
    return "%.2f" % v


def per_packet(report, out):
    figs = figures(report, "per_packet", "ns/packet")
    if not figs:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(figs) + 1.6))
    hbar(ax, figs, "ns per packet (BPF_PROG_TEST_RUN, repeat = 1, median of calls)")
    ax.set_title("Per-packet cost by path\n" + subtitle(report), fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "per_packet.png")
    fig.savefig(path, dpi=110)
    return path


def packet_rate(report, out):
    mpps = figures(report, "packet_rate", "Mpps")
    nspp = figures(report, "packet_rate", "ns/packet")
    if not mpps:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.42 * len(mpps) + 1.8), sharey=True)
    hbar(axes[0], mpps, "Mpps at the sink (64-byte UDP)")
    axes[0].set_title("Packets/s through one node", fontsize=10)
    if nspp:
        order = {f["name"]: i for i, f in enumerate(mpps)}
        nspp = sorted(nspp, key=lambda f: order.get(f["name"], 99))
        hbar(axes[1], nspp, "device core ns per forwarded packet (/proc/stat)")
        axes[1].set_title("CPU time per packet on the device's core", fontsize=10)
    fig.suptitle(subtitle(report), fontsize=9)
    fig.tight_layout()
    path = os.path.join(out, "packet_rate.png")
    fig.savefig(path, dpi=110)
    return path


def http(report, out):
    rps = figures(report, "http", "req/s")
    if not rps:
        return None
    p99 = {f["name"]: f for f in figures(report, "http", "p99 ms")}
    p50 = {f["name"]: f for f in figures(report, "http", "p50 ms")}
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.5 * len(rps) + 1.8), sharey=True)
    hbar(axes[0], rps, "requests/s (wrk)")
    axes[0].set_title("HTTP requests/s by load balancer", fontsize=10)
    names = [f["name"] for f in rps]
    y = range(len(names))
    axes[1].barh([i - 0.2 for i in y], [p50[n]["value"]["median"] if n in p50 else 0 for n in names],
                 height=0.4, color="#9ecae1", label="p50")
    axes[1].barh([i + 0.2 for i in y], [p99[n]["value"]["median"] if n in p99 else 0 for n in names],
                 height=0.4, color="#3182bd", label="p99")
    axes[1].set_xlabel("latency, ms")
    axes[1].legend(loc="lower right")
    axes[1].set_title("Latency", fontsize=10)
    fig.suptitle(subtitle(report), fontsize=9)
    fig.tight_layout()
    path = os.path.join(out, "http.png")
    fig.savefig(path, dpi=110)
    return path


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    with open(argv[1]) as f:
        report = json.load(f)
    os.makedirs(argv[2], exist_ok=True)
    for draw in (per_packet, packet_rate, http):
        path = draw(report, argv[2])
        if path:
            print("wrote", path)


if __name__ == "__main__":
    main(sys.argv)
