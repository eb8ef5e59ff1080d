#!/usr/bin/env python3
"""Per-document perplexity from a `pipefill run --logprobs` output.

usage: scripts/perplexity.py OUT.h5 [--input IN.h5] [--model DIR] [--surprising N]

Prints, for every document, its tokens, how many were scored, perplexity (exp of the mean
negative log-prob over the tokens after its first, or over its scored span: the input's
/score_start) and bits per token,
then the token-weighted figure over all of them. Prompts are named by their /ids when they have them.
--input names the prompt file the run read (tokenize.py's: each prompt's source file and line);
with --model (the directory holding tokenizer.json) and --surprising N, also the N tokens the
model expected least in each document, with the text just before them.
Runs itself under the venv scripts/setup.sh makes, like tokenize.py.
"""
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
# Beside scripts/tokenize.py, which shadows the standard library's `tokenize`: same fix as there.
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != HERE] + [HERE]

import python_tool  # noqa: E402  (standard library only: it picks the interpreter first)

python_tool.run_in_venv(__file__)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402

import h5py  # noqa: E402
import numpy as np  # noqa: E402

from prompt_file import PromptIndex, check_run_input, open_h5, text_of  # noqa: E402
from python_tool import ArgumentParser, UserError  # noqa: E402

CONTEXT_TOKENS = 8  # text shown before a surprising token


def check_same_input(out, args, prompts, logprobs, done, starts):
    """--input must be the file the run read: its count and fingerprint, and in any case its prompt
    boundaries where the output has a NaN (before each prompt's scored span)."""
    check_run_input(out, args.file, args.input, prompts)
    offsets = prompts.offsets
    for p in np.flatnonzero(done):
        first, end = int(offsets[p]), int(offsets[p + 1])
        scored = first + int(starts[p])
        if not np.isnan(logprobs[first:scored]).all() or np.isnan(logprobs[scored:end]).any():
            raise UserError(f"{args.input}: prompt {p}'s boundaries do not match {args.file}: not the run's input")


def parse_args():
    parser = ArgumentParser(description=__doc__.split("\n\n", 2)[2].strip(),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", metavar="OUT.h5", help="a pipefill run's output, written with --logprobs")
    parser.add_argument("--input", help="the input file of the run (prompt sources; the tokens, for --surprising)")
    parser.add_argument("--model", help="model directory holding tokenizer.json (for --surprising)")
    parser.add_argument("--surprising", type=int, default=0, metavar="N",
                        help="also the N least expected tokens of each document (needs --model and --input)")
    args = parser.parse_args()
    if args.surprising < 0:
        raise UserError("--surprising must not be negative")
    if args.surprising and not (args.model and args.input):
        raise UserError("--surprising needs --model (the tokenizer) and --input (the tokens)")
    return args


def main():
    args = parse_args()
    out = open_h5(args.file)
    if "token_logprobs" not in out:
        raise UserError(f"{args.file} has no /token_logprobs: run pipefill with --logprobs")
    dataset = out["token_logprobs"]
    if not isinstance(dataset, h5py.Dataset) or dataset.dtype.kind != "f" or dataset.ndim != 1 or len(dataset) == 0:
        raise UserError(f"{args.file}: /token_logprobs is not a pipefill output's (floats, one per token)")
    logprobs = dataset[:].astype(np.float64)
    if (logprobs > 1e-3).any():  # a log-probability is at most 0 (float32 rounding aside)
        raise UserError(f"{args.file}: /token_logprobs holds values above 0, which no log-probability takes")
    prompts = PromptIndex(open_h5(args.input) if args.input else out, args.input)
    offsets = prompts.offsets
    done = out["completed"][:] if "completed" in out else None
    # Each prompt's first scored position: the output's copy of the input's /score_start.
    starts = out["score_start"][:].astype(np.int64) if "score_start" in out else None
    if prompts.ids is None and "ids" in out:
        prompts.ids = [text_of(i) for i in out["ids"][:]]
    if offsets is None and starts is not None and (starts > 1).any():
        raise UserError(f"{args.file} scores spans (/score_start): give the run's input with --input to find "
                        f"its prompts")
    if offsets is None:
        # No input given: the NaN at each prompt's first token marks its start, which holds only
        # in a complete output (a partial one has rows never written, or left by a failed prompt).
        if done is None or not done.all():
            raise UserError(f"{args.file} is not complete: give the run's input with --input")
        offsets = np.append(np.flatnonzero(np.isnan(logprobs)), len(logprobs))
        if len(offsets) - 1 != len(done):
            raise UserError(f"{args.file}: its log-probs do not split into {len(done)} prompts: give --input")
    if offsets[-1] != len(logprobs):
        raise UserError(f"{args.input} has {offsets[-1]} tokens, the output {len(logprobs)}: not the run's input")
    if done is None:
        done = np.ones(len(offsets) - 1, np.uint8)
    if starts is None:
        starts = np.ones(len(offsets) - 1, np.int64)
    if args.input:
        check_same_input(out, args, prompts, logprobs, done, starts)
    model = None
    if args.surprising:
        from model_tokenizer import ModelTokenizer
        model = ModelTokenizer(args.model)
        model.require_model_of(out.attrs, args.file)

    # A document is one prompt, or its windows (tokenize.py --window): their scored spans
    # cover each of its tokens once, so its NLL is their sum.
    groups = prompts.document_groups(len(offsets) - 1)
    names = [prompts.name(g[0]) + (f" in {len(g)} windows" if len(g) > 1 else "") for g in groups]
    width = max(len(n) for n in names)
    print(f"{'document':<{width}} {'tokens':>9} {'scored':>9} {'perplexity':>11} {'bits/token':>10}")
    total_nll, total_tokens, total_length = 0.0, 0, 0
    for group, name in zip(groups, names):
        length = sum(int(offsets[p + 1] - offsets[p]) for p in group)
        if not all(done[p] for p in group):
            print(f"{name:<{width}} {length:>9} {'':>9} {'not computed':>11}")
            continue
        spans = [(int(offsets[p]) + int(starts[p]), int(offsets[p + 1])) for p in group]
        positions = np.concatenate([np.arange(a, b) for a, b in spans])
        if len(group) > 1:  # windows overlap: the document is its first unscored tokens and the spans
            length = int(starts[group[0]]) + len(positions)
        scored = logprobs[positions]
        nll = -float(scored.sum())
        mean = nll / len(scored) if len(scored) else math.nan
        print(f"{name:<{width}} {length:>9} {len(scored):>9} {math.exp(mean):>11.3f} {mean / math.log(2):>10.3f}")
        total_nll += nll
        total_tokens += len(scored)
        total_length += length
        for j in np.argsort(scored, kind="stable")[:args.surprising]:
            position = int(positions[j])
            p = group[int(np.searchsorted(np.cumsum([b - a for a, b in spans]), j, side="right"))]
            before = model.decode(prompts.tokens[max(int(offsets[p]), position - CONTEXT_TOKENS):position])
            token = model.decode(prompts.tokens[position:position + 1])
            print(f"    {json.dumps(token, ensure_ascii=False)} p={math.exp(scored[j]):.2e} "
                  f"after ...{json.dumps(before, ensure_ascii=False)}")
    if total_tokens:
        mean = total_nll / total_tokens
        print(f"{'all (token-weighted)':<{width}} {total_length:>9} {total_tokens:>9} {math.exp(mean):>11.3f} "
              f"{mean / math.log(2):>10.3f}")


if __name__ == "__main__":
    python_tool.main_with_user_errors(main)
