#!/usr/bin/env python3
"""Writes an input whose prompts share prefixes, for the prefix-reuse tests: one document
with several questions (one an exact duplicate, one the document alone), a multi-turn
history that extends a question, a branch that shares less than the question before it
(its reuse reaches back past that question to the document), a prompt that shares less
than a page, and unrelated prompts between them.

usage: make_shared_prompts.py OUT.h5 [--vocab V] [--doc N] [--copies K] [--seed S]
(--copies K: K such groups, each with its own document, one after another)
"""
import argparse

import h5py
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--vocab", type=int, default=512)
parser.add_argument("--doc", type=int, default=200)
parser.add_argument("--copies", type=int, default=1)
parser.add_argument("--seed", type=int, default=11)
args = parser.parse_args()
rng = np.random.default_rng(args.seed)


def tokens(n):
    return list(rng.integers(0, args.vocab, n))


prompts = []
for _ in range(args.copies):
    doc = tokens(args.doc)
    q1 = doc + tokens(30)
    turn = q1 + tokens(25) + tokens(40)
    prompts += [
        tokens(90),                # unrelated
        q1,                        # the document and a question
        doc + tokens(45),          # another question
        tokens(60),                # unrelated, between them
        doc,                       # the document alone (a prefix of the others)
        turn,                      # a multi-turn history extending q1
        list(q1),                  # an exact duplicate of q1
        turn[:len(q1) + 25] + tokens(33),  # a branch of the history: shares less than `turn`
        doc[:10] + tokens(50),     # shares less than a page
        doc + tokens(3),           # a short question
    ]
flat = np.concatenate([np.asarray(p, dtype=np.int32) for p in prompts])
offsets = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
with h5py.File(args.out, "w") as f:
    f["tokens"] = flat
    f["offsets"] = offsets
print(f"wrote {args.out}: {len(prompts)} prompts, {len(flat)} tokens, a {args.doc}-token document shared")
