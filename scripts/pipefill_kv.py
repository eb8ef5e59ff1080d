"""Reading a pipefill KV export (`pipefill run --save-kv DIR`) back, to continue decoding elsewhere.

    import sys; sys.path.insert(0, "scripts")
    from pipefill_kv import load_hf_cache
    cache = load_hf_cache("kv_dir", 0)                      # prompt 0: a transformers DynamicCache
    out = model(input_ids=next_token_ids, cache=cache)   # decoding continues at position T
                                                         # (transformers 4.x: past_key_values=cache)

The export holds, per prompt, one safetensors file per (stage, TP rank): layers.{L}.key and
layers.{L}.value [kv_heads, tokens, head_dim] for the stage's layers and the rank's KV heads, K
after RoPE (and q/k norm) exactly as Hugging Face caches it, and DIR/index.json listing the
prompts and shards (docs/formats.md, "KV export"). The loader joins the heads of the TP ranks,
puts the layers in order, and checks every file's identity against the index (model, prompt,
token count and hash) and its data against its data_checksum before trusting it. Needs torch,
safetensors and (for the cache) transformers: the venv of scripts/setup_venv.sh has them.
"""
import json
import os

import numpy as np
import torch
from safetensors import safe_open

from python_tool import fnv1a  # beside this file in scripts/

FORMAT = "pipefill-kv-1"


class KvExportError(ValueError):
    """The directory is not a complete export of that prompt (or not of those tokens)."""


def tokens_fnv1a(tokens):
    """FNV-1a 64 of the int32 token ids, as pipefill hashes a prompt's tokens (hex, as stored)."""
    return f"{fnv1a(np.asarray(tokens, dtype='<i4').tobytes()):016x}"


def token_ids(tokens):
    """`tokens` as a flat array of ids, refusing anything that is not int32 ids as they are:
    the hash is of int32 values, so a float, a bool or an id past int32 cast to match would
    pass for the exported prompt."""
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.detach().cpu()
    try:
        ids = np.asarray(tokens)
    except (TypeError, ValueError) as e:
        raise KvExportError(f"tokens: not an array of token ids ({e})")
    if ids.dtype.kind not in "iu":  # bool is "b", floats "f", mixed or > 64-bit integers "O"
        raise KvExportError(f"tokens: token ids must be integers, not {ids.dtype} values")
    ids = ids.reshape(-1)  # [T], or input_ids-shaped [1, T]
    bad = np.flatnonzero((ids < 0) | (ids > np.iinfo(np.int32).max))
    if len(bad):
        raise KvExportError(f"tokens: id {int(ids[bad[0]])} at position {int(bad[0])} is not a token id "
                            f"(pipefill's ids are int32, 0 <= id < 2**31)")
    return ids


# The data checksum of src/kvcache/kv_checksum.hpp, computed the same way on numpy uint64 arrays
# (whose products wrap modulo 2**64 as C++'s do), one element per row.
MASK64 = (1 << 64) - 1


def _mix64(x):  # splitmix64's finalizer
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def _row_hashes(rows):
    """row_hash of each row of `rows` (uint8 [N, row_bytes]): 8 bytes at a time, then the tail."""
    words = rows.shape[1] // 8
    hashes = np.full(rows.shape[0], 0x9E3779B97F4A7C15 ^ rows.shape[1], dtype=np.uint64)
    packed = np.ascontiguousarray(rows[:, :words * 8]).view("<u8")
    for w in range(words):
        hashes = _mix64(hashes ^ packed[:, w])
    for b in range(words * 8, rows.shape[1]):
        hashes = _mix64(hashes ^ rows[:, b].astype(np.uint64))
    return hashes


def _name_hash(name):
    return int(_row_hashes(np.frombuffer(name.encode(), dtype=np.uint8)[None])[0])


def data_checksum(tensors, first_position=0):
    """The file's data_checksum (16 hex digits) from its tensors {name: [kv_heads, tokens, head_dim]}:
    the sum modulo 2**64 of one term per row (a head's values at a position) mixing the hash of
    the row's stored bytes with the tensor's name, the head and the position (a file of a store
    entry whose prefix another entry holds begins at its first_position)."""
    total = 0
    for name, tensor in tensors.items():
        heads, tokens = tensor.shape[0], tensor.shape[1]
        rows = tensor.contiguous().view(torch.uint8).numpy().reshape(heads * tokens, -1)
        head = np.repeat(np.arange(heads, dtype=np.uint64), tokens)
        position = np.tile(np.arange(first_position, first_position + tokens, dtype=np.uint64), heads)
        place = (_name_hash(name) + head * 0x100000001B3 + position * 0x9E3779B97F4A7C15) & MASK64
        total += int(_mix64(_row_hashes(rows) ^ _mix64(place)).sum(dtype=np.uint64))
    return f"{total & MASK64:016x}"


