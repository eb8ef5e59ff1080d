#!/usr/bin/env python3
"""Scored spans (/score_start) and prompt ids (/ids), against transformers itself, on a tiny
Llama written by save_pretrained: what an evaluation harness asks of a context and its
continuation.

The batch: one document, four questions after it, each with a continuation (the context is the
document and the question); two continuations are the model's own greedy ones (transformers'
argmax, so /is_greedy must be 1), two are random (0 unless the model happens to agree). The
same tokens as the first pair also come scored whole (score_start 1) and scored from a later
position than their neighbour: prefix reuse between prompts with different spans must still
give every scored row. A plain document (no span) ends the batch.

On pp 2, tp 2, pp 2 x tp 2 and a dynamic plan (LM-head blocks of 16 rows, prefix reuse on), and
pp 2 without prefix reuse, and tp 2 loading every prompt from a KV store filled by a run that
scored every token (and the cuda backend on the simulated device, against its own whole-prompt
run): every scored log-prob and top-k row within the bounds of
score_checks.py, NaN and id -1 exactly where nothing was scored, /nll_sum minus the
continuation's log-likelihood, /is_greedy equal to transformers' argmax test, /score_start and
/ids copied from the input, and the same scores as a run without spans at the scored positions.
Every run also keeps a token set (--token-ids: the vocabulary's ends, a few letters' worth of
ids, in no order): /token_set_logprobs within the same bound of transformers' log-softmax at
those ids on every row from score_start - 1, NaN before, and /token_set_ids the file's ids.

usage: spans_check.py BUILD_DIR WORK_DIR   (run with scripts/setup_venv.sh's python)
"""
import os
import shutil
import sys

import h5py
import numpy as np
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

from pipefill_runs import check, exit_if_failed, run_pipefill, write_cost_model
from score_checks import compare_scores, reference_scores

SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=385, max_position_embeddings=4096, rms_norm_eps=1e-6,
             initializer_range=0.1, tie_word_embeddings=False)
TOKEN_SET = [384, 0, 17, 200, 201, 99, 3]  # --token-ids (vocab_size 385): ends, neighbours, no order
SCORES = "--logprobs --top-k 2 --token-ids {token_ids}"


def layouts(scores):
    """(name, ranks, options) of every layout, each with `scores`."""
    return [
        ("pp2", 2, f"--pp 2 --chunk-size 64 --page-size 16 {scores}"),
        ("tp2", 2, f"--tp 2 --chunk-size 48 --page-size 16 {scores}"),
        ("pp2_tp2", 4, f"--pp 2 --tp 2 --chunk-size 40 --page-size 16 {scores}"),
        ("pp2_dynamic", 2, f"--pp 2 --chunk-size 128 --page-size 16 --chunk-policy pipefill {scores}"),
        ("pp2_no_reuse", 2, f"--pp 2 --chunk-size 64 --page-size 16 --no-prefix-cache {scores}"),
    ]


def greedy(model, ids, count):
    """transformers' own greedy continuation of `ids` (argmax of float32 logits, one at a time)."""
    out = list(ids)
    with torch.no_grad():
        for _ in range(count):
            logits = model(input_ids=torch.tensor([out], dtype=torch.long)).logits[0, -1]
            out.append(int(torch.argmax(logits)))
    return np.array(out[len(ids):], dtype=np.int32)


def build_batch(model, rng, vocab):
    document = rng.integers(0, vocab, size=150, dtype=np.int32)
    prompts, starts, ids = [], [], []
    for q in range(4):
        context = np.concatenate([document, rng.integers(0, vocab, size=9 + q, dtype=np.int32)])
        continuation = greedy(model, context, 6) if q < 2 else rng.integers(0, vocab, size=5 + q, dtype=np.int32)
        prompts.append(np.concatenate([context, continuation]))
        starts.append(len(context))
        ids.append(f"question {q} {'greedy' if q < 2 else 'random'} — ü")
    # The first question again, scored whole, and again scored from later than its neighbours.
    prompts += [prompts[0].copy(), prompts[0].copy()]
    starts += [1, starts[0] + 3]
    ids += ["question 0 scored whole", "question 0 scored late"]
    prompts.append(rng.integers(0, vocab, size=70, dtype=np.int32))
    starts.append(1)
    ids.append("plain document")
    return prompts, np.array(starts, np.int64), ids


def write_input(path, prompts, starts=None, ids=None):
    with h5py.File(path, "w") as f:
        f["tokens"] = np.concatenate(prompts).astype(np.int32)
        f["offsets"] = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
        if starts is not None:
            f["score_start"] = starts
        if ids is not None:
            f.create_dataset("ids", data=ids, dtype=h5py.string_dtype("utf-8"))


