#!/usr/bin/env python3
"""Gantt chart of a pipefill timeline.

Reads either of the two files a run leaves:
  OUT.h5      a run's output (its /timeline dataset), or `pipefill simulate --timeline FILE`
  TRACE.json  the Chrome/Perfetto trace `pipefill run --trace TRACE.json` writes

usage: scripts/plot_timeline.py FILE [--out timeline.png] [--until SECONDS]

One row per rank of each stage (its CP rank and TP rank). Compute in two alternating blues by prompt (so prompt
boundaries show), LM head in purple, loading a prefix from the KV store in brown, copying K/V
out for an export in grey, waiting for a receive in light orange, blocking on a send commit
in red, TP all-reduces as thin green ticks inside compute. Dashed lines mark the start of each
prompt's first chunk on stage 0.
"""
import json
import os
import sys

import python_tool  # beside this file: the `error:` line and exit status 2 of every tool
from python_tool import ArgumentParser, check_output_path, save_figure

python_tool.run_in_venv_unless_importable(__file__, "h5py", "numpy", "matplotlib")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

# The kinds' names as pipefill writes them (the /timeline attribute kind_names, the trace's
# "cat"); an output older than a kind simply has none of it.
DEFAULT_KINDS = ["compute", "recv_wait", "send_commit", "allreduce", "lm_head", "kv_load", "kv_export", "cp_gather"]
COLORS = {"recv_wait": "#f5b971", "send_commit": "#d62728", "allreduce": "#2ca02c", "lm_head": "#9467bd",
          "kv_load": "#8c564b", "kv_export": "#7f7f7f", "cp_gather": "#17becf"}
LABELS = {"lm_head": "LM head", "kv_load": "prefix from the KV store", "kv_export": "K/V copied out for export",
          "cp_gather": "CP rows gathered to CP rank 0",
          "recv_wait": "waiting for a receive", "send_commit": "blocked on a send commit",
          "allreduce": "TP all-reduce"}
PROMPT_BLUES = ["#1f77b4", "#7fb2e0"]


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def read_h5(path):
    """Events as dicts, and the run's attributes, from an output's /timeline."""
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as e:
        fail(f"{path} cannot be read as HDF5 ({e})")
    with f:
        if "timeline" not in f:
            fail(f"{path} has no /timeline: not a finished pipefill output (a .partial file gets its timeline only "
                 "when every prompt is done)")
        t = f["timeline"][:]
        names = f["timeline"].attrs.get("kind_names", ",".join(DEFAULT_KINDS))
        names = (names.decode() if isinstance(names, bytes) else str(names)).split(",")
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    # A row per rank of a stage: its place in the stage (cp rank, then tp rank, as ranks are laid out).
    tp, cp = int(attrs.get("tp", 1) or 1), int(attrs.get("cp", 1) or 1)
    events = [{"kind": names[int(e["kind"])], "stage": int(e["stage"]), "lane": int(e["rank"]) % (cp * tp),
               "prompt": int(e["prompt"]), "chunk_start": int(e["chunk_start"]),
               "start": float(e["t_start_s"]), "end": float(e["t_end_s"])} for e in t]
    for e in events:
        lane = e["lane"]
        e["label"] = f"stage {e['stage']} / " + (f"cp {lane // tp} tp {lane % tp}" if cp > 1 else f"tp {lane}")
    return events, attrs


def read_trace(path):
    """Events from a Chrome trace (`--trace`): complete events, pid = stage, tid = TP rank."""
    try:
        with open(path) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path} is not a readable JSON trace ({e})")
    records = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(records, list):
        fail(f"{path} has no traceEvents: not a trace that `pipefill run --trace` wrote")
    events, thread_names = [], {}
    for e in records:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            thread_names[(e.get("pid"), e.get("tid"))] = str(e.get("args", {}).get("name", ""))
    for e in records:
        if e.get("ph") != "X":
            continue
        args = e.get("args", {})
        stage, lane = int(e["pid"]), int(e["tid"])
        name = thread_names.get((e["pid"], e["tid"]), f"tp {lane}").split(" (rank")[0]
        events.append({"kind": e.get("cat", "compute"), "stage": stage, "lane": lane, "label": f"stage {stage} / {name}",
                       "prompt": int(args.get("prompt", 0)), "chunk_start": int(args.get("chunk_start", -1)),
                       "start": e["ts"] / 1e6, "end": (e["ts"] + e["dur"]) / 1e6})
    return events, {}


