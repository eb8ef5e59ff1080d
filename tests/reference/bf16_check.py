#!/usr/bin/env python3
"""`--dtype bf16` on the cpu backend against transformers, on the real SmolLM2-135M-Instruct.

The prompts of smollm2_check.py (three licence excerpts and a chat prompt). pipefill in bf16
(weights and KV cache stored bf16, GEMM inputs and attention's Q and P rounded to bf16, every
sum and the residual stream float32) on pp 1, pp 2 and tp 3 with chunks that cut the prompts,
and with each bf16 GEMM forced (widened to sgemm; vdpbf16ps where the CPU has it), with
--logprobs, against:
  - transformers in float32 and float64 on the same directory: how far bf16 storage moves the
    logits and log-probs (the accuracy a user gives up for half the memory);
  - transformers in bf16 (torch keeps its residual stream in bf16 too): pipefill's bf16 log-probs
    must be closer to the float64 truth on average than transformers' own bf16 ones;
  - pipefill's own bf16 runs on the other layouts: they differ by bf16's own error, see
    LAYOUT_BOUND, and agree on every prompt's next token.
And the memory: a prompt whose KV does not fit --kv-memory-mb in float32 is refused (exit 2,
one error: line), and fits in bf16.

usage: bf16_check.py BUILD_DIR WORK_DIR MODEL_DIR   (run with scripts/setup_venv.sh's python)
"""
import os
import subprocess
import sys

import h5py
import numpy as np
import torch
from transformers import LlamaForCausalLM

from pipefill_runs import run_pipefill
from smollm2_check import last_logits, make_prompts, write_input

# Measured (torch 2.15, transformers 5.24, OpenBLAS, 2026-12-03, max|logit| ~32), against the
# float64 forward: pipefill bf16's logits 0.23-0.27 max abs, transformers' bf16 0.51; every
# position's log-prob 0.41-0.57 max abs and 0.018-0.021 on average, transformers' bf16 0.84 and
# 0.042 (its residual stream is bf16 too, pipefill's float32). pipefill's average must stay below
# transformers'; the maxima have about 2x room.
LOGIT_BOUND = 0.6
LOGPROB_BOUND = 1.0
LOGPROB_MEAN_BOUND = 0.03
# bf16 runs of different layouts: a partition, a TP split or other chunks sum in other float32
# orders, and where a sum lands on the other side of a bf16 rounding boundary the difference is
# 2^-8 of that value, carried through the later layers: layouts differ by bf16's own error
# (measured 0.06-0.32 in the logits), not by float32 rounding as float32 runs do.
LAYOUT_BOUND = LOGIT_BOUND
# (name, ranks, options, PIPEFILL_BF16_GEMM): each layout with the GEMM the run chooses, and pp 1
# with each of the two bf16 GEMMs forced (vdpbf16ps where the CPU has it): both kernels meet
# the same bounds, whichever this machine would pick.
LAYOUTS = [
    ("pp1", 1, "--pp 1 --chunk-size 64 --page-size 16", None),
    ("pp2", 2, "--pp 2 --chunk-size 96 --page-size 32", None),
    ("tp3", 3, "--tp 3 --chunk-size 128 --page-size 64", None),
    ("cp2", 2, "--cp 2 --chunk-size 64 --page-size 16", None),  # bf16 K/V shards, Q and P rounded as pp1's
    ("pp1_widened", 1, "--pp 1 --chunk-size 64 --page-size 16", "widen"),
]
if "avx512_bf16" in open("/proc/cpuinfo").read():
    LAYOUTS.append(("pp1_vdpbf16ps", 1, "--pp 1 --chunk-size 64 --page-size 16", "dot"))


def token_logprobs(model, prompts):
    """Every position's log-prob of the next prompt token, float64 log-softmax of the model's logits."""
    rows = []
    with torch.no_grad():
        for ids in prompts:
            logits = model(input_ids=torch.tensor(ids[None, :], dtype=torch.long)).logits[0].double()
            lp = torch.log_softmax(logits, dim=-1)
            row = np.full(len(ids), np.nan)
            row[1:] = lp[torch.arange(len(ids) - 1), torch.tensor(ids[1:], dtype=torch.long)].numpy()
            rows.append(row)
    return np.concatenate(rows)


def max_abs(a, b):
    keep = ~np.isnan(b)
    return float(np.abs(a[keep] - b[keep]).max())


def mean_abs(a, b):
    keep = ~np.isnan(b)
    return float(np.abs(a[keep] - b[keep]).mean())


