#!/usr/bin/env python3
"""Text in: documents -> pipefill's input HDF5 (token ids and offsets), with each prompt's source.
(The tool behind scripts/tokenize.py; see there why it is a file of its own.)

usage: scripts/tokenize.py --model DIR --out IN.h5 [--field text] [--chat] [--quiet] FILE...
       scripts/tokenize.py --model DIR --out IN.h5 --context-field C --continuation-field X [--id-field ID] FILE.jsonl...
       scripts/tokenize.py --model DIR --out IN.h5 --window N --stride S FILE...

  FILE.txt     the whole file is one prompt
  FILE.jsonl   one prompt per non-blank line: the string in the field --field (default "text")
  --chat       each prompt becomes one user message in the model's chat template, followed by
               the assistant's header (what transformers' apply_chat_template builds)
  --context-field, --continuation-field
               each line is a context and a continuation; the prompt is both, and only the
               continuation is scored (/score_start). Tokenized as lm-evaluation-harness's hf
               model does: trailing whitespace of the context moves to the continuation, the
               continuation's tokens are those of context + continuation beyond the context's
               (with the tokenizer's special tokens), and an empty context is the BOS (else EOS)
  --id-field   each line's id (a string or a number), stored as /ids and carried to the output
  --window N --stride S
               documents longer than N tokens become windows of N tokens, one every S tokens
               (1 <= S < N), each scoring only the tokens no earlier window scored (/score_start
               N - S after the first): every token of the document after its first is scored
               once, with at least N - S tokens of context (llama.cpp's --ppl-stride);
               scripts/perplexity.py adds the windows of a document back up

Token ids come from DIR/tokenizer.json (Hugging Face tokenizers, batch API), with the special
tokens its post-processor adds (e.g. a BOS). The file (docs/formats.md) is written beside OUT
under a temporary name and renamed: OUT is either left as it was or is the complete new file.
Runs itself under the venv scripts/setup.sh makes (${PIPEFILL_VENV:-~/.cache/pipefill/venv}).
"""
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
# This file's name shadows the standard library's `tokenize`, which inspect and linecache import:
# its folder goes behind the standard library on the path, where our modules are still found.
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != HERE] + [HERE]

import python_tool  # noqa: E402  (standard library only: it picks the interpreter first)

python_tool.run_in_venv(__file__)

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

from python_tool import ArgumentParser, UserError, check_output_path, require_unicode  # noqa: E402

EXTENSIONS = (".txt", ".jsonl")
# Text handed to the tokenizer per call: ~2M tokens, a few seconds on one core, so that every core
# has documents and progress still comes every few seconds. A longer document is a batch alone.
BATCH_CHARS = 8 << 20
BATCH_DOCS = 8192
PROGRESS_INTERVAL_S = 2.0


@dataclass
class Document:
    file_index: int
    line: int  # 1-based line of a .jsonl file; 0 for a .txt file (the whole file)
    label: str  # how error messages name it: "FILE" or "FILE line N"
    text: str  # the document, or the context of a pair
    continuation: str = None  # a pair's continuation (--continuation-field)
    id: str = None  # --id-field


def help_text():
    return "\n\n".join(p for p in __doc__.strip().split("\n\n") if not p.startswith("usage:"))


