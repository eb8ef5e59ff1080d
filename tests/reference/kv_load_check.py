#!/usr/bin/env python3
"""scripts/pipefill_kv.py loads a real export and refuses what it must not load.

`pipefill run --save-kv` on the tiny synthetic model at pp 2 x tp 2 (each file holds a slice of
the layers and of the KV heads). Then:
  - every prompt loads, with its ids as a list, an array or input_ids-shaped torch tensor: the
    data_checksum that Python recomputes equals the one the C++ writer stored, and the tensors
    are the files' own, heads and layers in place;
  - a file with one value set to 1e30, and a file with two positions' rows swapped (the same
    bytes in other places), are refused with an error naming the file and its data_checksum;
  - an index that lists a file twice, or two files holding the same layers' KV heads, is refused;
  - ids that only a cast would turn into the exported ones (the prompt as floats, as bools, an id
    plus 2**32, a negative id) are refused as not being token ids.

usage: kv_load_check.py BUILD_DIR WORK_DIR   (run with scripts/setup_venv.sh's python)
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from pipefill_kv import KvExportError, load_hf_cache, load_kv  # noqa: E402
from pipefill_runs import check, exit_if_failed, run_pipefill  # noqa: E402



def refusal(directory, prompt, tokens=None):
    """The message load_kv refuses with, or None when it loads."""
    try:
        load_kv(directory, prompt, tokens)
    except KvExportError as e:
        return str(e)
    return None


def read_header(path):
    """A safetensors file's metadata, and {tensor: (byte offset in the file, shape)} (float32 data)."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
    metadata = header.pop("__metadata__")
    assert all(t["dtype"] == "F32" for t in header.values())
    return metadata, {name: (8 + size + t["data_offsets"][0], t["shape"]) for name, t in header.items()}


def read_tensor(path, place):
    offset, shape = place
    return np.fromfile(path, dtype="<f4", count=int(np.prod(shape)), offset=offset).reshape(shape)


def main():
    build, work = (os.path.abspath(a) for a in sys.argv[1:3])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model, prompts_h5, kv = (os.path.join(work, name) for name in ("tiny", "prompts.h5", "kv"))
    for args in (["make-model", "--preset", "tiny", "--out", model],
                 ["make-prompts", "--out", prompts_h5, "--num", "3", "--min-len", "20", "--max-len", "90",
                  "--vocab", "512", "--seed", "5"]):
        subprocess.run([os.path.join(build, "pipefill"), *args], check=True, stdout=subprocess.DEVNULL)
    run_pipefill(build, model, prompts_h5, os.path.join(work, "out.h5"), 4, f"--pp 2 --tp 2 --save-kv {kv}")
    with h5py.File(prompts_h5, "r") as f:
        tokens, offsets = f["tokens"][:], f["offsets"][:]
    prompts = [tokens[offsets[p]:offsets[p + 1]] for p in range(len(offsets) - 1)]
    index = json.load(open(os.path.join(kv, "index.json")))

    # ---- a sound export loads --------------------------------------------------------------
    for p, prompt in enumerate(prompts):
        for label, ids in (("a list", [int(t) for t in prompt]), ("an int32 array", prompt),
                           ("a torch tensor [1, T]", torch.tensor(prompt[None, :], dtype=torch.long))):
            message = refusal(kv, p, ids)
            check(message is None, f"prompt {p} loads with its ids as {label} ({message})")
    layers = load_kv(kv, 1, prompts[1])
    same = True
    for name in index["prompts"]["1"]["files"]:
        path = os.path.join(kv, name)
        metadata, places = read_header(path)
        heads = slice(*(int(x) for x in metadata["kv_heads"].split(",")))
        for tensor, place in places.items():
            _, layer, part = tensor.split(".")
            loaded = layers[int(layer)][0 if part == "key" else 1][0, heads].numpy()
            same = same and np.array_equal(loaded, read_tensor(path, place))
    check(same and len(layers) == index["num_layers"], "the loaded K and V are the files' tensors, in place")
    cache = load_hf_cache(kv, 2, tokens=prompts[2])
    check(cache.get_seq_length() == len(prompts[2]), "load_hf_cache: a cache of the prompt's length")

    # ---- damaged files are refused ---------------------------------------------------------
    for case in ("one value 1e30", "two rows swapped"):
        damaged = os.path.join(work, "damaged_" + case.split()[0])
        shutil.copytree(kv, damaged)
        name = index["prompts"]["0"]["files"][-1]
        path = os.path.join(damaged, name)
        offset, shape = read_header(path)[1]["layers.7.value"]
        row = shape[2] * 4
        with open(path, "r+b") as f:
            if case == "one value 1e30":
                f.seek(offset + row * 5 + 4 * 3)  # head 0, position 5, element 3
                f.write(struct.pack("<f", 1e30))
            else:  # head 0's positions 2 and 3: every row's bytes are still in the file
                f.seek(offset + row * 2)
                rows = f.read(2 * row)
                f.seek(offset + row * 2)
                f.write(rows[row:] + rows[:row])
        message = refusal(damaged, 0, prompts[0]) or ""
        check(path in message and "data_checksum" in message,
              f"{case}: refused naming the file and its data_checksum ({message!r})")
        check(refusal(damaged, 1, prompts[1]) is None, f"{case}: the other prompts still load")

    # ---- an edited index: a file listed twice, or a copy of one listed beside it -----------
    files = index["prompts"]["0"]["files"]
    for number, (case, listed) in enumerate((("a file listed twice", files + files[:1]),
                                             ("a copy of a file listed beside it", files + ["copy.safetensors"]))):
        edited = os.path.join(work, f"edited_{number}")
        shutil.copytree(kv, edited)
        shutil.copy(os.path.join(kv, files[0]), os.path.join(edited, "copy.safetensors"))
        changed = json.loads(json.dumps(index))
        changed["prompts"]["0"]["files"] = listed
        with open(os.path.join(edited, "index.json"), "w") as f:
            json.dump(changed, f)
        message = refusal(edited, 0, prompts[0]) or ""
        check("twice" in message or "also in another file" in message, f"{case}: refused ({message!r})")

    # ---- ids that are not the exported int32 ids -------------------------------------------
    prompt = prompts[0].astype(np.int64)
    wrapped = prompt.copy()
    wrapped[3] += 2**32  # the same int32 once cast
    negative = prompt.copy()
    negative[0] = -1
    cases = [("floats", prompt.astype(np.float64), "must be integers, not float64"),
             ("a list with a float", [float(prompt[0])] + prompt[1:].tolist(), "must be integers, not float64"),
             ("bools", prompt.astype(bool), "must be integers, not bool"),
             ("a float tensor", torch.tensor(prompt, dtype=torch.float32), "must be integers, not float32"),
             ("an id plus 2**32", wrapped, f"id {int(wrapped[3])} at position 3 is not a token id"),
             ("an id 2**40", np.append(prompt[:-1], 2**40), f"id {2**40} at position {len(prompt) - 1}"),
             ("a negative id", negative, "id -1 at position 0 is not a token id")]
    for label, ids, expected in cases:
        message = refusal(kv, 0, ids) or ""
        check(expected in message, f"tokens as {label}: refused ({message!r})")

    exit_if_failed()
    print("all KV loader checks passed")


if __name__ == "__main__":
    main()