def read_index(directory):
    path = os.path.join(directory, "index.json")
    try:
        with open(path) as f:
            index = json.load(f)
    except FileNotFoundError:
        raise KvExportError(f"{path} is missing: not a finished pipefill KV export")
    except NotADirectoryError:
        raise KvExportError(f"{directory} is not a directory: give a --save-kv directory or a store's entry")
    except (OSError, UnicodeDecodeError, ValueError) as e:  # json's errors are ValueErrors
        raise KvExportError(f"{path} cannot be read as JSON: {e}")
    if not isinstance(index, dict) or not isinstance(index.get("prompts", {}), dict):
        raise KvExportError(f"{path} is not a pipefill KV export's index (not an object listing its prompts)")
    if index.get("format") != FORMAT:
        raise KvExportError(f"{path}: format {index.get('format')!r}, expected {FORMAT!r}")
    return index


def _parent_rows(directory, index, first, chain):
    """The first `first` positions of a store entry's KV, from the entry its index names as
    holding them ("parent", beside it in the store), that entry's own parent first. `chain`:
    the entries on the way here, which no parent may be again (an edited index's loop)."""
    name = index.get("parent")
    if not name or index.get("parent_tokens") != first:
        raise KvExportError(f"{directory}: its files begin at position {first}, but its index names no entry "
                            f"holding the positions before")
    parent = os.path.join(os.path.dirname(os.path.abspath(directory)), name)
    if not os.path.isdir(parent):
        raise KvExportError(f"{directory}: the entry holding its first {first} tokens, {name}, is missing")
    if os.path.realpath(parent) in chain:
        raise KvExportError(f"{directory}: its parent {name} leads back to it (a loop of parent entries: "
                            f"an edited index)")
    mine = np.fromfile(os.path.join(directory, "tokens.i32"), dtype="<i4")
    theirs = np.fromfile(os.path.join(parent, "tokens.i32"), dtype="<i4")
    if len(theirs) < first or not np.array_equal(mine[:first], theirs[:first]):
        raise KvExportError(f"{directory}: its parent {name} does not hold its first {first} tokens")
    parent_prompt = int(next(iter(read_index(parent)["prompts"])))
    return [(k[:, :, :first], v[:, :, :first]) for k, v in load_kv(parent, parent_prompt, theirs, _chain=chain)]


