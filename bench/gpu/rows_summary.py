#!/usr/bin/env python3
"""Prints the lines that matter of one `kiln llm-bench --json` report: prefill and decode tokens/s,
the single-sequence decode profile (GPU time, dispatches, the TOP kernels), and with `--rows` each
row count's step time and the largest count's per-kernel profile.

Usage: rows_summary.py REPORT.json [TOP]
"""
import json
import sys

d = json.load(open(sys.argv[1]))
top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
print(f'{d["dtype"]} {d["layers"]} layers, weights {d["weight_bytes"] / 1e9:.2f} GB; '
      f'prefill {d["prefill"]["tokens"]}: {d["prefill"]["tokens_per_sec"]:.0f} tok/s')
print("decode (one sequence):", [(r["context"], round(r["tokens_per_sec"], 1)) for r in d["decode"]])
p = d.get("decode_profile")
if p:
    print(f'decode profile at {p["context"]}: {p["gpu_us_per_token"]:.0f} us GPU, '
          f'{p["dispatches_per_token"]:.0f} dispatches, {p["submits_per_token"]:.1f} submits a token')
    for k in p["kernels"][:top]:
        print(f'  {k["us_per_token"]:>9.1f} us {k["per_token"]:>6.1f}x  {k["kernel"]}')
b = d.get("batched_decode") or {}
if b.get("runs"):
    print("rows  step ms  tok/s  x one row")
    for r in b["runs"]:
        x = r["x_one_row"]
        print(f'{r["rows"]:>4} {r["step_ms"]:>8.2f} {r["tokens_per_sec"]:>7.1f} {x if x is None else round(x, 2)}')
q = b.get("profile") or {}
if q:
    print(f'profile of a {q["rows"]}-row step: {q["gpu_us_per_step"]:.0f} us GPU (kernels timed one by one), '
          f'{q["dispatches_per_step"]:.0f} dispatches')
    for k in q["kernels"][:top]:
        print(f'  {k["us_per_step"]:>9.1f} us {k["per_step"]:>6.1f}x  {k["kernel"]}')
