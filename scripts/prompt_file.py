"""The prompts tokenize.py builds, and the HDF5 file it writes them to: pipefill's input format
(/tokens, /offsets, read by src/io/prompts_h5.cpp) plus each prompt's source (docs/formats.md);
and, for the tools that read a run's output, which rows belong to which prompt and where it came from.
"""
import itertools
import json
import os

import h5py
import numpy as np

from python_tool import UserError, fnv1a, utf8_name, written_atomically

INT32_LIMIT = 2**31
FINGERPRINT_LIMIT = 64 << 20  # bytes of input hashed in Python (about a second per 16 MB)


class PromptSet:
    """The ids of every prompt back to back, their lengths and sources, checked as they come."""

    def __init__(self, paths, model_vocab_size):
        self.paths = paths
        self.model_vocab_size = model_vocab_size
        self.token_arrays = []
        self.lengths = []
        self.source_file = []
        self.source_line = []
        self.score_start = []  # per prompt: the first scored position (1: all)
        self.scored_spans = False  # written with /score_start even where every context is one token
        self.ids = []  # per prompt: its --id-field value (None: none)
        self.tokens = 0

    def add_batch(self, docs, id_lists, starts=None):
        """docs: objects with file_index, line, label and id; id_lists: each one's token ids;
        starts: each one's first scored position (None: 1, every position)."""
        for doc, ids in zip(docs, id_lists):
            if not ids:
                raise UserError(f"{doc.label}: the tokenizer gives no tokens for this text")
        count = sum(len(ids) for ids in id_lists)
        ids = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=np.int64, count=count)
        self.check_range(docs, id_lists, ids)
        self.token_arrays.append(ids.astype(np.int32))
        self.lengths.extend(len(i) for i in id_lists)
        self.source_file.extend(d.file_index for d in docs)
        self.source_line.extend(d.line for d in docs)
        self.score_start.extend(starts if starts is not None else [1] * len(docs))
        self.scored_spans = self.scored_spans or starts is not None  # contexts and continuations
        self.ids.extend(getattr(d, "id", None) for d in docs)
        self.tokens += count

    def check_range(self, docs, id_lists, ids):
        # pipefill reads int32 ids below config.json's vocab_size; refuse here, naming the prompt.
        bounds = [(INT32_LIMIT, "does not fit the input's int32 ids")]
        if self.model_vocab_size is not None:
            bounds.append((self.model_vocab_size, f"is not below the model's vocab_size {self.model_vocab_size} "
                                                  f"(config.json): tokenizer.json and the weights disagree"))
        for limit, reason in bounds:
            if ids.max() >= limit:
                position = int(np.argmax(ids >= limit))
                ends = np.cumsum([len(i) for i in id_lists])
                doc = docs[int(np.searchsorted(ends, position, side="right"))]
                raise UserError(f"{doc.label}: token id {int(ids[position])} {reason}")

    def offsets(self):
        return np.concatenate([[0], np.cumsum(self.lengths, dtype=np.int64)]).astype(np.int64)


def write_prompt_file(out, prompts, attrs):
    """Writes beside OUT under a temporary name, then renames: OUT is never half written, and an
    existing OUT stays as it was until the new file is complete."""
    with written_atomically(out) as partial:
        # locking=False: the name is ours alone, and HDF5's locks fail on some network file systems.
        with h5py.File(partial, "w", locking=False) as f:
            f.create_dataset("tokens", data=np.concatenate(prompts.token_arrays), dtype="<i4")
            f.create_dataset("offsets", data=prompts.offsets(), dtype="<i8")
            names = [utf8_name(p) for p in prompts.paths]
            f.create_dataset("source_files", data=names, dtype=h5py.string_dtype("utf-8"))
            f.create_dataset("source_file", data=np.asarray(prompts.source_file, dtype=np.int32), dtype="<i4")
            f.create_dataset("source_line", data=np.asarray(prompts.source_line, dtype=np.int64), dtype="<i8")
            # pipefill reads these two (docs/formats.md): written only when they say something.
            if prompts.scored_spans or any(s != 1 for s in prompts.score_start):
                f.create_dataset("score_start", data=np.asarray(prompts.score_start, dtype=np.int64), dtype="<i8")
            if any(i is not None for i in prompts.ids):
                f.create_dataset("ids", data=[i if i is not None else "" for i in prompts.ids],
                                 dtype=h5py.string_dtype("utf-8"))
            for key, value in attrs.items():  # paths and --field as typed, maybe not UTF-8
                f.attrs[key] = utf8_name(value) if isinstance(value, str) else value
        with open(partial, "rb") as f:
            os.fsync(f.fileno())


