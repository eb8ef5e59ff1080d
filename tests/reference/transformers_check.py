#!/usr/bin/env python3
"""pipefill against Hugging Face transformers itself, on checkpoints transformers 5 wrote.

For each case a tiny float32 model is built with transformers' own config class, saved with
save_pretrained (which writes the transformers-5 layout: `rope_parameters`, no top-level
rope_theta / rope_scaling), run through `mpirun -n 2 pipefill run --pp 2`, and the logits
of each prompt's last position are compared with transformers' forward. The same weights
under a wrong rope (theta 10000, or llama3 scaling dropped) must give logits far from
pipefill's, so the test cannot pass by ignoring the rope fields. And a tied checkpoint that
also holds an lm_head.weight of its own is read as transformers reads it (that head, untied).
Then config.json edits transformers honours (a key spelt the older way, a family's own
defaults, a length given twice) are read as transformers reads them, and configs it cannot
compute as transformers does are refused naming the field.

usage: transformers_check.py BUILD_DIR WORK_DIR   (run with scripts/setup_venv.sh's python)
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM, LlamaConfig,
                          LlamaForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

from pipefill_runs import run_pipefill
from score_checks import make_prompts

# float32 pipefill vs float32 transformers: the two sum in different orders (chunks of 64,
# pages of 16, BLAS blocking), so they agree to float32 rounding amplified by depth.
# Measured (torch 2.15, transformers 5.24): max abs error 1.9e-6 to 2.3e-6 with max|logit|
# 2.8 to 3.2, i.e. below 1e-6 of max|logit|; the bound leaves more than 10x room.
RTOL = 1e-5
# A wrong rope must move the logits by far more than the bound and by a tenth of their scale
# (measured: 1.6 to 2.2, half of max|logit| or more).
WRONG_FACTOR = 20.0
WRONG_FRACTION = 0.1

SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=512, max_position_embeddings=4096, rms_norm_eps=1e-6,
             # Weights larger than the default 0.02 so that attention is far from uniform and
             # the logits depend strongly on the positions (that is, on the rope).
             initializer_range=0.1)
LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0,
          # Short, so that at 100-300 tokens every band of the remap changes the frequencies.
          "original_max_position_embeddings": 64}
DEFAULT_THETA = {"rope_type": "default", "rope_theta": 10000.0}

# name, config class, model class, rope_parameters, extra config, wrong ropes to tell apart
CASES = [
    ("llama_theta_500k", LlamaConfig, LlamaForCausalLM, {"rope_type": "default", "rope_theta": 500000.0},
     dict(tie_word_embeddings=False), {"theta 10000": DEFAULT_THETA}),
    ("llama3_rope_scaling", LlamaConfig, LlamaForCausalLM, LLAMA3, dict(tie_word_embeddings=False),
     {"theta 10000": DEFAULT_THETA, "llama3 scaling dropped": {"rope_type": "default", "rope_theta": 500000.0}}),
    ("qwen3_theta_1m_tied", Qwen3Config, Qwen3ForCausalLM, {"rope_type": "default", "rope_theta": 1000000.0},
     dict(head_dim=16, tie_word_embeddings=True), {"theta 10000": DEFAULT_THETA}),
]
PROMPT_LENGTHS = [100, 300, 173]


def last_logits(model, prompts):
    with torch.no_grad():
        return np.stack([model(input_ids=torch.tensor(p[None, :], dtype=torch.long)).logits[0, -1].numpy()
                         for p in prompts]).astype(np.float64)


def with_rope(config_class, model_class, model, rope_parameters, extra):
    """The same weights under another rope (inv_freq is a buffer built from the config)."""
    config = config_class(**SIZES, **extra, rope_parameters=dict(rope_parameters))
    other = model_class(config).eval()
    other.load_state_dict(model.state_dict())
    return other


def check_case(build, work, name, config_class, model_class, rope, extra, wrong_ropes):
    torch.manual_seed(1234)
    config = config_class(**SIZES, **extra, rope_parameters=dict(rope))
    model = model_class(config).eval()
    model_dir = os.path.join(work, name)
    model.save_pretrained(model_dir, safe_serialization=True)
    with open(os.path.join(model_dir, "config.json")) as f:
        written = json.load(f)
    # The point of the test: the checkpoint is in the transformers-5 layout.
    assert "rope_parameters" in written, f"{name}: save_pretrained wrote no rope_parameters"
    assert "rope_theta" not in written and "rope_scaling" not in written, f"{name}: top-level rope keys written"
    assert written["rope_parameters"]["rope_theta"] == rope["rope_theta"], written["rope_parameters"]

    prompts_h5 = os.path.join(work, "prompts.h5")
    prompts = make_prompts(prompts_h5, PROMPT_LENGTHS, SIZES["vocab_size"], seed=11)
    expected = last_logits(model, prompts)
    got, _, _ = run_pipefill(build, model_dir, prompts_h5, os.path.join(work, name + ".h5"), 2,
                             "--pp 2 --chunk-size 64 --page-size 16")
    assert got.shape == expected.shape, f"{name}: logits {got.shape}, expected {expected.shape}"

    scale = max(1.0, float(np.abs(expected).max()))
    bound = RTOL * scale
    error = float(np.abs(got - expected).max())
    print(f"{name}: max|logit| {np.abs(expected).max():.3f}, max abs error {error:.3e} (bound {bound:.1e})")
    ok = error <= bound
    for wrong_name, wrong_rope in wrong_ropes.items():
        wrong = last_logits(with_rope(config_class, model_class, model, wrong_rope, extra), prompts)
        distance = float(np.abs(got - wrong).max())
        needed = max(WRONG_FACTOR * bound, WRONG_FRACTION * scale)
        print(f"  vs {wrong_name}: max abs difference {distance:.3e} (must exceed {needed:.1e})")
        ok = ok and distance > needed
    return ok


def check_tied_with_own_head(build, work):
    """tie_word_embeddings true, but the checkpoint also holds an lm_head.weight of other values:
    transformers then does not tie them and computes the logits with lm_head.weight; pipefill
    must give transformers' logits (on pp 2 and on tp 2, where the head is split by vocabulary),
    far from the embeddings' (what tying would give)."""
    from safetensors.torch import load_file, save_file
    name = "qwen3_tied_with_own_lm_head"
    torch.manual_seed(4321)
    config = Qwen3Config(**SIZES, head_dim=16, tie_word_embeddings=True, rope_parameters=dict(DEFAULT_THETA))
    model_dir = os.path.join(work, name)
    Qwen3ForCausalLM(config).save_pretrained(model_dir, safe_serialization=True)
    path = os.path.join(model_dir, "model.safetensors")
    tensors = load_file(path)
    assert "lm_head.weight" not in tensors, "save_pretrained wrote a tied lm_head"
    tensors["lm_head.weight"] = torch.randn_like(tensors["model.embed_tokens.weight"]) * 0.1
    save_file(tensors, path, metadata={"format": "pt"})
    loaded = Qwen3ForCausalLM.from_pretrained(model_dir).eval()  # what transformers makes of it
    assert torch.equal(loaded.lm_head.weight, tensors["lm_head.weight"]), "transformers tied them after all"
    prompts_h5 = os.path.join(work, "prompts.h5")
    prompts = make_prompts(prompts_h5, PROMPT_LENGTHS, SIZES["vocab_size"], seed=11)
    expected = last_logits(loaded, prompts)
    with torch.no_grad():
        loaded.lm_head.weight.copy_(tensors["model.embed_tokens.weight"])
    tied = last_logits(loaded, prompts)
    scale = max(1.0, float(np.abs(expected).max()))
    ok = True
    for layout in ("--pp 2", "--tp 2"):
        got, _, _ = run_pipefill(build, model_dir, prompts_h5, os.path.join(work, name + ".h5"), 2,
                                 f"{layout} --chunk-size 64 --page-size 16")
        error, distance = float(np.abs(got - expected).max()), float(np.abs(got - tied).max())
        print(f"{name} ({layout}): max abs error {error:.3e} (bound {RTOL * scale:.1e}); vs the embeddings as "
              f"the head: {distance:.3e} (must exceed {WRONG_FRACTION * scale:.1e})")
        ok = ok and error <= RTOL * scale and distance > WRONG_FRACTION * scale
    return ok


