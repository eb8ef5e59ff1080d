#!/usr/bin/env python3
"""scripts/tokenize.py and scripts/detokenize.py against transformers' own tokenizer.

A small byte-level BPE (vocabulary 400 <= synthetic:tiny's 512, a BOS post-processor, digits
split like SmolLM2's, a chat template) is trained here with `tokenizers`, no network. Then:
.txt, .jsonl (--field, blank lines, a raw U+2028) and --chat files are tokenized and every
prompt's ids are compared with transformers.AutoTokenizer on the same directory (the template
from tokenizer_config.json, and from chat_template.jinja, which wins); offsets, sources and
attributes are checked; `pipefill run --model synthetic:tiny` reads the file; detokenize.py
gives the texts back, shows the run's /logits and its /topk_ids beside /topk_logprobs, and refuses
other datasets and an --input that is not the run's; each bad input (lone surrogates among them)
is exit status 2, one `error:` line and no file (an existing output left as it was); paths and
--field in bytes that are not UTF-8 are stored as text. Also prints, not asserted, the time for a
~1M-token document.

usage: tokenize_check.py SOURCE_DIR BUILD_DIR WORK_DIR   (run with scripts/setup_venv.sh's python)
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer

SOURCE, BUILD, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
TOKENIZE = os.path.join(SOURCE, "scripts", "tokenize.py")
DETOKENIZE = os.path.join(SOURCE, "scripts", "detokenize.py")
TOKEN_IDS = os.path.join(SOURCE, "scripts", "token_ids.py")
PERPLEXITY = os.path.join(SOURCE, "scripts", "perplexity.py")
PIPEFILL = os.path.join(BUILD, "pipefill")

SPECIALS = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{{ eos_token }}\n"
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
# chat_template.jinja beside the config's template: transformers prefers the file.
JINJA_TEMPLATE = ("{{ bos_token }}<|user|>system: be brief{{ eos_token }}{% for m in messages %}"
                  "<|{{ m.role }}|>{{ m.content | upper }}{{ eos_token }}{% endfor %}"
                  "{% if add_generation_prompt %}<|assistant|>{% endif %}")
WORDS = ("the of prefill pipeline token prompt chunk stage rank model layer cache page attention "
         "document score perplexity long context million text number value résumé naïve "
         "über straße 東京 データ 🙂").split()

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"FAIL: {what}")
    return condition


def sentences(count, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        words = rng.choice(WORDS, size=rng.integers(4, 14))
        out.append(" ".join(words).capitalize() + f" {rng.integers(0, 10000)}.")
    return out


def make_model(directory, vocab_size=512, template="config", tokenizer_json=None):
    """A model directory's tokenizer files; the tokenizer is trained unless tokenizer_json is given."""
    os.makedirs(directory)
    if tokenizer_json:
        shutil.copy(tokenizer_json, os.path.join(directory, "tokenizer.json"))
    else:
        train_tokenizer(os.path.join(directory, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
              # the AddedToken form older save_pretrained wrote
              "unk_token": {"__type": "AddedToken", "content": "<unk>", "lstrip": False, "normalized": False,
                            "rstrip": False, "single_word": False, "special": True},
              "model_max_length": 1 << 30}
    if template:
        config["chat_template"] = CHAT_TEMPLATE
    write(os.path.join(directory, "tokenizer_config.json"), json.dumps(config))
    if template == "jinja":
        write(os.path.join(directory, "chat_template.jinja"), JINJA_TEMPLATE)
    model_config = {"model_type": "llama", "vocab_size": vocab_size, "max_position_embeddings": 4096}
    write(os.path.join(directory, "config.json"), json.dumps(model_config))


def train_tokenizer(path):
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(sentences(2000, seed=1), trainer)
    bos = tokenizer.token_to_id("<s>")
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                             special_tokens=[("<s>", bos)])
    tokenizer.save(path)


def write(path, content):
    with open(path, "wb") as f:
        f.write(content.encode("utf-8") if isinstance(content, str) else content)


def run(tool, *args, env=None):
    # The script itself, as a user types it: its shebang and its venv re-exec are under test too.
    start = time.monotonic()
    result = subprocess.run([tool, *args], capture_output=True, cwd=WORK, env=dict(os.environ, **(env or {})))
    result.seconds = time.monotonic() - start
    # Decoded by hand: text=True would turn the documents' \r\n into \n.
    result.stdout, result.stderr = result.stdout.decode(), result.stderr.decode()
    return result


def read(path):
    with h5py.File(path, "r") as f:
        return {name: f[name][:] for name in f}, dict(f.attrs)


def prompt_ids(data, i):
    return [int(t) for t in data["tokens"][data["offsets"][i]:data["offsets"][i + 1]]]


