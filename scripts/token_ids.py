#!/usr/bin/env python3
"""The token ids of strings, with a model directory's tokenizer: the file `pipefill run
--token-ids FILE` reads (the tokens whose log-probs every scored position keeps).

usage: scripts/token_ids.py --model DIR --out FILE [--first] TEXT [TEXT ...]

Each TEXT must be one token of the model, as it would follow other text: " A" (with its leading
space) is the answer letter after "Answer:" in most tokenizers, "A" the letter at the start of a
word. A TEXT that makes several tokens is refused, naming them, unless --first takes the first
(lm-evaluation-harness scores a multi-token choice with every token; a token set holds one
token per choice). The file gets one id per line, the text as a comment beside it, in the order
given; /token_set_ids in the run's output holds the same order.
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

from model_tokenizer import ModelTokenizer  # noqa: E402
from python_tool import (ArgumentParser, UserError, check_output_path, require_unicode,  # noqa: E402
                         write_text_atomically)


def parse_args():
    parser = ArgumentParser(description=__doc__.split("\n\n", 2)[2],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="model directory holding tokenizer.json")
    parser.add_argument("--out", required=True, help="the token-ids file to write")
    parser.add_argument("--first", action="store_true", help="take the first token of a text that makes several")
    parser.add_argument("texts", metavar="TEXT", nargs="+", help="one token's text each")
    return parser.parse_args()


def main():
    args = parse_args()
    check_output_path(args.out, model=args.model)
    for text in args.texts:
        require_unicode(text, f"TEXT {python_tool.utf8_name(text)!r}")
    model = ModelTokenizer(args.model)
    lines, seen = [], {}
    for text, ids in zip(args.texts, model.encode(args.texts, add_special_tokens=False)):
        pieces = [model.tokenizer.id_to_token(i) for i in ids]
        if not ids:
            raise UserError(f"{json.dumps(text)} makes no token")
        if len(ids) > 1 and not args.first:
            raise UserError(f"{json.dumps(text)} is {len(ids)} tokens ({', '.join(map(json.dumps, pieces))}), not "
                            f"one: give one token's text, or --first to take the first")
        if ids[0] in seen:
            raise UserError(f"{json.dumps(text)} and {json.dumps(seen[ids[0]])} are the same token ({ids[0]})")
        seen[ids[0]] = text
        # The comment names the token taken: with --first, the first of a longer text's (JSON
        # strings, so that no text can break the line).
        taken = json.dumps(text) if len(ids) == 1 else \
            f"{json.dumps(model.tokenizer.decode([ids[0]]))} (the first of {json.dumps(text)})"
        lines.append(f"{ids[0]}  # {taken}")
    write_text_atomically(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}: {len(lines)} token ids")


if __name__ == "__main__":
    python_tool.main_with_user_errors(main)
