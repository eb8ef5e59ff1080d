#!/usr/bin/env python3
"""lm-evaluation-harness with pipefill as its model: lm-eval's own command line, plus a model
named `pipefill`.

usage: scripts/lm_eval_pipefill.py --model pipefill --model_args model=DIR[,pp=2,tp=1,...] --tasks T [lm-eval options]

model_args (comma-separated key=value, as for lm-eval's other models):
  model=DIR          the model directory (config.json, safetensors, tokenizer.json); required
  pp=P, tp=T         pipeline stages and tensor-parallel ranks: P x T ranks (default 1, 1)
  launcher=L         mpirun (default), srun, or sbatch (a job that is waited for: sbatch --wait)
  launcher_args=A    more words for the launcher (e.g. "--partition=gpu --time=1:00:00")
  run_args=A         more options for `pipefill run` (e.g. "--chunk-size 2048 --backend cuda")
  pipefill=PATH      the pipefill binary (default: build/pipefill of this checkout)
  workdir=DIR        where the input and output files of each call go (default: a temporary
                     directory, removed afterwards); kept when given
  max_length=N       the most tokens the model sees at once, as lm-eval's hf model: a longer context
                     is cut from the left, loglikelihood_rolling windows are this long
                     (default: the model's max_position_embeddings)

Every `loglikelihood` and `loglikelihood_rolling` request of a call goes into one input file and
one pipefill run: a context shared by several requests (a document and its questions, the
choices of one question) is computed once, by pipefill's prefix reuse. Requests are tokenized as
lm-eval 0.4's hf model tokenizes them (scripts/text_to_prompts.py's encode_pairs, rolling windows
as lm_eval.utils makes them), so the numbers are comparable with `--model hf`. `generate_until`
tasks are refused: pipefill prefills, it does not generate.

Install lm-eval into the project's venv with `scripts/setup_venv.sh --lm-eval` (pinned in
requirements-lm-eval.txt). Runs itself under that venv, like the other tools.
"""
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
# Beside scripts/tokenize.py, which shadows the standard library's `tokenize`: same fix as there.
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != HERE] + [HERE]

import python_tool  # noqa: E402  (standard library only: it picks the interpreter first)

python_tool.run_in_venv(__file__)

import json  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import h5py  # noqa: E402
import numpy as np  # noqa: E402

from python_tool import UserError  # noqa: E402

try:
    import lm_eval.models  # noqa: E402,F401  (lm-eval's own models, registered before ours)
    from lm_eval.__main__ import cli_evaluate  # noqa: E402
    from lm_eval.api.model import LM  # noqa: E402
    from lm_eval.api.registry import register_model  # noqa: E402
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window  # noqa: E402
except ImportError as e:
    print(f"error: lm-evaluation-harness is not in {sys.prefix} ({e}): run scripts/setup_venv.sh --lm-eval",
          file=sys.stderr)
    sys.exit(2)

REPO = os.path.dirname(HERE)
LAUNCHERS = ("mpirun", "srun", "sbatch")


@dataclass
class Pair:
    """What text_to_prompts.encode_pairs reads of a document."""
    label: str
    text: str
    continuation: str
    file_index: int = 0
    line: int = 0
    id: str = None