def text_attr(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def check_against_transformers(label, path, model_dir, texts, chat):
    reference = AutoTokenizer.from_pretrained(model_dir)
    data, attrs = read(path)
    check(len(data["offsets"]) == len(texts) + 1, f"{label}: {len(texts)} prompts")
    for i, text in enumerate(texts):
        if chat:
            want = reference.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                 tokenize=True, return_dict=False)
        else:
            want = reference(text)["input_ids"]
        check(prompt_ids(data, i) == list(want), f"{label}: prompt {i}'s ids equal transformers' ({text[:30]!r}...)")
    check(int(attrs["chat"]) == int(chat), f"{label}: attribute chat is {int(chat)}")
    return data, attrs


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    model = os.path.join(WORK, "model")
    make_model(model)
    trained = os.path.join(model, "tokenizer.json")
    vocab = Tokenizer.from_file(trained).get_vocab_size()
    print(f"test tokenizer: vocabulary {vocab}")
    assert vocab <= 512, "the ids must fit synthetic:tiny's vocabulary"
    make_model(os.path.join(WORK, "model_jinja"), template="jinja", tokenizer_json=trained)
    make_model(os.path.join(WORK, "model_no_template"), template=None, tokenizer_json=trained)
    make_model(os.path.join(WORK, "model_small_vocab"), vocab_size=300, tokenizer_json=trained)

    # ---- inputs ------------------------------------------------------------------------------
    doc = "\n".join(sentences(40, seed=2)) + "\r\nThe end: 1234567 tokens, naïve 東京 🙂.\n"
    write(os.path.join(WORK, "doc.txt"), doc)
    bom_text = "Starts with a byte-order mark."
    write(os.path.join(WORK, "bom.txt"), b"\xef\xbb\xbf" + bom_text.encode())
    records = [{"id": 1, "body": "first record, 42 pages"},
               {"body": "second\twith a line separator \u2028 inside and \"quotes\"", "extra": [1, 2]},
               None,  # a blank line: skipped, line numbers stay those of the file
               {"body": "  third: résumé über straße  ", "id": 3}]
    lines = ["" if r is None else json.dumps(r, ensure_ascii=False) for r in records]
    write(os.path.join(WORK, "data.jsonl"), "\n".join(lines) + "\n\n")
    texts = [doc] + [r["body"] for r in records if r] + [bom_text]
    inputs = ["doc.txt", "data.jsonl", "bom.txt"]
    want_lines = [0, 1, 2, 4, 0]
    want_files = [0, 1, 1, 1, 2]

    # ---- plain text -------------------------------------------------------------------------
    result = run(TOKENIZE, "--model", "model", "--out", "in.h5", "--field", "body", *inputs)
    check(result.returncode == 0, f"tokenize.py succeeds (stderr: {result.stderr.strip()})")
    check(result.stdout.startswith("wrote in.h5: 5 prompts"), f"a one-line summary (got {result.stdout!r})")
    check(result.stderr == "", f"quiet on small input (stderr: {result.stderr!r})")
    data, attrs = check_against_transformers("plain", os.path.join(WORK, "in.h5"), model, texts, chat=False)
    check(data["tokens"].dtype == np.int32 and data["offsets"].dtype == np.int64, "/tokens int32, /offsets int64")
    check(all(prompt_ids(data, i)[0] == 1 for i in range(len(texts))), "every prompt starts with the BOS (id 1)")
    check([text_attr(s) for s in data["source_files"]] == inputs, "/source_files lists the inputs as given")
    check(list(data["source_file"]) == want_files, f"/source_file {list(data['source_file'])} == {want_files}")
    check(list(data["source_line"]) == want_lines, f"/source_line {list(data['source_line'])} == {want_lines}")
    with open(os.path.join(model, "tokenizer.json"), "rb") as f:
        check(text_attr(attrs["tokenizer_sha256"]) == hashlib.sha256(f.read()).hexdigest(), "tokenizer_sha256")
    check(text_attr(attrs["model_dir"]) == model, "model_dir attribute")

    # ---- chat templates: tokenizer_config.json's, and chat_template.jinja's ----------------------
    for label, directory in (("chat", "model"), ("chat jinja", "model_jinja")):
        out = label.replace(" ", "_") + ".h5"
        result = run(TOKENIZE, "--model", directory, "--out", out, "--field", "body", "--chat", *inputs)
        if check(result.returncode == 0, f"{label}: tokenize.py --chat succeeds ({result.stderr.strip()})"):
            check_against_transformers(label, os.path.join(WORK, out), os.path.join(WORK, directory), texts, chat=True)

    # ---- pipefill reads the file -------------------------------------------------------------
    result = subprocess.run([PIPEFILL, "run", "--model", "synthetic:tiny", "--input", "in.h5", "--output", "out.h5",
                             "--quiet", "--logprobs", "--top-k", "3", "--hidden-states", "last"],
                            capture_output=True, text=True, cwd=WORK)
    check(result.returncode == 0, f"pipefill run accepts the file (rc {result.returncode}: {result.stderr.strip()})")

    # ---- detokenize.py -----------------------------------------------------------------------
    reference = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))

    def piece(token_id):  # one token's text as detokenize.py shows it: special tokens included
        return reference.decode([token_id], skip_special_tokens=False)

    labels = ["doc.txt", "data.jsonl:1", "data.jsonl:2", "data.jsonl:4", "bom.txt"]
    result = run(DETOKENIZE, "--model", "model", "in.h5")
    want = "".join(f"--- prompt {i} ({label}) ---\n<s>{text}\n" for i, (label, text) in enumerate(zip(labels, texts)))
    check(result.returncode == 0 and result.stdout == want,
          "detokenize gives every prompt's text back, BOS included, under a header naming its source")
    result = run(DETOKENIZE, "--model", "model", "in.h5", "--prompt", "0", "--skip-special")
    check(result.returncode == 0 and result.stdout == texts[0] + "\n", "--prompt 0 --skip-special: the text alone")
    result = run(DETOKENIZE, "--model", "model", "in.h5", "--prompt", "1", "--boundaries")
    rows = [line.split("\t") for line in result.stdout.split("\n")[:-1]]
    check([int(r[1]) for r in rows] == prompt_ids(data, 1), "--boundaries: one line per token, ids in order")
    check(all(json.loads(r[2]) == piece(int(r[1])) for r in rows), "--boundaries: each token's text")
    if os.path.exists(os.path.join(WORK, "out.h5")):
        result = run(DETOKENIZE, "--model", "model", "out.h5", "--dataset", "logits", "--input", "in.h5", "--top", "3")
        with h5py.File(os.path.join(WORK, "out.h5"), "r") as f:
            best = [int(np.argmax(row)) for row in f["logits"][:]]
        want = [f"prompt {i} ({label}): " + json.dumps(piece(b) if b < vocab else f"<id {b}>",
                                                       ensure_ascii=False) + " "
                for i, (label, b) in enumerate(zip(labels, best))]
        shown = result.stdout.split("\n")[:-1]
        check(result.returncode == 0 and len(shown) == len(want) and all(map(str.startswith, shown, want)),
              f"logits: each prompt named, its most likely next token first ({shown} vs {want})")
    topk = np.stack([data["tokens"], (data["tokens"] + 7) % vocab], axis=1).astype(np.int32)
    with h5py.File(os.path.join(WORK, "topk.h5"), "w") as f:
        f["topk_ids"] = topk
    result = run(DETOKENIZE, "--model", "model", "topk.h5", "--dataset", "topk_ids", "--input", "in.h5",
                 "--prompt", "2", "--last", "2")
    end = int(data["offsets"][3])
    want = [f"{j}\t{json.dumps(piece(int(data['tokens'][j])), ensure_ascii=False)} -> "
            + " ".join(json.dumps(piece(int(t)), ensure_ascii=False) for t in topk[j])
            for j in (end - 2, end - 1)]
    check(result.stdout.splitlines() == want, f"topk ids per position: {result.stdout.splitlines()} vs {want}")
    if os.path.exists(os.path.join(WORK, "out.h5")):
        check_run_outputs(data, piece, vocab)

    check_pairs_ids_and_windows(model)
    check_token_ids(model)
    check_bad_inputs()
    check_unencodable_names(texts)
    check_atomic_output()
    time_a_million_tokens()

    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all tokenize checks passed")


