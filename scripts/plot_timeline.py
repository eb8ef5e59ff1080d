#!/usr/bin/env python3
"""Gantt chart of a pipefill timeline (a run's output, or `simulate --timeline`).

usage: scripts/plot_timeline.py OUT.h5 [--out timeline.png] [--until SECONDS]

One row per (stage, TP rank). Compute in two alternating blues by prompt (so prompt
boundaries show), LM head in purple, waiting for a receive in light orange, blocking on a
send commit in red, TP all-reduces as thin green ticks inside compute. Dashed lines mark the
start of each prompt's first chunk on stage 0.
"""
import argparse
import os

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

KINDS = ["compute", "recv_wait", "send_commit", "allreduce", "lm_head"]
COLORS = {"recv_wait": "#f5b971", "send_commit": "#d62728", "allreduce": "#2ca02c", "lm_head": "#9467bd"}
PROMPT_BLUES = ["#1f77b4", "#7fb2e0"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--out", default=None)
    ap.add_argument("--until", type=float, default=None, help="show only the first SECONDS")
    args = ap.parse_args()
    with h5py.File(args.file, "r") as f:
        t = f["timeline"][:]
        attrs = dict(f.attrs)
    rows = sorted({(int(s), int(r)) for s, r in zip(t["stage"], t["tp_rank"])})
    row_of = {key: i for i, key in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(14, 1.2 + 0.45 * len(rows)))
    for e in t:
        if args.until is not None and e["t_start_s"] > args.until:
            continue
        kind = KINDS[int(e["kind"])]
        y = row_of[(int(e["stage"]), int(e["tp_rank"]))]
        start, width = e["t_start_s"], e["t_end_s"] - e["t_start_s"]
        if kind == "compute":
            ax.broken_barh([(start, width)], (y - 0.4, 0.8), facecolor=PROMPT_BLUES[int(e["prompt"]) % 2],
                           edgecolor="white", linewidth=0.4)  # chunk boundaries stay visible
        elif kind == "allreduce":
            ax.broken_barh([(start, width)], (y + 0.25, 0.15), color=COLORS[kind])
        else:
            ax.broken_barh([(start, width)], (y - 0.4, 0.8), color=COLORS[kind])
    first = t[(t["kind"] == 0) & (t["stage"] == 0) & (t["chunk_start"] == 0)]
    for e in first:
        ax.axvline(e["t_start_s"], color="gray", linestyle="--", linewidth=0.7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"stage {s} / tp {r}" for s, r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the run's start (rank 0 clock)")
    if args.until is not None:
        ax.set_xlim(0, args.until)
    policy = attrs.get("chunk_policy_used", b"")
    policy = policy.decode() if isinstance(policy, bytes) else str(policy)
    ax.set_title(f"{os.path.basename(args.file)}: pp {attrs.get('pp')} x tp {attrs.get('tp')}, chunk {attrs.get('chunk_size')} ({policy})")
    ax.legend(handles=[Patch(color=PROMPT_BLUES[0], label="compute (prompts alternate shades)"),
                       Patch(color=COLORS["lm_head"], label="LM head"),
                       Patch(color=COLORS["recv_wait"], label="waiting for a receive"),
                       Patch(color=COLORS["send_commit"], label="blocked on a send commit"),
                       Patch(color=COLORS["allreduce"], label="TP all-reduce")],
              loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=5, fontsize=8, frameon=False)
    fig.tight_layout()
    out = args.out or args.file.rsplit(".", 1)[0] + "_timeline.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
