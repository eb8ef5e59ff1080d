#!/usr/bin/env python3
"""TTFT against GPUs for the best layouts `pipefill advise` ranked.

usage: pipefill advise ... --json > advice.jsonl
       scripts/plot_advice.py advice.jsonl [--out advice.png] [--families 5]
(`pipefill advise --plot advice.png` runs this for you.)

Layouts are grouped into families by how they grow: the TP size, and whether CP is used
("pp x tp 8": pp 1, 2, 4, ... at tp 8; "pp x cp x tp 4"). Each family's line
goes through its fastest layout at each GPU count (the fastest family's points are labelled
with their layout and chunk); the families drawn are those with the fastest layouts overall. Left: time; right: strong-scaling
efficiency against the smallest allocation that fits (advise's column).
"""
import json
import os
from collections import defaultdict

import python_tool  # beside this file: the `error:` line and exit status 2 of every tool
from python_tool import ArgumentParser, UserError, check_output_path, save_figure

python_tool.run_in_venv_unless_importable(__file__, "matplotlib")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def family(row):
    """Layouts of one TP size, with or without CP: the line along which pp (and cp) grow."""
    return f"pp x cp x tp {row['tp']}" if row["cp"] > 1 else f"pp x tp {row['tp']}"


def main():
    ap = ArgumentParser()
    ap.add_argument("rows", help="advise --json output: one layout a line")
    ap.add_argument("--out", default=None)
    ap.add_argument("--families", type=int, default=5)
    args = ap.parse_args()
    out = args.out or os.path.splitext(args.rows)[0] + ".png"
    if not os.path.isfile(args.rows):
        raise UserError(f"{args.rows}: no such file")
    check_output_path(out, [args.rows])
    rows = []
    keys = ("pp", "cp", "tp", "gpus", "time_s", "efficiency", "chunk_size", "chunk_policy")
    try:
        with open(args.rows) as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    raise UserError(f"{args.rows} line {number} is not JSON (give `pipefill advise --json`'s output)")
                if not isinstance(row, dict) or any(k not in row for k in keys):
                    raise UserError(f"{args.rows} line {number} is not a layout of `pipefill advise --json` "
                                    f"(it needs {', '.join(keys)})")
                rows.append(row)
    except UnicodeDecodeError:
        raise UserError(f"{args.rows} is not a text file")
    if not rows:
        raise UserError(f"{args.rows} holds no layouts")
    best = defaultdict(dict)  # family -> gpus -> fastest row
    for row in rows:
        kept = best[family(row)].get(row["gpus"])
        if kept is None or row["time_s"] < kept["time_s"]:
            best[family(row)][row["gpus"]] = row
    ranked = sorted(best, key=lambda name: min(r["time_s"] for r in best[name].values()))[: args.families]

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for name in ranked:
        points = sorted(best[name].items())
        gpus = [g for g, _ in points]
        left.plot(gpus, [r["time_s"] for _, r in points], marker="o", label=name)
        right.plot(gpus, [100 * r["efficiency"] for _, r in points], marker="o", label=name)
        for g, r in points if name == ranked[0] else []:  # the fastest family's layouts, named
            chunk = f"C0 {r['chunk_size']}" if r["chunk_policy"] != "fixed" else f"{r['chunk_size']}"
            left.annotate(f"pp{r['pp']} cp{r['cp']} tp{r['tp']}\n{chunk}", (g, r["time_s"]), fontsize=6,
                          textcoords="offset points", xytext=(4, 4))
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.grid(True, alpha=0.3)
    left.set_yscale("log")
    left.set_ylabel("time for the batch (one prompt: TTFT) [s]")
    right.set_ylabel("strong-scaling efficiency [%]")
    right.set_ylim(0, 110)
    left.legend(fontsize=8)
    fig.suptitle(f"pipefill advise: {len(rows)} layouts ranked, the {len(ranked)} fastest families")
    fig.tight_layout()
    save_figure(fig, out)  # never a half-written picture, nor another file touched
    print(f"wrote {out}")


if __name__ == "__main__":
    python_tool.main_with_user_errors(main)
