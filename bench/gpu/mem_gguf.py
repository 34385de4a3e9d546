#!/usr/bin/env python3
"""Writes a Llama-3-shaped GGUF with random f16 weights into memory (a memfd: no disk, which on the
device machine is smaller than a 70B model), links it at OUT, then runs CMD with the file alive and
exits with CMD's status. For issue 37's multi-GPU runs: a Llama-3.1-70B-shaped model (141 GB of f16)
that does not fit one GPU with a long context, written without a 141 GB disk.

Weights: normals x 0.02 from one random pool, each tensor a run of slices of it from random starts
(written straight from the pool, no copy); a SentencePiece-style vocabulary of the full size, as
../../../shared/device/llama-cpp/make_gguf.py writes (both llama.cpp and kiln load it).

Usage: mem_gguf.py SHAPE OUT.gguf CMD [ARG...]     SHAPE: 70b, 8b, 1b or tiny
"""
import os
import subprocess
import sys
import time

import numpy as np
import gguf

SHAPES = {
    "70b": dict(layers=80, hidden=8192, heads=64, kv=8, ffn=28672, vocab=128256),
    "1b": dict(layers=16, hidden=2048, heads=32, kv=8, ffn=8192, vocab=128256),
    "8b": dict(layers=32, hidden=4096, heads=32, kv=8, ffn=14336, vocab=128256),
    "tiny": dict(layers=2, hidden=256, heads=4, kv=2, ffn=512, vocab=1000),
}
POOL = 1 << 24


def tensors(s):
    h, hd = s["hidden"], s["hidden"] // s["heads"]
    yield "token_embd.weight", (s["vocab"], h)
    for i in range(s["layers"]):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", (h,)
        yield p + "attn_q.weight", (s["heads"] * hd, h)
        yield p + "attn_k.weight", (s["kv"] * hd, h)
        yield p + "attn_v.weight", (s["kv"] * hd, h)
        yield p + "attn_output.weight", (h, s["heads"] * hd)
        yield p + "ffn_norm.weight", (h,)
        yield p + "ffn_gate.weight", (s["ffn"], h)
        yield p + "ffn_up.weight", (s["ffn"], h)
        yield p + "ffn_down.weight", (h, s["ffn"])
    yield "output_norm.weight", (h,)
    yield "output.weight", (s["vocab"], h)


def main():
    shape, out, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
    s = SHAPES[shape]
    t0 = time.time()
    rng = np.random.default_rng(0)
    pool = (rng.standard_normal(POOL, dtype=np.float32) * 0.02).astype(np.float16)
    pool2 = np.concatenate([pool, pool])
    fd = os.memfd_create(f"kiln-{shape}.gguf", 0)
    path = f"/proc/{os.getpid()}/fd/{fd}"
    h, hd = s["hidden"], s["hidden"] // s["heads"]
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(f"kiln-bench-{shape}")
    w.add_block_count(s["layers"])
    w.add_context_length(131072)
    w.add_embedding_length(h)
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(s["vocab"])
    w.add_file_type(1)  # mostly f16
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    toks += [f"\u2581w{i}" for i in range(s["vocab"] - len(toks))]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * len(toks))
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (s["vocab"] - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    specs = list(tensors(s))
    for name, dims in specs:
        # Norm weights are f32 ones; everything else f16.
        dt = np.float32 if len(dims) == 1 else np.float16
        w.add_tensor_info(name, dims, np.dtype(dt), int(np.prod(dims)) * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    total = 0
    for name, dims in specs:
        n = int(np.prod(dims))
        w.write_padding(fout, fout.tell())
        if len(dims) == 1:
            fout.write(np.ones(n, dtype=np.float32).tobytes())
            nbytes = 4 * n
        else:
            done = 0
            while done < n:
                start = int(rng.integers(0, POOL))
                k = min(POOL, n - done)
                fout.write(memoryview(pool2[start:start + k]).cast("B"))
                done += k
            nbytes = 2 * n
        w.write_padding(fout, nbytes)
        total += nbytes
    fout.flush()
    link = os.path.abspath(out)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(path, link)
    print(f"wrote {shape} ({total / 1e9:.1f} GB of weights) in memory at {link} in {time.time() - t0:.1f} s",
          flush=True)
    rc = subprocess.run(cmd, env=dict(os.environ, MODEL=link)).returncode
    os.remove(link)
    sys.exit(rc)


if __name__ == "__main__":
    main()
