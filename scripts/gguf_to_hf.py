#!/usr/bin/env python3
"""A llama.cpp GGUF checkpoint of a Llama model -> a Hugging Face model directory.

scripts/get_model.sh calls it on the GGUF it downloaded; pipefill and transformers then read the
directory: config.json (written by transformers' LlamaConfig), model.safetensors (float32, written by
save_pretrained), generation_config.json, tokenizer.json and tokenizer_config.json (with the chat
template). The weights are dequantized by the `gguf` package (numpy ports of ggml's own
dequantizers), and llama.cpp's row permutation of q_proj and k_proj is undone.

Why float32: ggml dequantizes in float32 (Q4_1: d * q + m, d and m float16, q 4 bits; Q8_0: d * q,
q 8 bits), so a product alone carries up to 15 (Q4_1) or 19 (Q8_0) significant bits. float32 keeps
every value exactly as llama.cpp computes with it; bfloat16 (8 bits) would round most of them (the
converter counts how many and prints it), and pipefill's CPU backend computes in float32 anyway.

usage: gguf_to_hf.py GGUF OUT_DIR   (run with scripts/setup_venv.sh's python)
"""
import os
import sys

# scripts/tokenize.py would shadow the standard library's tokenize (imported by linecache, logging):
# this file's folder goes behind the standard library on the path.
HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != HERE]

import json  # noqa: E402

import gguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from tokenizers import pre_tokenizers  # noqa: E402
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.utils import logging as transformers_logging  # noqa: E402

# llama.cpp tensor names -> transformers' LlamaForCausalLM parameter names.
GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}
LAYER_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
               "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj"}

# llama.cpp's pre-tokenizer types that split off every digit before the GPT-2 regex (llama-vocab.cpp
# runs \p{N} first), as the Hugging Face originals do with a Digits(individual_digits) pre-tokenizer.
DIGIT_SPLIT_PRE = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b")


class ConversionError(Exception):
    """The GGUF is not a Llama checkpoint this converter understands (a user error, exit 2)."""


def field(reader, key, default=None):
    entry = reader.fields.get(key)
    if entry is None:
        if default is None:
            raise ConversionError(f"the GGUF has no field {key}")
        return default
    return entry.contents()


def float32_literal(value):
    """GGUF stores floats as float32 (1e-5 reads back as 9.999999747e-06); write the shortest
    decimal that rounds to the same float32, as config.json files write it."""
    return float(str(np.float32(value)))


def read_config(reader):
    architecture = field(reader, "general.architecture")
    if architecture != "llama":
        raise ConversionError(f"architecture {architecture!r}: only llama GGUF files are converted")
    a = architecture
    heads = int(field(reader, f"{a}.attention.head_count"))
    hidden = int(field(reader, f"{a}.embedding_length"))
    head_dim = hidden // heads
    rope_dims = int(field(reader, f"{a}.rope.dimension_count", head_dim))
    if rope_dims != head_dim:
        raise ConversionError(f"partial rope ({rope_dims} of {head_dim} dimensions) is not a Llama model")
    if f"{a}.rope.scaling.type" in reader.fields or any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise ConversionError("rope scaling in a GGUF is not converted")
    names = {t.name for t in reader.tensors}
    tokens = reader.fields["tokenizer.ggml.tokens"]
    pad = reader.fields.get("tokenizer.ggml.padding_token_id")
    return LlamaConfig(
        vocab_size=len(tokens.data), hidden_size=hidden,
        intermediate_size=int(field(reader, f"{a}.feed_forward_length")),
        num_hidden_layers=int(field(reader, f"{a}.block_count")), num_attention_heads=heads,
        num_key_value_heads=int(field(reader, f"{a}.attention.head_count_kv", heads)), head_dim=head_dim,
        max_position_embeddings=int(field(reader, f"{a}.context_length")),
        rms_norm_eps=float32_literal(field(reader, f"{a}.attention.layer_norm_rms_epsilon")),
        rope_parameters={"rope_type": "default",
                         "rope_theta": float32_literal(field(reader, f"{a}.rope.freq_base", 10000.0))},
        # llama.cpp writes no output.weight when the head reuses the embedding.
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=int(field(reader, "tokenizer.ggml.bos_token_id")),
        eos_token_id=int(field(reader, "tokenizer.ggml.eos_token_id")),
        pad_token_id=int(pad.contents()) if pad is not None else None,
        architectures=["LlamaForCausalLM"], dtype="float32")


