#!/usr/bin/env python3
"""Calibrate the H20 description against the seed's table, freeze it, then predict.

The seed (LMSYS post) reports Qwen3-235B-A22B-FP8 on H20, PP8 x TP4, dynamic chunking
("DCK 18K", smooth factor 0.8): TTFT 10.54 s at 128K, 32.68 s at 256K, 114.33 s at 512K,
420.91 s at 1M. Only `matmul_efficiency` is fitted, on the 128K and 256K points, held to a
physical value (at most 0.8 of the file's peak: no GEMM sustains more); least squares of the
log errors, a coarse then a fine grid with `pipefill simulate` as the function.
`attention_efficiency` is not fitted but predicted from the H100's (hardware/h100.json, which
predicts Meta's 1M-token run within 7 %): FlashAttention's softmax runs on the SMs' vector
units beside the tensor cores, and the share of it that the matrix work cannot hide grows with
the ratio of the tensor rate to the vector rate (peak_tflops bf16 / fp32 in each file):
    efficiency = 1 / (1 + K x bf16 / fp32),  K from the H100's 0.60 at 989.4 / 66.9.
An H20's tensor rate is capped at 148 TFLOP/s beside 44 of fp32 (the H100: 989 beside 67), so
its attention hides most of the softmax: 0.87. The GEMM tile rows (`matmul_half_rows`) are the
file's, not fitted. Then, frozen, the 512K and 1M points are predicted, and so are the seeds'
scaling readings (128K requests one at a time, throughput):
  - DeepSeek-V3.1 PP4 x TP8 (DCK 12K, smooth 0.65) against TP8: 3.31x;
  - the same against TP32 (fixed 12288; equal GPUs): +30.5 %;
  - Qwen3-235B PP8 x TP4 strong-scaling efficiency against PP1 x TP4: 76.9 % with DCK 18K,
    69.6 % with fixed 6K chunks.
The simulation models SGLang: bf16 activations on the wire (--wire-bytes 2), FP8 weights kept
in FP8 (the fp8 matmul rate).

usage: scripts/calibrate_paper.py [--pipefill build/pipefill] [--hardware hardware/h20.json]
                                  [--reference hardware/h100.json] [--bound 0.8] [--write]
"""
import argparse
import json
import math
import subprocess

PAPER = {131072: 10.54, 262144: 32.68, 524288: 114.33, 1048576: 420.91}
CALIBRATION = (131072, 262144)
QWEN = "configs/qwen3-235b-a22b-fp8.json"
DEEPSEEK = "configs/deepseek-v3.1.json"
DYNAMIC_QWEN = ["--chunk-size", "18432", "--dynamic-chunking", "--smooth-factor", "0.8"]
DYNAMIC_DEEPSEEK = ["--chunk-size", "12288", "--dynamic-chunking", "--smooth-factor", "0.65"]


