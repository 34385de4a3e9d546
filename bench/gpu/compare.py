#!/usr/bin/env python3
"""Joins `kiln bench --device gpu --json` with torch_ref.py's JSON into one table per op: shape, kiln time,
PyTorch time, speed ratio (PyTorch time / kiln time: above 1 means kiln is faster), kiln GB/s or TFLOPS,
the fraction of the limit measured in the same run (PyTorch's device copy bandwidth for memory-bound ops,
cuBLAS SGEMM at 4096 for f32 matmul), and the issue-4 target with whether it is met.

Usage: python3 compare.py KILN_JSON TORCH_JSON
"""

import json
import sys


def target(name):
    """(kind, threshold) of the issue-4 target for a row: kind 'ratio' (kiln speed / torch speed),
    'copy' (fraction of copy bandwidth), 'sgemm' (fraction of cuBLAS SGEMM 4096) or 'us' (µs per op)."""
    if name.startswith(("add", "mul", "exp", "silu", "gelu", "cast")):
        return "ratio", 0.95
    if name.startswith(("sum_", "max_")):
        return "copy", 0.90
    if name.startswith(("softmax", "rms_norm", "layer_norm")):
        return "ratio", 1.0
    if name.startswith("matmul_f32_m1_"):
        return "copy", 0.85
    if name.startswith("matmul_f32"):
        return "sgemm", 0.70
    if name.startswith("matmul_f16_8192"):
        return "ratio", 0.40
    if name.startswith("sdpa_causal"):
        return "ratio", 0.50
    if name.startswith("sdpa_decode"):
        return "copy", 0.80
    if name.startswith("launch_chain"):
        return "us", 3.0
    # Issue 9's realistic layouts (realistic_cases.rs).
    if name.startswith(("linear_f16_m1_", "linear_bf16_m1_")):
        return "copy", 0.85
    if name.startswith(("linear_f16", "linear_bf16")):
        return "ratio", 0.40
    if name.startswith("linear_f32"):
        return "sgemm", 0.70
    if name.startswith(("decode_mlp", "embedding", "rope")):
        return "copy", 0.80
    if name.startswith(("concat", "transpose_add")):
        return "ratio", 0.90
    return None, None


def main():
    kiln = json.load(open(sys.argv[1]))
    torch = json.load(open(sys.argv[2]))
    trows = {r["name"]: r for r in torch["rows"]}
    copy = torch.get("copy_gbps") or float("nan")
    sgemm = (trows.get("matmul_f32_4096") or {}).get("gflops") or float("nan")
    kcopy = (kiln.get("copy_bandwidth") or {}).get("gbps", float("nan"))
    print(f"device: {torch.get('device')}  torch {torch.get('torch')}  kiln {kiln.get('kiln_version')}")
    print(f"limits measured in this run: copy bandwidth {copy:.0f} GB/s (torch clone), kiln copy kernel "
          f"{kcopy:.0f} GB/s, cuBLAS SGEMM 4096 {sgemm / 1e3:.1f} TFLOPS")
    timer = {r.get("gpu_timestamps") for r in kiln["rows"] if r.get("status") == "ok" and r.get("bound") != "launch"}
    print(f"kiln timed with {'GPU timestamps' if timer == {True} else 'wall clock (some or all rows)'}; "
          "torch with CUDA events; medians")
    head = (f"{'op':<24} {'shape':<26} {'kiln':>10} {'torch':>10} {'speed':>6} {'kiln rate':>14} "
            f"{'of limit':>9}  target")
    print(head)
    print("-" * (len(head) + 16))
    met = total = 0
    for r in kiln["rows"]:
        name = r["name"]
        t = trows.get(name) or {}
        if r.get("status") != "ok":
            print(f"{name:<24} {r['shape']:<26} {'n/a':>10}  {r.get('error', r.get('status'))}")
            continue
        ops = r.get("ops") or 1
        kt = r["median_s"] / ops * 1e6
        tt = t["median_s"] / ops * 1e6 if t.get("status") == "ok" else float("nan")
        speed = tt / kt
        if r.get("gflops"):
            rate = f"{r['gflops'] / 1e3:.2f} TFLOPS"
        elif r.get("gbps"):
            rate = f"{r['gbps']:.0f} GB/s"
        else:
            rate = f"{kt:.2f} us/op"
        kind, thr = target(name)
        frac = {"copy": (r.get("gbps") or 0) / copy, "sgemm": (r.get("gflops") or 0) / sgemm,
                "ratio": speed, "us": kt}.get(kind)
        lim = ""
        if r.get("gbps"):
            lim = f"{100 * r['gbps'] / copy:.0f}% bw"
        elif name.startswith(("matmul_f32", "linear_f32")) and r.get("gflops"):
            lim = f"{100 * r['gflops'] / sgemm:.0f}% sgemm"
        goal = ""
        if kind:
            ok = frac <= thr if kind == "us" else frac >= thr
            met += ok
            total += 1
            unit = {"copy": "of copy bw", "sgemm": "of SGEMM", "ratio": "x torch", "us": "us/op max"}[kind]
            shown = f"{frac:.2f}" if kind != "us" else f"{frac:.2f}"
            goal = f"{'MET ' if ok else 'miss'} {shown} vs {thr} {unit}"
        print(f"{name:<24} {r['shape']:<26} {kt:>8.1f}us {tt:>8.1f}us {speed:>6.2f} {rate:>14} {lim:>9}  {goal}")
    print(f"\ntargets met: {met}/{total}")


if __name__ == "__main__":
    main()
