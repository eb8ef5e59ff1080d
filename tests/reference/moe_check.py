#!/usr/bin/env python3
"""Mixture-of-experts and multi-head latent attention against Hugging Face transformers itself,
on tiny checkpoints written by transformers' own config classes and save_pretrained (8 experts,
top 2, hidden 64):

  qwen3_moe        Qwen3-MoE: softmax router, norm_topk_prob, q/k norm, a dense layer among the
                   sparse ones (mlp_only_layers)
  mixtral          Mixtral: block_sparse_moe tensors (w1/w3/w2), always-renormalised top 2
  qwen2_moe        Qwen2-MoE: q/k/v biases, the shared expert and its sigmoid gate, a sparse layer
                   every second one (decoder_sparse_step 2), saved in bfloat16
  deepseek_v3      DeepSeek-V3: MLA (q LoRA, latent KV, interleaved rope), YaRN scaling with
                   mscale_all_dim, a dense first layer, a shared expert, the sigmoid router with
                   e_score_correction_bias, group-limited top-k (4 groups, best 2) and
                   routed_scaling_factor
  deepseek_v3_noq  DeepSeek-V3 without q LoRA (a plain q_proj), default rope, no interleave

Each runs on pp 2, pp 2 x tp 2, tp 2 with whole experts per rank (--expert-split experts),
pp 2 with a dynamic plan (chunks cutting every prompt) and pp 2 x cp 2 (the DeepSeek models
also cp 2 x tp 2 with pass-Q forced),
storing --logprobs --top-k 4 and hidden states: last-position logits within 1e-5 of max|logit|
of transformers' float32 forward, log-probs within 1e-3, confident top-k ids equal, hidden states
within 1e-4 (score_checks.py). An FP8 copy of deepseek_v3 (every projection and expert in
F8_E4M3 blocks, as DeepSeek ships it) runs on pp 2 x tp 2 against transformers' forward of the
dequantized weights. Then bad configurations are refused before any compute.

usage: moe_check.py BUILD_DIR WORK_DIR   (run with scripts/setup_venv.sh's python)
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import transformers
from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig,
                          Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

from fp8_check import QUANTIZATION_CONFIG, dequantize, quantize_blocks
from pipefill_runs import run_pipefill
from score_checks import check_layouts, make_prompts

HERE = os.path.dirname(os.path.abspath(__file__))
LOGITS_RTOL = 1e-5
TOP_K = 4
BASE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=385, max_position_embeddings=4096,
            rms_norm_eps=1e-6, initializer_range=0.1, tie_word_embeddings=False)
EXPERTS = dict(num_experts_per_tok=2)
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 1024,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.8}
MLA = dict(kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, num_key_value_heads=4,
           n_routed_experts=8, moe_intermediate_size=32, intermediate_size=96, n_shared_experts=1,
           first_k_dense_replace=1, n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True)
# name, config class, model class, config, save dtype
MODELS = [
    ("qwen3_moe", Qwen3MoeConfig, Qwen3MoeForCausalLM,
     dict(num_hidden_layers=3, head_dim=16, num_experts=8, moe_intermediate_size=32, intermediate_size=96,
          norm_topk_prob=True, mlp_only_layers=[1], rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
     torch.float32),
    ("mixtral", MixtralConfig, MixtralForCausalLM,
     dict(num_hidden_layers=2, num_local_experts=8, intermediate_size=32), torch.float32),
    ("qwen2_moe", Qwen2MoeConfig, Qwen2MoeForCausalLM,
     dict(num_hidden_layers=4, num_experts=8, moe_intermediate_size=32, intermediate_size=96,
          shared_expert_intermediate_size=48, decoder_sparse_step=2), torch.bfloat16),
    ("deepseek_v3", DeepseekV3Config, DeepseekV3ForCausalLM,
     dict(num_hidden_layers=3, q_lora_rank=32, rope_parameters=YARN, rope_interleave=True, **MLA), torch.float32),
    ("deepseek_v3_noq", DeepseekV3Config, DeepseekV3ForCausalLM,
     dict(num_hidden_layers=2, q_lora_rank=None, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
          rope_interleave=False, **MLA), torch.float32),
]
SCORES = f"--logprobs --top-k {TOP_K}"
LAYOUTS = [
    ("pp2", 2, f"--pp 2 --chunk-size 64 --page-size 16 {SCORES} --hidden-states mean"),
    ("pp2_tp2", 4, f"--pp 2 --tp 2 --chunk-size 40 --page-size 16 {SCORES} --hidden-states last"),
    ("tp2_whole_experts", 2, f"--tp 2 --expert-split experts --chunk-size 48 --page-size 16 {SCORES} --hidden-states last"),
    ("pp2_dynamic", 2, f"--pp 2 --chunk-size 128 --page-size 16 --chunk-policy pipefill {SCORES}"),
]
# Context parallelism: each CP rank routes its own rows, the 2- and 1-token prompts leave some
# ranks without any; MLA's CP ranks hold latent rows by token, expanded where attended (both
# ways round the ring, and pass-Q forced with TP splitting the heads).
CP_LAYOUTS = [
    ("pp2_cp2", 4, f"--pp 2 --cp 2 --chunk-size 37 --page-size 16 {SCORES} --hidden-states mean"),
]
MLA_CP_LAYOUTS = CP_LAYOUTS + [
    ("cp2_tp2_pass_q", 4, f"--cp 2 --tp 2 --cp-attention pass-q --chunk-size 48 --page-size 16 {SCORES} "
                          "--hidden-states last"),
]
PROMPT_LENGTHS = [100, 300, 173, 2, 1]


def build(work, name, config_class, model_class, extra, dtype):
    torch.manual_seed(77)
    model = model_class(config_class(**{**BASE, **EXPERTS, **extra})).eval()
    with torch.no_grad():  # the correction bias starts at zero: make it choose
        for layer in model.model.layers:
            gate = getattr(layer.mlp, "gate", None)
            if gate is not None and hasattr(gate, "e_score_correction_bias"):
                gate.e_score_correction_bias.copy_(torch.randn_like(gate.e_score_correction_bias) * 0.3)
    model_dir = os.path.join(work, name)
    model.to(dtype).save_pretrained(model_dir, safe_serialization=True)
    return model_dir


def check_model(build_dir, work, prompts_h5, prompts, name, config_class, model_class, extra, dtype):
    model_dir = build(work, name, config_class, model_class, extra, dtype)
    layouts = LAYOUTS + (MLA_CP_LAYOUTS if name.startswith("deepseek") else CP_LAYOUTS)
    return check_layouts(build_dir, work, name, model_dir, model_class, prompts_h5, prompts, layouts,
                         TOP_K, LOGITS_RTOL, f" ({dtype})")


def check_fp8(build_dir, work, prompts_h5, prompts):
    """deepseek_v3 with its projections and experts block-quantized (not the router, norms,
    embeddings or head), against transformers on the dequantized weights."""
    from safetensors.torch import load_file, save_file
    original = os.path.join(work, "deepseek_v3")
    fp8_dir, dequantized_dir = os.path.join(work, "deepseek_v3_fp8"), os.path.join(work, "deepseek_v3_dequantized")
    tensors = load_file(os.path.join(original, "model.safetensors"))
    fp8, dequantized = {}, {}
    for name, tensor in tensors.items():
        if name.startswith("model.layers.") and (name.endswith("proj.weight") or name.endswith("proj_with_mqa.weight")):
            stored, scale_inv = quantize_blocks(tensor.float())
            fp8[name], fp8[name + "_scale_inv"] = stored, scale_inv
            dequantized[name] = dequantize(stored, scale_inv)
        else:
            fp8[name] = dequantized[name] = tensor
    with open(os.path.join(original, "config.json")) as f:
        config = json.load(f)
    for directory, weights, extra in ((fp8_dir, fp8, {"quantization_config": QUANTIZATION_CONFIG}),
                                      (dequantized_dir, dequantized, {})):
        os.makedirs(directory, exist_ok=True)
        save_file(weights, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump({**config, **extra}, f)
    quantized = sum(n.endswith("_scale_inv") for n in fp8)
    reference = DeepseekV3ForCausalLM.from_pretrained(dequantized_dir, dtype=torch.float32).eval()
    unquantized = DeepseekV3ForCausalLM.from_pretrained(original, dtype=torch.float32).eval()
    with torch.no_grad():
        want = np.stack([reference(input_ids=torch.tensor(p[None, :], dtype=torch.long)).logits[0, -1].double().numpy()
                         for p in prompts])
        before = np.stack([unquantized(input_ids=torch.tensor(p[None, :], dtype=torch.long)).logits[0, -1].double()
                           .numpy() for p in prompts])
    logits, _, _ = run_pipefill(build_dir, fp8_dir, prompts_h5, os.path.join(work, "fp8_pp2_tp2.h5"), 4,
                                "--pp 2 --tp 2 --chunk-size 40 --page-size 16")
    scale = max(1.0, float(np.abs(want).max()))
    error, moved = float(np.abs(logits - want).max()), float(np.abs(want - before).max())
    good = error <= LOGITS_RTOL * scale and moved > 100 * LOGITS_RTOL * scale
    print(f"deepseek_v3 FP8 ({quantized} weights in F8_E4M3 blocks): pp2_tp2 last logits {error:.1e} from the "
          f"dequantized reference, quantization moved them {moved:.1e} {'ok' if good else 'FAILED'}")
    return good


def refused(build_dir, work, prompts_h5, base_dir, name, edit, ranks=1, options="", expect=""):
    """A copy of `base_dir` changed by `edit(config, dir)` must end in exit status 2 with an
    `error:` line (containing `expect`) and no output file."""
    bad_dir = os.path.join(work, f"bad_{name}")
    shutil.rmtree(bad_dir, ignore_errors=True)
    shutil.copytree(base_dir, bad_dir)
    with open(os.path.join(bad_dir, "config.json")) as f:
        config = json.load(f)
    edit(config, bad_dir)
    with open(os.path.join(bad_dir, "config.json"), "w") as f:
        json.dump(config, f)
    out_h5 = os.path.join(work, f"bad_{name}.h5")
    mpi_env = os.path.join(HERE, "..", "mpi", "mpi_env.sh")
    command = (f'source "{mpi_env}" && exec timeout 120 mpirun -n {ranks} "{build_dir}/pipefill" run '
               f'--model "{bad_dir}" --input "{prompts_h5}" --output "{out_h5}" {options}')
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    error_lines = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith("error:")]
    good = run.returncode == 2 and error_lines and expect in error_lines[0] and not os.path.exists(out_h5)
    print(f"  refused {name:<26} {'ok' if good else 'FAILED'}: {error_lines[0] if error_lines else run.stderr[-300:]}")
    return bool(good)


def drop_tensor(name):
    def edit(config, directory):
        from safetensors.torch import load_file, save_file
        path = os.path.join(directory, "model.safetensors")
        tensors = load_file(path)
        del tensors[name]
        save_file(tensors, path, metadata={"format": "pt"})
    return edit


def add_tensor(name, shape):
    def edit(config, directory):
        from safetensors.torch import load_file, save_file
        path = os.path.join(directory, "model.safetensors")
        tensors = load_file(path)
        tensors[name] = torch.ones(shape)
        save_file(tensors, path, metadata={"format": "pt"})
    return edit


def set_fields(**fields):
    def edit(config, directory):
        config.update(fields)
    return edit


def check_refusals(build_dir, work, prompts_h5):
    qwen, deepseek = os.path.join(work, "qwen3_moe"), os.path.join(work, "deepseek_v3")
    cases = [
        ("too_many_experts_per_token", qwen, set_fields(num_experts_per_tok=9), 1, "", "num_experts_per_tok"),
        ("tp_not_dividing_experts", qwen, set_fields(moe_intermediate_size=25), 2, "--tp 2",
         "moe_intermediate_size (25) does not divide by --tp 2; the TP sizes this model allows: 1"),
        ("missing_expert_tensor", qwen, drop_tensor("model.layers.2.mlp.experts.5.up_proj.weight"), 1, "",
         "model.layers.2.mlp.experts.5.up_proj.weight is missing"),
        ("unknown_router", deepseek, set_fields(scoring_func="softmax"), 1, "", "scoring_func"),
        ("unknown_topk_method", deepseek, set_fields(topk_method="group_limited_greedy"), 1, "", "topk_method"),
        ("unknown_rope_scaling", deepseek,
         set_fields(rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0}), 1, "", "rope_type"),
        ("groups_not_dividing", deepseek, set_fields(n_group=3), 1, "", "n_group"),
        ("sliding_window", os.path.join(work, "mixtral"), set_fields(sliding_window=64), 1, "", "sliding_window"),
        # transformers gives o_proj a bias too, which pipefill does not add: refused, not ignored.
        ("attention_bias_reaches_o_proj", qwen, set_fields(attention_bias=True), 1, "", "attention_bias"),
        ("a_tensor_pipefill_would_not_read", qwen, add_tensor("model.layers.1.self_attn.o_proj.bias", [64]), 1, "",
         "model.layers.1.self_attn.o_proj.bias is in the checkpoint but not in"),
    ]
    return all([refused(build_dir, work, prompts_h5, base, name, edit, ranks, options, expect)
                for name, base, edit, ranks, options, expect in cases])


def main():
    build_dir, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    os.environ["PIPEFILL_TEST_SCORE_BLOCK_ROWS"] = "16"
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    prompts_h5 = os.path.join(work, "prompts.h5")
    prompts = make_prompts(prompts_h5, PROMPT_LENGTHS, BASE["vocab_size"])
    only = os.environ.get("PIPEFILL_MOE_CHECK_ONLY")  # one model's name, when debugging
    failed = [m[0] for m in MODELS
              if (not only or m[0] == only) and not check_model(build_dir, work, prompts_h5, prompts, *m)]
    if not only and not check_fp8(build_dir, work, prompts_h5, prompts):
        failed.append("deepseek_v3 FP8")
    if not only and not check_refusals(build_dir, work, prompts_h5):
        failed.append("refusals")
    if failed:
        print("FAILED:", ", ".join(failed))
        return 1
    print("Passed: MoE and MLA logits, log-probs, top-k and hidden states match transformers on every layout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
