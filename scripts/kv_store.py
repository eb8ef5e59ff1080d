#!/usr/bin/env python3
"""Looking after a pipefill KV store (`pipefill run --kv-store DIR`).

usage: kv_store.py ls STORE [--json]        each entry: model, layout, tokens, size, age
       kv_store.py du STORE                 bytes, in all and per (model, layout)
       kv_store.py verify STORE [ENTRY...]  every file's identity and checksums (exit 1 if any fails;
                                            a scoring run's rows are hashed at a few MB/s)
       kv_store.py gc STORE [--dry-run]     remove entries that fail verify and the .incoming
                                            directories of runs on this host that are gone

A store holds one directory per stored prompt, `<store key>-<tokens hash>-<tokens>`, with its
index.json, its token ids (tokens.i32) and one safetensors file per (stage, TP rank) of the
layout that wrote it; a prompt whose prefix another entry holds keeps only its own rows and
names that entry (its "parent", shown by `ls`; `verify` checks an entry with its parents); runs add
entries by an atomic rename of a finished `.incoming-<host>-<pid>-<ms>` directory
(docs/formats.md, "The KV store"). `gc` only removes what no run can use (a damaged entry is
refused by every run's own checks) or what a dead run left, and renames an entry out of the
store's names before deleting it, so a concurrent run never sees half of one. Needs the
project's venv (numpy, torch, safetensors: scripts/setup_venv.sh).
"""
import errno
import fcntl
import json
import os
import re
import shutil
import socket
import sys
import time

HERE = os.path.dirname(os.path.realpath(__file__))
# Beside scripts/tokenize.py, which shadows the standard library's `tokenize`: as the other tools.
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != HERE] + [HERE]

import python_tool  # noqa: E402  (standard library only: it picks the interpreter first)

python_tool.run_in_venv(__file__)

import numpy as np  # noqa: E402

