#!/usr/bin/env python3
"""NumPy reference timings for the shapes of `kiln bench` (CPU).

Each op runs on preallocated random float32 inputs; the op itself allocates its output, as kiln does
(`np.add(a, b)`, not `np.add(a, b, out=c)`). Warm-up runs first, then at least MIN_RUNS timed runs until
a time budget is spent; the median is reported. Prints one JSON document on stdout.

Row names match `kiln bench --json` so that compare.py can join them. Bytes and FLOPs are counted the
same way as kiln counts them (inputs read once + output written once; 2*M*N*K for a matmul).

Usage: python3 numpy_ref.py [--quick] [--filter SUBSTR] [--min-runs N] [--budget SECONDS]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

F32 = 4


def sizes(quick):
    """Problem sizes; must match crates/kiln-cli/src/bench/cases.rs."""
    if quick:
        return dict(n=1 << 20, rows=512, cols=512, square=[128, 256], llm=512)
    return dict(n=32 << 20, rows=4096, cols=4096, square=[1024, 2048], llm=4096)


def count(n):
    return f"{n >> 20}M" if n >= 1 << 20 and n % (1 << 20) == 0 else str(n)


def cases(quick):
    """(name, shape, bytes, flops, setup) where setup() returns the zero-argument op to time."""
    s = sizes(quick)
    n, r, c = s["n"], s["rows"], s["cols"]
    rc = r * c
    eps = 1e-5

    def randn(shape, seed):
        return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)

    def flat(f):
        def setup():
            x = randn(n, 1)
            return lambda: f(x)

        return setup

    def rows(f):
        def setup():
            x, w, b = randn((r, c), 1), randn(c, 2), randn(c, 3)
            return lambda: f(x, w, b)

        return setup

    def softmax(x, _w, _b):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def rms_norm(x, w, _b):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def layer_norm(x, w, b):
        mu = x.mean(-1, keepdims=True)
        d = x - mu
        return d / np.sqrt((d * d).mean(-1, keepdims=True) + eps) * w + b

    def add_setup():
        a, b = randn(n, 1), randn(n, 2)
        return lambda: np.add(a, b)

    def mul_setup():
        x, w = randn(n, 1).reshape(n // c, c), randn(c, 2)
        return lambda: np.multiply(x, w)

    def matmul(m, k, nn):
        def setup():
            a, b = randn((m, k), 1), randn((k, nn), 2)
            return lambda: a @ b

        return setup

    out = [
        ("add", count(n), 3 * F32 * n, None, add_setup),
        ("mul_row_bcast", f"{n // c}x{c} * {c}", F32 * (2 * n + c), None, mul_setup),
        ("exp", count(n), 2 * F32 * n, None, flat(np.exp)),
        ("silu", count(n), 2 * F32 * n, None, flat(lambda x: x / (1 + np.exp(-x)))),
        ("cast_f32_f16", count(n), (F32 + 2) * n, None, flat(lambda x: x.astype(np.float16))),
        ("sum_all", count(n), F32 * n, None, flat(np.sum)),
        ("sum_last_axis", f"{r}x{c}", F32 * (rc + r), None, rows(lambda x, _w, _b: x.sum(-1))),
        ("sum_first_axis", f"{r}x{c}", F32 * (rc + c), None, rows(lambda x, _w, _b: x.sum(0))),
        ("softmax", f"{r}x{c}", 2 * F32 * rc, None, rows(softmax)),
        ("rms_norm", f"{r}x{c}", F32 * (2 * rc + c), None, rows(rms_norm)),
        ("layer_norm", f"{r}x{c}", F32 * (2 * rc + 2 * c), None, rows(layer_norm)),
    ]
    for sq in s["square"]:
        out.append((f"matmul_f32_{sq}", f"{sq}x{sq} @ {sq}x{sq}", None, 2 * sq**3, matmul(sq, sq, sq)))
    k = s["llm"]
    for m in (1, 16):
        out.append(
            (f"matmul_f32_llm_m{m}", f"{m}x{k} @ {k}x{k}", F32 * (m * k + k * k + m * k), 2 * m * k * k, matmul(m, k, k))
        )
    return out


def measure(op, warmup, min_runs, max_runs, budget):
    for _ in range(warmup):
        op()
    times = []
    start = time.perf_counter()
    while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        r = op()
        times.append(time.perf_counter() - t0)
        del r  # freed after the clock stops, like kiln's bench
    return statistics.median(times), min(times), len(times)


def blas_info():
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # older NumPy: no dict mode
        return "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small shapes and 3 runs (smoke test)")
    p.add_argument("--filter", default=None, help="only ops whose name contains this")
    p.add_argument("--min-runs", type=int, default=None, help="timed runs at least (default 10; quick 3)")
    p.add_argument("--budget", type=float, default=None, help="seconds per op after min runs (default 2)")
    args = p.parse_args()
    min_runs = args.min_runs or (3 if args.quick else 10)
    max_runs = 3 if args.quick and args.min_runs is None else max(min_runs, 100)
    budget = args.budget if args.budget is not None else (0.2 if args.quick else 2.0)

    rows = []
    for name, shape, nbytes, flops, setup in cases(args.quick):
        if args.filter and args.filter not in name:
            continue
        print(f"numpy: {name} ...", file=sys.stderr, flush=True)
        op = setup()
        med, best, runs = measure(op, 2, min_runs, max_runs, budget)
        del op
        rows.append(
            dict(
                name=name,
                shape=shape,
                dtype="f32",
                median_s=med,
                min_s=best,
                runs=runs,
                bytes=nbytes,
                flops=flops,
                gbps=nbytes / med / 1e9 if nbytes else None,
                gflops=flops / med / 1e9 if flops else None,
            )
        )
    doc = dict(
        numpy_version=np.__version__,
        blas=blas_info(),
        python=platform.python_version(),
        cpu=cpu_model(),
        logical_cores=os.cpu_count(),
        quick=args.quick,
        rows=rows,
    )
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