def check_pairs_ids_and_windows(model):
    """--context-field/--continuation-field against lm-evaluation-harness 0.4's rule written out
    with transformers' tokenizer; --id-field carried to pipefill's output; --window/--stride
    windows that score each token once, which perplexity.py adds back up."""
    tok = AutoTokenizer.from_pretrained(model)
    pairs = [{"q": 7, "ctx": "The first record, with", "cont": " 42 pages"},
             {"q": "b", "ctx": "A context that ends in spaces  ", "cont": "and a continuation"},
             {"q": "c", "ctx": "", "cont": "no context at all"},
             {"q": "d", "ctx": "<s>starts with the BOS text", "cont": " here"}]
    write(os.path.join(WORK, "pairs.jsonl"), "\n".join(json.dumps(p) for p in pairs) + "\n")
    result = run(TOKENIZE, "--model", "model", "--out", "pairs.h5", "--context-field", "ctx",
                 "--continuation-field", "cont", "--id-field", "q", "pairs.jsonl")
    check(result.returncode == 0, f"pairs: tokenize.py succeeds ({result.stderr.strip()})")
    data, attrs = read(os.path.join(WORK, "pairs.h5"))
    for i, pair in enumerate(pairs):
        context, continuation = pair["ctx"], pair["cont"]
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        if context:
            special = not context.startswith("<s>")
            whole = tok(context + continuation, add_special_tokens=special)["input_ids"]
            ctx = tok(context, add_special_tokens=special)["input_ids"]
            want, start = whole, len(ctx)
        else:
            want, start = [tok.bos_token_id] + tok(continuation, add_special_tokens=False)["input_ids"], 1
        check(prompt_ids(data, i) == want and int(data["score_start"][i]) == start,
              f"pair {i}: ids and score_start as lm-eval's hf model encodes it ({start})")
    check([text_attr(t) for t in data["ids"]] == ["7", "b", "c", "d"], "--id-field: /ids, a number as its text")
    # ... as the line wrote it: 1E2 is not 100.0, and 1e400 and 2e400 are not both inf.
    write(os.path.join(WORK, "number_ids.jsonl"),
          "".join(f'{{"id": {n}, "ctx": "", "cont": "b c"}}\n' for n in ("1E2", "1e400", "2e400", "-0")))
    result = run(TOKENIZE, "--model", "model", "--out", "number_ids.h5", "--context-field", "ctx",
                 "--continuation-field", "cont", "--id-field", "id", "number_ids.jsonl")
    check(result.returncode == 0, f"number ids: tokenize.py succeeds ({result.stderr.strip()})")
    if result.returncode == 0:
        numbered = read(os.path.join(WORK, "number_ids.h5"))[0]
        ids = [text_attr(t) for t in numbered["ids"]]
        check(ids == ["1E2", "1e400", "2e400", "-0"], f"number ids kept as written ({ids})")
        check("score_start" in numbered and (numbered["score_start"] == 1).all(),
              "pairs: /score_start written even where every context is one token (here the BOS)")
    result = subprocess.run([PIPEFILL, "run", "--model", "synthetic:tiny", "--input", "pairs.h5", "--output",
                             "pairs_out.h5", "--quiet", "--logprobs", "--top-k", "1"], capture_output=True, text=True,
                            cwd=WORK)
    check(result.returncode == 0, f"pipefill runs the pairs ({result.stderr.strip()})")
    if result.returncode == 0:
        out, _ = read(os.path.join(WORK, "pairs_out.h5"))
        check([text_attr(t) for t in out["ids"]] == ["7", "b", "c", "d"], "the output carries /ids")
        check(list(out["score_start"]) == list(data["score_start"]), "the output carries /score_start")
        result = run(PERPLEXITY, "pairs_out.h5", "--input", "pairs.h5")
        check(result.returncode == 0 and "prompt 0 ('7', pairs.jsonl:1)" in result.stdout,
              f"perplexity.py names each prompt by its id ({result.stdout.splitlines()[1:2]})")
    expect_error("pairs without a continuation field", ["--model", "model", "--out", "x.h5", "--context-field", "ctx",
                                                         "pairs.jsonl"],
                 "--context-field and --continuation-field come together", "x.h5")
    write(os.path.join(WORK, "empty_cont.jsonl"), '{"ctx": "some text", "cont": ""}\n')
    expect_error("an empty continuation", ["--model", "model", "--out", "x.h5", "--context-field", "ctx",
                                           "--continuation-field", "cont", "empty_cont.jsonl"], "empty continuation",
                 "x.h5")

    # Windows: a document of ~400 tokens, windows of 64 every 48.
    write(os.path.join(WORK, "long.txt"), "\n".join(sentences(40, seed=9)))
    result = run(TOKENIZE, "--model", "model", "--out", "long.h5", "long.txt")
    whole, _ = read(os.path.join(WORK, "long.h5"))
    result = run(TOKENIZE, "--model", "model", "--out", "windows.h5", "--window", "64", "--stride", "48", "long.txt")
    check(result.returncode == 0, f"windows: tokenize.py succeeds ({result.stderr.strip()})")
    data, attrs = read(os.path.join(WORK, "windows.h5"))
    ids = prompt_ids(whole, 0)
    starts = data["score_start"]
    covered = []
    for w in range(len(data["offsets"]) - 1):
        window = prompt_ids(data, w)
        ok = window == ids[48 * w:48 * w + 64] and (w == 0 or starts[w] == 16)
        covered += list(range(48 * w + int(starts[w]), 48 * w + len(window)))
        check(ok, f"window {w}: tokens {48 * w}.. of the document, scored from {int(starts[w])}")
    check(covered == list(range(1, len(ids))), "the windows score every token after the first once")
    result = subprocess.run([PIPEFILL, "run", "--model", "synthetic:tiny", "--input", "windows.h5", "--output",
                             "windows_out.h5", "--quiet", "--logprobs"], capture_output=True, text=True, cwd=WORK)
    check(result.returncode == 0, f"pipefill runs the windows ({result.stderr.strip()})")
    if result.returncode == 0:
        out, _ = read(os.path.join(WORK, "windows_out.h5"))
        nll = float(out["nll_sum"].sum())
        result = run(PERPLEXITY, "windows_out.h5", "--input", "windows.h5")
        rows = result.stdout.splitlines()
        want = np.exp(nll / (len(ids) - 1))
        check(result.returncode == 0 and len(rows) == 3 and f"{want:.3f}" in rows[1] and str(len(ids)) in rows[1],
              f"perplexity.py: one row for the windowed document, exp(sum of the windows' NLL / {len(ids) - 1}) "
              f"= {want:.3f} ({rows})")
    expect_error("a stride as long as the window", ["--model", "model", "--out", "x.h5", "--window", "64",
                                                     "--stride", "64", "long.txt"],
                 "want 1 <= S < N", "x.h5")


