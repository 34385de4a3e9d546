#!/usr/bin/env python3
"""PyTorch (CUDA) reference timings for the shapes of `kiln bench` on the GPU machine.

Same row names and byte/FLOP counts as `kiln bench --json` and bench/cpu/numpy_ref.py. Inputs are random
float32 on the GPU; each op allocates its output like kiln does. Warm-up, then the median of many runs
timed with CUDA events. TF32 is off, so matmul is true f32 (cuBLAS SGEMM). Prints JSON.

Usage: python3 torch_ref.py [--quick]
"""

import json
import statistics
import sys

import torch

F32 = 4
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def count(n):
    return f"{n >> 20}M" if n >= 1 << 20 and n % (1 << 20) == 0 else str(n)


def cases(quick):
    n, r, c = (1 << 20, 512, 512) if quick else (32 << 20, 4096, 4096)
    squares, llm = ([128, 256], 512) if quick else ([1024, 2048], 4096)
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=g, dtype=torch.float32)

    x, y = randn(n), randn(n)
    m2, w, b = randn(r, c), randn(c), randn(c)
    xr = x.view(n // c, c)
    out = [
        ("add", count(n), 3 * F32 * n, None, lambda: x + y),
        ("mul_row_bcast", f"{n // c}x{c} * {c}", F32 * (2 * n + c), None, lambda: xr * w),
        ("exp", count(n), 2 * F32 * n, None, lambda: torch.exp(x)),
        ("silu", count(n), 2 * F32 * n, None, lambda: torch.nn.functional.silu(x)),
        ("cast_f32_f16", count(n), (F32 + 2) * n, None, lambda: x.half()),
        ("sum_all", count(n), F32 * n, None, lambda: x.sum()),
        ("sum_last_axis", f"{r}x{c}", F32 * (r * c + r), None, lambda: m2.sum(-1)),
        ("sum_first_axis", f"{r}x{c}", F32 * (r * c + c), None, lambda: m2.sum(0)),
        ("softmax", f"{r}x{c}", 2 * F32 * r * c, None, lambda: torch.softmax(m2, -1)),
        ("rms_norm", f"{r}x{c}", F32 * (2 * r * c + c), None, lambda: torch.nn.functional.rms_norm(m2, (c,), w, 1e-5)),
        ("layer_norm", f"{r}x{c}", F32 * (2 * r * c + 2 * c), None, lambda: torch.nn.functional.layer_norm(m2, (c,), w, b, 1e-5)),
    ]
    for sq in squares:
        a, bb = randn(sq, sq), randn(sq, sq)
        out.append((f"matmul_f32_{sq}", f"{sq}x{sq} @ {sq}x{sq}", None, 2 * sq**3, lambda a=a, bb=bb: a @ bb))
    wk = randn(llm, llm)
    for m in (1, 16):
        a = randn(m, llm)
        out.append((f"matmul_f32_llm_m{m}", f"{m}x{llm} @ {llm}x{llm}", F32 * (2 * m * llm + llm * llm), 2 * m * llm * llm, lambda a=a: a @ wk))
    return out


def measure(op, runs=50):
    for _ in range(5):
        op()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        op()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e-3)
    return statistics.median(times)


def main():
    quick = "--quick" in sys.argv
    rows = []
    for name, shape, nbytes, flops, op in cases(quick):
        t = measure(op)
        row = {"name": name, "shape": shape, "dtype": "f32", "median_s": t}
        if nbytes:
            row["gb_per_s"] = nbytes / t / 1e9
        if flops:
            row["gflops"] = flops / t / 1e9
        rows.append(row)
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