def memory_check(build, model_dir, work):
    """A 1,200-token prompt in 40 MiB of KV: SmolLM2 needs 46,080 bytes a token in float32
    (30 layers x K and V x 3 heads x 64), 23,040 in bf16, so ~910 tokens fit in float32, ~1,820 in bf16."""
    ids = np.tile(np.arange(100, 400, dtype=np.int32), 4)
    prompts_h5 = os.path.join(work, "long.h5")
    write_input(prompts_h5, [ids])
    mpi_env = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi", "mpi_env.sh")
    results = {}
    for dtype in ("f32", "bf16"):
        out = os.path.join(work, f"long_{dtype}.h5")
        command = (f'source "{mpi_env}" && exec timeout 300 mpirun -n 1 "{build}/pipefill" run --model "{model_dir}" '
                   f'--input "{prompts_h5}" --output "{out}" --overwrite --kv-memory-mb 40 --chunk-size 256 '
                   f'--dtype {dtype} --quiet')
        run = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
        errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
        results[dtype] = (run.returncode, errors, os.path.exists(out))
        print(f"  {len(ids)} tokens in 40 MiB of KV, --dtype {dtype}: exit {run.returncode}"
              f"{', ' + errors[0] if errors else ''}")
    f32_code, f32_errors, f32_out = results["f32"]
    bf16_code = results["bf16"][0]
    ok = f32_code == 2 and len(f32_errors) == 1 and not f32_out and bf16_code == 0
    if not ok:
        print("FAILED: float32 must be refused (exit 2, one error: line, no output) and bf16 must fit")
    return ok


def main():
    build, work, model_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    _, prompts = make_prompts(model_dir)
    prompts_h5 = os.path.join(work, "prompts.h5")
    write_input(prompts_h5, prompts)

    f32 = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    truth_logits = last_logits(f32.double(), prompts)
    truth_lp = token_logprobs(f32, prompts)  # f32 is float64 now
    f32 = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    f32_logits = last_logits(f32, prompts)
    bf16 = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    bf16_logits = last_logits(bf16, prompts)
    bf16_lp = token_logprobs(bf16, prompts)
    torch_error = max_abs(bf16_logits, truth_logits)
    torch_lp_mean = mean_abs(bf16_lp, truth_lp)
    print(f"transformers bf16 vs float64: logits {torch_error:.3e}, log-probs {max_abs(bf16_lp, truth_lp):.3e} "
          f"(mean {torch_lp_mean:.3e}); "
          f"float32 vs float64: logits {max_abs(f32_logits, truth_logits):.3e}")

    ok = True
    first = None
    for name, ranks, options, kernel in LAYOUTS:
        out_h5 = os.path.join(work, name + ".h5")
        os.environ.pop("PIPEFILL_BF16_GEMM", None)
        if kernel:
            os.environ["PIPEFILL_BF16_GEMM"] = kernel
        got, attributes, _ = run_pipefill(build, model_dir, prompts_h5, out_h5, ranks,
                                          f"{options} --dtype bf16 --logprobs")
        os.environ.pop("PIPEFILL_BF16_GEMM", None)
        with h5py.File(out_h5, "r") as f:
            lp = f["token_logprobs"][:].astype(np.float64)
        vs_truth, vs_torch = max_abs(got, truth_logits), max_abs(got, bf16_logits)
        lp_error, lp_mean = max_abs(lp, truth_lp), mean_abs(lp, truth_lp)
        layout_error = 0.0 if first is None else max_abs(got, first)
        first = got if first is None else first
        row_ok = (vs_truth <= LOGIT_BOUND and lp_error <= LOGPROB_BOUND and lp_mean <= LOGPROB_MEAN_BOUND
                  and lp_mean < torch_lp_mean
                  and layout_error <= LAYOUT_BOUND and attributes["backend_used"] == "cpu (bf16)"
                  and np.array_equal(got.argmax(axis=1), truth_logits.argmax(axis=1)))
        print(f"{name:<5} logits vs float64 {vs_truth:.3e} (bound {LOGIT_BOUND}, transformers bf16 {torch_error:.3e}), "
              f"vs transformers bf16 {vs_torch:.3e}; log-probs vs float64 {lp_error:.3e} (bound {LOGPROB_BOUND}), "
              f"mean {lp_mean:.3e} (bound {LOGPROB_MEAN_BOUND}, transformers bf16 {torch_lp_mean:.3e}); "
              f"vs pp1 {layout_error:.2e} (bound {LAYOUT_BOUND}) {'ok' if row_ok else 'FAILED'}")
        ok = ok and row_ok
    ok = memory_check(build, model_dir, work) and ok
    if not ok:
        print("FAILED: --dtype bf16 on the cpu backend")
        return 1
    print("Passed: --dtype bf16 is closer to float64 than transformers' bf16 on every layout and halves the KV")
    return 0


if __name__ == "__main__":
    sys.exit(main())