def check_run_outputs(data, piece, vocab):
    """detokenize.py on the run's output: the candidates of /topk_ids with their /topk_logprobs; a
    dataset that holds neither ids nor logits, or an --input other than the run's, is refused."""
    def text(token_id):
        return json.dumps(piece(token_id) if token_id < vocab else f"<id {token_id}>", ensure_ascii=False)

    with h5py.File(os.path.join(WORK, "out.h5"), "r") as f:
        ids, logprobs = f["topk_ids"][:], f["topk_logprobs"][:]
    result = run(DETOKENIZE, "--model", "model", "out.h5", "--dataset", "topk_ids", "--input", "in.h5",
                 "--prompt", "3", "--last", "3")
    end = int(data["offsets"][4])
    want = [f"{j}\t{text(int(data['tokens'][j]))} -> "
            + " ".join(f"{text(int(t))} {p:.3f}" for t, p in zip(ids[j], logprobs[j])) for j in range(end - 3, end)]
    check(result.returncode == 0 and result.stdout.splitlines() == want,
          f"the run's topk ids, each with its log-prob: {result.stdout.splitlines()} vs {want} ({result.stderr})")

    # A stopped run's partial file: its rows of a prompt not /completed were never written.
    shutil.copy(os.path.join(WORK, "out.h5"), os.path.join(WORK, "partial.h5"))
    with h5py.File(os.path.join(WORK, "partial.h5"), "r+") as f:
        f["completed"][3] = 0
    for dataset in ("topk_ids", "logits"):
        result = run(DETOKENIZE, "--model", "model", "partial.h5", "--dataset", dataset, "--input", "in.h5")
        lines = [line for line in result.stdout.splitlines() if "prompt 3" in line or "not computed" in line]
        check(result.returncode == 0 and len(lines) == 1 and "not computed" in lines[0],
              f"a prompt not done in a partial output is shown as not computed ({dataset}: {lines}, {result.stderr})")
    shown = "(out.h5 has: logits, topk_ids)"
    for dataset in ("hidden_states", "completed", "topk_logprobs", "token_logprobs", "row_checksum"):
        expect_tool_error(f"detokenize --dataset {dataset}", DETOKENIZE,
                          ["--model", "model", "out.h5", "--dataset", dataset, "--input", "in.h5"],
                          f"--dataset {dataset}: /{dataset} holds neither token ids nor logits; detokenize.py shows "
                          f"tokens, topk_ids and logits {shown}")
    expect_tool_error("detokenize --dataset offsets", DETOKENIZE, ["--model", "model", "in.h5", "--dataset", "offsets"],
                      "/offsets holds neither token ids nor logits; detokenize.py shows tokens, topk_ids and logits "
                      "(in.h5 has: tokens)")
    # Another batch with the same boundaries (and sources): only its tokens differ.
    with h5py.File(os.path.join(WORK, "in.h5"), "r") as f, h5py.File(os.path.join(WORK, "other.h5"), "w") as g:
        for name in f:
            g[name] = f[name][:]
        del g["tokens"]
        g["tokens"] = (f["tokens"][:] + 1) % vocab
    with h5py.File(os.path.join(WORK, "fewer.h5"), "w") as g:
        g["tokens"] = data["tokens"][:data["offsets"][2]]
        g["offsets"] = data["offsets"][:3]
    for dataset in ("topk_ids", "logits"):
        expect_tool_error(f"detokenize --dataset {dataset} with another input", DETOKENIZE,
                          ["--model", "model", "out.h5", "--dataset", dataset, "--input", "other.h5"],
                          "other.h5 is not the input out.h5 was computed from")
        expect_tool_error(f"detokenize --dataset {dataset} with an input of 2 prompts", DETOKENIZE,
                          ["--model", "model", "out.h5", "--dataset", dataset, "--input", "fewer.h5"],
                          "fewer.h5 has 2 prompts, out.h5 5: not the run's input")