def simulate(args, config, layout, chunking, lengths, mm, attn):
    command = [args.pipefill, "simulate", "--model-config", config, "--hardware", args.hardware, "--wire-bytes", "2",
               "--fp8", "keep",  # SGLang runs the FP8 checkpoints in FP8
               "--matmul-efficiency", f"{mm:.6f}", "--attention-efficiency", f"{attn:.6f}", "--json"]
    command += layout + chunking
    for n in lengths:
        command += ["--length", str(n)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def ttft(args, length, mm, attn):
    return simulate(args, QWEN, ["--pp", "8", "--tp", "4"], DYNAMIC_QWEN, [length], mm, attn)["ttft_s"][0]


def loss(args, mm, attn):
    """Sum of squared log errors on the calibration points."""
    return sum(math.log(ttft(args, n, mm, attn) / PAPER[n]) ** 2 for n in CALIBRATION)


def search(args, mm_values, attn):
    return min((loss(args, mm, attn), mm) for mm in mm_values)


def vector_ratio(path):
    """A file's tensor rate over its vector rate: bf16 matrix over fp32 vector TFLOP/s."""
    with open(path) as f:
        peak = json.load(f)["peak_tflops"]
    return peak["bf16"] / peak["fp32"]


def predicted_attention(args):
    """The attention efficiency the reference GPU's implies for this one (the module's note)."""
    with open(args.reference) as f:
        reference = json.load(f)["attention_efficiency"]
    k = (1 / reference - 1) / vector_ratio(args.reference)
    return 1 / (1 + k * vector_ratio(args.hardware)), reference, k


def throughput(args, config, layout, chunking, mm, attn, requests=1):
    """Tokens per second of `requests` 128K requests sent at once (one: one at a time). The seeds'
    benchmark sends 16 in a row without saying how many are in flight; their throughput ratios
    follow their TTFT ratios for DeepSeek (3.31x against 48.5 s / 15.5 s = 3.13x), so requests are
    taken one at a time, and for Qwen the 16-at-once bound is printed beside."""
    return simulate(args, config, layout, chunking, [131072] * requests, mm, attn)["tokens_per_s"]


def readings(args, mm, attn):
    ds = lambda layout, chunking: throughput(args, DEEPSEEK, layout, chunking, mm, attn)  # noqa: E731
    fixed_12k, fixed_6k = ["--chunk-size", "12288"], ["--chunk-size", "6144"]
    pp4_tp8 = ds(["--pp", "4", "--tp", "8"], DYNAMIC_DEEPSEEK)
    tp8 = ds(["--tp", "8"], fixed_12k)
    tp32 = ds(["--tp", "32"], fixed_12k)

    def qwen_efficiency(chunking, requests=1):
        pp8 = throughput(args, QWEN, ["--pp", "8", "--tp", "4"], chunking, mm, attn, requests)
        return pp8 / (8 * throughput(args, QWEN, ["--tp", "4"], chunking, mm, attn, requests))

    rows = [
        ("DeepSeek PP4 x TP8 (DCK 12K) over TP8", "3.31x", f"{pp4_tp8 / tp8:.2f}x"),
        ("DeepSeek PP4 x TP8 (DCK 12K) over TP32 (fixed 12K)", "+30.5 %", f"{100 * (pp4_tp8 / tp32 - 1):+.1f} %"),
    ]
    for name, paper, chunking in (("DCK 18K", "76.9 %", DYNAMIC_QWEN), ("fixed 6K", "69.6 %", fixed_6k)):
        one, sixteen = qwen_efficiency(chunking), qwen_efficiency(chunking, 16)
        rows.append((f"Qwen PP8 x TP4 efficiency, {name}", paper, f"{100 * one:.1f} %  (16 at once: {100 * sixteen:.1f} %)"))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipefill", default="build/pipefill")
    ap.add_argument("--hardware", default="hardware/h20.json")
    ap.add_argument("--reference", default="hardware/h100.json",
                    help="the GPU whose attention efficiency predicts this one's")
    ap.add_argument("--bound", type=float, default=0.8, help="the largest matmul efficiency the fit may take")
    ap.add_argument("--write", action="store_true", help="store the efficiencies in --hardware")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless --hardware holds these efficiencies and 512K and 1M come within 10 %%")
    args = ap.parse_args()
    attn, reference, slope = predicted_attention(args)
    print(f"attention_efficiency {attn:.3f}, predicted: 1 / (1 + {slope:.4f} x {vector_ratio(args.hardware):.2f}); "
          f"{args.reference}: {reference} at {vector_ratio(args.reference):.2f} bf16 over fp32")
    coarse = [round(v, 3) for v in (0.1 + 0.05 * k for k in range(40)) if v <= args.bound + 1e-9]
    _, mm = search(args, coarse, attn)
    fine = lambda c: [v for v in (round(c + 0.005 * k, 4) for k in range(-10, 11)) if 0.01 <= v <= args.bound]  # noqa
    _, mm = search(args, fine(mm), attn)
    attn = round(attn, 3)
    print(f"calibrated: matmul_efficiency {mm:.3f} (at most {args.bound}"
          + ("; at the bound" if mm >= args.bound - 1e-9 else "") + ")")
    print(f"{'length':>8} {'paper s':>9} {'simulated s':>12} {'error':>7}  used for")
    problems = []
    for n, paper in PAPER.items():
        sim = ttft(args, n, mm, attn)
        role = "calibration" if n in CALIBRATION else "prediction"
        print(f"{n:>8} {paper:9.2f} {sim:12.2f} {100 * (sim - paper) / paper:6.1f}%  {role}")
        if role == "prediction" and abs(sim - paper) > 0.10 * paper:
            problems.append(f"{n} tokens: {sim:.2f} s against the paper's {paper:.2f} s, beyond 10 %")
    if args.check:
        with open(args.hardware) as f:
            hw = json.load(f)
        for key, value in (("matmul_efficiency", mm), ("attention_efficiency", attn)):
            if abs(hw[key] - value) > 0.0051:
                problems.append(f"{args.hardware}: {key} {hw[key]}, the calibration gives {value:.3f} (rerun --write)")
        for problem in problems:
            print(f"FAIL: {problem}")
        raise SystemExit(1 if problems else 0)
    print("\nthe seeds' scaling readings, predicted (one 128K request at a time):")
    for name, paper, simulated in readings(args, mm, attn):
        print(f"  {name:<52} paper {paper:>8}  simulated {simulated}")
    if args.write:
        with open(args.hardware) as f:
            hw = json.load(f)
        hw["matmul_efficiency"] = mm
        hw["attention_efficiency"] = attn
        with open(args.hardware, "w") as f:
            json.dump(hw, f, indent=2)
            f.write("\n")
        print(f"wrote {args.hardware}")


if __name__ == "__main__":
    main()
