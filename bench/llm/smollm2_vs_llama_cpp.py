#!/usr/bin/env python3
"""kiln's decode against llama.cpp's on the same GGUF file, same machine, same thread count, in one
run: greedy decoding of N tokens after a short prompt, tokens/s of the decode phase (llama.cpp's own
`predicted_per_second` timing; kiln's `tokens/s (decode)` line). kiln's GPU decode is reported
beside them (where a GPU adapter is present).

    pip install xllamacpp          # llama.cpp, prebuilt CPU wheel
    cargo build --release -p kiln-cli
    python3 bench/llm/smollm2_vs_llama_cpp.py SmolLM2-135M-Instruct.Q4_1.gguf [--threads 2] [--tokens 128]
"""
import argparse
import os
import re
import subprocess
import sys

PROMPT = "The capital of France is"


def llama_cpp(path, threads, tokens, reps):
    import xllamacpp as xlc
    p = xlc.CommonParams()
    p.model.path = path
    p.n_ctx = 512
    p.cpuparams.n_threads = threads
    p.n_parallel = 1
    server = xlc.Server(p)
    best = 0.0
    for _ in range(reps):
        r = server.handle_completions({"prompt": PROMPT, "n_predict": tokens, "temperature": 0,
                                       "ignore_eos": True, "cache_prompt": False})
        best = max(best, r["timings"]["predicted_per_second"])
    return best


def kiln(binary, path, device, threads, tokens, reps):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    best = 0.0
    for _ in range(reps):
        cmd = [binary, "generate", "--model", path, "--device", device, "--prompt", PROMPT,
               "--max-tokens", str(tokens), "--ignore-eos", "--max-context", "512"]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        m = re.search(r"([0-9.]+) tokens/s \(decode\)", out.stderr)
        if out.returncode != 0 or not m:
            return f"failed: {out.stderr.strip()[-300:]}"
        best = max(best, float(m.group(1)))
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kiln", default=os.path.join(os.path.dirname(__file__), "../../target/release/kiln"))
    a = ap.parse_args()
    rows = [
        ("llama.cpp (xllamacpp), CPU", llama_cpp(a.model, a.threads, a.tokens, a.reps)),
        ("kiln, CPU", kiln(a.kiln, a.model, "cpu", a.threads, a.tokens, a.reps)),
        ("kiln, GPU", kiln(a.kiln, a.model, "gpu", a.threads, a.tokens, a.reps)),
    ]
    print(f"{os.path.basename(a.model)}: greedy decode of {a.tokens} tokens, {a.threads} threads, best of {a.reps}")
    for name, v in rows:
        print(f"  {name:40s} " + (f"{v:8.1f} tokens/s" if isinstance(v, float) else v))


if __name__ == "__main__":
    sys.exit(main())
