#!/usr/bin/env python3
"""scripts/kv_store.py on a real store: ls, du, verify, gc.

`pipefill run --pp 2 --kv-store STORE` on the tiny synthetic model fills a store; then:
  - `ls --json` lists every prompt's entry with its model, layout and tokens; `du` adds up to the
    bytes on disk; `verify` passes;
  - one value of one safetensors file changed: `verify` names that entry and exits 1;
  - a `.incoming` directory of a process that is gone (this host): `gc --dry-run` names both and
    removes nothing, `gc` removes both, `verify` passes again, and a second run still loads
    prefixes from the store that is left;
  - a pp 1 run loads prefixes from the pp 2 entries (any layout reads any entry); a run of
    another model says how many entries it passed over and why;
  - a document with 3 questions in one batch: the questions' entries hold only their own rows and
    name the document's entry, `ls` says so, `load_kv` of one joins the two into exactly what
    the run's --save-kv export holds for that prompt, and with the parent gone `verify` names it
    and `gc` removes the orphans;
  - `gc` of the store's parent directory removes nothing, of an export is refused; a changed
    byte of a scoring run's token scores fails `verify`.

usage: kv_store_tool_check.py BUILD_DIR WORK_DIR   (run with scripts/setup_venv.sh's python)
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pipefill_runs import check, exit_if_failed, run_pipefill  # noqa: E402

TOOL = os.path.join(HERE, "..", "..", "scripts", "kv_store.py")


def tool(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def main():
    build, work = (os.path.abspath(a) for a in sys.argv[1:3])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    prompts_h5, store = os.path.join(work, "prompts.h5"), os.path.join(work, "store")
    subprocess.run([os.path.join(build, "pipefill"), "make-prompts", "--out", prompts_h5, "--num", "3", "--min-len",
                    "40", "--max-len", "90", "--vocab", "512", "--seed", "11"], check=True, stdout=subprocess.DEVNULL)
    run_pipefill(build, "synthetic:tiny", prompts_h5, os.path.join(work, "a.h5"), 2,
                 f"--pp 2 --chunk-size 32 --page-size 16 --kv-store {store}")

    r = tool("ls", store, "--json")
    entries = json.loads(r.stdout) if r.returncode == 0 else []
    check(len(entries) == 3 and all(e["pp"] == 2 and e["partition"] == "4,4" and e["tokens"] >= 40 for e in entries),
          f"ls lists the 3 prompts' entries with their layout: {r.stdout[-400:]} {r.stderr[-300:]}")
    on_disk = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(store) for f in files)
    check(sum(e["bytes"] for e in entries) == on_disk, f"ls's bytes add up to the store's {on_disk}")
    r = tool("du", store)
    check(r.returncode == 0 and "3 entries" in r.stdout and "pp 2 x tp 1 (4,4)" in r.stdout, f"du: {r.stdout}")
    r = tool("verify", store)
    check(r.returncode == 0 and "3 of 3 entries verify" in r.stdout, f"verify passes: {r.stdout[-300:]}")

    # One value changed in the middle of one file: the data no longer match their checksum.
    victim = sorted(e["name"] for e in entries)[0]
    file = os.path.join(store, victim, "prompt-%06d" % next(e["prompt"] for e in entries if e["name"] == victim),
                        "stage01_tp00.safetensors")
    with open(file, "r+b") as f:
        f.seek(os.path.getsize(file) - 64)
        value = f.read(4)
        f.seek(-4, 1)
        f.write(bytes(b ^ 0x40 for b in value))
    r = tool("verify", store)
    check(r.returncode == 1 and f"BAD  {victim}" in r.stdout and "data_checksum" in r.stdout,
          f"verify names the damaged entry: {r.stdout[-400:]}")

    # A directory a killed run left: its pid is no process on this host.
    dead = os.path.join(store, f".incoming-{socket.gethostname()}-{2**22 + 12345}-1")
    os.makedirs(os.path.join(dead, "prompt-000000"))
    with open(os.path.join(dead, "prompt-000000", "x"), "wb") as f:
        f.write(b"0" * 1000)
    r = tool("gc", store, "--dry-run")
    check(r.returncode == 0 and "2 would be removed" in r.stdout and os.path.isdir(dead) and
          os.path.isdir(os.path.join(store, victim)), f"gc --dry-run removes nothing: {r.stdout[-400:]}")
    # A run using the damaged entry (a shared lock on its in_use, as pipefill takes one) keeps it.
    import fcntl
    held = os.open(os.path.join(store, victim, "in_use"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.lockf(held, fcntl.LOCK_SH)
    r = tool("gc", store)
    check(r.returncode == 0 and os.path.isdir(os.path.join(store, victim)) and "a run is using it" in r.stdout,
          f"gc keeps an entry in use: {r.stdout[-400:]}")
    os.close(held)
    r = tool("gc", store)
    check(r.returncode == 0 and not os.path.exists(dead) and not os.path.exists(os.path.join(store, victim)) and
          not any(n.startswith(".deleting") for n in os.listdir(store)), f"gc removes both: {r.stdout[-400:]}")
    r = tool("verify", store)
    check(r.returncode == 0 and "2 of 2 entries verify" in r.stdout, f"the rest verifies: {r.stdout[-300:]}")

    # The store still lends: the same prompts again load their prefixes from it.
    _, attributes, _ = run_pipefill(build, "synthetic:tiny", prompts_h5, os.path.join(work, "b.h5"), 2,
                                    f"--pp 2 --chunk-size 32 --page-size 16 --kv-store {store}")
    with h5py.File(os.path.join(work, "b.h5"), "r") as f:
        reused = [int(x) for x in f["reused_tokens"][:]]
    check(sum(1 for x in reused if x > 0) >= 2, f"a later run still loads prefixes from the store: {reused}")
    # A run of another layout loads from these entries; one of another model passes them over and says why.
    mpi_env = os.path.join(HERE, "..", "mpi", "mpi_env.sh")

    def one_rank(out, *args):
        return subprocess.run(["bash", "-c", f'source "{mpi_env}" && exec mpirun -n 1 "{build}/pipefill" run --model '
                               f'synthetic:tiny --input "{prompts_h5}" --output "{work}/{out}" --chunk-size 32 '
                               f'--page-size 16 --kv-store "{store}" --quiet {" ".join(args)}'],
                              capture_output=True, text=True)
    r = one_rank("c.h5")
    with h5py.File(os.path.join(work, "c.h5"), "r") as f:
        reused = [int(x) for x in f["reused_tokens"][:]]
    check(r.returncode == 0 and sum(1 for x in reused if x > 0) >= 2,
          f"a pp 1 run loads prefixes from the pp 2 entries: {reused} {r.stderr[-400:]}")
    r = one_rank("d.h5", "--seed 3")
    check(r.returncode == 0 and re.search(r"passed over \d+ entr(y|ies) \(\d+ of another model\)", r.stderr),
          f"a run of another model names the entries it passed over: {r.stderr[-400:]}")
    # Shared prefixes: a document and 3 questions, stored once.
    rng = np.random.default_rng(3)
    doc = rng.integers(0, 512, 200).astype(np.int32)
    asked = [np.concatenate([doc, rng.integers(0, 512, 20).astype(np.int32)]) for _ in range(4)]
    shared_h5, shared_store, export = (os.path.join(work, n) for n in ("shared.h5", "shared_store", "export"))
    with h5py.File(shared_h5, "w") as f:
        f["tokens"] = np.concatenate(asked)
        f["offsets"] = np.cumsum([0] + [len(p) for p in asked]).astype(np.int64)
    os.makedirs(shared_store)
    run_pipefill(build, "synthetic:tiny", shared_h5, os.path.join(work, "shared.h5.out"), 2,
                 f"--pp 2 --chunk-size 32 --page-size 16 --kv-store {shared_store} --save-kv {export}")
    listed = json.loads(tool("ls", shared_store, "--json").stdout)
    children = [e for e in listed if e.get("parent")]
    root = [e for e in listed if not e.get("parent")]
    check(len(root) == 1 and len(children) == 3 and
          all(e["parent"] == root[0]["name"] and e["parent_tokens"] == 192 for e in children),
          f"the 3 other prompts name the first's entry (not each other), holding its first 192 tokens: {listed}")
    check(sum(e["bytes"] for e in children) < root[0]["bytes"],
          f"the 3 questions' entries hold less than the document's: {[e['bytes'] for e in listed]}")
    r = tool("verify", shared_store)
    check(r.returncode == 0 and "4 of 4 entries verify" in r.stdout, f"verify passes on chains: {r.stdout[-300:]}")
    sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
    import torch
    from pipefill_kv import load_kv
    child = children[0]
    joined = load_kv(os.path.join(shared_store, child["name"]), child["prompt"])
    exported = load_kv(export, child["prompt"])
    check(len(joined) == len(exported) and all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                                               for a, b in zip(joined, exported)),
          "load_kv joins a question's entry with its document's into the run's own export of it")
    # Two children edited to name each other as parent: a loop, named, not a RecursionError.
    looped = os.path.join(work, "looped_store")
    shutil.copytree(shared_store, looped)
    for me, them in ((children[0], children[1]), (children[1], children[0])):
        path = os.path.join(looped, me["name"], "index.json")
        index = json.load(open(path))
        index["parent"] = them["name"]
        json.dump(index, open(path, "w"))
    r = tool("verify", looped)
    check(r.returncode == 1 and "2 of 4 entries verify" in r.stdout and "a loop of parent entries" in r.stdout,
          f"verify names the loop: {r.stdout[-400:]} {r.stderr[-400:]}")
    shutil.rmtree(os.path.join(shared_store, root[0]["name"]))
    r = tool("verify", shared_store)
    check(r.returncode == 1 and "0 of 3 entries verify" in r.stdout and "is missing" in r.stdout,
          f"verify names the missing parent: {r.stdout[-400:]}")
    r = tool("gc", shared_store)
    check(r.returncode == 0 and not tool("ls", shared_store, "--json").stdout.strip("[]\n "),
          f"gc removes the orphans: {r.stdout[-300:]}")

    # gc pointed one level too high, or at an export: nothing that is not an entry is touched.
    r = tool("gc", work)
    check(r.returncode == 0 and os.path.isdir(store) and os.path.isdir(export),
          f"gc of the store's parent removes nothing: {r.stdout[-300:]} {r.stderr[-300:]}")
    r = tool("gc", export)
    check(r.returncode == 2 and r.stderr.startswith("error: ") and os.path.isfile(os.path.join(export, "index.json")),
          f"gc refuses an export: {r.stderr[-300:]}")

    # A scoring run's entries keep token scores: verify checks them as a run does.
    scored_store = os.path.join(work, "scored_store")
    run_pipefill(build, "synthetic:tiny", prompts_h5, os.path.join(work, "scored.h5"), 2,
                 f"--pp 2 --chunk-size 32 --page-size 16 --logprobs --top-k 2 --kv-store {scored_store}")
    damaged = sorted(n for n in os.listdir(scored_store) if not n.startswith("."))[0]
    scores = next(os.path.join(root, "scores.bin") for root, _, files in os.walk(os.path.join(scored_store, damaged))
                  if "scores.bin" in files)
    with open(scores, "r+b") as f:
        f.seek(8)
        value = f.read(1)
        f.seek(8)
        f.write(bytes([value[0] ^ 0x40]))
    r = tool("verify", scored_store)
    check(r.returncode == 1 and f"BAD  {damaged}" in r.stdout and "token scores" in r.stdout,
          f"verify checks the token scores: {r.stdout[-400:]}")

    r = tool("ls", "/nonexistent-store")
    check(r.returncode == 2 and r.stderr.startswith("error: "), f"a missing store is one error line: {r.stderr}")
    for args in ((), ("frob", store), ("ls",)):  # usage mistakes too: one line, no usage block
        r = tool(*args)
        check(r.returncode == 2 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1,
              f"kv_store.py {' '.join(args)}: one error line: {r.stderr}")
    exit_if_failed()


if __name__ == "__main__":
    main()