def expect_tool_error(name, tool, args, message):
    result = run(tool, *args)
    lines = result.stderr.splitlines()
    check(result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0],
          f"{name}: exit status 2 and one error line saying {message!r} (got {result.returncode}, {result.stderr!r})")
    check(result.stdout == "", f"{name}: nothing on stdout")


def check_token_ids(model):
    """token_ids.py: one token per text, as transformers' tokenizer makes it, in the order given,
    in a file `pipefill run --token-ids` reads; a text of several tokens refused unless --first."""
    tok = AutoTokenizer.from_pretrained(model)
    texts = [" the", "a", " of"]
    want = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    check(all(len(w) == 1 for w in want), f"token_ids: the test's texts are one token each ({want})")
    result = run(TOKEN_IDS, "--model", "model", "--out", "ids.txt", *texts)
    check(result.returncode == 0, f"token_ids: succeeds ({result.stderr.strip()})")
    with open(os.path.join(WORK, "ids.txt")) as f:
        got = [int(line.split("#")[0]) for line in f if line.strip()]
    check(got == [w[0] for w in want], f"token_ids: the ids transformers gives, in order ({got})")
    long_text = " unbelievably pneumatic"
    pieces = tok(long_text, add_special_tokens=False)["input_ids"]
    expect_tool_error("token_ids several tokens", TOKEN_IDS, ["--model", "model", "--out", "x.txt", long_text],
                      f"is {len(pieces)} tokens")
    result = run(TOKEN_IDS, "--model", "model", "--out", "first.txt", "--first", long_text)
    with open(os.path.join(WORK, "first.txt")) as f:
        check(int(f.read().split("#")[0]) == pieces[0], "token_ids --first: the text's first token")
    expect_tool_error("token_ids repeated", TOKEN_IDS, ["--model", "model", "--out", "x.txt", " the", " the"],
                      "are the same token")