def parse_args():
    parser = ArgumentParser(prog="scripts/tokenize.py", description=help_text(),
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="Each prompt's file and line are stored beside the ids (docs/formats.md).")
    parser.add_argument("--model", required=True, help="model directory holding tokenizer.json")
    parser.add_argument("--out", required=True, help="HDF5 file to write (pipefill run --input)")
    parser.add_argument("--field", default="text", help="field of each .jsonl line holding the prompt (default: text)")
    parser.add_argument("--chat", action="store_true", help="apply the model's chat template (one user message)")
    parser.add_argument("--context-field", help="field of each .jsonl line holding a context (with --continuation-field)")
    parser.add_argument("--continuation-field", help="field holding the continuation scored after the context")
    parser.add_argument("--id-field", help="field holding each prompt's id (stored as /ids, carried to the output)")
    parser.add_argument("--window", type=int, metavar="N", help="split documents into windows of N tokens")
    parser.add_argument("--stride", type=int, metavar="S", help="a window every S tokens (with --window)")
    parser.add_argument("--quiet", action="store_true", help="no progress and no summary")
    parser.add_argument("files", nargs="*", metavar="FILE", help=".txt (one prompt) or .jsonl (one per line)")
    args = parser.parse_args()
    if not args.files:
        raise UserError("no input files: give .txt files (one prompt each) or .jsonl files (one prompt per line)")
    if (args.context_field is None) != (args.continuation_field is None):
        raise UserError("--context-field and --continuation-field come together (a context and the continuation "
                        "scored after it)")
    args.pairs = args.context_field is not None
    if args.pairs and args.chat:
        raise UserError("--chat with --context-field: a chat template would wrap the context, not the pair; "
                        "render the context yourself")
    if args.pairs and args.context_field == args.continuation_field:
        raise UserError(f"--context-field and --continuation-field are both \"{args.context_field}\"")
    if (args.window is None) != (args.stride is None):
        raise UserError("--window and --stride come together (windows of N tokens, one every S)")
    if args.window is not None:
        if args.pairs:
            raise UserError("--window with --context-field: a pair is scored as one prompt")
        if args.window < 2 or not 1 <= args.stride < args.window:
            raise UserError(f"--window {args.window} --stride {args.stride}: want 1 <= S < N (each window keeps "
                            f"N - S tokens of context, at least one)")
        if args.window > 2**31 - 1:  # a prompt's length, as pipefill reads it (int32 token positions)
            raise UserError(f"--window {args.window}: at most {2**31 - 1} tokens")
    if args.pairs or args.id_field is not None:
        for path in args.files:
            if not path.lower().endswith(".jsonl"):
                raise UserError(f"{path}: --context-field and --id-field read .jsonl lines; a .txt file has no fields")
    return args


def check_inputs(paths):
    """Every input is refused before any work: a typo in the last file costs nothing."""
    for path in paths:
        if not path.lower().endswith(EXTENSIONS):
            raise UserError(f"{path}: unknown kind of file (want .txt for one prompt per file "
                            f"or .jsonl for one prompt per line)")
        if not os.path.exists(path):
            raise UserError(f"{path}: no such file")
        if not os.path.isfile(path):
            raise UserError(f"{path} is not a regular file")
        if not os.access(path, os.R_OK):
            raise UserError(f"cannot read {path}")


def decode_utf8(path, data):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(f"{path} is not valid UTF-8: byte 0x{data[e.start]:02x} at byte offset {e.start} "
                        f"(line {line})")
    return text[1:] if text.startswith("\ufeff") else text  # a byte-order mark is not text


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}")


def require_text(doc):
    if not doc.text.strip():
        raise UserError(f"{doc.label}: empty document" + (" (only whitespace)" if doc.text else ""))
    return doc


class NumberLiteral(str):
    """A JSON number as the line wrote it: an id 1E2 stays "1E2" (not 100.0), 1e400 stays itself
    (not inf), and two ids that differ in the file differ in the output."""


def not_json_constant(name):
    raise ValueError(f"{name} is not JSON")  # Python's json would take NaN and Infinity


def parse_record(line):
    return json.loads(line, parse_int=NumberLiteral, parse_float=NumberLiteral, parse_constant=not_json_constant)


def json_type(value):
    if isinstance(value, NumberLiteral):
        return "a number"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__)


def field_of(record, label, field, option, numbers=False):
    if field not in record:
        fields = ", ".join(f'"{k}"' for k in list(record)[:8]) or "none"
        raise UserError(f"{label} has no field \"{field}\" (its fields: {fields}; choose one with {option})")
    value = record[field]
    if not isinstance(value, str) or (isinstance(value, NumberLiteral) and not numbers):
        want = "a string or a number" if numbers else "a string"
        raise UserError(f"{label}: field \"{field}\" is {json_type(value)}, not {want}")
    value = require_unicode(str(value), f"{label}: field \"{field}\"")
    if numbers and "\0" in value:  # an id is stored as an HDF5 string, which ends at a NUL
        raise UserError(f"{label}: field \"{field}\" holds a NUL character (\\u0000), which an id cannot")
    return value


