#!/usr/bin/env python3
"""FP8 block-quantized checkpoints (DeepSeek-V3, Qwen3-*-FP8 layout) against transformers.

A tiny Qwen3ForCausalLM written by transformers' save_pretrained is quantized here as those
checkpoints are: every q/k/v/o/gate/up/down weight becomes F8_E4M3 (torch.float8_e4m3fn) with a
float32 `<name>_scale_inv` per block (scale = amax/448, stored = w/scale), norms, embeddings and
lm_head stay float32, and config.json gains quantization_config (fp8, e4m3, dynamic, blocks
32 x 32). A third directory holds the dequantized weights (stored * scale_inv, in float32), saved
by save_pretrained: the reference.

  intermediate_size 80 (not 128) so gate/up/down end in a partial block (80 = 2.5 x 32) and the
  TP 2 split of those 80 rows (40 each) falls inside a block; k/v (32 rows) split at row 16, also
  inside a block: pipefill's loader must dequantize slices that are not block aligned.

pipefill runs the FP8 directory on pp 2, tp 2 and pp 2 x tp 2. Its last-position logits must match
transformers' float32 forward of the dequantized model within 1e-5 of max|logit| (as
scores_check.py), equal pipefill's own on the dequantized directory exactly (the same floats
reach the backend), and be far from the unquantized original's (the quantization error is
hundreds of times the tolerance, so a loader that skipped the scales could not pass). Bad
checkpoints end with exit status 2 and one `error:` line: a missing _scale_inv, a _scale_inv of
the wrong shape, F8 weights without quantization_config, quant_method "gptq".

usage: fp8_check.py BUILD_DIR WORK_DIR   (run with scripts/setup_venv.sh's python)
"""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

from pipefill_runs import HERE, run_pipefill
from score_checks import make_prompts

LOGITS_RTOL = 1e-5  # as scores_check.py
# The quantization must move the logits by far more than the tolerance, or this test could not
# tell a dequantizing loader from one that ignores the scales.
MIN_QUANTIZATION_EFFECT = 100 * LOGITS_RTOL
BLOCK = [32, 32]
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
QUANTIZED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SIZES = dict(hidden_size=64, intermediate_size=80, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, vocab_size=385, max_position_embeddings=4096, rms_norm_eps=1e-6,
             initializer_range=0.1, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
QUANTIZATION_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                       "weight_block_size": BLOCK}
LAYOUTS = [
    ("pp2", 2, "--pp 2 --chunk-size 64 --page-size 16"),
    ("tp2", 2, "--tp 2 --chunk-size 48 --page-size 16"),
    ("pp2_tp2", 4, "--pp 2 --tp 2 --chunk-size 40 --page-size 16"),
]
PROMPT_LENGTHS = [150, 37, 1]


def quantize_blocks(weight):
    """(stored float8_e4m3fn, scale_inv float32 [ceil(rows/B0), ceil(cols/B1)]) of a float32 weight."""
    rows, cols = weight.shape
    grid = (math.ceil(rows / BLOCK[0]), math.ceil(cols / BLOCK[1]))
    stored = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    scale_inv = torch.empty(grid, dtype=torch.float32)
    for i in range(grid[0]):
        for j in range(grid[1]):
            block = (slice(i * BLOCK[0], (i + 1) * BLOCK[0]), slice(j * BLOCK[1], (j + 1) * BLOCK[1]))
            scale = weight[block].abs().max() / FP8_MAX
            scale_inv[i, j] = scale
            stored[block] = (weight[block] / scale).to(torch.float8_e4m3fn)
    return stored, scale_inv