def check_bad_inputs():
    write(os.path.join(WORK, "bad_utf8.txt"), b"fine line\nbad \xff byte\n")
    write(os.path.join(WORK, "bad_utf8.jsonl"), b'{"text": "ok"}\n{"text": "bad \xc3("}\n')
    write(os.path.join(WORK, "empty.txt"), b"")
    write(os.path.join(WORK, "spaces.txt"), b" \n\t \n")
    write(os.path.join(WORK, "empty_field.jsonl"), '{"text": ""}\n')
    write(os.path.join(WORK, "not_json.jsonl"), '{"text": "ok"}\n{"text": oops}\n')
    write(os.path.join(WORK, "no_field.jsonl"), '{"body": "x", "id": 2}\n')
    write(os.path.join(WORK, "number_field.jsonl"), '{"text": 12}\n')
    write(os.path.join(WORK, "array_line.jsonl"), '["text"]\n')
    write(os.path.join(WORK, "blank.jsonl"), "\n  \n")
    write(os.path.join(WORK, "nul_id.jsonl"), '{"text": "ok", "id": "a\\u0000b"}\n')
    write(os.path.join(WORK, "nan_id.jsonl"), '{"text": "ok", "id": NaN}\n')
    write(os.path.join(WORK, "notes.md"), "# notes\n")
    write(os.path.join(WORK, "ok.txt"), "A fine prompt 12.")
    os.makedirs(os.path.join(WORK, "folder.txt"), exist_ok=True)
    os.makedirs(os.path.join(WORK, "no_tokenizer"), exist_ok=True)
    write(os.path.join(WORK, "no_tokenizer", "config.json"), '{"vocab_size": 512}')
    os.makedirs(os.path.join(WORK, "empty_dir"), exist_ok=True)
    os.makedirs(os.path.join(WORK, "broken_tokenizer"), exist_ok=True)
    write(os.path.join(WORK, "broken_tokenizer", "tokenizer.json"), '{"model": "nonsense"}')
    # A word-level vocabulary with an id past int32: the int32 guard, which real tokenizers never reach.
    # Written as JSON: Tokenizer.save walks every id up to the largest (~40 s here).
    huge = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "fine": 1, "huge": 3_000_000_000},
                      "unk_token": "<unk>"}}
    os.makedirs(os.path.join(WORK, "huge_ids"), exist_ok=True)
    write(os.path.join(WORK, "huge_ids", "tokenizer.json"), json.dumps(huge))
    write(os.path.join(WORK, "huge.txt"), "fine huge fine")
    # Lone surrogates: JSON escapes can write them, UTF-8 cannot hold them, no tokenizer reads them.
    write(os.path.join(WORK, "surrogate.jsonl"), '{"text": "fine"}\n\n{"text": "bad \\ud800 here", "id": 3}\n')
    write(os.path.join(WORK, "surrogate_body.jsonl"), '{"body": "x\\udc00\\ud83d"}\n')
    write(os.path.join(WORK, "surrogate.txt"), b"encoded \xed\xa0\x80 surrogate")
    for name, config in (("model_surrogate_bos", {"bos_token": "\ud800", "chat_template": CHAT_TEMPLATE}),
                         ("model_surrogate_template", {"chat_template": "{# \udfff #}" + CHAT_TEMPLATE})):
        os.makedirs(os.path.join(WORK, name), exist_ok=True)
        shutil.copy(os.path.join(WORK, "model", "tokenizer.json"), os.path.join(WORK, name))
        write(os.path.join(WORK, name, "tokenizer_config.json"), json.dumps(config))  # ASCII: \u escapes

    cases = [  # name, arguments after --model, what the error line must say
        ("no tokenizer.json", ["no_tokenizer", "ok.txt"], "has no tokenizer.json"),
        ("not a model directory", ["empty_dir", "ok.txt"], "is not a model directory"),
        ("missing model directory", ["nowhere", "ok.txt"], "no such directory"),
        ("broken tokenizer.json", ["broken_tokenizer", "ok.txt"], "is not a tokenizer"),
        ("missing input", ["model", "ok.txt", "missing.txt"], "missing.txt: no such file"),
        ("input is a directory", ["model", "folder.txt"], "is not a regular file"),
        ("invalid UTF-8 in .txt", ["model", "bad_utf8.txt"], "not valid UTF-8: byte 0xff at byte offset 14 (line 2)"),
        ("invalid UTF-8 in .jsonl", ["model", "bad_utf8.jsonl"], "bad_utf8.jsonl is not valid UTF-8"),
        ("empty .txt", ["model", "ok.txt", "empty.txt"], "empty.txt: empty document"),
        ("whitespace .txt", ["model", "spaces.txt"], "spaces.txt: empty document (only whitespace)"),
        ("empty field", ["model", "empty_field.jsonl"], "empty_field.jsonl line 1: empty document"),
        ("line not JSON", ["model", "not_json.jsonl"], "not_json.jsonl line 2 is not JSON"),
        ("missing field", ["model", "no_field.jsonl"],
         'no_field.jsonl line 1 has no field "text" (its fields: "body", "id"'),
        ("field not a string", ["model", "number_field.jsonl"], 'field "text" is a number, not a string'),
        ("line not an object", ["model", "array_line.jsonl"], "array_line.jsonl line 1 is an array, not a JSON object"),
        ("NUL in an id", ["model", "--id-field", "id", "nul_id.jsonl"], 'field "id" holds a NUL character'),
        ("NaN, which JSON has not", ["model", "--id-field", "id", "nan_id.jsonl"], "line 1 is not JSON (NaN is not"),
        ("only blank lines", ["model", "blank.jsonl"], "blank.jsonl holds no prompts"),
        ("unknown extension", ["model", "notes.md"], "notes.md: unknown kind of file"),
        ("no input files", ["model"], "no input files"),
        ("no chat template", ["model_no_template", "--chat", "ok.txt"], "has no chat template"),
        ("id past the model's vocabulary", ["model_small_vocab", "doc.txt"], "is not below the model's vocab_size 300"),
        ("id past int32", ["huge_ids", "huge.txt"], "token id 3000000000 does not fit the input's int32 ids"),
        ("unknown flag", ["model", "--bogus", "ok.txt"], "unrecognized arguments: --bogus"),
        ("lone surrogate in .jsonl", ["model", "ok.txt", "surrogate.jsonl"],
         'surrogate.jsonl line 3: field "text" holds a lone surrogate, \\ud800 at character 4: not Unicode text'),
        ("lone surrogate under --chat", ["model", "--chat", "surrogate.jsonl"],
         'surrogate.jsonl line 3: field "text" holds a lone surrogate, \\ud800 at character 4'),
        ("lone surrogate in --field", ["model", "--field", "body", "surrogate_body.jsonl"],
         'surrogate_body.jsonl line 1: field "body" holds a lone surrogate, \\udc00 at character 1'),
        ("surrogate encoded in .txt", ["model", "surrogate.txt"],
         "surrogate.txt is not valid UTF-8: byte 0xed at byte offset 8 (line 1)"),
        ("lone surrogate in a special token", ["model_surrogate_bos", "--chat", "ok.txt"],
         f"the chat template of {os.path.join(WORK, 'model_surrogate_bos')} rendered for ok.txt holds a lone "
         f"surrogate, \\ud800 at character 0"),
        ("lone surrogate in the chat template", ["model_surrogate_template", "--chat", "ok.txt"],
         f"the chat_template of {os.path.join(WORK, 'model_surrogate_template', 'tokenizer_config.json')} holds a "
         f"lone surrogate, \\udfff at character 3"),
    ]
    for name, args, message in cases:
        expect_error(name, ["--model", args[0], "--out", "bad.h5", *args[1:]], message, "bad.h5")
    expect_error("output in a missing directory", ["--model", "model", "--out", "nodir/x.h5", "ok.txt"],
                 "the directory of --out nodir/x.h5 does not exist", "nodir/x.h5")
    expect_error("output is a directory", ["--model", "model", "--out", "empty_dir", "ok.txt"], "is a directory", None)
    tokenizer = os.path.join(WORK, "model", "tokenizer.json")
    with open(tokenizer, "rb") as f:
        before = f.read()
    expect_error("output is the model's tokenizer", ["--model", "model", "--out", "model/tokenizer.json", "ok.txt"],
                 "--out model/tokenizer.json is a file of --model model", None)
    expect_tool_error("token_ids onto the model's config", TOKEN_IDS,
                      ["--model", "model", "--out", "model/config.json", " the"], "is a file of --model model")
    with open(tokenizer, "rb") as f:
        check(f.read() == before, "the model's tokenizer.json is as it was")
    expect_error("no venv", ["--model", "model", "--out", "bad.h5", "ok.txt"], "run scripts/setup.sh", "bad.h5",
                 env={"PIPEFILL_VENV": os.path.join(WORK, "no_venv")})


