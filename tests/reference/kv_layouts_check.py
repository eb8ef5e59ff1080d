#!/usr/bin/env python3
"""A --kv-store filled under one layout serves a run of another, on the real SmolLM2-135M.

Run A stores a document (the GPL's first 400 tokens) with two questions; run B, on another
layout, asks two new questions about it and loads the document's KV from A's entries: each of
B's ranks reads the layers and KV heads it holds from whichever of A's files hold them. B's
logits must match transformers' float32 forward within the bound of smollm2_check.py, and B
computed fresh (no store, same layout) within float32 rounding. Layout pairs: pp 2 -> tp 3
(SmolLM2's 9 heads allow tp 1 and 3 only), pp 1 -> pp 3, tp 3 -> pp 2 x tp 3 (6 ranks,
oversubscribed). Every pair shares one store key:
B adds its two prompts and nothing of A's is stored twice.

usage: kv_layouts_check.py BUILD_DIR WORK_DIR MODEL_DIR   (run with scripts/setup_venv.sh's python)
"""
import os
import shutil
import sys

import h5py
import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import LlamaForCausalLM

from pipefill_runs import check, exit_if_failed, run_pipefill

DOCUMENT = ("/usr/share/common-licenses/GPL-3", 400)
QUESTIONS_A = [" What may I do with the program?", " Who holds the copyright?"]
QUESTIONS_B = [" Can I sell copies of it?", " What must I give to the people I convey it to?"]
# transformers vs pipefill float32: the bound of smollm2_check.py (2e-5 of max|logit|).
RTOL_TRANSFORMERS = 2e-5
# A prefix loaded from another layout's files against the same layout computing it: the rows
# are the same float32 values either way; the layouts differ in summation order only, inside
# the new layout's own arithmetic. Measured below 3e-6 of max|logit| (SmolLM2, this check).
RTOL_FRESH = 1e-5
PAIRS = [(("pp2", 2, "--pp 2"), ("tp3", 3, "--tp 3")),
         (("pp1", 1, "--pp 1"), ("pp3", 3, "--pp 3")),
         (("tp3", 3, "--tp 3"), ("pp2xtp3", 6, "--pp 2 --tp 3"))]
CHUNKS = "--chunk-size 64 --page-size 16"


def main():
    build, work, model_dir = (os.path.abspath(a) for a in sys.argv[1:4])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.set_num_threads(1)
    tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    with open(DOCUMENT[0], encoding="utf-8") as f:
        document = tokenizer.encode(f.read()).ids[:DOCUMENT[1]]

    def batch(path, questions):
        prompts = [np.array(document + tokenizer.encode(q).ids, dtype=np.int32) for q in questions]
        with h5py.File(path, "w") as f:
            f["tokens"] = np.concatenate(prompts)
            f["offsets"] = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
        return prompts

    a_h5, b_h5 = os.path.join(work, "a.h5"), os.path.join(work, "b.h5")
    batch(a_h5, QUESTIONS_A)
    b_prompts = batch(b_h5, QUESTIONS_B)
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = np.stack([model(input_ids=torch.tensor(p[None, :], dtype=torch.long), logits_to_keep=1)
                             .logits[0, -1].double().numpy() for p in b_prompts])
    scale = max(1.0, float(np.abs(expected).max()))

    for (a_name, a_ranks, a_layout), (b_name, b_ranks, b_layout) in PAIRS:
        store = os.path.join(work, f"store_{a_name}")
        os.makedirs(store)
        run_pipefill(build, model_dir, a_h5, os.path.join(work, f"a_{a_name}.h5"), a_ranks,
                     f"{a_layout} {CHUNKS} --kv-store {store}")
        out = os.path.join(work, f"b_{b_name}.h5")
        got, _, _ = run_pipefill(build, model_dir, b_h5, out, b_ranks, f"{b_layout} {CHUNKS} --kv-store {store}")
        with h5py.File(out, "r") as f:
            reused = [int(x) for x in f["reused_tokens"][:]]
        fresh, _, _ = run_pipefill(build, model_dir, b_h5, os.path.join(work, f"fresh_{b_name}.h5"), b_ranks,
                                   f"{b_layout} {CHUNKS} --no-prefix-cache")
        to_transformers = float(np.abs(got - expected).max())
        to_fresh = float(np.abs(got - fresh).max())
        print(f"{a_name} -> {b_name}: reused {reused}, max|logit| {scale:.1f}, vs transformers {to_transformers:.3e} "
              f"({to_transformers / scale:.2e} of max), vs fresh {b_name} {to_fresh:.3e} ({to_fresh / scale:.2e})")
        check(all(r >= 384 for r in reused), f"{a_name} -> {b_name}: B loads the document from A's entries ({reused})")
        check(to_transformers <= RTOL_TRANSFORMERS * scale, f"{a_name} -> {b_name}: logits match transformers")
        check(to_fresh <= RTOL_FRESH * scale, f"{a_name} -> {b_name}: logits match a fresh {b_name} run")
        entries = [n for n in os.listdir(store) if not n.startswith(".")]
        check(len(entries) == 4 and len({n.split("-")[0] for n in entries}) == 1,
              f"{a_name} -> {b_name}: A's 2 and B's 2 prompts stored once each, under one key ({entries})")
    exit_if_failed()


if __name__ == "__main__":
    main()
