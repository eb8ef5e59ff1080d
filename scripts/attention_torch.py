#!/usr/bin/env python3
"""torch's CPU attention on the shapes of bench_kernels' BM_ChunkAttention: a chunk of queries
after a prefix, causal, GQA, float32, F.scaled_dot_product_attention (torch picks its CPU flash
attention kernel). GFLOP/s counted as pipefill counts them: 4 d per (query, visible key, head).

usage: attention_torch.py THREADS      (under the venv of scripts/setup_venv.sh)
"""
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = [("small", 16, 8, 64), ("smollm2", 9, 3, 64), ("llama3-tp4", 8, 2, 128)]


def main():
    torch.set_num_threads(int(sys.argv[1]))
    chunk = 1024
    for prefix in (0, 4096, 16384):
        total = prefix + chunk
        # Query i (position prefix + i) sees keys 0 .. prefix + i.
        visible = torch.arange(total)[None, :] <= (prefix + torch.arange(chunk))[:, None]
        for name, heads, kv_heads, d in SHAPES:
            g = torch.Generator().manual_seed(5)
            q = torch.rand(1, heads, chunk, d, generator=g) * 2 - 1
            k = torch.rand(1, kv_heads, total, d, generator=g) * 2 - 1
            v = torch.rand(1, kv_heads, total, d, generator=g) * 2 - 1
            flops = 4.0 * d * heads * (chunk * prefix + 0.5 * chunk * (chunk + 1))
            with torch.inference_mode():
                F.scaled_dot_product_attention(q, k, v, attn_mask=visible, enable_gqa=True)
                best = float("inf")
                for _ in range(3 if prefix < 16384 else 1):
                    start = time.perf_counter()
                    F.scaled_dot_product_attention(q, k, v, attn_mask=visible, enable_gqa=True)
                    best = min(best, time.perf_counter() - start)
            print(f"torch prefix={prefix} chunk={chunk} {name}: {best * 1e3:.1f} ms, {flops / best / 1e9:.1f} GFLOP/s",
                  flush=True)


if __name__ == "__main__":
    main()
