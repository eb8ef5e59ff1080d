#!/usr/bin/env python3
"""Token ids in a pipefill input or output, back to text, with the model directory's tokenizer.

usage: scripts/detokenize.py --model DIR FILE.h5 [--dataset NAME] [--input IN.h5] [--prompt I]
                             [--boundaries] [--skip-special] [--last N] [--top K]

What is printed depends on the dataset (default: tokens); no other holds token ids or logits:
  /tokens     ids [T]        each prompt's text; --boundaries: one token per line
                             (position, id, the token's text as a JSON string)
  /topk_ids   ids [T, K]     per position: the token there, then the K candidates after it,
                             each with its log-prob from /topk_logprobs
  /logits     floats [n, V]  per prompt: the --top K most likely next tokens and their probabilities
Prompt boundaries (/offsets), the tokens and each prompt's source file and line come from FILE,
or from --input (the tokenize.py file a run read, checked against the output's fingerprint of
it) when FILE is a run's output.
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

import h5py  # noqa: E402
import numpy as np  # noqa: E402

from model_tokenizer import ModelTokenizer  # noqa: E402
from prompt_file import PromptIndex, check_run_input, open_h5  # noqa: E402
from python_tool import ArgumentParser, UserError  # noqa: E402

# The datasets of pipefill's files (docs/formats.md) that hold token ids or logits, and what they
# must be. Chosen by name: by type alone, /completed or /offsets pass for ids, and /hidden_states
# or /topk_logprobs for logits.
SHOWN = {"tokens": ("iu", 1, "integers [T]"), "topk_ids": ("iu", 2, "integers [T, K]"),
         "logits": ("f", 2, "floats [n, vocab]")}


def help_text():
    return "\n\n".join(p for p in __doc__.strip().split("\n\n") if not p.startswith("usage:"))


def parse_args():
    parser = ArgumentParser(description=help_text(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="model directory holding tokenizer.json")
    parser.add_argument("file", metavar="FILE.h5", help="tokenize.py's file, or a pipefill run's output")
    parser.add_argument("--dataset", default="tokens", help="tokens (default), topk_ids or logits")
    parser.add_argument("--input", help="the input file of the run that wrote FILE (offsets, tokens, sources)")
    parser.add_argument("--prompt", type=int, help="only this prompt (0-based); default: all")
    parser.add_argument("--boundaries", action="store_true", help="one token per line instead of running text")
    parser.add_argument("--skip-special", action="store_true", help="leave out special tokens such as BOS")
    parser.add_argument("--last", type=int, metavar="N", help="per-position datasets: only each prompt's last N")
    parser.add_argument("--top", type=int, default=5, metavar="K", help="float datasets: how many ids (default 5)")
    args = parser.parse_args()
    if args.last is not None and args.last < 1:
        raise UserError("--last must be at least 1")
    if args.top < 1:
        raise UserError("--top must be at least 1")
    return args


def token_text(model, token_id):
    if not model.has_id(token_id):
        return f"<id {int(token_id)}>"
    return model.decode([token_id])


def quoted(text):
    # Escaped too: U+2028 / U+2029, which JSON leaves raw but some viewers break lines at.
    return json.dumps(text, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def chosen_prompts(args, n):
    if args.prompt is None:
        return range(n)
    if not 0 <= args.prompt < n:
        raise UserError(f"--prompt {args.prompt} is out of range: the file has {n} prompts")
    return [args.prompt]


def print_texts(args, model, prompts, ids):
    """ids [T]: each prompt's text, or its tokens one per line."""
    offsets = prompts.offsets if prompts.offsets is not None else np.array([0, len(ids)])
    if offsets[-1] != len(ids):
        raise UserError(f"/{args.dataset} holds {len(ids)} ids but the offsets end at {offsets[-1]}")
    chosen = chosen_prompts(args, len(offsets) - 1)
    for prompt in chosen:
        segment = ids[offsets[prompt]:offsets[prompt + 1]]
        if len(chosen) > 1:
            print(f"--- {prompts.name(prompt)} ---")
        if args.boundaries:
            for position, token_id in enumerate(segment, start=int(offsets[prompt])):
                print(f"{position}\t{int(token_id)}\t{quoted(token_text(model, token_id))}")
            continue
        unknown = segment[(segment < 0) | (segment >= model.vocab_size)]
        if len(unknown):
            raise UserError(f"prompt {prompt}: id {int(unknown[0])} is not in {model.tokenizer_json}")
        print(model.decode(segment, skip_special_tokens=args.skip_special))


NOT_COMPUTED = "not computed (the run stopped before it finished this prompt; --resume finishes it)"