def read_events(path):
    if not os.path.isfile(path):
        fail(f"{path} does not exist (give the run's OUT.h5 or the JSON file --trace wrote)")
    with open(path, "rb") as f:
        head = f.read(8)
    if head.startswith(b"\x89HDF"):
        return read_h5(path)
    if head.lstrip()[:1] in (b"{", b"["):
        return read_trace(path)
    fail(f"{path} is neither HDF5 (a run's output) nor JSON (a --trace file)")


def main():
    ap = ArgumentParser(
        description="Gantt chart of a pipefill timeline: one row per rank of each stage, each event a bar.",
        epilog="FILE is a run's output OUT.h5 (its /timeline), a `pipefill simulate --timeline` file, or the "
               "JSON trace `pipefill run --trace TRACE.json` writes.")
    ap.add_argument("file", metavar="FILE", help="OUT.h5 or TRACE.json")
    ap.add_argument("--out", default=None, help="the PNG to write (default: FILE's name with _timeline.png)")
    ap.add_argument("--until", type=float, default=None, help="show only the first SECONDS")
    args = ap.parse_args()
    out = args.out or args.file.rsplit(".", 1)[0] + "_timeline.png"
    check_output_path(out, [args.file])
    events, attrs = read_events(args.file)
    if not events:
        fail(f"{args.file} holds no timeline events")
    rows = sorted({(e["stage"], e["lane"]) for e in events})
    label_of = {(e["stage"], e["lane"]): e["label"] for e in events}
    row_of = {key: i for i, key in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(14, 1.6 + 0.45 * len(rows)))
    kinds_seen = set()
    for e in events:
        if args.until is not None and e["start"] > args.until:
            continue
        kind = e["kind"]
        kinds_seen.add(kind)
        y = row_of[(e["stage"], e["lane"])]
        start, width = e["start"], e["end"] - e["start"]
        if kind == "compute":
            ax.broken_barh([(start, width)], (y - 0.4, 0.8), facecolor=PROMPT_BLUES[e["prompt"] % 2],
                           edgecolor="white", linewidth=0.4)  # chunk boundaries stay visible
        elif kind == "allreduce":
            ax.broken_barh([(start, width)], (y + 0.25, 0.15), color=COLORS[kind])
        else:
            ax.broken_barh([(start, width)], (y - 0.4, 0.8), color=COLORS.get(kind, "black"))
    for e in events:
        if e["kind"] == "compute" and e["stage"] == 0 and e["chunk_start"] == 0:
            ax.axvline(e["start"], color="gray", linestyle="--", linewidth=0.7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label_of[row] for row in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the run's start (rank 0 clock)")
    if args.until is not None:
        ax.set_xlim(0, args.until)
    title = os.path.basename(args.file)
    if attrs:
        cp = f" x cp {attrs.get('cp')}" if int(attrs.get("cp", 1) or 1) > 1 else ""
        title += f": pp {attrs.get('pp')}{cp} x tp {attrs.get('tp')}, chunk {attrs.get('chunk_size')}"
        if attrs.get("chunk_policy_used"):
            title += f" ({attrs.get('chunk_policy_used')})"
    fig.suptitle(title)  # above the legend, which sits above the plot
    handles = [Patch(color=PROMPT_BLUES[0], label="compute (prompts alternate shades)")]
    handles += [Patch(color=COLORS[k], label=LABELS[k]) for k in COLORS if k in kinds_seen]
    # The legend goes above the plot, so it never covers the x axis's label.
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.02), ncol=min(len(handles), 4),
              fontsize=8, frameon=False)
    fig.tight_layout()
    save_figure(fig, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    python_tool.main_with_user_errors(main)
