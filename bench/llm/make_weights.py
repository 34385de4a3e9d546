#!/usr/bin/env python3
"""Writes a Llama-3-shaped model with random bf16 weights as a Hugging Face folder (config.json,
sharded safetensors with model.safetensors.index.json), generating the tensors on the GPU with torch.

Usage: make_weights.py SHAPE OUT_DIR [--layers N]   SHAPE: 1b (Llama-3.2-1B) or 8b (Llama-3-8B)
"""

import argparse
import json
import os
import time

import torch
from safetensors.torch import save_file

SHAPES = {
    # Llama-3.2-1B: tied embeddings.
    "1b": dict(layers=16, hidden=2048, heads=32, kv=8, ffn=8192, vocab=128256, tied=True, factor=32.0),
    # Llama-3-8B (Llama 3.1 rope scaling).
    # A smoke-test shape for machines without a GPU.
    "tiny": dict(layers=2, hidden=256, heads=4, kv=2, ffn=512, vocab=1000, tied=False, factor=8.0),
    "8b": dict(layers=32, hidden=4096, heads=32, kv=8, ffn=14336, vocab=128256, tied=False, factor=8.0),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", choices=SHAPES)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=None, help="fewer layers than the real model")
    args = ap.parse_args()
    s = dict(SHAPES[args.shape])
    if args.layers:
        s["layers"] = args.layers
    os.makedirs(args.out, exist_ok=True)
    h, hd = s["hidden"], s["hidden"] // s["heads"]
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": s["vocab"],
        "hidden_size": h,
        "intermediate_size": s["ffn"],
        "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"],
        "num_key_value_heads": s["kv"],
        "head_dim": hd,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": s["factor"],
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "tie_word_embeddings": s["tied"],
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "torch_dtype": "bfloat16",
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):
        return (torch.randn(*shape, generator=g, device=dev, dtype=torch.float32) * 0.02).to(torch.bfloat16)

    def ones(n):
        return (1.0 + 0.1 * torch.randn(n, generator=g, device=dev)).to(torch.bfloat16)

    start = time.time()
    weight_map = {}
    shards = []
    head = {"model.embed_tokens.weight": rand(s["vocab"], h), "model.norm.weight": ones(h)}
    if not s["tied"]:
        head["lm_head.weight"] = rand(s["vocab"], h)
    shards.append(head)
    per_shard = 4
    for first in range(0, s["layers"], per_shard):
        shard = {}
        for l in range(first, min(first + per_shard, s["layers"])):
            p = f"model.layers.{l}"
            shard[f"{p}.input_layernorm.weight"] = ones(h)
            shard[f"{p}.post_attention_layernorm.weight"] = ones(h)
            shard[f"{p}.self_attn.q_proj.weight"] = rand(s["heads"] * hd, h)
            shard[f"{p}.self_attn.k_proj.weight"] = rand(s["kv"] * hd, h)
            shard[f"{p}.self_attn.v_proj.weight"] = rand(s["kv"] * hd, h)
            shard[f"{p}.self_attn.o_proj.weight"] = rand(h, s["heads"] * hd)
            shard[f"{p}.mlp.gate_proj.weight"] = rand(s["ffn"], h)
            shard[f"{p}.mlp.up_proj.weight"] = rand(s["ffn"], h)
            shard[f"{p}.mlp.down_proj.weight"] = rand(h, s["ffn"])
        shards.append(shard)
    total = 0
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        cpu = {k: v.cpu().contiguous() for k, v in shard.items()}
        total += sum(v.numel() * v.element_size() for v in cpu.values())
        save_file(cpu, os.path.join(args.out, name), metadata={"format": "pt"})
        for k in shard:
            weight_map[k] = name
        shard.clear()
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    print(f"{args.shape}: {s['layers']} layers, {total / 2**30:.2f} GiB in {time.time() - start:.1f} s -> {args.out}")


if __name__ == "__main__":
    main()