def hf_name(gguf_name):
    if gguf_name in GLOBAL_NAMES:
        return GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".")  # blk.N.attn_q.weight
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in LAYER_NAMES:
        return f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}.{parts[3]}"
    raise ConversionError(f"tensor {gguf_name}: not part of a Llama model")


def unpermute_rows(weight, heads):
    """Undo convert_hf_to_gguf.py's permute(): llama.cpp's rope rotates adjacent pairs (x0, x1), Hugging
    Face's rotates halves (x_i, x_{i+d/2}), so the converter interleaved each head's two halves of rows."""
    half = weight.shape[0] // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def read_weights(reader, config):
    state, not_bf16, total = {}, 0, 0
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        # GGUF lists dimensions fastest first; rows of a quantized tensor are whole blocks.
        shape = tuple(int(d) for d in reversed(tensor.shape))
        # A copy: F32 tensors come back as read-only views of the memory-mapped file.
        weight = np.array(gguf.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(shape)
        if tensor.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            bits = weight.view(np.uint32)
            not_bf16 += int(np.count_nonzero(bits & 0xFFFF))
            total += weight.size
        if name.endswith("q_proj.weight"):
            weight = unpermute_rows(weight, config.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            weight = unpermute_rows(weight, config.num_key_value_heads)
        state[name] = torch.from_numpy(np.ascontiguousarray(weight))
    if total:
        print(f"gguf_to_hf: {not_bf16 / total:.1%} of the dequantized weights are not exact in bfloat16; "
              f"writing float32")
    return state


def write_model(config, state, out_dir):
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    expected = set(model.state_dict())
    if config.tie_word_embeddings:
        expected.discard("lm_head.weight")
    if set(state) != expected:
        raise ConversionError(f"tensors missing: {sorted(expected - set(state))[:4]}, "
                              f"unexpected: {sorted(set(state) - expected)[:4]}")
    for name, weight in state.items():
        if tuple(model.get_parameter(name).shape) != tuple(weight.shape):
            raise ConversionError(f"{name}: shape {tuple(weight.shape)}, the config implies "
                                  f"{tuple(model.get_parameter(name).shape)}")
    model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    model.save_pretrained(out_dir, safe_serialization=True)


def write_tokenizer(gguf_path, config, reader, out_dir):
    tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path))
    # transformers' converter gives these plain ByteLevel, which keeps whitespace and a digit after it
    # in one pre-token where the model was trained on them apart (on the GPL-3 text: 19 more tokens,
    # "\n\n " + " 0" instead of "\n\n  " + "0").
    if field(reader, "tokenizer.ggml.pre", "default") in DIGIT_SPLIT_PRE:
        tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tokenizer.model_max_length = config.max_position_embeddings
    tokenizer.save_pretrained(out_dir)
    # transformers 5 writes the template to chat_template.jinja; the model card layout (and tools that
    # read only tokenizer_config.json) keep it in tokenizer_config.json: one place, that one.
    template_file = os.path.join(out_dir, "chat_template.jinja")
    config_file = os.path.join(out_dir, "tokenizer_config.json")
    with open(config_file) as f:
        tokenizer_config = json.load(f)
    for transient in ("is_local", "local_files_only"):
        tokenizer_config.pop(transient, None)
    if os.path.exists(template_file):
        with open(template_file) as f:
            tokenizer_config["chat_template"] = f.read()
        os.remove(template_file)
    with open(config_file, "w") as f:
        json.dump(tokenizer_config, f, indent=2, ensure_ascii=False)
        f.write("\n")


def readable_as_umask_allows(out_dir):
    """save_pretrained writes model.safetensors 0600; a model directory is shared like any other file."""
    umask = os.umask(0)
    os.umask(umask)
    for name in os.listdir(out_dir):
        os.chmod(os.path.join(out_dir, name), 0o666 & ~umask)


def main():
    if len(sys.argv) != 3:
        print("usage: gguf_to_hf.py GGUF OUT_DIR", file=sys.stderr)
        return 2
    gguf_path, out_dir = sys.argv[1], sys.argv[2]
    transformers_logging.disable_progress_bar()
    try:
        try:
            reader = gguf.GGUFReader(gguf_path)
        except (OSError, ValueError) as e:
            raise ConversionError(f"not a readable GGUF file ({e})")
        config = read_config(reader)
        write_model(config, read_weights(reader, config), out_dir)
        write_tokenizer(gguf_path, config, reader, out_dir)
        readable_as_umask_allows(out_dir)
    except ConversionError as e:
        print(f"error: {gguf_path}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
