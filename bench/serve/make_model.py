#!/usr/bin/env python3
"""Writes a Llama-3-shaped model with random bf16 weights for serving benchmarks, with numpy and the
standard library only (no torch): config.json as bench/llm/make_weights.py's, sharded safetensors
with model.safetensors.index.json, and a word-level tokenizer.json covering the whole vocabulary
(every generated id decodes to a word, so each streamed token is a text chunk; the words of
bench/serve/load.py's prompts are in it).

The weights are normals (x 0.02) from one random pool of 2^24 values, each tensor a slice of it
repeated from a random start: the shapes and bytes of the real model, for timing, in seconds.

Usage: make_model.py SHAPE OUT_DIR [--layers N]   SHAPE: 8b (Llama-3-8B), 1b, mid (512 wide, 8
layers, 32000 words: serving runs in seconds on a CPU or lavapipe) or tiny
"""

import argparse
import json
import os
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load import WORDS  # noqa: E402

SHAPES = {
    "1b": dict(layers=16, hidden=2048, heads=32, kv=8, ffn=8192, vocab=128256, tied=True, factor=32.0),
    "8b": dict(layers=32, hidden=4096, heads=32, kv=8, ffn=14336, vocab=128256, tied=False, factor=8.0),
    "mid": dict(layers=8, hidden=512, heads=8, kv=2, ffn=1536, vocab=32000, tied=False, factor=8.0),
    "tiny": dict(layers=2, hidden=256, heads=4, kv=2, ffn=512, vocab=1000, tied=False, factor=8.0),
}
POOL = 1 << 24


def bf16(x):
    """float32 array -> bf16 bits (round to nearest even) as uint16."""
    b = x.astype(np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", choices=SHAPES)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=None)
    args = ap.parse_args()
    s = dict(SHAPES[args.shape])
    if args.layers:
        s["layers"] = args.layers
    os.makedirs(args.out, exist_ok=True)
    h, hd = s["hidden"], s["hidden"] // s["heads"]
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": s["vocab"],
        "hidden_size": h, "intermediate_size": s["ffn"], "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"], "num_key_value_heads": s["kv"], "head_dim": hd,
        "hidden_act": "silu", "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": s["factor"], "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        "tie_word_embeddings": s["tied"], "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    # Word-level tokenizer: <s>, </s>, <unk>, the prompt words, then w<i> up to the vocabulary size.
    words = list(dict.fromkeys(WORDS))
    vocab = ["<s>", "</s>", "<unk>"] + words
    vocab += [f"w{i}" for i in range(s["vocab"] - len(vocab))]
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(vocab[:2])],
        "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(vocab)}, "unk_token": "<unk>"},
    }
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump(tok, f)

    rng = np.random.default_rng(0)
    start = time.time()
    pool = bf16(rng.standard_normal(POOL, dtype=np.float32) * 0.02)
    pool = np.concatenate([pool, pool])  # any start has POOL values after it
    ones = bf16(1.0 + 0.1 * rng.standard_normal(POOL, dtype=np.float32))
    ones = np.concatenate([ones, ones])

    def tensor(shape, src):
        return (shape, src, int(rng.integers(0, POOL)))

    shards = []
    head = {"model.embed_tokens.weight": tensor([s["vocab"], h], pool), "model.norm.weight": tensor([h], ones)}
    if not s["tied"]:
        head["lm_head.weight"] = tensor([s["vocab"], h], pool)
    shards.append(head)
    for first in range(0, s["layers"], 4):
        shard = {}
        for l in range(first, min(first + 4, s["layers"])):
            p = f"model.layers.{l}"
            shard[f"{p}.input_layernorm.weight"] = tensor([h], ones)
            shard[f"{p}.post_attention_layernorm.weight"] = tensor([h], ones)
            shard[f"{p}.self_attn.q_proj.weight"] = tensor([s["heads"] * hd, h], pool)
            shard[f"{p}.self_attn.k_proj.weight"] = tensor([s["kv"] * hd, h], pool)
            shard[f"{p}.self_attn.v_proj.weight"] = tensor([s["kv"] * hd, h], pool)
            shard[f"{p}.self_attn.o_proj.weight"] = tensor([h, s["heads"] * hd], pool)
            shard[f"{p}.mlp.gate_proj.weight"] = tensor([s["ffn"], h], pool)
            shard[f"{p}.mlp.up_proj.weight"] = tensor([s["ffn"], h], pool)
            shard[f"{p}.mlp.down_proj.weight"] = tensor([h, s["ffn"]], pool)
        shards.append(shard)
    weight_map = {}
    total = 0
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        header = {"__metadata__": {"format": "pt"}}
        at = 0
        for k, (shape, _, _) in shard.items():
            n = 2 * int(np.prod(shape))
            header[k] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + n]}
            at += n
        hb = json.dumps(header).encode()
        hb += b" " * (-len(hb) % 8)
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(struct.pack("<Q", len(hb)))
            f.write(hb)
            for k, (shape, src, off) in shard.items():
                left = int(np.prod(shape))
                while left:
                    n = min(left, POOL)
                    f.write(src[off:off + n].tobytes())
                    left -= n
                weight_map[k] = name
        total += at
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    print(f"{args.shape}: {s['layers']} layers, {total / 2**30:.2f} GiB in {time.time() - start:.1f} s -> {args.out}")


if __name__ == "__main__":
    main()