def main():
    build, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    os.environ["PIPEFILL_TEST_SCORE_BLOCK_ROWS"] = "16"
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    torch.manual_seed(31)
    model_dir = os.path.join(work, "llama")
    LlamaForCausalLM(LlamaConfig(**SIZES)).eval().save_pretrained(model_dir, safe_serialization=True)
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts, starts, ids = build_batch(model, np.random.default_rng(8), SIZES["vocab_size"])
    spans_h5, whole_h5 = os.path.join(work, "spans.h5"), os.path.join(work, "whole.h5")
    write_input(spans_h5, prompts, starts, ids)
    write_input(whole_h5, prompts)
    ref = reference_scores(model, prompts, 2)
    offsets = np.cumsum([0] + [len(p) for p in prompts])
    token_ids = os.path.join(work, "token_ids.txt")
    with open(token_ids, "w") as f:  # the file format's liberties: a comment, commas and brackets
        f.write("# the set\n[" + ", ".join(map(str, TOKEN_SET[:4])) + "]\n" + " ".join(map(str, TOKEN_SET[4:])) + "\n")
    scores = SCORES.format(token_ids=token_ids)
    all_layouts = layouts(scores)
    # transformers' log-softmax (float64 of its float32 logits) at the set's ids, every row.
    with torch.no_grad():
        want_set = np.concatenate([
            torch.log_softmax(model(input_ids=torch.tensor(p[None, :], dtype=torch.long)).logits[0].double(),
                              dim=-1)[:, TOKEN_SET].numpy() for p in prompts])
    set_rows = np.ones(len(want_set), bool)  # rows a span run computes: from score_start - 1
    for p, start in enumerate(starts):
        set_rows[offsets[p]:offsets[p] + start - 1] = False

    def check_token_set(name, out_h5, rows=set_rows):
        with h5py.File(out_h5, "r") as f:
            check(list(f["token_set_ids"][:]) == TOKEN_SET, f"{name}: /token_set_ids is the file's ids in order")
            got = f["token_set_logprobs"][:].astype(np.float64)
        error = float(np.abs(got[rows] - want_set[rows]).max())
        check(error <= 1e-3 and bool(np.isnan(got[~rows]).all()),
              f"{name}: /token_set_logprobs within 1e-3 of transformers ({error:.1e}), NaN where not scored")

    # transformers' answer to "was every continuation token the argmax?" (float32 logits).
    with torch.no_grad():
        want_greedy = []
        for p, s in zip(prompts, starts):
            logits = model(input_ids=torch.tensor(p[None, :], dtype=torch.long)).logits[0]
            want_greedy.append(int(bool((torch.argmax(logits[s - 1:-1], dim=-1).numpy() == p[s:]).all())))
    check(want_greedy[:2] == [1, 1], f"the greedy continuations are transformers' argmax ({want_greedy})")

    whole_out = os.path.join(work, "whole_out.h5")
    run_pipefill(build, model_dir, whole_h5, whole_out, 2, all_layouts[0][2])
    with h5py.File(whole_out, "r") as f:
        whole = f["token_logprobs"][:]
    check_token_set("pp2_whole", whole_out, rows=np.ones(len(want_set), bool))
    attributes = None
    for layout, ranks, options in all_layouts:
        out_h5 = os.path.join(work, f"out_{layout}.h5")
        if layout == "pp2_dynamic":
            cost_model = os.path.join(work, "cost.json")
            write_cost_model(cost_model, attributes, pp=2, tp=1)
            options += f" --cost-model {cost_model}"
        _, run_attributes, _ = run_pipefill(build, model_dir, spans_h5, out_h5, ranks, options)
        attributes = attributes or run_attributes
        check(compare_scores(layout, out_h5, ref), f"{layout}: scores within bounds, NaN and -1 outside the spans")
        check_token_set(layout, out_h5)
        with h5py.File(out_h5, "r") as f:
            got_ids = [t.decode() if isinstance(t, bytes) else t for t in f["ids"][:]]
            check(got_ids == ids, f"{layout}: /ids copied from the input")
            check(np.array_equal(f["score_start"][:], starts), f"{layout}: /score_start copied from the input")
            greedy_got = [int(g) for g in f["is_greedy"][:]]
            check(greedy_got == want_greedy, f"{layout}: /is_greedy {greedy_got}")
            lp = f["token_logprobs"][:].astype(np.float64)
            loglik = np.array([np.sum(ref["token_logprobs"][offsets[p] + s:offsets[p + 1]])
                               for p, s in enumerate(starts)])
            error = float(np.abs(-f["nll_sum"][:] - loglik).max())
            check(error <= 1e-4 * 30, f"{layout}: -nll_sum is the continuation's log-likelihood (error {error:.1e})")
            scored = ~np.isnan(lp)
            same = float(np.abs(lp[scored] - whole[scored]).max())
            check(same <= 1e-5, f"{layout}: scored positions as in a run without spans ({same:.1e})")
            reused = f["reused_tokens"][:]
            if layout != "pp2_no_reuse":
                check(reused.sum() > 0, f"{layout}: prompts shared the document ({[int(r) for r in reused]})")
    # The KV store: a run that scored every token stores the prompts (with their scores); the
    # spans run loads their prefixes from it and copies the rows of its spans.
    store = os.path.join(work, "store")
    shutil.rmtree(store, ignore_errors=True)
    run_pipefill(build, model_dir, whole_h5, os.path.join(work, "store_fill.h5"), 2,
                 f"{all_layouts[0][2]} --kv-store {store}")
    out_h5 = os.path.join(work, "out_store.h5")
    run_pipefill(build, model_dir, spans_h5, out_h5, 2, f"{all_layouts[1][2]} --kv-store {store}")
    check(compare_scores("tp2_from_store", out_h5, ref), "tp2 from the store: scores within bounds, NaN outside")
    check_token_set("tp2_from_store", out_h5)
    with h5py.File(out_h5, "r") as f:
        check(f["reused_tokens"][:].sum() > 0, f"the store lent prefixes ({[int(r) for r in f['reused_tokens'][:]]})")
        check([int(g) for g in f["is_greedy"][:]] == want_greedy, "is_greedy from the store's rows")
    # The cuda backend on the simulated device (bf16 compute, so against its own whole-prompt
    # run, not transformers): the same scored rows, NaN and -1 before each span, the same ids.
    if os.path.exists(os.path.join(build, "pipefill_sim")):
        # Its kernels take head_dim 32 and pages of 64: the same sizes with 2 heads over 1.
        sim_model = os.path.join(work, "llama_hd32")
        LlamaForCausalLM(LlamaConfig(**dict(SIZES, num_attention_heads=2, num_key_value_heads=1))).eval() \
            .save_pretrained(sim_model, safe_serialization=True)
        sim = f"--pp 2 --chunk-size 64 --page-size 64 --backend cuda {scores}"
        sim_whole, sim_spans = os.path.join(work, "sim_whole.h5"), os.path.join(work, "sim_spans.h5")
        run_pipefill(build, sim_model, whole_h5, sim_whole, 2, sim, program="pipefill_sim", timeout=600)
        run_pipefill(build, sim_model, spans_h5, sim_spans, 2, sim, program="pipefill_sim", timeout=600)
        with h5py.File(sim_whole, "r") as w, h5py.File(sim_spans, "r") as f:
            lp, ref_lp = f["token_logprobs"][:], w["token_logprobs"][:]
            unscored = np.zeros(len(lp), bool)
            for p, start in enumerate(starts):
                unscored[offsets[p]:offsets[p] + start] = True
            same = float(np.abs(lp[~unscored] - ref_lp[~unscored]).max())
            check(bool(np.isnan(lp[unscored]).all()) and same <= 1e-5,
                  f"cuda (simulated): scored positions as its whole run ({same:.1e}), NaN before each span")
            top1 = f["topk_ids"][:, 0]
            own_greedy = [int(all(top1[offsets[p] + j - 1] == prompts[p][j] for j in range(start, len(prompts[p]))))
                          for p, start in enumerate(starts)]
            check([int(g) for g in f["is_greedy"][:]] == own_greedy,
                  f"cuda (simulated): is_greedy from its own top-1 ({own_greedy})")
            check([t.decode() if isinstance(t, bytes) else t for t in f["ids"][:]] == ids, "cuda (simulated): /ids")
            got_set, whole_set = f["token_set_logprobs"][:], w["token_set_logprobs"][:]
            same = float(np.abs(got_set[set_rows] - whole_set[set_rows]).max())
            check(bool(np.isnan(got_set[~set_rows]).all()) and same <= 1e-5,
                  f"cuda (simulated): token-set rows as its whole run ({same:.1e}), NaN before each span")
            # Where its top-1 is a token of the set, the set's column holds the top-1's log-prob.
            top_lp = f["topk_logprobs"][:, 0]
            hits = [(r, TOKEN_SET.index(int(top1[r]))) for r in np.flatnonzero(set_rows) if int(top1[r]) in TOKEN_SET]
            agree = all(got_set[r, c] == top_lp[r] for r, c in hits)
            check(len(hits) > 0 and agree, f"cuda (simulated): the set's columns agree with its top-1 ({len(hits)} rows)")
    exit_if_failed()
    print("Passed: scored spans, is_greedy and ids match transformers on every layout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