def load_kv(directory, prompt_index, tokens=None, *, _chain=()):
    """[(key, value)] per layer in order, each [1, num_kv_heads, T, head_dim], as stored (float32,
    or bfloat16 with --kv-dtype bf16). An MLA export (index "cache": "latent") holds one latent
    row per token, the same in every TP rank's file; each layer comes back as transformers'
    DeepSeek-V3 cache holds it: the normed compressed KV [1, 1, T, kv_lora_rank] and the shared
    key after RoPE [1, 1, T, qk_rope_head_dim]. With `tokens` (the prompt's ids), they must be the
    exported ones. A store entry whose prefix another entry holds is joined with it."""
    index = read_index(directory)
    entry = index["prompts"].get(str(prompt_index))
    if entry is None:
        raise KvExportError(f"{directory}: prompt {prompt_index} is not in the export "
                            f"(it has {len(index['prompts'])} prompts)")
    if tokens is not None:
        tokens = token_ids(tokens)
    if tokens is not None and (len(tokens) != entry["tokens"] or tokens_fnv1a(tokens) != entry["tokens_fnv1a"]):
        raise KvExportError(f"{directory}: prompt {prompt_index} was exported for other tokens")
    num_layers, num_heads = index["num_layers"], index["num_kv_heads"]
    latent = index.get("cache") == "latent"
    parts = ("latent",) if latent else ("key", "value")
    keys = [[None] * num_heads for _ in range(num_layers)]
    values = [[None] * num_heads for _ in range(num_layers)]
    covered = [set() for _ in range(num_layers)]  # KV heads a file has given, per layer
    firsts = set()
    if len(set(entry["files"])) != len(entry["files"]):
        raise KvExportError(f"{directory}: its index lists a file of prompt {prompt_index} twice (an edited index)")
    for name in entry["files"]:
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise KvExportError(f"{path} is missing")
        try:
            handle = safe_open(path, framework="pt")
        except Exception as e:  # safetensors' own error types: a damaged or foreign file
            raise KvExportError(f"{path} is not a readable safetensors file: {e}")
        with handle as f:
            meta = f.metadata()
            expected = {"format": FORMAT, "model_identity": index["model_identity"], "prompt": str(prompt_index),
                        "tokens": str(entry["tokens"]), "tokens_fnv1a": entry["tokens_fnv1a"]}
            for key, value in expected.items():
                if meta.get(key) != value:
                    raise KvExportError(f"{path}: {key} is {meta.get(key)!r}, the index says {value!r}")
            first_layer, end_layer = (int(x) for x in meta["layers"].split(","))
            first_head, end_head = (int(x) for x in meta["kv_heads"].split(","))
            if not (0 <= first_layer < end_layer <= num_layers and 0 <= first_head < end_head <= num_heads):
                raise KvExportError(f"{path}: layers {meta['layers']} / KV heads {meta['kv_heads']} lie outside "
                                    f"the index's {num_layers} layers and {num_heads} KV heads")
            names = [f"layers.{layer}.{part}" for layer in range(first_layer, end_layer) for part in parts]
            if sorted(f.keys()) != sorted(names):
                raise KvExportError(f"{path}: holds tensors {sorted(f.keys())}, not the {' and '.join(parts)} rows "
                                    f"of layers {meta['layers']}")
            tensors = {name: f.get_tensor(name) for name in names}
        first = int(meta.get("first_position", "0"))
        firsts.add(first)
        # What the metadata cannot show: a changed value, or rows moved between positions or heads.
        if meta.get("data_checksum") != data_checksum(tensors, first):
            raise KvExportError(f"{path}: its data do not match their data_checksum (a damaged or altered file): "
                                f"export the prompt again")
        for layer in range(first_layer, end_layer):
            if latent:  # every TP rank's file holds the same rows: they must agree
                rows = tensors[f"layers.{layer}.latent"]
                if keys[layer][0] is not None and not torch.equal(keys[layer][0], rows):
                    raise KvExportError(f"{path}: layer {layer}'s latent rows differ from another TP rank's")
                keys[layer][0] = rows
                continue
            if covered[layer] & set(range(first_head, end_head)):
                raise KvExportError(f"{path}: layer {layer}'s KV heads {meta['kv_heads']} are also in another file")
            covered[layer] |= set(range(first_head, end_head))
            keys[layer][first_head] = tensors[f"layers.{layer}.key"]
            values[layer][first_head] = tensors[f"layers.{layer}.value"]
    if len(firsts) != 1:
        raise KvExportError(f"{directory}: prompt {prompt_index}'s files begin at different positions {sorted(firsts)}")
    first = firsts.pop()
    own = entry["tokens"] - first  # the rows its files hold
    layers = []
    for layer in range(num_layers):
        parts_k = [k for k in keys[layer] if k is not None]
        parts_v = [v for v in values[layer] if v is not None]
        if not parts_k:
            raise KvExportError(f"{directory}: prompt {prompt_index}: no file holds layer {layer}")
        if latent:
            rows, rank = parts_k[0], index["kv_lora_rank"]
            if rows.shape[1] != own:
                raise KvExportError(f"{directory}: layer {layer} holds {rows.shape[1]} tokens, the index says "
                                    f"{own}")
            layers.append((rows[None, :, :, :rank], rows[None, :, :, rank:]))
            continue
        key, value = torch.cat(parts_k, dim=0), torch.cat(parts_v, dim=0)
        if key.shape[0] != num_heads:
            raise KvExportError(f"{directory}: layer {layer} has {key.shape[0]} of {num_heads} KV heads")
        if key.shape[1] != own or value.shape != key.shape:
            raise KvExportError(f"{directory}: layer {layer} holds {key.shape[1]} tokens, the index says "
                                f"{own}")
        layers.append((key[None], value[None]))
    if first > 0:
        layers = [(torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2))
                  for (pk, pv), (k, v) in zip(_parent_rows(directory, index, first,
                                                            _chain + (os.path.realpath(directory),)), layers)]
    return layers


def load_hf_cache(directory, prompt_index, tokens=None, dtype=None, device="cpu"):
    """The prompt's cache as transformers' past_key_values: a DynamicCache holding every layer's
    K and V for the prompt's T tokens (so the next token goes at position T); for an MLA model
    (DeepSeek-V3) its compressed latent and shared rope key, which is what its cache holds."""
    from transformers import DynamicCache
    cache = DynamicCache()
    for layer, (key, value) in enumerate(load_kv(directory, prompt_index, tokens)):
        cache.update(key.to(device=device, dtype=dtype or key.dtype), value.to(device=device, dtype=dtype or value.dtype),
                     layer)
    return cache
