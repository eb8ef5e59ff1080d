#!/usr/bin/env python3
"""Compares the token rows and hidden states of a pipefill output with the numpy reference.

The reference (tests/reference/numpy_reference.py --top-k K) holds every position's scores from
the full logits; the output holds what its run stored (--logprobs, --top-k k <= K,
--hidden-states last|mean). Checked: log-probs within LOGPROB_ATOL and NaN exactly at each
prompt's first token; top-k log-probs within LOGPROB_ATOL rank by rank; top-k ids equal wherever
the reference's neighbouring log-probs are more than MARGIN apart (elsewhere the order is a
float32 coin toss); /nll_sum equal to the sum of the stored log-probs and /perplexity to
exp(nll_sum / (length - 1)); hidden states within HIDDEN_RTOL of each row's max|h|.

usage: check_token_outputs.py OUTPUT.h5 REFERENCE.h5
"""
import sys

import h5py
import numpy as np

LOGPROB_ATOL = 1e-4  # measured on the tiny models: 2.6e-6 to 4.4e-6
MARGIN = 1e-3
HIDDEN_RTOL = 1e-4


def confident(ref_topk, k):
    """[T, k] mask: the reference's rank j is more than MARGIN from both neighbours (a rank
    whose lower neighbour the reference does not hold is never confident)."""
    gaps = -np.diff(ref_topk, axis=1)  # gaps[:, j]: rank j minus rank j + 1, >= 0
    ok = np.zeros((ref_topk.shape[0], k), bool)
    for j in range(min(k, gaps.shape[1])):
        ok[:, j] = gaps[:, j] > MARGIN
        if j > 0:
            ok[:, j] &= gaps[:, j - 1] > MARGIN
    return ok


def main():
    out_path, ref_path = sys.argv[1:3]
    failures = []
    with h5py.File(out_path, "r") as out, h5py.File(ref_path, "r") as ref:
        offsets = None
        if "token_logprobs" in out:
            got, want = out["token_logprobs"][:].astype(np.float64), ref["token_logprobs"][:]
            first = np.isnan(want)
            error = float(np.abs(got[~first] - want[~first]).max())
            print(f"token_logprobs [{len(got)}]: max abs error {error:.2e} (bound {LOGPROB_ATOL:.0e})")
            if got.shape != want.shape or not np.array_equal(np.isnan(got), first) or error > LOGPROB_ATOL:
                failures.append("token_logprobs")
            starts = np.flatnonzero(first)
            offsets = np.append(starts, len(want))
            nll = out["nll_sum"][:]
            ppl = out["perplexity"][:]
            for p in range(len(starts)):
                stored = got[offsets[p] + 1:offsets[p + 1]]
                expect_nll = -np.sum(stored)
                if not np.isclose(nll[p], expect_nll, rtol=1e-9, atol=1e-9):
                    failures.append(f"nll_sum[{p}] {nll[p]} != -sum(token_logprobs) {expect_nll}")
                expect_ppl = np.exp(nll[p] / len(stored)) if len(stored) else np.nan  # one token: NaN
                if not np.isclose(ppl[p], expect_ppl, rtol=1e-12, equal_nan=True):
                    failures.append(f"perplexity[{p}] is not exp(nll_sum / (length - 1))")
            print(f"perplexity {np.round(ppl, 3)} (reference {np.round(ref['perplexity'][:], 3)})")
        if "topk_ids" in out:
            ids, lps = out["topk_ids"][:], out["topk_logprobs"][:].astype(np.float64)
            k = ids.shape[1]
            ref_ids, ref_lps = ref["topk_ids"][:], ref["topk_logprobs"][:]
            error = float(np.abs(lps - ref_lps[:, :k]).max())
            mask = confident(ref_lps, k)
            agree = ids[mask] == ref_ids[:, :k][mask]
            print(f"top-{k}: log-prob max abs error {error:.2e}; ids equal at {int(agree.sum())}/{int(mask.sum())} "
                  f"confident ranks ({ids.size} in all)")
            if error > LOGPROB_ATOL or not agree.all():
                failures.append("top-k")
            if not (np.diff(lps, axis=1) <= 0).all():
                failures.append("top-k log-probs are not in descending order")
        if "hidden_states" in out:
            mode = out.attrs.get("hidden_states", b"")
            mode = mode.decode() if isinstance(mode, bytes) else str(mode)
            got, want = out["hidden_states"][:].astype(np.float64), ref[f"hidden_{mode}"][:]
            scale = np.maximum(1.0, np.abs(want).max(axis=1))
            relative = float((np.abs(got - want).max(axis=1) / scale).max())
            print(f"hidden_states ({mode}): max relative error {relative:.2e} (bound {HIDDEN_RTOL:.0e})")
            if relative > HIDDEN_RTOL:
                failures.append("hidden_states")
    if failures:
        print("FAILED:", "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
