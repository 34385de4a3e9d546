#!/usr/bin/env python3
"""PyTorch (CUDA) reference timings for the fusion rows of `kiln bench --device gpu`
(crates/kiln-cli/src/bench/fusion_cases.rs, issue 26): the same functions written with primitives
(hypot, a Gaussian, RMSNorm, GELU-tanh, and a softmax), same shapes and byte counts, run by PyTorch
eagerly (`eager_*`, one kernel per op) and through `torch.compile` (`compiled_*`, Inductor's fused
Triton kernels). Compare `compiled_*` with kiln's `fused_*` rows and `eager_*` with kiln's `eager_*`
rows of the same run's device.

Each row: warm-up (the compile happens in the first call), then the median of 30 runs, each timed
with CUDA events. f32 inputs, random on the GPU. Prints JSON.

Usage: python3 torch_fusion.py [--quick] [--filter SUBSTR]
"""

import json
import statistics
import sys

import torch

F32 = 4


def count(n):
    return f"{n >> 20}M" if n >= 1 << 20 and n % (1 << 20) == 0 else str(n)


def hypot(a, b):
    return torch.sqrt(a * a + b * b)


def gauss(x):
    return torch.exp(-(x * x))


def gelu_tanh(x):
    inner = (x + x * x * x * 0.044715) * 0.7978845608028654
    return x * 0.5 * (torch.tanh(inner) + 1.0)


def rmsnorm(x, w):
    ms = (x * x).mean(-1, keepdim=True)
    return x * torch.rsqrt(ms + 1e-5) * w


def softmax(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def cases(quick):
    """(name, shape label, bytes moved, function, input shapes): must match fusion_cases.rs."""
    n = 1 << 20 if quick else 64 << 20
    rows, d = (256, 4096) if quick else (16384, 4096)
    return [
        ("hypot", count(n), 3 * F32 * n, hypot, [[n], [n]]),
        ("gauss", count(n), 2 * F32 * n, gauss, [[n]]),
        ("rmsnorm_prims", f"{rows}x{d}", F32 * (2 * rows * d + d), rmsnorm, [[rows, d], [d]]),
        ("softmax_prims", f"{rows}x{d}", 2 * F32 * rows * d, softmax, [[rows, d]]),
        ("gelu_tanh_prims", count(n), 2 * F32 * n, gelu_tanh, [[n]]),
    ]


def measure(op, runs=30, warmup=5):
    for _ in range(warmup):
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
    filt = sys.argv[sys.argv.index("--filter") + 1] if "--filter" in sys.argv else None
    rows = []
    for name, shape, nbytes, f, shapes in cases(quick):
        g = torch.Generator(device="cuda").manual_seed(1)
        xs = [torch.randn(*s, device="cuda", generator=g) for s in shapes]
        for kind, fn in [("eager", f), ("compiled", torch.compile(f))]:
            row_name = f"{kind}_{name}"
            if filt and filt not in row_name:
                continue
            try:
                t = measure(lambda: fn(*xs))
            except Exception as e:  # e.g. no Triton for torch.compile: report it, keep going
                rows.append({"name": row_name, "shape": shape, "status": "error", "error": str(e)})
                continue
            rows.append({"name": row_name, "shape": shape, "median_s": t, "gbps": nbytes / t / 1e9, "status": "ok"})
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": 30, "rows": rows}
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