def expect_error(name, args, message, out, env=None):
    result = run(TOKENIZE, *args, env=env)
    lines = result.stderr.splitlines()
    check(result.returncode == 2, f"{name}: exit status 2 (got {result.returncode})")
    check(len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0],
          f"{name}: one error line saying {message!r} (got {result.stderr!r})")
    check(result.stdout == "", f"{name}: nothing on stdout")
    if out:
        check(not os.path.exists(os.path.join(WORK, out)), f"{name}: no output file")
    check(not any(f.endswith(".partial") for f in os.listdir(WORK)), f"{name}: no partial file left")


def check_unencodable_names(texts):
    """A lone surrogate in a field that is not read is no error; a model directory, --out and
    --field in bytes that are not UTF-8 (Python holds them as surrogates) are stored with U+FFFD
    and printed back as typed, even where Python's stdout is strict UTF-8."""
    write(os.path.join(WORK, "other_field.jsonl"), '{"text": "fine 42", "note": "\\ud800"}\n')
    result = run(TOKENIZE, "--model", "model", "--out", "other_field.h5", "other_field.jsonl")
    check(result.returncode == 0, f"a lone surrogate in a field not read: no error ({result.stderr.strip()})")
    if result.returncode == 0:
        check_against_transformers("other field", os.path.join(WORK, "other_field.h5"), os.path.join(WORK, "model"),
                                   ["fine 42"], chat=False)
    model = os.path.join(WORK, os.fsdecode(b"model\xff"))
    shutil.copytree(os.path.join(WORK, "model"), model)
    out = os.fsdecode(b"out\xff.h5")
    result = subprocess.run([TOKENIZE, "--model", model, "--out", out, "--field", os.fsdecode(b"\xfe"), "doc.txt"],
                            capture_output=True, cwd=WORK, env=dict(os.environ, PYTHONIOENCODING="utf-8"))
    check(result.returncode == 0 and result.stdout.startswith(b"wrote out\xff.h5: 1 prompt"),
          f"paths and --field not in UTF-8: the file is written, named as typed ({result.stdout!r}, {result.stderr!r})")
    if result.returncode == 0:
        # transformers cannot open such a path: the reference reads the same files under their first name.
        _, attrs = check_against_transformers("names not in UTF-8", os.path.join(WORK, out),
                                              os.path.join(WORK, "model"), [texts[0]], chat=False)
        stored = model.replace("\udcff", "\ufffd")
        check(text_attr(attrs["model_dir"]) == stored and text_attr(attrs["field"]) == "\ufffd",
              f"model_dir and field stored with U+FFFD ({attrs['model_dir']!r}, {attrs['field']!r})")