def open_h5(path):
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such file")
    try:
        return h5py.File(path, "r", locking=False)
    except OSError:
        raise UserError(f"{path} is not an HDF5 file")


def text_of(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class PromptIndex:
    """Prompt boundaries, tokens and sources: from FILE when it has /offsets, else from --input."""

    def __init__(self, data_file, input_path):
        source = data_file if "offsets" in data_file else (open_h5(input_path) if input_path else None)
        self.offsets = self.tokens = None
        self.labels = self.score_start = self.ids = None
        self.windowed = False
        if source is None:
            return
        if "offsets" not in source:
            raise UserError(f"--input {input_path} has no /offsets: give the file the run read")
        self.offsets = source["offsets"][:].astype(np.int64)
        self.tokens = source["tokens"][:] if "tokens" in source else None
        if all(name in source for name in ("source_files", "source_file", "source_line")):
            files = [text_of(f) for f in source["source_files"][:]]
            self.labels = [files[f] + (f":{line}" if line else "")
                           for f, line in zip(source["source_file"][:], source["source_line"][:])]
        if "score_start" in source:
            self.score_start = source["score_start"][:].astype(np.int64)
        # tokenize.py --window: a document's windows are consecutive prompts of one source.
        self.windowed = "window" in source.attrs and "source_file" in source
        if self.windowed:
            self.documents = list(zip(source["source_file"][:].tolist(), source["source_line"][:].tolist()))
        if "ids" in source:
            self.ids = [text_of(i) for i in source["ids"][:]]

    def document_groups(self, count):
        """Lists of prompts that are one document each: its windows (tokenize.py --window), else
        every prompt alone."""
        if not self.windowed:
            return [[p] for p in range(count)]
        groups = []
        for p in range(count):
            if groups and self.documents[groups[-1][-1]] == self.documents[p]:
                groups[-1].append(p)
            else:
                groups.append([p])
        return groups

    def count(self):
        return None if self.offsets is None else len(self.offsets) - 1

    def name(self, prompt):
        """How tools name a prompt: its number, its id (/ids) and where it came from."""
        details = ([repr(self.ids[prompt])] if self.ids else []) + ([self.labels[prompt]] if self.labels else [])
        return f"prompt {prompt}" + (f" ({', '.join(details)})" if details else "")

    def fingerprint_bytes(self):
        """The bytes io::fingerprint hashes (src/io/prompts_h5.cpp)."""
        data = self.tokens.astype("<i4").tobytes() + self.offsets.astype("<i8").tobytes()
        if self.score_start is not None:
            data += b"score_start" + self.score_start.astype("<i8").tobytes()
        if self.ids is not None:
            data += b"ids" + b"".join(i.encode("utf-8") + b"\0" for i in self.ids)
        return data


def check_run_input(out, out_path, input_path, prompts):
    """--input must be the file the run that wrote `out` read: as many prompts, and the fingerprint
    of its tokens and offsets (io::fingerprint) that the output's resume identity holds."""
    count = prompts.count()
    if "completed" in out and len(out["completed"]) != count:
        raise UserError(f"{input_path} has {count} prompts, {out_path} {len(out['completed'])}: not the run's input")
    identity = out.attrs.get("resume_identity")
    identity = json.loads(identity.decode() if isinstance(identity, bytes) else identity) if identity else {}
    expected = identity.get("input_fingerprint")
    if expected is not None and prompts.tokens is not None and \
            prompts.tokens.nbytes + prompts.offsets.nbytes <= FINGERPRINT_LIMIT:
        if str(fnv1a(prompts.fingerprint_bytes())) != str(expected):
            raise UserError(f"{input_path} is not the input {out_path} was computed from (another fingerprint)")
