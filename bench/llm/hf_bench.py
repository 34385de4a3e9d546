#!/usr/bin/env python3
"""Hugging Face transformers (PyTorch eager attention, bf16, CUDA) on a model folder: prefill tokens/s of
a PROMPT-token prompt, greedy decode tokens/s at the given contexts (`generate`), and the device's copy
bandwidth (torch clone) for the decode ceiling. JSON on stdout.

Usage: hf_bench.py MODEL_DIR [--prefill 2048] [--contexts 512,4096] [--decode-tokens 32]
"""

import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


DEV = "cuda" if torch.cuda.is_available() else "cpu"


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def sync_time(f):
    sync()
    t = time.perf_counter()
    out = f()
    sync()
    return time.perf_counter() - t, out


def copy_bandwidth():
    x = torch.empty(1 << (30 if DEV == "cuda" else 26), dtype=torch.uint8, device=DEV)
    for _ in range(3):
        x.clone()
    n = 20
    secs, _ = sync_time(lambda: [x.clone() for _ in range(n)])
    return 2 * x.numel() * n / secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--prefill", type=int, default=2048)
    ap.add_argument("--contexts", default="512,4096")
    ap.add_argument("--decode-tokens", type=int, default=32)
    args = ap.parse_args()
    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, attn_implementation="eager")
    model = model.to(DEV).eval()
    model.generation_config.eos_token_id = None
    load_secs = time.perf_counter() - t
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(0, vocab, (1, n), generator=g).to(DEV)

    def gen(prompt, n):
        return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)

    with torch.no_grad():
        gen(ids(64), 4)  # warm-up
        p = ids(args.prefill)
        model(p, logits_to_keep=1)
        prefill = min(sync_time(lambda: model(p, logits_to_keep=1))[0] for _ in range(2))
        decode = []
        for ctx in [int(c) for c in args.contexts.split(",")]:
            prompt = ids(ctx)
            one, _ = sync_time(lambda: gen(prompt, 1))
            many, out = sync_time(lambda: gen(prompt, 1 + args.decode_tokens))
            assert out.shape[1] == ctx + 1 + args.decode_tokens
            secs = many - one
            decode.append({"context": ctx, "steps": args.decode_tokens, "secs": secs, "tokens_per_sec": args.decode_tokens / secs})
    report = {
        "engine": "transformers",
        "transformers": __import__("transformers").__version__,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu",
        "dtype": "bf16",
        "load_secs": load_secs,
        "prefill": {"tokens": args.prefill, "secs": prefill, "tokens_per_sec": args.prefill / prefill},
        "decode": decode,
        "peak_gpu_bytes": torch.cuda.max_memory_allocated() if DEV == "cuda" else 0,
        "copy_bandwidth_bytes_per_sec": copy_bandwidth(),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