def check_atomic_output():
    existing = os.path.join(WORK, "existing.h5")
    write(existing, b"an earlier file")
    result = run(TOKENIZE, "--model", "model", "--out", "existing.h5", "ok.txt", "empty.txt")
    with open(existing, "rb") as f:
        check(result.returncode == 2 and f.read() == b"an earlier file", "a failed run leaves the existing output")
    result = run(TOKENIZE, "--model", "model", "--out", "existing.h5", "--quiet", "ok.txt")
    check(result.returncode == 0 and result.stdout == "" and h5py.is_hdf5(existing),
          "a successful run replaces the existing output (and --quiet prints nothing)")
    check(oct(os.stat(existing).st_mode & 0o777) == oct(0o666 & ~current_umask()), "the output has umask permissions")


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def time_a_million_tokens():
    """Not a test assertion (a benchmark figure): the time for one ~1M-token document."""
    text = " ".join(sentences(60000, seed=3))
    write(os.path.join(WORK, "long.txt"), text)
    result = run(TOKENIZE, "--model", "model", "--out", "long.h5", "long.txt")
    if check(result.returncode == 0, f"the long document tokenizes ({result.stderr.strip()})"):
        tokens = int(read(os.path.join(WORK, "long.h5"))[0]["offsets"][-1])
        check("warning: 1 prompt(s) longer than the model's max_position_embeddings (4096)" in result.stderr,
              f"a warning for a prompt pipefill would refuse without --allow-long-prompts ({result.stderr!r})")
        print(f"timing (not asserted): {tokens:,} tokens from {len(text.encode()) / 1e6:.1f} MB in "
              f"{result.seconds:.2f} s wall, interpreter start-up included ({result.stdout.strip()})")


if __name__ == "__main__":
    main()
