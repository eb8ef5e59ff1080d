#!/usr/bin/env python3
"""Strong-scaling plots from scripts/strong_scaling.sh's CSV.

usage: scripts/plot_scaling.py scaling.csv [--out scaling.png]

Left: strong-scaling efficiency T(1) / (P T(P)) against P; right: TTFT (one long prompt)
or time to finish the batch against P. One line per workload and chunk policy.
"""
import csv
import os
from collections import defaultdict

import python_tool  # beside this file: the `error:` line and exit status 2 of every tool
from python_tool import ArgumentParser, UserError, check_output_path, save_figure

python_tool.run_in_venv_unless_importable(__file__, "matplotlib")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = args.out or args.csv.rsplit(".", 1)[0] + ".png"
    if not os.path.isfile(args.csv):
        raise UserError(f"{args.csv}: no such file")
    check_output_path(out, [args.csv])
    series = defaultdict(list)
    columns = ("workload", "policy", "chunk", "pp", "efficiency", "time_s")
    try:
        with open(args.csv, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise UserError(f"{args.csv} lacks the column(s) {', '.join(missing)} of scripts/strong_scaling.sh's CSV")
            for line, row in enumerate(reader, start=2):
                try:
                    point = (int(row["pp"]), float(row["efficiency"]), float(row["time_s"]))
                except (TypeError, ValueError):
                    raise UserError(f"{args.csv} line {line}: pp, efficiency and time_s must be numbers")
                series[(row["workload"], row["policy"], row["chunk"])].append(point)
    except UnicodeDecodeError:
        raise UserError(f"{args.csv} is not a text file")
    if not series:
        raise UserError(f"{args.csv} holds no rows")
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
    save_figure(fig, out)  # never a half-written picture, nor another file touched
    print(f"wrote {out}")


if __name__ == "__main__":
    python_tool.main_with_user_errors(main)
