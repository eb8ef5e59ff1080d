"""What `pipefill run --logprobs --top-k K --hidden-states MODE` stores, computed by transformers
itself, and the comparison of an output with a reference (shared by scores_check.py and
smollm2_check.py, against transformers, and by tests/mpi/check_token_outputs.py, against the
numpy reference; torch is needed only to compute a reference).

The transformers reference is its float32 forward over each whole prompt: the logits of every
position, log-softmax in float64, and the final norm's output (model.model(...).last_hidden_state).
A reference is a dict: token_logprobs [T] (NaN at each prompt's first token), topk_ids and
topk_logprobs [T, K] (K >= the output's k), hidden_last and hidden_mean [n, hidden], lengths.
"""
import h5py
import numpy as np

# The issue's bounds: log-probs within 1e-3 of transformers'; ids equal wherever the reference's
# neighbouring log-probs are more than 1e-3 apart (closer, the order is a float32 coin toss).
LOGPROB_ATOL = 1e-3
MARGIN = 1e-3
HIDDEN_RTOL = 1e-4  # of each row's max|h|


def reference_scores(model, prompts, k):
    """Per prompt, from one float32 forward: every position's log-softmax, reduced to the token
    log-probs, the top k + 1 (one more than stored, to tell confident ranks), and the hidden states."""
    import torch
    token_logprobs, topk_ids, topk_logprobs, last, mean = [], [], [], [], []
    with torch.no_grad():
        for ids in prompts:
            tensor = torch.tensor(ids[None, :], dtype=torch.long)
            hidden = model.model(input_ids=tensor).last_hidden_state[0]
            logprobs = torch.log_softmax(model(input_ids=tensor).logits[0].double(), dim=-1)
            lp = np.full(len(ids), np.nan)
            lp[1:] = logprobs[torch.arange(len(ids) - 1), torch.tensor(ids[1:], dtype=torch.long)].numpy()
            token_logprobs.append(lp)
            values, indices = torch.topk(logprobs, k + 1, dim=-1)
            topk_ids.append(indices.numpy())
            topk_logprobs.append(values.numpy())
            last.append(hidden[-1].double().numpy())
            mean.append(hidden.double().mean(dim=0).numpy())
    return {"token_logprobs": np.concatenate(token_logprobs), "topk_ids": np.concatenate(topk_ids),
            "topk_logprobs": np.concatenate(topk_logprobs), "hidden_last": np.stack(last),
            "hidden_mean": np.stack(mean), "lengths": [len(p) for p in prompts]}


def confident_ranks(ref_logprobs, k):
    """[T, k]: rank j is more than MARGIN from both neighbours in the reference (a rank whose
    lower neighbour the reference does not hold is never confident)."""
    gaps = -np.diff(ref_logprobs, axis=1)  # gaps[:, j]: rank j minus rank j + 1, >= 0
    ok = np.zeros((ref_logprobs.shape[0], k), bool)
    for j in range(min(k, gaps.shape[1])):
        ok[:, j] = gaps[:, j] > MARGIN
        if j > 0:
            ok[:, j] &= gaps[:, j - 1] > MARGIN
    return ok