@register_model("pipefill")
class PipefillLM(LM):
    def __init__(self, model=None, pp=1, tp=1, launcher="mpirun", launcher_args="", run_args="", pipefill=None,
                 workdir=None, max_length=None, **ignored):
        super().__init__()
        if not model:
            raise UserError("--model_args needs model=DIR (the model directory pipefill runs)")
        from model_tokenizer import ModelTokenizer
        self.tokenizer = ModelTokenizer(str(model))
        self.model_dir = self.tokenizer.model_dir
        try:
            self.pp, self.tp = int(pp), int(tp)
        except (TypeError, ValueError):
            raise UserError(f"pp={pp}, tp={tp}: both must be whole numbers")
        if self.pp < 1 or self.tp < 1:
            raise UserError(f"pp={pp}, tp={tp}: both must be at least 1")
        if launcher not in LAUNCHERS:
            raise UserError(f"launcher={launcher}: want one of {', '.join(LAUNCHERS)}")
        self.launcher, self.launcher_args, self.run_args = launcher, str(launcher_args), str(run_args)
        try:
            given = [w.split("=")[0] for w in shlex.split(self.run_args)]
        except ValueError as e:
            raise UserError(f"run_args={run_args}: {e}")
        # pipefill refuses a flag given twice: say here which ones the adapter sets itself.
        own = [f for f in ("--model", "--input", "--output", "--pp", "--tp", "--logprobs", "--top-k", "--quiet",
                           "--overwrite") if f in given]
        if own:
            raise UserError(f"run_args gives {', '.join(own)}, which the adapter sets itself "
                            "(the model, pp and tp are model_args of their own)")
        if "--resume" in given:
            raise UserError("run_args gives --resume: each request batch is a new run the adapter writes with "
                            "--overwrite")
        self.allows_long = "--allow-long-prompts" in given
        self.pipefill = os.path.abspath(pipefill) if pipefill else os.path.join(REPO, "build", "pipefill")
        if not os.access(self.pipefill, os.X_OK):
            raise UserError(f"{self.pipefill} is not an executable (build pipefill, or give pipefill=PATH)")
        self.workdir = os.path.abspath(str(workdir)) if workdir else None
        if self.workdir:  # checked now, not after lm-eval has built its tasks
            try:
                os.makedirs(self.workdir, exist_ok=True)
            except OSError as e:
                raise UserError(f"workdir={workdir}: cannot make that directory ({e.strerror})")
            if not os.access(self.workdir, os.W_OK | os.X_OK):
                raise UserError(f"workdir={workdir}: cannot write into that directory")
        try:  # given (0 included) or the model's own context
            self.max_length = int(max_length) if max_length not in (None, "") else \
                (self.tokenizer.max_positions or 2048)
        except (TypeError, ValueError):
            raise UserError(f"max_length={max_length}: want a whole number of tokens")
        if self.max_length < 1:
            raise UserError(f"max_length={max_length}: want at least 1 token")
        self.calls = 0
        self.too_long = False
        skipped = sorted(k for k, v in ignored.items() if v is not None and k not in ("batch_size", "max_batch_size",
                                                                                         "device"))
        if skipped:
            print(f"lm_eval_pipefill: ignoring model_args {', '.join(skipped)}", file=sys.stderr)

    # ---- lm-eval's requests ----------------------------------------------------------------

    def loglikelihood(self, requests, disable_tqdm=False):
        from text_to_prompts import encode_pairs
        docs = [Pair(label=f"request {i}", text=r.args[0], continuation=r.args[1], id=f"loglikelihood {i}")
                for i, r in enumerate(requests)]
        ids, starts = encode_pairs(self.tokenizer, docs) if docs else ([], [])
        # As lm-eval's hf model: the model sees at most max_length + 1 tokens, cut from the left.
        for i, (prompt, start) in enumerate(zip(ids, starts)):
            cut = max(0, len(prompt) - (self.max_length + 1))
            if cut >= start:
                raise UserError(f"request {i}: its continuation alone ({len(prompt) - start} tokens) is longer than "
                                f"max_length {self.max_length}")
            ids[i], starts[i] = prompt[cut:], start - cut
        nll, greedy = self.score(ids, starts, [d.id for d in docs])
        answers = [(-float(n), bool(g)) for n, g in zip(nll, greedy)]
        for request, answer in zip(requests, answers):  # lm-eval's --use_cache
            self.cache_hook.add_partial("loglikelihood", request.args, answer)
        return answers

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        # lm-eval's windows: the first predicts every token after the prefix token, each later one
        # up to max_length tokens with the tokens before them as context (make_disjoint_window).
        prompts, starts, names, owner = [], [], [], []
        for i, request in enumerate(requests):
            (text,) = request.args
            tokens = self.encode_document(text)
            windows = get_rolling_token_windows(token_list=tokens, prefix_token=self.tokenizer.prefix_id(
                f"request {i} needs a prefix token"), max_seq_len=self.max_length, context_len=1)
            for w, (context, predicted) in enumerate(map(make_disjoint_window, windows)):
                prompts.append(list(context) + list(predicted))
                starts.append(len(context))
                names.append(f"loglikelihood_rolling {i} window {w}")
                owner.append(i)
        nll, _ = self.score(prompts, starts, names)
        totals = np.zeros(len(requests))
        np.add.at(totals, np.asarray(owner, dtype=np.int64), -np.asarray(nll, dtype=np.float64))
        for request, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, float(total))
        return [float(t) for t in totals]

    def generate_until(self, requests, disable_tqdm=False):
        raise UserError("pipefill prefills prompts and scores tokens; it does not generate text: generate_until tasks "
                        "need another model (loglikelihood, multiple_choice and loglikelihood_rolling tasks run here)")

    def encode_document(self, text):
        """A rolling request's tokens: lm-eval's tok_encode(text) (the tokenizer's special tokens,
        none when the text starts with the BOS text)."""
        prefix = self.tokenizer.prefix_text()
        return self.tokenizer.encode([text], add_special_tokens=not (prefix and text.startswith(prefix)))[0]

    # ---- one pipefill run ------------------------------------------------------------------

    def score(self, prompts, starts, names):
        """(nll_sum, is_greedy) of every prompt, scored from its start, by one pipefill run."""
        if not prompts:
            return [], []
        self.calls += 1
        work = self.workdir or tempfile.mkdtemp(prefix="lm_eval_pipefill.")
        os.makedirs(work, exist_ok=True)
        try:
            in_h5 = os.path.join(work, f"call{self.calls}_in.h5")
            out_h5 = os.path.join(work, f"call{self.calls}_out.h5")
            limit = self.tokenizer.max_positions
            self.too_long = bool(limit) and max(len(p) for p in prompts) > limit
            with h5py.File(in_h5, "w") as f:
                f["tokens"] = np.concatenate([np.asarray(p, dtype=np.int32) for p in prompts])
                f["offsets"] = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
                f["score_start"] = np.asarray(starts, dtype=np.int64)
                f.create_dataset("ids", data=names, dtype=h5py.string_dtype("utf-8"))
            command = self.command(in_h5, out_h5)
            tokens = sum(len(p) for p in prompts)
            print(f"lm_eval_pipefill: {len(prompts)} prompts, {tokens:,} tokens: {shlex.join(command)}",
                  file=sys.stderr, flush=True)
            start = time.monotonic()
            finished = subprocess.run(command)  # from the user's directory: run_args paths as typed
            if finished.returncode != 0:  # its own error line is above
                raise UserError(f"pipefill failed (exit status {finished.returncode}); "
                                + (f"its input is {in_h5}" if self.workdir else "give workdir=DIR to keep its input"))
            with h5py.File(out_h5, "r") as f:
                nll, greedy = f["nll_sum"][:], f["is_greedy"][:]
            print(f"lm_eval_pipefill: scored in {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)
            return nll, greedy
        finally:
            if not self.workdir:
                shutil.rmtree(work, ignore_errors=True)

    def command(self, in_h5, out_h5):
        ranks = self.pp * self.tp
        run = [self.pipefill, "run", "--model", self.model_dir, "--input", in_h5, "--output", out_h5,
               "--pp", str(self.pp), "--tp", str(self.tp), "--logprobs", "--top-k", "1", "--quiet", "--overwrite",
               *shlex.split(self.run_args)]
        if self.too_long and not self.allows_long:
            # lm-eval's hf model feeds max_length tokens and scores one more: that last token is
            # input here too (its row predicts past the prompt, and nothing read depends on it).
            run.append("--allow-long-prompts")
        extra = shlex.split(self.launcher_args)
        if self.launcher == "mpirun":
            return ["mpirun", "-n", str(ranks), *extra, *run]
        if self.launcher == "srun":
            return ["srun", "-n", str(ranks), *extra, *run]
        return ["sbatch", "--wait", "-n", str(ranks), *extra, "--wrap", "srun " + shlex.join(run)]


def main():
    if any(word in ("-h", "--help") for word in sys.argv[1:]):
        print(__doc__)  # the pipefill model's model_args, then lm-eval's own options
    # lm-eval's own command line; without a subcommand it inserts `run`, as its own entry point does.
    cli_evaluate()


if __name__ == "__main__":
    python_tool.main_with_user_errors(main)