def dequantize(stored, scale_inv):
    """What pipefill computes on load: each code's value times its block's scale, in float32."""
    rows, cols = stored.shape
    scales = scale_inv.repeat_interleave(BLOCK[0], 0).repeat_interleave(BLOCK[1], 1)[:rows, :cols]
    return stored.to(torch.float32) * scales


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=1)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def make_checkpoints(work):
    """The original (float32), FP8 and dequantized (float32) model directories."""
    torch.manual_seed(31)
    original = Qwen3ForCausalLM(Qwen3Config(**SIZES)).eval()
    original_dir, fp8_dir, dequantized_dir = (os.path.join(work, n) for n in ("original", "fp8", "dequantized"))
    original.save_pretrained(original_dir, safe_serialization=True)
    tensors = load_file(os.path.join(original_dir, "model.safetensors"))
    fp8_tensors, dequantized_state = {}, {}
    for name, tensor in tensors.items():
        if name.endswith(".weight") and name.split(".")[-2] in QUANTIZED:
            stored, scale_inv = quantize_blocks(tensor)
            fp8_tensors[name], fp8_tensors[name + "_scale_inv"] = stored, scale_inv
            dequantized_state[name] = dequantize(stored, scale_inv)
        else:
            fp8_tensors[name] = tensor
    os.makedirs(fp8_dir, exist_ok=True)
    save_file(fp8_tensors, os.path.join(fp8_dir, "model.safetensors"), metadata={"format": "pt"})
    config = read_json(os.path.join(original_dir, "config.json"))
    config["quantization_config"] = QUANTIZATION_CONFIG
    write_json(os.path.join(fp8_dir, "config.json"), config)

    dequantized = Qwen3ForCausalLM(Qwen3Config(**SIZES)).eval()
    dequantized.load_state_dict({**tensors, **dequantized_state}, strict=True)
    dequantized.save_pretrained(dequantized_dir, safe_serialization=True)
    shapes = {n.split(".")[-2]: (list(fp8_tensors[n].shape), list(fp8_tensors[n + "_scale_inv"].shape))
              for n in fp8_tensors if n.startswith("model.layers.0.") and n.endswith("proj.weight")}
    print(f"FP8 copy: {sum(n.endswith('_scale_inv') for n in fp8_tensors)} weights as F8_E4M3 in blocks of "
          f"{BLOCK[0]}x{BLOCK[1]}, weight -> scale_inv shapes: " +
          ", ".join(f"{proj} {weight} -> {grid}" for proj, (weight, grid) in sorted(shapes.items())))
    return original_dir, fp8_dir, dequantized_dir


def last_logits(model_dir, prompts):
    model = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return np.stack([model(input_ids=torch.tensor(p[None, :], dtype=torch.long)).logits[0, -1].double().numpy()
                         for p in prompts])


def check_runs(build, work, prompts_h5, prompts, fp8_dir, dequantized_dir, original_dir):
    reference = last_logits(dequantized_dir, prompts)
    unquantized = last_logits(original_dir, prompts)
    scale = max(1.0, float(np.abs(reference).max()))
    tolerance = LOGITS_RTOL * scale
    effect = float(np.abs(reference - unquantized).max())
    print(f"max|logit| {scale:.2f}; the quantization moves the logits by {effect:.2e} "
          f"({effect / scale:.1e} of max|logit|; tolerance {LOGITS_RTOL:.0e})")
    ok = effect >= MIN_QUANTIZATION_EFFECT * scale
    if not ok:
        print(f"FAILED: the quantization changes the logits by less than {MIN_QUANTIZATION_EFFECT:.0e} of max|logit|: "
              "this model cannot show whether the scales were applied")
    for layout, ranks, options in LAYOUTS:
        logits, _, _ = run_pipefill(build, fp8_dir, prompts_h5, os.path.join(work, f"fp8_{layout}.h5"), ranks, options)
        error = float(np.abs(logits - reference).max())
        from_original = float(np.abs(logits - unquantized).max())
        same_as_dequantized, note = True, ""
        if layout == "tp2":  # the FP8 files and their dequantized float32 copy: the same run, bit for bit
            plain, _, _ = run_pipefill(build, dequantized_dir, prompts_h5, os.path.join(work, f"deq_{layout}.h5"),
                                       ranks, options)
            same_as_dequantized = np.array_equal(plain, logits)
            note = f", {'bit-equal to' if same_as_dequantized else 'DIFFERENT from'} its run of the dequantized files"
        layout_ok = (error <= tolerance and from_original >= MIN_QUANTIZATION_EFFECT * scale and same_as_dequantized)
        print(f"  {layout:<8} last logits vs dequantized {error:.1e} ({error / scale:.1e} of max), "
              f"vs unquantized original {from_original:.1e}{note}  {'ok' if layout_ok else 'FAILED'}")
        ok = ok and layout_ok
    return ok


