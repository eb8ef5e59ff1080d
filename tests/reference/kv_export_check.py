#!/usr/bin/env python3
"""Decoding continues elsewhere: a pipefill KV export, loaded as transformers' cache, decodes the
same tokens as transformers' own generate().

For each model and layout, pipefill prefills the prompts with --save-kv; then, per prompt,
scripts/pipefill_kv.py's load_hf_cache gives a DynamicCache, the first new token is the argmax of
pipefill's /logits row, and 31 more are decoded greedily by transformers from that cache. They must
equal the 32 tokens of model.generate(prompt, max_new_tokens=32, do_sample=False) exactly. Also
printed: how far the exported K/V are from transformers' own prefill cache.

  smollm2   the real SmolLM2-135M-Instruct (9 query / 3 KV heads, tied): pp 2, tp 3, pp 2 x tp 3
  qwen3     a tiny Qwen3 (q/k norm) written by transformers' save_pretrained: pp 2, tp 2, pp 2 x tp 2
  deepseek  a tiny DeepSeek-V3 (MLA: the latent cache, YaRN, interleaved rope; tests/reference/
            moe_check.py's): pp 2, pp 2 x tp 2; the files hold the latent rows, which are what
            transformers' DeepSeek-V3 caches

With --kv-dtype bf16 (SmolLM2 at pp 2) the files hold the K/V rounded to bfloat16: loaded
widened to float32, they must be within bf16 rounding (2^-8 relative) of transformers' own cache
and decode the same greedy tokens (here all 32; a bf16 near-tie could end the run of equal
tokens early, so at least the first 8 are required).

usage: kv_export_check.py BUILD_DIR WORK_DIR SMOLLM2_DIR   (run with scripts/setup_venv.sh's python)
"""
import os
import shutil
import sys

import h5py
import numpy as np
import torch
import transformers
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM, Qwen3Config, Qwen3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from pipefill_kv import load_hf_cache  # noqa: E402
from pipefill_runs import run_pipefill  # noqa: E402

NEW_TOKENS = 32
LICENSES = "/usr/share/common-licenses"
QWEN3 = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, vocab_size=384, max_position_embeddings=4096, rms_norm_eps=1e-6,
             initializer_range=0.1, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})


def write_input(path, prompts):
    with h5py.File(path, "w") as f:
        f["tokens"] = np.concatenate(prompts).astype(np.int32)
        f["offsets"] = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)


def decode_from_export(model, kv_dir, prompt_index, prompt, first_token):
    cache = load_hf_cache(kv_dir, prompt_index, tokens=prompt, dtype=torch.float32)
    tokens = [first_token]
    with torch.no_grad():
        for _ in range(NEW_TOKENS - 1):
            # transformers 5 names the argument `cache` (past_key_values: deprecated, same object).
            out = model(input_ids=torch.tensor([[tokens[-1]]]), cache=cache, use_cache=True)
            cache = out.cache
            tokens.append(int(out.logits[0, -1].argmax()))
    return tokens


def cache_distance(model, kv_dir, prompt_index, prompt):
    with torch.no_grad():
        own = model(input_ids=torch.tensor(prompt[None, :], dtype=torch.long), use_cache=True).cache
    exported = load_hf_cache(kv_dir, prompt_index, dtype=torch.float32)
    return max(max(float(((a.keys - b.keys).abs() / b.keys.abs().max()).max()),  # (MLA: latent, rope key)
                   float(((a.values - b.values).abs() / b.values.abs().max()).max()))
               for a, b in zip(exported.layers, own.layers))


