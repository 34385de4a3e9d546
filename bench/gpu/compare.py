#!/usr/bin/env python3
"""Joins `kiln bench --device gpu --json` with torch_ref.py's JSON into one table: op, shape, kiln time,
PyTorch time, ratio (PyTorch time / kiln time: above 1 means kiln is faster), kiln GB/s or GFLOPS and the
fraction of the device copy bandwidth measured in the same kiln run.

Usage: python3 compare.py KILN_JSON TORCH_JSON
"""

import json
import sys


def main():
    kiln = json.load(open(sys.argv[1]))
    torch = json.load(open(sys.argv[2]))
    trows = {r["name"]: r for r in torch["rows"]}
    copy = kiln.get("copy_bandwidth") or {}
    print(f"device: {torch.get('device')}  torch {torch.get('torch')}  kiln {kiln.get('kiln_version')}")
    print(f"device copy bandwidth (kiln, copy engine): {copy.get('gbps', float('nan')):.0f} GB/s")
    head = f"{'op':<20} {'shape':<24} {'kiln':>10} {'torch':>10} {'torch/kiln':>10} {'kiln rate':>16} {'of copy bw':>10}"
    print(head)
    print("-" * len(head))
    for r in kiln["rows"]:
        t = trows.get(r["name"])
        if r.get("status") != "ok":
            print(f"{r['name']:<20} {r['shape']:<24} {'n/a':>10}  {r.get('status')}")
            continue
        kt = r["median_s"] * 1e6
        tt = t["median_s"] * 1e6 if t else float("nan")
        rate = f"{r['gflops']:.0f} GFLOPS" if r.get("gflops") and not r.get("gbps") else f"{r.get('gbps') or 0:.0f} GB/s"
        lim = f"{100 * r['limit_ratio']:.0f}%" if r.get("limit_ratio") else ""
        print(f"{r['name']:<20} {r['shape']:<24} {kt:>8.1f}us {tt:>8.1f}us {tt / kt:>10.2f} {rate:>16} {lim:>10}")


if __name__ == "__main__":
    main()
