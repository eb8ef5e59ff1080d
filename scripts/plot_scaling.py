#!/usr/bin/env python3
"""Strong-scaling plots from scripts/strong_scaling.sh's CSV.

usage: scripts/plot_scaling.py scaling.csv [--out scaling.png]

Left: strong-scaling efficiency T(1) / (P T(P)) against P; right: TTFT (one long prompt)
or time to finish the batch against P. One line per workload and chunk policy.
"""
import argparse
import csv
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    series = defaultdict(list)
    with open(args.csv) as f:
        for row in csv.DictReader(f):
            key = (row["workload"], row["policy"], row["chunk"])
            series[key].append((int(row["pp"]), float(row["efficiency"]), float(row["time_s"])))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for (workload, policy, chunk), points in sorted(series.items()):
        points.sort()
        pps = [p for p, _, _ in points]
        style = "-" if policy != "fixed" else "--"
        label = f"{workload}, {policy} {chunk}"
        left.plot(pps, [100 * e for _, e, _ in points], style, marker="o", label=label)
        right.plot(pps, [t for _, _, t in points], style, marker="o", label=label)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("pipeline stages P")
        ax.grid(True, alpha=0.3)
    left.set_ylabel("strong-scaling efficiency T(1) / (P T(P))  [%]")
    left.set_ylim(0, 105)
    right.set_ylabel("TTFT (long prompt) / batch time [s]")
    right.set_yscale("log")
    left.legend(fontsize=7)
    fig.suptitle(args.csv)
    fig.tight_layout()
    out = args.out or args.csv.rsplit(".", 1)[0] + ".png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
