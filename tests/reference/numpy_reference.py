#!/usr/bin/env python3
"""Independent numpy reference that follows Hugging Face transformers semantics.

Reads a model directory (config.json + safetensors, single or sharded) with its own
safetensors parser, runs LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM the way
transformers does in float32 (rotate-half RoPE with float32 angles, repeat_kv GQA, RMSNorm
in float32, causal softmax), and writes /logits float32 [n, vocab] for the last position
of each prompt.

With --top-k K it also writes what `pipefill run --logprobs --top-k K --hidden-states` stores,
from the logits of every position (log-softmax in float64): /token_logprobs [T] (NaN at each
prompt's first token), /perplexity [n], /topk_ids and /topk_logprobs [T, K], and the final
norm's output at the last position and averaged over the prompt, /hidden_last and
/hidden_mean [n, hidden].

usage: numpy_reference.py MODEL_DIR INPUT.h5 OUTPUT.h5 [--top-k K]
"""
import json
import math
import os
import struct
import sys

import h5py
import numpy as np


def read_safetensors(path):
    """Returns {name: np.ndarray(float32)} for one safetensors file."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[begin:end]
        if entry["dtype"] == "F32":
            array = np.frombuffer(raw, dtype="<f4")
        elif entry["dtype"] == "BF16":
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif entry["dtype"] == "F16":
            array = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        else:
            raise ValueError(f"unsupported dtype {entry['dtype']}")
        tensors[name] = array.reshape(entry["shape"]).astype(np.float32)
    return tensors


def load_weights(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    files = [os.path.join(model_dir, "model.safetensors")]
    if os.path.exists(index):
        with open(index) as f:
            files = sorted({os.path.join(model_dir, v) for v in json.load(f)["weight_map"].values()})
    weights = {}
    for path in files:
        weights.update(read_safetensors(path))
    return weights


def rope_inv_freq(config, head_dim):
    """transformers' _compute_default_rope_parameters and _compute_llama3_parameters."""
    # transformers 5 writes rope_parameters (theta and type together); older files the
    # top-level rope_theta and rope_scaling.
    parameters = config.get("rope_parameters") or {}
    base = parameters.get("rope_theta", config.get("rope_theta", 10000.0))
    inv_freq = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim))
    scaling = parameters if "rope_parameters" in config else (config.get("rope_scaling") or {})
    if scaling.get("rope_type", scaling.get("type")) == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_len = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv_freq
        llama = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * llama / factor + smooth * llama
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv_freq = np.where(medium, smoothed, llama)
    return inv_freq.astype(np.float32)


def rms_norm(x, weight, eps):
    x = x.astype(np.float32)
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return weight * (x / np.sqrt(variance + np.float32(eps)))


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def forward(config, w, ids):
    arch = config["architectures"][0]
    hidden = config["hidden_size"]
    n_heads = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_heads)
    head_dim = config.get("head_dim") or hidden // n_heads
    eps = config.get("rms_norm_eps", 1e-6)
    n = len(ids)

    inv_freq = rope_inv_freq(config, head_dim)
    positions = np.arange(n, dtype=np.float32)
    freqs = np.outer(positions, inv_freq).astype(np.float32)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[None], np.sin(emb)[None]  # [1, n, d]

    x = w["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((n, n), -np.inf, dtype=np.float32), k=1)
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)

        def proj(name):
            y = h @ w[p + f"self_attn.{name}.weight"].T
            bias = w.get(p + f"self_attn.{name}.bias")
            return y + bias if bias is not None else y

        q = proj("q_proj").reshape(n, n_heads, head_dim).transpose(1, 0, 2)
        k = proj("k_proj").reshape(n, n_kv, head_dim).transpose(1, 0, 2)
        v = proj("v_proj").reshape(n, n_kv, head_dim).transpose(1, 0, 2)
        if arch == "Qwen3ForCausalLM":
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        groups = n_heads // n_kv
        k = np.repeat(k, groups, axis=0)  # repeat_kv: head j uses KV head j // groups
        v = np.repeat(v, groups, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.float32(math.sqrt(head_dim)) + mask
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        attn = (probs @ v).transpose(1, 0, 2).reshape(n, n_heads * head_dim)
        x = x + attn @ w[p + "self_attn.o_proj.weight"].T

        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        act = gate / (1.0 + np.exp(-gate)) * up
        x = x + act @ w[p + "mlp.down_proj.weight"].T

    normed = rms_norm(x, w["model.norm.weight"], eps)
    head = w["embed_tokens_tied"] if config.get("tie_word_embeddings") else w["lm_head.weight"]
    return normed, normed @ head.T


def token_outputs(ids, normed, logits, k):
    """Per-position scores from every position's logits [n, vocab], as pipefill defines them."""
    logits = logits.astype(np.float64)
    logprobs = logits - logits.max(axis=1, keepdims=True)
    logprobs -= np.log(np.exp(logprobs).sum(axis=1, keepdims=True))
    token_logprobs = np.full(len(ids), np.nan)
    token_logprobs[1:] = logprobs[np.arange(len(ids) - 1), ids[1:]]
    # Most likely first; on a tie the smaller id (a stable sort of the negated values).
    order = np.argsort(-logprobs, axis=1, kind="stable")[:, :k]
    return {"token_logprobs": token_logprobs, "topk_ids": order,
            "topk_logprobs": np.take_along_axis(logprobs, order, axis=1),
            "perplexity": np.exp(-token_logprobs[1:].mean()) if len(ids) > 1 else np.nan,
            "hidden_last": normed[-1], "hidden_mean": normed.astype(np.float64).mean(axis=0)}


def main():
    args = sys.argv[1:]
    top_k = 0
    if len(args) == 5 and args[3] == "--top-k":
        top_k = int(args.pop(4))
        args.pop(3)
    if len(args) != 3:
        sys.exit(__doc__)
    model_dir, input_path, output_path = args
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    weights = load_weights(model_dir)
    weights["embed_tokens_tied"] = weights["model.embed_tokens.weight"]
    with h5py.File(input_path, "r") as f:
        tokens, offsets = f["tokens"][:], f["offsets"][:]
    prompts = [tokens[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
    rows, per_token = [], []
    for ids in prompts:
        normed, logits = forward(config, weights, ids)
        rows.append(logits[-1])
        if top_k:
            per_token.append(token_outputs(ids, normed, logits, top_k))
    with h5py.File(output_path, "w") as f:
        f["logits"] = np.stack(rows).astype(np.float32)
        if top_k:
            for name in ("token_logprobs", "topk_ids", "topk_logprobs"):
                f[name] = np.concatenate([p[name] for p in per_token])
            for name in ("perplexity", "hidden_last", "hidden_mean"):
                f[name] = np.stack([p[name] for p in per_token])


if __name__ == "__main__":
    main()