def jsonl_documents(paths, index, text, args):
    found = 0
    field = args.context_field if args.pairs else args.field
    # split("\n"), not splitlines(): U+2028 and friends may stand raw inside JSON strings.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        label = f"{paths[index]} line {number}"
        try:
            record = parse_record(line)
        except ValueError as e:
            raise UserError(f"{label} is not JSON ({e})")
        if not isinstance(record, dict):
            raise UserError(f"{label} is {json_type(record)}, not a JSON object with a \"{field}\" field")
        found += 1
        doc = Document(index, number, label, field_of(record, label, field, "--context-field" if args.pairs else "--field"))
        if args.id_field is not None:
            doc.id = field_of(record, label, args.id_field, "--id-field", numbers=True)
        if not args.pairs:
            yield require_text(doc)
            continue
        doc.continuation = field_of(record, label, args.continuation_field, "--continuation-field")
        if not doc.continuation:
            raise UserError(f"{label}: empty continuation (field \"{args.continuation_field}\"): nothing to score")
        yield doc
    if not found:
        raise UserError(f"{paths[index]} holds no prompts (no non-blank lines)")


def windows(length, window, stride):
    """(start, end, score_start) of each window of a `length`-token document: windows of `window`
    tokens every `stride`, each scoring the tokens after the previous window's end."""
    spans, end = [(0, min(window, length), 1)], min(window, length)
    while end < length:
        start = len(spans) * stride
        spans.append((start, min(start + window, length), end - start))
        end = spans[-1][1]
    return spans


def split_windows(docs, id_lists, window, stride):
    """Each document as its windows: (docs, ids, starts), a window keeping its document's source
    and id (with "#w" after it)."""
    out_docs, out_ids, starts = [], [], []
    for doc, ids in zip(docs, id_lists):
        for w, (start, end, first) in enumerate(windows(len(ids), window, stride)):
            out_docs.append(Document(doc.file_index, doc.line, doc.label, "", id=None if doc.id is None
                                     else f"{doc.id}#{w}"))
            out_ids.append(ids[start:end])
            starts.append(first)
    return out_docs, out_ids, starts


def encode_pairs(model, docs):
    """(ids, score_start) of each context/continuation pair, as lm-evaluation-harness 0.4's hf model
    encodes them (TemplateLM._encode_pair and loglikelihood): the context's trailing whitespace
    moves to the continuation; context and context + continuation are encoded with the tokenizer's
    own special tokens (none when the text already starts with the BOS text), and the
    continuation's tokens are those of the whole beyond the context's. An empty context becomes the
    prefix token (BOS, else EOS) before the continuation encoded without special tokens."""
    prefix_text = model.prefix_text()
    contexts, wholes, bare = [], [], []
    for doc in docs:
        context, continuation = doc.text, doc.continuation
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        contexts.append(context)
        wholes.append(context + continuation)
        bare.append(continuation)

    def encode(texts):
        special = [not (prefix_text and t.startswith(prefix_text)) for t in texts]
        with_special = model.encode(texts, add_special_tokens=True)
        without = model.encode([t for t, s in zip(texts, special) if not s], add_special_tokens=False)
        without = iter(without)
        return [ids if s else next(without) for ids, s in zip(with_special, special)]

    context_ids, whole_ids = encode(contexts), encode(wholes)
    bare_ids = model.encode(bare, add_special_tokens=False)
    ids, starts = [], []
    for doc, context, ctx, whole, alone in zip(docs, contexts, context_ids, whole_ids, bare_ids):
        if context and not ctx:
            raise UserError(f"{doc.label}: the context gives no tokens")
        if context:
            continuation = whole[len(ctx):]
        else:
            prefix = model.prefix_id(f"{doc.label} has an empty context")
            ctx, continuation = ([prefix], alone) if not alone or alone[0] != prefix else (alone[:1], alone[1:])
        if not continuation:
            raise UserError(f"{doc.label}: the continuation gives no tokens of its own after the context")
        ids.append(ctx + continuation)
        starts.append(len(ctx))
    return ids, starts


class Progress:
    """Progress on stderr, every few seconds, only for runs long enough to want it."""

    def __init__(self, files, quiet):
        self.files = files
        self.quiet = quiet
        self.start = self.last = time.monotonic()

    def elapsed(self):
        return time.monotonic() - self.start

    def note(self, message):
        if not self.quiet:
            print(f"tokenize: {message}", file=sys.stderr, flush=True)

    def update(self, file_index, prompts, tokens):
        now = time.monotonic()
        if now - self.last >= PROGRESS_INTERVAL_S:
            self.last = now
            self.note(f"file {file_index + 1}/{len(self.files)} ({self.files[file_index]}), {prompts} prompts, "
                      f"{tokens:,} tokens, {now - self.start:.0f} s")


