#!/usr/bin/env python3
"""The model families of the cuda backend's end-to-end matrix that pipefill has no preset for,
written by transformers' own save_pretrained (tests/reference/moe_check.py's tiny configs):

  mixtral          Mixtral (block_sparse_moe w1/w3/w2), bf16
  qwen2_moe        Qwen2-MoE (q/k/v biases, shared expert with its sigmoid gate), bf16
  deepseek_v3_fp8  DeepSeek-V3 (MLA, YaRN, grouped sigmoid router) with every projection and
                   expert block-quantized to F8_E4M3 with weight_scale_inv, as DeepSeek ships it

Hidden 128 over 4 heads (2 KV heads): head_dim 32, which the cuda attention kernel takes.
bf16 (and FP8) files, so that the cpu and the cuda backend hold the same weights and differ only
by the cuda backend's bf16 activations. Does nothing for a model already there.

usage: make_family_models.py OUT_DIR   (run with scripts/setup_venv.sh's python)
"""
import json
import os
import sys

import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, \
    Qwen2MoeForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from fp8_check import QUANTIZATION_CONFIG, quantize_blocks  # noqa: E402
from moe_check import MLA, YARN, build  # noqa: E402


def quantized_copy(source, target):
    """source's checkpoint with its layers' projections (and experts) in FP8 blocks."""
    from safetensors.torch import load_file, save_file
    tensors = load_file(os.path.join(source, "model.safetensors"))
    fp8 = {}
    for name, tensor in tensors.items():
        if name.startswith("model.layers.") and (name.endswith("proj.weight") or name.endswith("proj_with_mqa.weight")):
            fp8[name], fp8[name + "_scale_inv"] = quantize_blocks(tensor.float())
        else:
            fp8[name] = tensor
    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    os.makedirs(target, exist_ok=True)
    save_file(fp8, os.path.join(target, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(target, "config.json"), "w") as f:  # last: its presence marks the model done
        json.dump({**config, "quantization_config": QUANTIZATION_CONFIG}, f)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    if not os.path.exists(os.path.join(out, "mixtral", "config.json")):
        build(out, "mixtral", MixtralConfig, MixtralForCausalLM, dict(hidden_size=128, num_hidden_layers=4,
                                                                       num_local_experts=8, intermediate_size=32),
              torch.bfloat16)
    if not os.path.exists(os.path.join(out, "qwen2_moe", "config.json")):
        build(out, "qwen2_moe", Qwen2MoeConfig, Qwen2MoeForCausalLM,
              dict(hidden_size=128, num_hidden_layers=4, num_experts=8, moe_intermediate_size=32, intermediate_size=96,
                   shared_expert_intermediate_size=48, decoder_sparse_step=2), torch.bfloat16)
    if not os.path.exists(os.path.join(out, "deepseek_v3_fp8", "config.json")):
        source = build(out, "deepseek_v3", DeepseekV3Config, DeepseekV3ForCausalLM,
                       dict(num_hidden_layers=4, q_lora_rank=32, rope_parameters=YARN, rope_interleave=True, **MLA),
                       torch.bfloat16)
        quantized_copy(source, os.path.join(out, "deepseek_v3_fp8"))
    print(f"models in {out}: " + ", ".join(sorted(d for d in os.listdir(out) if not d.startswith("."))))


if __name__ == "__main__":
    main()