def print_candidates(args, model, prompts, rows, describe, done):
    """rows [T, K] (per position) or [n, K] (per prompt): describe(i) says what row i holds.
    done: the output's /completed (None if it has none); a prompt not done has no rows to show."""
    n = prompts.count()
    if done is not None and n is not None and len(done) != n:
        raise UserError(f"{args.file}: /completed has {len(done)} entries but the prompts are {n}: give the "
                        f"run's own --input")
    if done is not None and n is None and not done.all():
        raise UserError(f"{args.file} is not complete: give the run's input with --input to show the prompts done")
    if n is None:  # nothing says which rows belong to which prompt
        if args.prompt is not None:
            raise UserError(f"{args.file} has no /offsets: give the run's input with --input to pick a prompt")
        for row in range(len(rows)):
            print(f"row {row}: {describe(row)}")
        return
    if len(rows) == n:
        for prompt in chosen_prompts(args, n):
            print(f"{prompts.name(prompt)}: {describe(prompt) if done is None or done[prompt] else NOT_COMPUTED}")
        return
    if len(rows) != prompts.offsets[-1]:
        raise UserError(f"/{args.dataset} has {len(rows)} rows: neither one per prompt ({n}) "
                        f"nor one per token ({prompts.offsets[-1]})")
    chosen = chosen_prompts(args, n)
    for prompt in chosen:
        start, end = int(prompts.offsets[prompt]), int(prompts.offsets[prompt + 1])
        if args.last is not None:
            start = max(start, end - args.last)
        if done is not None and not done[prompt]:
            print(f"--- {prompts.name(prompt)}: {NOT_COMPUTED}")
            continue
        if len(chosen) > 1:
            print(f"--- {prompts.name(prompt)} ---")
        for position in range(start, end):
            here = f"{quoted(token_text(model, prompts.tokens[position]))} -> " if prompts.tokens is not None else ""
            print(f"{position}\t{here}{describe(position)}")


def candidates(args, model, data_file, ids):
    """describe(i) for /topk_ids: row i's candidates, each with its log-prob (natural log, as
    /topk_logprobs stores it) when the file has them."""
    if "topk_logprobs" not in data_file:
        return lambda i: " ".join(quoted(token_text(model, t)) for t in ids[i])
    logprobs = data_file["topk_logprobs"]
    if logprobs.shape != ids.shape:
        raise UserError(f"{args.file}: /topk_logprobs is {list(logprobs.shape)}, /topk_ids {list(ids.shape)}")
    logprobs = logprobs[:]
    return lambda i: " ".join(f"{quoted(token_text(model, t))} {p:.3f}" for t, p in zip(ids[i], logprobs[i]))


def most_likely(args, model, logits):
    """describe(i) for /logits: the --top most likely next tokens after prompt i, with probabilities."""
    def describe(i):
        row = logits[i].astype(np.float64)
        top = np.argsort(-row, kind="stable")[:args.top]
        probabilities = np.exp(row - row.max())
        probabilities /= probabilities.sum()
        return " ".join(f"{quoted(token_text(model, t))} {probabilities[t]:.3f}" for t in top)
    return describe


def main():
    args = parse_args()
    model = ModelTokenizer(args.model)
    data_file = open_h5(args.file)
    model.require_model_of(data_file.attrs, args.file)
    showable = ", ".join(k for k in sorted(SHOWN) if isinstance(data_file.get(k), h5py.Dataset)) or "none of them"
    if args.dataset not in SHOWN:
        raise UserError(f"--dataset {args.dataset}: /{args.dataset} holds neither token ids nor logits; detokenize.py "
                        f"shows tokens, topk_ids and logits ({args.file} has: {showable})")
    if not isinstance(data_file.get(args.dataset), h5py.Dataset):
        raise UserError(f"{args.file} has no dataset /{args.dataset} "
                        f"(of tokens, topk_ids and logits it has: {showable})")
    dataset = data_file[args.dataset]
    prompts = PromptIndex(data_file, args.input)
    if args.input and "offsets" not in data_file:
        check_run_input(data_file, args.file, args.input, prompts)
    kinds, ndim, what = SHOWN[args.dataset]
    if dataset.dtype.kind not in kinds or dataset.ndim != ndim:
        raise UserError(f"{args.file}: /{args.dataset} is {dataset.dtype} {list(dataset.shape)}, not {what}")
    # A partial output (a stopped run's OUT.h5.partial) holds rows only for its /completed prompts.
    done = data_file["completed"][:].astype(bool) if isinstance(data_file.get("completed"), h5py.Dataset) else None
    if args.dataset == "tokens":
        print_texts(args, model, prompts, dataset[:])
    elif args.dataset == "topk_ids":
        ids = dataset[:]
        print_candidates(args, model, prompts, ids, candidates(args, model, data_file, ids), done)
    else:
        print_candidates(args, model, prompts, dataset, most_likely(args, model, dataset), done)


if __name__ == "__main__":
    python_tool.main_with_user_errors(main)
