#!/usr/bin/env python3
"""Every output pipefill can hand back, against Hugging Face transformers itself, on tiny
checkpoints written by transformers' own config classes and save_pretrained:

  llama_gqa_llama3   Llama, 4 query heads over 2 KV heads, llama3 rope scaling, float32 files
  qwen2_bias_bf16    Qwen2 (q/k/v biases), saved in bfloat16 (the reference runs the same
                     bf16-rounded weights in float32, as pipefill does)
  qwen3_qknorm_tied  Qwen3 (q/k RMSNorm), tied embeddings

Each runs on pp 2, tp 2, pp 2 x tp 2 and pp 2 with a dynamic plan, chunks cutting every prompt
and cut again into LM-head blocks of 16 rows, the 385-token vocabulary split unevenly over the TP
ranks, storing --logprobs --top-k 4 and --hidden-states (last, and mean on one layout). Checked against
transformers' float32 forward (score_checks.py): the last position's logits within 1e-5 of
max|logit|, log-probs within 1e-3, top-k ids equal at every confident rank, hidden states within
1e-4 of each row's max|h|, /perplexity and /nll_sum consistent with the stored log-probs.

usage: scores_check.py BUILD_DIR WORK_DIR   (run with scripts/setup_venv.sh's python)
"""
import os
import sys

import numpy as np
import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

from score_checks import check_layouts, make_prompts

LOGITS_RTOL = 1e-5  # as transformers_check.py: measured below 1e-6 of max|logit|
TOP_K = 4
SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
             # 385: split unevenly over 2 TP ranks (193 + 192 tokens).
             num_key_value_heads=2, vocab_size=385, max_position_embeddings=4096, rms_norm_eps=1e-6,
             initializer_range=0.1)
LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
# name, config class, model class, extra config, save dtype
MODELS = [
    ("llama_gqa_llama3", LlamaConfig, LlamaForCausalLM, dict(rope_parameters=LLAMA3, tie_word_embeddings=False),
     torch.float32),
    ("qwen2_bias_bf16", Qwen2Config, Qwen2ForCausalLM,
     dict(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False),
     torch.bfloat16),
    ("qwen3_qknorm_tied", Qwen3Config, Qwen3ForCausalLM,
     dict(head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=True),
     torch.float32),
]
SCORES = f"--logprobs --top-k {TOP_K}"
# name, ranks, options (the dynamic layout adds its cost model)
LAYOUTS = [
    ("pp2", 2, f"--pp 2 --chunk-size 64 --page-size 16 {SCORES} --hidden-states mean"),
    ("tp2", 2, f"--tp 2 --chunk-size 48 --page-size 16 {SCORES} --hidden-states last"),
    ("pp2_tp2", 4, f"--pp 2 --tp 2 --chunk-size 40 --page-size 16 {SCORES} --hidden-states last"),
    ("pp2_dynamic", 2, f"--pp 2 --chunk-size 128 --page-size 16 --chunk-policy pipefill {SCORES}"),
]
PROMPT_LENGTHS = [100, 300, 173, 2, 1]  # a one-token prompt: no log-prob, perplexity NaN


def check_model(build, work, prompts_h5, prompts, name, config_class, model_class, extra, dtype):
    torch.manual_seed(77)
    model = model_class(config_class(**SIZES, **extra)).eval()
    model_dir = os.path.join(work, name)
    model.to(dtype).save_pretrained(model_dir, safe_serialization=True)
    # The reference runs what the files hold, in float32.
    return check_layouts(build, work, name, model_dir, model_class, prompts_h5, prompts, LAYOUTS,
                         TOP_K, LOGITS_RTOL, f" ({dtype})")


def main():
    build, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    # Rows go through the LM head 16 at a time (the real budget would take whole chunks of these
    # small models): every chunk is several blocks, each gathered over the TP ranks.
    os.environ["PIPEFILL_TEST_SCORE_BLOCK_ROWS"] = "16"
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    prompts_h5 = os.path.join(work, "prompts.h5")
    prompts = make_prompts(prompts_h5, PROMPT_LENGTHS, SIZES["vocab_size"])
    failed = [m[0] for m in MODELS if not check_model(build, work, prompts_h5, prompts, *m)]
    if failed:
        print("FAILED:", ", ".join(failed))
        return 1
    print("Passed: logits, log-probs, top-k and hidden states match transformers on every layout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
