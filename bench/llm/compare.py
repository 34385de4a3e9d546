#!/usr/bin/env python3
"""Joins the kiln and transformers results of run_nvidia.sh into one table (markdown) and one JSON.

Decode ceiling = copy bandwidth / (weight bytes + KV-cache bytes at that context), the tokens/s a
decoder reading every weight and the whole cache once per token could reach.

Usage: compare.py OUT_DIR   (reads kiln_<shape>_<dtype>.json and hf_<shape>.json)
"""

import glob
import json
import os
import sys


def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    out = sys.argv[1]
    rows, joined = [], {}
    for hf_path in sorted(glob.glob(os.path.join(out, "hf_*.json"))):
        shape = os.path.basename(hf_path)[3:-5]
        hf = load(hf_path)
        kilns = {os.path.basename(p)[len(f"kiln_{shape}_"):-5]: load(p) for p in sorted(glob.glob(os.path.join(out, f"kiln_{shape}_*.json")))}
        kilns = {k: v for k, v in kilns.items() if v}
        joined[shape] = {"hf": hf, "kiln": kilns}
        any_kiln = next(iter(kilns.values()), None)
        bw = hf["copy_bandwidth_bytes_per_sec"] if hf else None
        header = f"| {shape} | " + " | ".join(f"kiln {d}" for d in kilns) + " | transformers bf16 | ceiling (bf16) |"
        rows.append(header)
        rows.append("|" + "---|" * (len(kilns) + 3))
        pre = [f"{k['prefill']['tokens_per_sec']:.0f}" for k in kilns.values()]
        rows.append(f"| prefill {hf['prefill']['tokens'] if hf else ''} tok/s | " + " | ".join(pre) + f" | {hf['prefill']['tokens_per_sec']:.0f} | |" if hf else "")
        for i, d in enumerate((hf or {}).get("decode", [])):
            ctx = d["context"]
            ks = [f"{k['decode'][i]['tokens_per_sec']:.1f}" if i < len(k["decode"]) else "" for k in kilns.values()]
            ceil = ""
            if any_kiln and bw:
                kv_pb = any_kiln["kv_bytes_per_position"] * 2 // (4 if any_kiln["dtype"] == "f32" else 2)
                w = any_kiln["weight_bytes"] * 2 // (4 if any_kiln["dtype"] == "f32" else 2)
                ceil = f"{bw / (w + kv_pb * ctx):.1f}"
            rows.append(f"| decode @ {ctx} tok/s | " + " | ".join(ks) + f" | {d['tokens_per_sec']:.1f} | {ceil} |")
        if hf:
            rows.append(f"| peak GPU GiB | " + " | ".join(f"{(k['peak_gpu_bytes'] or 0) / 2**30:.1f}" for k in kilns.values()) + f" | {hf['peak_gpu_bytes'] / 2**30:.1f} | |")
            rows.append(f"\ncopy bandwidth (torch clone): {bw / 1e9:.0f} GB/s; transformers {hf['transformers']}, torch {hf['torch']}, {hf['device']}\n")
    text = "\n".join(r for r in rows if r)
    print(text)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(joined, f, indent=1)


if __name__ == "__main__":
    main()