# config.json edits that transformers honours, each read as transformers reads it: the field
# spelt another way, a default left to the family's configuration class, a value given twice.
# (name, config class, model class, extra config, edit of the written config.json, and the
# config a reader that missed the edit's meaning would compute: the test must tell them apart)
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32}
DEEPSEEK = dict(n_routed_experts=16, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8, qk_rope_head_dim=8,
                v_head_dim=16)
EDITS = [
    # rope_parameters' type under the older key "type" (transformers: setdefault("rope_type", type))
    ("llama_yarn_under_type", LlamaConfig, LlamaForCausalLM, dict(rope_parameters=dict(YARN)),
     lambda c: c["rope_parameters"].update({"type": c["rope_parameters"].pop("rope_type")}),
     dict(rope_parameters=DEFAULT_THETA)),
    # a top-level original_max_position_embeddings wins over the rope object's (Phi-3's layout)
    ("llama3_top_level_original_length", LlamaConfig, LlamaForCausalLM, dict(rope_parameters=dict(LLAMA3)),
     lambda c: c.update(original_max_position_embeddings=512), dict(rope_parameters=dict(LLAMA3))),
    # Mixtral's own defaults: rms_norm_eps 1e-5 and rope_theta 1e6
    ("mixtral_class_defaults", MixtralConfig, MixtralForCausalLM,
     dict(num_local_experts=4, num_experts_per_tok=2, rms_norm_eps=1e-5,
          rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
     lambda c: [c.pop("rms_norm_eps"), c.pop("rope_parameters"), c.pop("rope_theta", None)],
     dict(rms_norm_eps=1e-6, rope_parameters=DEFAULT_THETA)),
    # A window asked for (use_sliding_window) on no layer: Qwen3 windows only the layers its
    # layer_types marks sliding (save_pretrained lists them all "full_attention")...
    ("qwen3_window_on_no_listed_layer", Qwen3Config, Qwen3ForCausalLM, dict(head_dim=16),
     lambda c: c.update(use_sliding_window=True, sliding_window=16),
     dict(use_sliding_window=True, sliding_window=16, max_window_layers=0)),
    # ... and, without the list, Qwen2 those from max_window_layers on (none of 3 here)
    ("qwen2_window_from_max_window_layers", Qwen2Config, Qwen2ForCausalLM, dict(),
     lambda c: [c.pop("layer_types", None), c.update(use_sliding_window=True, sliding_window=16, max_window_layers=3)],
     dict(use_sliding_window=True, sliding_window=16, max_window_layers=0)),
    # DeepseekV3Config's routing defaults: routed_scaling_factor 2.5, n_group 8, topk_group 4
    ("deepseek_v3_routing_defaults", DeepseekV3Config, DeepseekV3ForCausalLM,
     dict(DEEPSEEK, routed_scaling_factor=2.5, n_group=8, topk_group=4),
     lambda c: [c.pop(k) for k in ("routed_scaling_factor", "n_group", "topk_group")],
     dict(routed_scaling_factor=1.0, n_group=1, topk_group=1)),
]
# Configs pipefill cannot compute as transformers does (or that transformers refuses): an
# `error:` naming the field, exit status 2. (name, config class, model class, extra, edit, words)
REFUSED = [
    ("mixtral_window_despite_flag", MixtralConfig, MixtralForCausalLM, dict(num_local_experts=4, num_experts_per_tok=2),
     lambda c: c.update(sliding_window=16, use_sliding_window=False), '"sliding_window"'),
    ("yarn_partial_rotary", LlamaConfig, LlamaForCausalLM, dict(rope_parameters=dict(YARN)),
     lambda c: c["rope_parameters"].update(partial_rotary_factor=0.5), '"rope_parameters.partial_rotary_factor"'),
    ("yarn_without_factor", LlamaConfig, LlamaForCausalLM, dict(rope_parameters=dict(YARN)),
     lambda c: c["rope_parameters"].pop("factor"), '"rope_parameters.factor"'),
    ("qwen3_named_llama", Qwen3Config, Qwen3ForCausalLM, dict(head_dim=16), lambda c: c.update(model_type="llama"),
     '"model_type"'),
    ("qwen3_window_asked_for", Qwen3Config, Qwen3ForCausalLM, dict(head_dim=16),
     lambda c: [c.update(use_sliding_window=True, max_window_layers=1), c.pop("sliding_window", None),
                c.pop("layer_types", None)], '"use_sliding_window"'),
    # a layer typed sliding without use_sliding_window: transformers has no window size for it
    ("qwen3_sliding_layer_not_asked", Qwen3Config, Qwen3ForCausalLM, dict(head_dim=16),
     lambda c: c.update(layer_types=["full_attention", "full_attention", "sliding_attention"]), '"layer_types"'),
]


def saved_with_edit(work, name, config_class, model_class, extra, edit):
    """A model saved by transformers, its config.json then edited; returns the directory and the
    unedited model."""
    torch.manual_seed(99)
    model = model_class(config_class(**{**SIZES, **extra})).eval()
    model_dir = os.path.join(work, name)
    model.save_pretrained(model_dir, safe_serialization=True)
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        config = json.load(f)
    edit(config)
    with open(path, "w") as f:
        json.dump(config, f)
    return model_dir, model


def check_config_edits(build, work):
    ok = True
    prompts_h5 = os.path.join(work, "prompts.h5")
    prompts = make_prompts(prompts_h5, PROMPT_LENGTHS, SIZES["vocab_size"], seed=11)
    for name, config_class, model_class, extra, edit, misread in EDITS:
        model_dir, model = saved_with_edit(work, name, config_class, model_class, extra, edit)
        expected = last_logits(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval(), prompts)
        got, _, _ = run_pipefill(build, model_dir, prompts_h5, os.path.join(work, name + ".h5"), 1,
                                 "--chunk-size 64 --page-size 16")
        scale = max(1.0, float(np.abs(expected).max()))
        error = float(np.abs(got - expected).max())
        wrong = model_class(config_class(**{**SIZES, **extra, **misread})).eval()
        wrong.load_state_dict(model.state_dict())
        distance = float(np.abs(got - last_logits(wrong, prompts)).max())
        print(f"{name}: max abs error {error:.3e} (bound {RTOL * scale:.1e}); vs the config misread: "
              f"{distance:.3e} (must exceed {WRONG_FACTOR * RTOL * scale:.1e})")
        ok = ok and error <= RTOL * scale and distance > WRONG_FACTOR * RTOL * scale
    for name, config_class, model_class, extra, edit, words in REFUSED:
        model_dir, _ = saved_with_edit(work, name, config_class, model_class, extra, edit)
        run = subprocess.run([os.path.join(build, "pipefill"), "run", "--model", model_dir, "--input", prompts_h5,
                              "--output", os.path.join(work, name + ".h5"), "--quiet"],
                             capture_output=True, text=True, timeout=120)
        refused = run.returncode == 2 and run.stderr.startswith("error: ") and words in run.stderr
        print(f"{name}: {'refused' if refused else 'NOT REFUSED'} (exit {run.returncode}): {run.stderr.strip()}")
        ok = ok and refused
    return ok


def main():
    build, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    failed = [case[0] for case in CASES if not check_case(build, work, *case)]
    if not check_tied_with_own_head(build, work):
        failed.append("qwen3_tied_with_own_lm_head")
    if not check_config_edits(build, work):
        failed.append("config.json edits")
    if failed:
        print("FAILED:", ", ".join(failed))
        return 1
    print("Passed: pipefill matches transformers on transformers-5 checkpoints")
    return 0


if __name__ == "__main__":
    sys.exit(main())