def check(build, work, name, model_dir, model, prompts, layouts):
    prompts_h5 = os.path.join(work, f"{name}_prompts.h5")
    write_input(prompts_h5, prompts)
    with torch.no_grad():
        expected = [model.generate(torch.tensor(p[None, :], dtype=torch.long), max_new_tokens=NEW_TOKENS,
                                   do_sample=False)[0, len(p):].tolist() for p in prompts]
    ok = True
    for layout, ranks, options in layouts:
        kv_dir = os.path.join(work, f"{name}_{layout}_kv")
        shutil.rmtree(kv_dir, ignore_errors=True)  # an earlier run's export is refused without --overwrite
        logits, _, _ = run_pipefill(build, model_dir, prompts_h5, os.path.join(work, f"{name}_{layout}.h5"), ranks,
                                    f"{options} --save-kv {kv_dir}")
        bf16 = "--kv-dtype bf16" in options
        for p, prompt in enumerate(prompts):
            got = decode_from_export(model, kv_dir, p, prompt, int(np.argmax(logits[p])))
            same = got == expected[p]
            first_difference = next((i for i, (a, b) in enumerate(zip(got, expected[p])) if a != b), None)
            distance = cache_distance(model, kv_dir, p, prompt)
            if bf16:  # rounded to bf16: within 2^-8 (and float32 rounding) of the largest value, and the first tokens equal
                ok = ok and distance <= 1.05 * 2.0**-8 and (same or first_difference >= 8)
            else:
                ok = ok and same
            print(f"  {name:<8} {layout:<8} prompt {p} ({len(prompt)} tokens): K/V vs transformers' cache "
                  f"{distance:.1e} of the largest value; {NEW_TOKENS} greedy tokens "
                  f"{'equal' if same else f'differ from token {first_difference}'}")
    return ok


def main():
    build, work, smollm2_dir = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")

    tokenizer = Tokenizer.from_file(os.path.join(smollm2_dir, "tokenizer.json"))
    texts = []
    for licence, length in (("GPL-3", 180), ("Apache-2.0", 97)):
        with open(os.path.join(LICENSES, licence), encoding="utf-8") as f:
            texts.append(np.array(tokenizer.encode(f.read()).ids[:length], dtype=np.int32))
    smollm2 = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    ok = check(build, work, "smollm2", smollm2_dir, smollm2, texts,
               [("pp2", 2, "--pp 2 --chunk-size 64 --page-size 16"),
                ("tp3", 3, "--tp 3 --chunk-size 48 --page-size 16"),
                ("pp2_tp3", 6, "--pp 2 --tp 3 --chunk-size 40 --page-size 16"),
                ("pp2_bf16", 2, "--pp 2 --chunk-size 64 --page-size 16 --kv-dtype bf16")])

    torch.manual_seed(5)
    qwen3_dir = os.path.join(work, "qwen3_qknorm")
    Qwen3ForCausalLM(Qwen3Config(**QWEN3)).eval().save_pretrained(qwen3_dir, safe_serialization=True)
    qwen3 = AutoModelForCausalLM.from_pretrained(qwen3_dir, dtype=torch.float32).eval()
    rng = np.random.default_rng(3)
    random_prompts = [rng.integers(0, QWEN3["vocab_size"], size=n, dtype=np.int32) for n in (150, 61)]
    ok = check(build, work, "qwen3", qwen3_dir, qwen3, random_prompts,
               [("pp2", 2, "--pp 2 --chunk-size 32 --page-size 16"),
                ("tp2", 2, "--tp 2 --chunk-size 48 --page-size 16"),
                ("pp2_tp2", 4, "--pp 2 --tp 2 --chunk-size 40 --page-size 16")]) and ok

    from moe_check import BASE, EXPERTS, MLA, YARN
    torch.manual_seed(7)
    deepseek_dir = os.path.join(work, "deepseek_v3")
    config = DeepseekV3Config(**{**BASE, **EXPERTS, **MLA}, num_hidden_layers=3, q_lora_rank=32, rope_parameters=YARN,
                              rope_interleave=True)
    DeepseekV3ForCausalLM(config).eval().save_pretrained(deepseek_dir, safe_serialization=True)
    deepseek = AutoModelForCausalLM.from_pretrained(deepseek_dir, dtype=torch.float32).eval()
    random_prompts = [rng.integers(0, BASE["vocab_size"], size=n, dtype=np.int32) for n in (130, 45)]
    ok = check(build, work, "deepseek", deepseek_dir, deepseek, random_prompts,
               [("pp2", 2, "--pp 2 --chunk-size 32 --page-size 16"),
                ("pp2_tp2", 4, "--pp 2 --tp 2 --chunk-size 40 --page-size 16")]) and ok
    if not ok:
        print("FAILED: decoding from pipefill's KV export differs from transformers' generate()")
        return 1
    print("Passed: decoding from pipefill's KV export gives transformers' own tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
