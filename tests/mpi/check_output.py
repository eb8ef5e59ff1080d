#!/usr/bin/env python3
"""Checks that a pipefill output file is complete: logits, TTFT, timeline, attributes.

With EXPECT_POLICY set, also checks the chunk policy the run used, and for a dynamic one
that the chunk sizes really varied. With EXPECT_REUSED set, checks that the prompts reused
that many tokens in all (/reused_tokens, prefix reuse).
"""
import os
import sys

import h5py
import numpy as np

path = sys.argv[1]
with h5py.File(path, "r") as f:
    logits, ttft, timeline = f["logits"][:], f["ttft_s"][:], f["timeline"][:]
    reused = f["reused_tokens"][:]
    attrs = dict(f.attrs)
def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)
# Scores and mean hidden states read every row of a prompt; logits and its last hidden state the last.
per_token = (int(attrs.get("logprobs", 0)) or int(attrs.get("top_k", 0)) > 0 or text(attrs.get("token_ids", ""))
             or text(attrs.get("hidden_states", "none")) == "mean")
n = logits.shape[0]
assert np.isfinite(logits).all(), "non-finite logits"
assert ttft.shape == (n,) and (ttft > 0).all(), f"bad ttft {ttft}"
for key in ("version", "model", "pp", "tp", "chunk_size", "page_size", "model_config"):
    assert key in attrs, f"attribute {key} missing"
pp, tp, cp = int(attrs["pp"]), int(attrs["tp"]), int(attrs.get("cp", 1))
kinds = {int(k) for k in timeline["kind"]}
assert 0 in kinds and 4 in kinds, f"compute / lm_head events missing: {kinds}"
assert len({int(r) for r in timeline["rank"]}) == pp * cp * tp, "events missing from some rank"
assert (timeline["t_end_s"] >= timeline["t_start_s"]).all(), "negative event duration"
last_stage_heads = timeline[(timeline["kind"] == 4) & (timeline["stage"] == pp - 1) & (timeline["tp_rank"] == 0)]
if int(attrs.get("top_k", 0)) > 0 or int(attrs.get("logprobs", 0)):
    micro_batches = timeline[(timeline["kind"] == 0) & (timeline["rank"] == 0)]
    assert len(last_stage_heads) == len(micro_batches), "one LM-head event per micro-batch when scoring tokens"
else:
    assert len(last_stage_heads) == n, "one LM-head event per prompt"
if cp > 1:  # the last stage gathers a chunk's rows to CP rank 0 only where they are read
    computed = timeline[(timeline["kind"] == 0) & (timeline["rank"] == 0)]
    gathered = {int(m) for m in timeline[(timeline["kind"] == 7) & (timeline["tp_rank"] == 0)]["micro_batch"]}
    last_chunks = {int(computed["micro_batch"][computed["prompt"] == p].max()) for p in set(computed["prompt"])}
    expected = {int(m) for m in computed["micro_batch"]} if per_token else last_chunks
    assert gathered == expected, f"CP gathers for micro-batches {sorted(gathered)}, expected {sorted(expected)}"
assert reused.shape == (n,) and (reused >= 0).all(), f"bad /reused_tokens {reused}"
if "EXPECT_REUSED" in os.environ:
    assert reused.sum() == int(os.environ["EXPECT_REUSED"]), f"reused {reused.sum()} tokens ({reused}), expected {os.environ['EXPECT_REUSED']}"
    print(f"prefix reuse: {reused.sum()} tokens reused ({np.count_nonzero(reused)} prompts)")
expected_policy = os.environ.get("EXPECT_POLICY")
if expected_policy:
    used = attrs["chunk_policy_used"]
    used = used.decode() if isinstance(used, bytes) else str(used)
    assert used == expected_policy, f"chunk policy used: {used}, expected {expected_policy}"
    compute = timeline[(timeline["kind"] == 0) & (timeline["rank"] == 0)]
    sizes = {int(x) for x in compute["chunk_length"]}
    if expected_policy != "fixed":
        assert len(sizes) > 2, f"dynamic chunking should vary the chunk sizes, saw {sorted(sizes)}"
print(f"output ok: {n} prompts, {len(timeline)} timeline events, pp {pp} x tp {tp}")
