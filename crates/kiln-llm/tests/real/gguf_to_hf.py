#!/usr/bin/env python3
"""Converts a Llama-architecture GGUF file into a Hugging Face folder (config.json and an f32
model.safetensors): every tensor dequantised by gguf-py, renamed to transformers' names, and the
rows of the query and key weights put back in Hugging Face order (llama.cpp's converter permutes
them for its interleaved rope; this undoes `LlamaModel.permute`).

    pip install gguf numpy
    python3 gguf_to_hf.py model.gguf out_dir

kiln-llm's `real_model` test runs it on SmolLM2 and checks that kiln gives the same tokens on the
folder as on the GGUF file in f32.
"""
import json
import os
import struct
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as T
from gguf.quants import dequantize

NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
BLOCK = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


def field(r, key):
    f = r.fields[key]
    return f.contents()


def hf_name(name):
    if name in NAMES:
        return NAMES[name]
    parts = name.split(".")  # blk.N.kind.weight
    if parts[0] == "blk" and parts[2] in BLOCK:
        return f"model.layers.{parts[1]}.{BLOCK[parts[2]]}.{parts[3]}"
    return None


def unpermute(w, n_head):
    """Inverse of convert_hf_to_gguf.py's LlamaModel.permute (rows of (n_head, 2, hd/2) -> (n_head, hd/2, 2))."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main(src, out):
    r = GGUFReader(src)
    arch = field(r, "general.architecture")
    if arch != "llama":
        sys.exit(f"{src}: architecture {arch!r}; this script converts llama")
    p = lambda k: field(r, f"llama.{k}")
    n_head, n_kv = p("attention.head_count"), p("attention.head_count_kv")
    tensors = {}
    for t in r.tensors:
        name = hf_name(t.name)
        if name is None:
            continue
        a = np.array(t.data)
        if t.tensor_type not in (T.F32, T.F16, T.BF16):
            a = dequantize(a, t.tensor_type)
        a = a.astype(np.float32).reshape([int(x) for x in reversed(t.shape)])
        if t.name.endswith("attn_q.weight"):
            a = unpermute(a, n_head)
        elif t.name.endswith("attn_k.weight"):
            a = unpermute(a, n_kv)
        tensors[name] = a
    vocab = tensors["model.embed_tokens.weight"].shape[0]
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": int(p("embedding_length")),
        "intermediate_size": int(p("feed_forward_length")),
        "num_hidden_layers": int(p("block_count")),
        "num_attention_heads": int(n_head),
        "num_key_value_heads": int(n_kv),
        "rms_norm_eps": float(p("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(p("rope.freq_base")),
        "max_position_embeddings": int(p("context_length")),
        "vocab_size": int(vocab),
        "tie_word_embeddings": "lm_head.weight" not in tensors,
        "bos_token_id": int(field(r, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(field(r, "tokenizer.ggml.eos_token_id")),
        "torch_dtype": "float32",
    }
    os.makedirs(out, exist_ok=True)
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    print(f"wrote {len(tensors)} tensors to {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