def compare_scores(name, out_h5, ref, logprob_atol=LOGPROB_ATOL):
    """Prints one line per stored kind of score; True when every one is within its bound, the
    first token's log-prob is NaN, /perplexity, /nll_sum agree with the stored log-probs, and the
    top-k log-probs descend."""
    ok, notes = True, []
    with h5py.File(out_h5, "r") as f:
        offsets = np.cumsum([0] + ref["lengths"])
        n = len(ref["lengths"])
        # Each prompt's scored span (/score_start: the input's, 1 for a prompt scored whole):
        # positions before it have no log-prob, and rows before start - 1 no top-k.
        starts = f["score_start"][:] if "score_start" in f else np.ones(n, np.int64)
        unscored = np.zeros(offsets[-1], bool)      # positions without a log-prob
        no_topk = np.zeros(offsets[-1], bool)       # rows without a top-k
        for p in range(n):
            unscored[offsets[p]:offsets[p] + min(starts[p], ref["lengths"][p])] = True
            no_topk[offsets[p]:offsets[p] + min(starts[p] - 1, ref["lengths"][p])] = True
        if "token_logprobs" in f:
            got, want = f["token_logprobs"][:].astype(np.float64), ref["token_logprobs"]
            first = unscored | np.isnan(want)
            error = float(np.abs(got[~first] - want[~first]).max())
            nan_ok = np.array_equal(np.isnan(got), first)
            nll = np.array([-got[offsets[p] + starts[p]:offsets[p + 1]].sum() for p in range(n)])
            scored = np.diff(offsets) - starts  # a one-token prompt has none: perplexity NaN
            with np.errstate(divide="ignore", invalid="ignore"):
                perplexity = np.where(scored > 0, np.exp(nll / np.maximum(scored, 1)), np.nan)
            sums_ok = np.allclose(f["nll_sum"][:], nll, rtol=1e-9, atol=1e-9) and np.allclose(
                f["perplexity"][:], perplexity, rtol=1e-9, equal_nan=True)
            ok = ok and error <= logprob_atol and nan_ok and sums_ok
            notes.append(f"logprobs {error:.1e}{'' if nan_ok else ' (NaN misplaced)'}{'' if sums_ok else ' (bad NLL)'}")
        if "topk_ids" in f:
            all_ids, all_lps = f["topk_ids"][:], f["topk_logprobs"][:].astype(np.float64)
            # Rows before a span were never computed: id -1 and NaN, exactly.
            skipped_ok = bool((all_ids[no_topk] == -1).all() and np.isnan(all_lps[no_topk]).all())
            ids, lps = all_ids[~no_topk], all_lps[~no_topk]
            k = ids.shape[1]
            error = float(np.abs(lps - ref["topk_logprobs"][~no_topk, :k]).max())
            mask = confident_ranks(ref["topk_logprobs"][~no_topk], k)
            same = ids[mask] == ref["topk_ids"][~no_topk, :k][mask]
            top1 = int((ids[:, 0] == ref["topk_ids"][~no_topk, 0]).sum())
            descending = bool((np.diff(lps, axis=1) <= 0).all())
            ok = ok and error <= logprob_atol and bool(same.all()) and descending and skipped_ok
            notes.append(f"top-{k} {error:.1e}, ids {int(same.sum())}/{int(mask.sum())} confident "
                         f"(top-1 {top1}/{len(ids)}){'' if descending else ' (not descending)'}"
                         f"{'' if skipped_ok else ' (rows before a span not -1/NaN)'}")
        if "hidden_states" in f:
            mode = f.attrs["hidden_states"]
            mode = mode.decode() if isinstance(mode, bytes) else str(mode)
            got, want = f["hidden_states"][:].astype(np.float64), ref["hidden_" + mode]
            relative = float((np.abs(got - want).max(axis=1) / np.maximum(1.0, np.abs(want).max(axis=1))).max())
            ok = ok and relative <= HIDDEN_RTOL
            notes.append(f"hidden {mode} {relative:.1e}")
    print(f"  {name:<14} {'; '.join(notes)} {'ok' if ok else 'FAILED'}")
    return ok


def make_prompts(path, lengths, vocab, seed=12):
    """Random prompts of `lengths` tokens (seeded), written as pipefill's input; returns them."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, vocab, size=n, dtype=np.int32) for n in lengths]
    with h5py.File(path, "w") as f:
        f["tokens"] = np.concatenate(prompts).astype(np.int32)
        f["offsets"] = np.cumsum([0] + list(lengths)).astype(np.int64)
    return prompts


def check_layouts(build, work, name, model_dir, model_class, prompts_h5, prompts, layouts, top_k,
                  logits_rtol=1e-5, label=""):
    """pipefill on `model_dir` in each of `layouts` (name, ranks, options) against transformers'
    float32 forward of what the files hold: the last position's logits within `logits_rtol` of
    max|logit|, and every stored score (compare_scores). A layout named pp2_dynamic gets a fixed
    cost model (from the first run's identity) and must really vary its chunks."""
    import torch
    from pipefill_runs import run_pipefill, write_cost_model
    model = model_class.from_pretrained(model_dir, dtype=torch.float32).eval()
    ref = reference_scores(model, prompts, top_k)
    with torch.no_grad():
        last = np.stack([model(input_ids=torch.tensor(p[None, :], dtype=torch.long)).logits[0, -1].double().numpy()
                         for p in prompts])
    print(f"{name}{label}: max|logit| {np.abs(last).max():.2f}")
    ok, attributes = True, None
    for layout, ranks, options in layouts:
        out_h5 = f"{work}/{name}_{layout}.h5"
        if layout == "pp2_dynamic":
            cost_model = f"{work}/{name}_cost.json"
            write_cost_model(cost_model, attributes, pp=2, tp=1)
            options += f" --cost-model {cost_model}"
        logits, run_attributes, timeline = run_pipefill(build, model_dir, prompts_h5, out_h5, ranks, options)
        attributes = attributes or run_attributes
        error = float(np.abs(logits - last).max())
        logits_ok = error <= logits_rtol * max(1.0, float(np.abs(last).max()))
        if layout == "pp2_dynamic":  # the plan really varied its chunks
            logits_ok = logits_ok and len({int(n) for n in timeline["chunk_length"]}) >= 3
        print(f"  {layout:<17} last logits {error:.1e} {'ok' if logits_ok else 'FAILED'}")
        ok = compare_scores(layout, out_h5, ref) and logits_ok and ok
    return ok