def tokenize_all(args, model, prompts):
    paths = args.files
    render = model.chat_renderer() if args.chat else None
    progress = Progress(paths, args.quiet)
    batch, batch_chars = [], 0

    def flush():
        nonlocal batch, batch_chars
        if not batch:
            return
        if len(batch) == 1 and batch_chars >= BATCH_CHARS:  # one core, ~1-3 s per million tokens
            progress.note(f"{batch[0].label}: one prompt of {batch_chars / 1e6:.0f} M characters")
        # The template and the special tokens come from JSON too: their output is checked as well.
        if args.pairs:
            ids, starts = encode_pairs(model, batch)
            prompts.add_batch(batch, ids, starts)
        else:
            texts = [require_unicode(render(d.text), f"the chat template of {model.model_dir} rendered for {d.label}")
                     for d in batch] if render else [d.text for d in batch]
            # A chat template writes its special tokens itself (transformers encodes it the same way).
            ids = model.encode(texts, add_special_tokens=not args.chat)
            if args.window:
                prompts.add_batch(*split_windows(batch, ids, args.window, args.stride))
            else:
                prompts.add_batch(batch, ids)
        batch_file = batch[-1].file_index
        batch, batch_chars = [], 0
        progress.update(batch_file, len(prompts.lengths), prompts.tokens)

    for index, path in enumerate(paths):
        data = read_bytes(path)
        text = decode_utf8(path, data)
        if path.lower().endswith(".jsonl"):
            docs = jsonl_documents(paths, index, text, args)
        else:
            docs = [require_text(Document(index, 0, path, text))]
        for doc in docs:
            batch.append(doc)
            batch_chars += len(doc.text) + len(doc.continuation or "")
            if batch_chars >= BATCH_CHARS or len(batch) >= BATCH_DOCS:
                flush()
    flush()
    return progress


def main():
    args = parse_args()
    check_output_path(args.out, args.files, model=args.model)
    check_inputs(args.files)
    # Loaded only now (~0.4 s), so that a mistyped argument or path is reported at once.
    import tokenizers

    from model_tokenizer import ModelTokenizer
    from prompt_file import PromptSet, write_prompt_file

    model = ModelTokenizer(args.model)
    prompts = PromptSet(args.files, model.model_vocab_size)
    progress = tokenize_all(args, model, prompts)
    attrs = {
        "created_by": "scripts/tokenize.py (pipefill)",
        "tokenizers_version": tokenizers.__version__,
        "model_dir": model.model_dir,
        "tokenizer_json": model.tokenizer_json,
        "tokenizer_sha256": model.tokenizer_sha256,
        "tokenizer_vocab_size": model.vocab_size,
        "chat": int(args.chat),
        "field": args.field,
    }
    if args.pairs:
        attrs.update(context_field=args.context_field, continuation_field=args.continuation_field,
                     pair_encoding="lm-evaluation-harness 0.4 hf (whitespace to the continuation)")
    if args.id_field is not None:
        attrs["id_field"] = args.id_field
    if args.window:
        attrs.update(window=args.window, stride=args.stride)
    if args.chat:
        attrs["chat_template_sha256"] = hashlib.sha256(model.chat_template().encode("utf-8")).hexdigest()
    write_prompt_file(args.out, prompts, attrs)
    too_long = [n for n in prompts.lengths if model.max_positions and n > model.max_positions]
    if too_long:
        print(f"warning: {len(too_long)} prompt(s) longer than the model's max_position_embeddings "
              f"({model.max_positions}), the longest {max(too_long):,} tokens: `pipefill run` needs "
              f"--allow-long-prompts for them", file=sys.stderr)
    if not args.quiet:
        count = len(prompts.lengths)
        print(f"wrote {args.out}: {count} prompt{'s' if count != 1 else ''}, {prompts.tokens:,} tokens "
              f"({progress.elapsed():.1f} s)")


if __name__ == "__main__":
    python_tool.main_with_user_errors(main)