# ---- bad checkpoints: exit status 2, one `error:` line -----------------------------------

def expect_user_error(build, work, name, model_dir, prompts_h5, fragment):
    out_h5 = os.path.join(work, f"bad_{name}.h5")
    mpi_env = os.path.join(HERE, "..", "mpi", "mpi_env.sh")
    command = (f'source "{mpi_env}" && exec timeout 120 mpirun -n 2 "{build}/pipefill" run --model "{model_dir}" '
               f'--input "{prompts_h5}" --output "{out_h5}" --pp 2 --chunk-size 64 --quiet')
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error:")]
    ok = result.returncode == 2 and len(errors) == 1 and fragment in errors[0] and not os.path.exists(out_h5)
    print(f"  {name:<20} status {result.returncode}: {errors[0] if errors else '(no error line)'}  "
          f"{'ok' if ok else 'FAILED (wanted status 2 and one error line with ' + repr(fragment) + ')'}")
    if not ok and not errors:
        print(result.stdout + result.stderr)
    return ok


def broken_copy(fp8_dir, work, name, edit_tensors=None, edit_config=None):
    target = os.path.join(work, f"bad_{name}")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(fp8_dir, target)
    if edit_tensors:
        path = os.path.join(target, "model.safetensors")
        tensors = load_file(path)
        edit_tensors(tensors)
        save_file(tensors, path, metadata={"format": "pt"})
    if edit_config:
        config = read_json(os.path.join(target, "config.json"))
        edit_config(config)
        write_json(os.path.join(target, "config.json"), config)
    return target


def check_bad_checkpoints(build, work, prompts_h5, fp8_dir):
    down = "model.layers.1.mlp.down_proj.weight"  # [64, 80]: scales [2, 3]
    gate = "model.layers.2.mlp.gate_proj.weight"  # [80, 64]: scales [3, 2]
    cases = [
        ("missing_scale_inv", dict(edit_tensors=lambda t: t.pop(down + "_scale_inv")),
         f"scale tensor {down}_scale_inv is missing; it needs shape [2, 3]"),
        # The transposed grid: what a writer confusing [out, in] with [in, out] would store.
        ("scale_inv_shape", dict(edit_tensors=lambda t: t.update({gate + "_scale_inv":
                                                                   t[gate + "_scale_inv"].T.contiguous()})),
         f"{gate}_scale_inv has shape [2, 3] but {gate} needs one scale per block, shape [3, 2]"),
        ("no_quantization", dict(edit_config=lambda c: c.pop("quantization_config")),
         "is stored as F8_E4M3 but config.json has no FP8 quantization_config"),
        ("gptq", dict(edit_config=lambda c: c["quantization_config"].update(quant_method="gptq")),
         'field "quantization_config.quant_method" must be "fp8"'),
    ]
    print("bad checkpoints:")
    results = [expect_user_error(build, work, name, broken_copy(fp8_dir, work, name, **edits), prompts_h5, fragment)
               for name, edits, fragment in cases]
    return all(results)


def main():
    build, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    prompts_h5 = os.path.join(work, "prompts.h5")
    prompts = make_prompts(prompts_h5, PROMPT_LENGTHS, SIZES["vocab_size"], seed=8)
    original_dir, fp8_dir, dequantized_dir = make_checkpoints(work)
    runs_ok = check_runs(build, work, prompts_h5, prompts, fp8_dir, dequantized_dir, original_dir)
    bad_ok = check_bad_checkpoints(build, work, prompts_h5, fp8_dir)
    if not (runs_ok and bad_ok):
        print("FAILED")
        return 1
    print("Passed: FP8 checkpoints load dequantized on every layout, and bad ones are refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