from pipefill_kv import KvExportError, load_kv, read_index, tokens_fnv1a  # noqa: E402
from python_tool import ArgumentParser, fnv1a  # noqa: E402


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def size_of(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


# <store key>-<tokens_fnv1a>-<tokens>: the only names a store's runs and this tool treat as
# entries (src/kvcache/kv_directories.cpp); nothing else in the directory is ever touched.
ENTRY_NAME = re.compile(r"[0-9a-f]{16}-[0-9a-f]{16}-[1-9][0-9]*")


def require_store(store):
    """A store's directory, not an export, one of its entries or a model (as pipefill checks)."""
    if not os.path.isdir(store):
        fail(f"{store} is not a directory (give the directory of --kv-store)")
    has = set(os.listdir(store))
    if "tokens.i32" in has:
        fail(f"{store} is one entry of a KV store: give the store's directory, its parent")
    if "index.json" in has:
        fail(f"{store} holds index.json: a --save-kv export, not a KV store (read it with pipefill_kv.py)")
    if "config.json" in has or any(n.endswith(".safetensors") for n in has):
        fail(f"{store} holds config.json or .safetensors files: a model's directory, not a KV store")


def entries_of(store):
    """The store's entry directories, sorted."""
    require_store(store)
    return sorted(d for d in os.listdir(store) if ENTRY_NAME.fullmatch(d) and os.path.isdir(os.path.join(store, d)))


def describe(store, name):
    """What an entry's index.json says, or its problem."""
    path = os.path.join(store, name)
    in_use = os.path.join(path, "in_use")  # its mtime: when a run last loaded it (--kv-store-limit)
    used = os.path.getmtime(in_use) if os.path.exists(in_use) else os.path.getmtime(path)
    info = {"name": name, "bytes": size_of(path), "modified": os.path.getmtime(path), "last_used": used}
    try:
        index = read_index(path)
        prompt, listed = next(iter(index["prompts"].items()))
        shards = sorted(index.get("shards", []), key=lambda s: (s["stage"], s["tp_rank"]))
        layers = {}
        for shard in shards:
            layers[shard["stage"]] = shard["layers"][1] - shard["layers"][0]
        info.update(model=index["model_config"].get("architectures", ["?"])[0], model_identity=index["model_identity"],
                    pp=index.get("pp"), tp=index.get("tp", max((s["tp_rank"] for s in shards), default=0) + 1),
                    partition=",".join(str(layers[s]) for s in sorted(layers)), prompt=int(prompt),
                    tokens=int(listed["tokens"]), dtype=index.get("dtype"), parent=index.get("parent"),
                    parent_tokens=index.get("parent_tokens", 0))
    except (KvExportError, OSError, ValueError, KeyError, TypeError, AttributeError, StopIteration) as e:
        info["problem"] = f"unreadable index.json: {e}"
    return info


def file_fnv1a(path, start=0, length=None):
    with open(path, "rb") as f:
        f.seek(start)
        return f"{fnv1a(f.read() if length is None else f.read(length)):016x}"


def check_rows(prompt_dir, tokens, first):
    """None, or what is wrong with the token rows a scoring run stored beside the KV
    (src/kvcache/entry_scores.hpp: scores.json/.bin, hidden_rows.json/.bin), checked as a run
    checks them before it lends them."""
    scores = os.path.join(prompt_dir, "scores.json")
    if os.path.exists(scores):
        with open(scores) as f:
            about = json.load(f)
        if not isinstance(about, dict) or about.get("tokens") != tokens:
            return f"{scores} does not describe this entry's {tokens} tokens"
        width = (1 if about.get("logprobs") else 0) + 2 * int(about.get("top_k", 0)) + len(about.get("token_set", []))
        data = os.path.join(prompt_dir, "scores.bin")
        if not os.path.isfile(data) or os.path.getsize(data) != 4 * tokens * width:
            return f"{data} is missing or not {4 * tokens * width} bytes"
        if file_fnv1a(data) != about.get("fnv1a"):
            return f"{data} does not match its checksum (the token scores were changed)"
    hidden = os.path.join(prompt_dir, "hidden_rows.json")
    if os.path.exists(hidden):
        with open(hidden) as f:
            about = json.load(f)
        if not isinstance(about, dict) or about.get("tokens") != tokens or about.get("first") != first:
            return f"{hidden} does not describe this entry's rows {first}..{tokens}"
        row = 4 * int(about["hidden"])
        block = int(about["block_rows"])
        data = os.path.join(prompt_dir, "hidden_rows.bin")
        if not os.path.isfile(data) or os.path.getsize(data) != row * (tokens - first):
            return f"{data} is missing or not {row * (tokens - first)} bytes"
        blocks = range(0, tokens - first, block)
        if len(about["fnv1a"]) != len(blocks):
            return f"{hidden} lists {len(about['fnv1a'])} block checksums, not {len(blocks)}"
        for b, at in enumerate(blocks):
            if file_fnv1a(data, at * row, min(block, tokens - first - at) * row) != about["fnv1a"][b]:
                return f"{data}: rows {first + at}.. do not match their checksum (the rows were changed)"
    return None


def check(store, name):
    """None if the entry verifies, else what is wrong with it."""
    path = os.path.join(store, name)
    try:
        index = read_index(path)
        prompt, listed = next(iter(index["prompts"].items()))
        ids = np.fromfile(os.path.join(path, "tokens.i32"), dtype="<i4")
        if len(ids) != listed["tokens"] or tokens_fnv1a(ids) != listed["tokens_fnv1a"]:
            return "tokens.i32 does not match its index.json"
        if name.rsplit("-", 2)[1:] != [listed["tokens_fnv1a"], str(listed["tokens"])]:
            return "its name does not match the tokens it holds"
        load_kv(path, int(prompt), ids)  # every file's identity and data_checksum
        first = int(index.get("parent_tokens", 0)) if index.get("parent") else 0
        return check_rows(os.path.join(path, f"prompt-{int(prompt):06d}"), len(ids), first)
    except (KvExportError, OSError, ValueError, KeyError, TypeError, AttributeError, StopIteration) as e:
        return str(e)


def cmd_ls(store, as_json):
    rows = [describe(store, name) for name in entries_of(store)]
    if as_json:
        print(json.dumps(rows, indent=1))
        return 0
    now = time.time()
    print(f"{'entry':<44} {'model':<30} {'layout':<24} {'tokens':>8} {'size':>10} {'age':>6} {'used':>6}")
    for r in rows:
        if "problem" in r:
            print(f"{r['name']:<44} {r['problem']}")
            continue
        layout = f"pp {r['pp']} x tp {r['tp']} ({r['partition']})"
        def ago(t):
            age = now - t
            return f"{age / 86400:.1f}d" if age >= 86400 else f"{age / 3600:.1f}h" if age >= 3600 else f"{age:.0f}s"
        shared = f"  first {r['parent_tokens']} in {r['parent']}" if r.get("parent") else ""
        print(f"{r['name']:<44} {r['model'][:21] + ' ' + r['model_identity'][:8]:<30} {layout:<24} "
              f"{r['tokens']:>8} {human(r['bytes']):>10} {ago(r['modified']):>6} {ago(r['last_used']):>6}{shared}")
    print(f"{len(rows)} entries, {human(sum(r['bytes'] for r in rows))}")
    return 0


def cmd_du(store):
    groups, total = {}, 0
    for name in entries_of(store):
        r = describe(store, name)
        key = ("damaged", "") if "problem" in r else (f"{r['model']} {r['model_identity'][:8]}",
                                                       f"pp {r['pp']} x tp {r['tp']} ({r['partition']}), {r['dtype']}")
        count, size = groups.get(key, (0, 0))
        groups[key] = (count + 1, size + r["bytes"])
        total += r["bytes"]
    incoming = sum(size_of(os.path.join(store, d)) for d in os.listdir(store) if d.startswith(".incoming-"))
    aside = sum(size_of(os.path.join(store, d)) for d in moved_aside(store))
    for (model, layout), (count, size) in sorted(groups.items()):
        print(f"{human(size):>10}  {count:>5} entries  {model}  {layout}")
    if incoming:
        print(f"{human(incoming):>10}  in .incoming directories (runs writing now, or killed)")
    if aside:
        print(f"{human(aside):>10}  in entries moved aside for removal (a removal a kill cut short: gc removes them)")
    print(f"{human(total + incoming + aside):>10}  in all ({store})")
    return 0


def cmd_verify(store, names):
    names = names or entries_of(store)
    require_store(store)
    bad = 0
    for name in names:
        if not ENTRY_NAME.fullmatch(name) or not os.path.isdir(os.path.join(store, name)):
            fail(f"{store} has no entry {name}")
        problem = check(store, name)
        print(f"{'ok' if problem is None else 'BAD':<4} {name}{'' if problem is None else ': ' + problem}")
        bad += problem is not None
    print(f"{len(names) - bad} of {len(names)} entries verify")
    return 1 if bad else 0


def dead_incoming(store):
    """.incoming-<host>-<pid>-<ms> directories of this host whose process is gone."""
    host = socket.gethostname()
    prefix = f".incoming-{host}-"
    for name in sorted(os.listdir(store)):
        if not name.startswith(prefix):
            continue
        fields = name[len(prefix):].split("-")
        if len(fields) != 2 or not fields[0].isdigit():
            continue
        try:
            os.kill(int(fields[0]), 0)
        except ProcessLookupError:
            yield name
        except PermissionError:  # alive, another user's
            pass


ASIDE = (".evicting-", ".replaced-", ".deleting-")  # entries moved aside to be removed


def moved_aside(store):
    """Entries moved out of the store's names by a removal (pipefill's eviction, a replaced damaged
    entry, this gc) that a kill interrupted: garbage, whoever left them."""
    return [name for name in sorted(os.listdir(store)) if name.startswith(ASIDE)]


def ignore_missing(function, path, error):
    """shutil.rmtree's onerror: a file already gone is no error, anything else is."""
    if not issubclass(error[0], FileNotFoundError):
        raise error[1]


def cmd_gc(store, dry_run):
    names = entries_of(store)  # first: it refuses a directory that is not a store
    doomed = [(name, "left by a run that is gone") for name in dead_incoming(store)]
    doomed += [(name, "moved aside by a removal that did not finish") for name in moved_aside(store)]
    for name in names:
        problem = check(store, name)
        if problem is not None:
            doomed.append((name, problem))
    freed, removed = 0, 0
    for name, why in doomed:
        path = os.path.join(store, name)
        size = size_of(path)
        print(f"{'would remove' if dry_run else 'removing'} {name} ({human(size)}): {why}")
        if dry_run:
            continue
        # Never one a run is using (it holds a shared lock on in_use, as pipefill's own
        # --kv-store-limit respects). Out of the store's names first (an atomic rename, under
        # the lock), then deleted: no run lists it again.
        lock = None
        if not name.startswith("."):
            try:
                lock = os.open(os.path.join(path, "in_use"), os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:  # a held lock is EAGAIN or EACCES; anything else is the entry's own state
                busy = e.errno in (errno.EAGAIN, errno.EACCES)
                print(f"  kept {name}: " + ("a run is using it" if busy else f"cannot lock its in_use: {e.strerror}"))
                if lock is not None:
                    os.close(lock)
                continue
        trash = path if name.startswith(ASIDE) else os.path.join(store, f".deleting-{name.lstrip('.')}-{os.getpid()}")
        try:
            if trash != path:
                os.rename(path, trash)
        except FileNotFoundError:  # removed meanwhile (a run's own clean-up)
            continue
        finally:
            if lock is not None:
                os.close(lock)
        # (A pipefill run opening the store removes moved-aside entries too: whatever it took first
        # is gone, not an error.)
        shutil.rmtree(trash, onerror=ignore_missing)
        freed += size
        removed += 1
    print(f"{len(doomed)} would be removed" if dry_run else f"{removed} removed, {human(freed)} freed")
    return 0


def main():
    ap = ArgumentParser(description="Look after a pipefill KV store (pipefill run --kv-store DIR).",
                        epilog="ls, du and verify only read; gc removes damaged entries and what dead "
                               "runs on this host left (--dry-run: only say what).")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, text in (("ls", "list the entries"), ("du", "bytes per model and layout"),
                       ("verify", "check every file against its checksums"), ("gc", "remove what no run can use")):
        p = sub.add_parser(name, help=text)
        p.add_argument("store", metavar="STORE", help="the --kv-store directory")
        if name == "ls":
            p.add_argument("--json", action="store_true", help="JSON instead of a table")
        if name == "verify":
            p.add_argument("entries", nargs="*", metavar="ENTRY", help="entries to check (default: all)")
        if name == "gc":
            p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    args = ap.parse_args()
    if args.command == "ls":
        return cmd_ls(args.store, args.json)
    if args.command == "du":
        return cmd_du(args.store)
    if args.command == "verify":
        return cmd_verify(args.store, args.entries)
    return cmd_gc(args.store, args.dry_run)


if __name__ == "__main__":
    sys.exit(python_tool.main_with_user_errors(main))
