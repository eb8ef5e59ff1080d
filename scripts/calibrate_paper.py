#!/usr/bin/env python3
"""Calibrate the H20 description's two efficiencies against the seed's table, then predict.

The seed (LMSYS post) reports Qwen3-235B-A22B-FP8 on H20, PP8 x TP4, dynamic chunking
("DCK 18K"): TTFT 10.54 s at 128K, 32.68 s at 256K, 114.33 s at 512K, 420.91 s at 1M.
Only `matmul_efficiency` and `attention_efficiency` are fitted, on the 128K and 256K points
(bounded least squares of the log errors, efficiencies in (0, 1], a coarse then a fine grid
search with `pipefill simulate` as the function); 512K and 1M are then predicted. The
simulation models SGLang, which sends bf16 activations (--wire-bytes 2; pipefill sends float32).

usage: scripts/calibrate_paper.py [--pipefill build/pipefill] [--write hardware/h20.json]
"""
import argparse
import json
import math
import subprocess

PAPER = {131072: 10.54, 262144: 32.68, 524288: 114.33, 1048576: 420.91}
CALIBRATION = (131072, 262144)
CONFIG = "configs/qwen3-235b-a22b-fp8.json"


def ttft(binary, length, mm, attn):
    out = subprocess.run([binary, "simulate", "--model-config", CONFIG, "--hardware", "h20", "--pp", "8", "--tp", "4",
                          "--chunk-size", "18432", "--dynamic-chunking", "--length", str(length), "--wire-bytes", "2",
                          "--matmul-efficiency", f"{mm:.6f}", "--attention-efficiency", f"{attn:.6f}", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ttft_s"][0]


def loss(binary, mm, attn):
    """Sum of squared log errors on the calibration points."""
    return sum(math.log(ttft(binary, n, mm, attn) / PAPER[n]) ** 2 for n in CALIBRATION)


def search(binary, mm_values, attn_values):
    return min((loss(binary, mm, attn), mm, attn) for mm in mm_values for attn in attn_values)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipefill", default="build/pipefill")
    ap.add_argument("--write", help="store the calibrated efficiencies in this hardware file")
    args = ap.parse_args()
    coarse = [round(0.05 * k, 3) for k in range(2, 21)]
    _, mm, attn = search(args.pipefill, coarse, coarse)
    fine = lambda c: [v for v in (round(c + 0.005 * k, 4) for k in range(-10, 11)) if 0.01 <= v <= 1.0]
    _, mm, attn = search(args.pipefill, fine(mm), fine(attn))
    print(f"calibrated H20: matmul_efficiency {mm:.3f}, attention_efficiency {attn:.3f}")
    print(f"{'length':>8} {'paper s':>9} {'simulated s':>12} {'error':>7}  used for")
    for n, paper in PAPER.items():
        sim = ttft(args.pipefill, n, mm, attn)
        role = "calibration" if n in CALIBRATION else "prediction"
        print(f"{n:>8} {paper:9.2f} {sim:12.2f} {100 * (sim - paper) / paper:6.1f}%  {role}")
    if args.write:
        with open(args.write) as f:
            hw = json.load(f)
        hw["matmul_efficiency"] = mm
        hw["attention_efficiency"] = attn
        with open(args.write, "w") as f:
            json.dump(hw, f, indent=2)
            f.write("\n")
        print(f"wrote {args.write}")


if __name__ == "__main__":
    main()
