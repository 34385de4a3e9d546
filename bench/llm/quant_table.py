#!/usr/bin/env python3
"""The decode table of run_quant.sh: kiln's tokens/s per weight format against the ceiling of the
bytes a decode step must read (weights as stored, quantized or bf16, plus the KV cache at that
context) over the copy bandwidth, and where the step's time goes (dispatches, GPU time per token).

Usage: quant_table.py OUT_DIR SHAPE   (reads kiln_SHAPE_<format>.json and bandwidth.json)
"""

import json
import os
import sys


def main():
    out, shape = sys.argv[1], sys.argv[2]
    bw = json.load(open(os.path.join(out, "bandwidth.json")))
    runs = {}
    for name in ("none", "q8_0", "q4_k", "q4_0", "q6_k"):
        try:
            runs[name] = json.load(open(os.path.join(out, f"kiln_{shape}_{name}.json")))
        except (OSError, ValueError):
            pass
    rate = bw["copy_bandwidth_bytes_per_sec"]
    label = lambda n: "bf16" if n == "none" else n.upper()
    rows = [f"| {shape} shape | " + " | ".join(label(n) for n in runs) + " |", "|---|" + "---|" * len(runs)]
    rows.append("| weights GiB | " + " | ".join(f"{r['weight_bytes'] / 2**30:.2f}" for r in runs.values()) + " |")
    contexts = [d["context"] for d in next(iter(runs.values()))["decode"]] if runs else []
    for i, ctx in enumerate(contexts):
        cells = []
        for r in runs.values():
            d = r["decode"][i]
            ceiling = rate / (r["weight_bytes"] + r["kv_bytes_per_position"] * ctx)
            cells.append(f"{d['tokens_per_sec']:.1f} ({100 * d['tokens_per_sec'] / ceiling:.0f}% of {ceiling:.0f})")
        rows.append(f"| decode @ {ctx}, tok/s (% of ceiling) | " + " | ".join(cells) + " |")
    rows.append("| prefill tok/s | " + " | ".join(f"{r['prefill']['tokens_per_sec']:.0f}" for r in runs.values()) + " |")
    prof = [r.get("decode_profile") or {} for r in runs.values()]
    rows.append("| dispatches per token | " + " | ".join(f"{p.get('dispatches_per_token', 0):.0f}" for p in prof) + " |")
    rows.append("| GPU busy per token, ms (profiled) | " + " | ".join(f"{p.get('gpu_us_per_token', 0) / 1e3:.2f}" for p in prof) + " |")
    rows.append("| peak GPU GiB | " + " | ".join(f"{(r['peak_gpu_bytes'] or 0) / 2**30:.1f}" for r in runs.values()) + " |")
    text = "\n".join(rows) + f"\n\ncopy bandwidth (torch clone): {rate / 1e9:.0f} GB/s on {bw['device']}\n"
    for n, p in zip(runs, prof):
        if p:
            top = ", ".join(f"{k['kernel']} {k['us_per_token']:.0f} us ({k['per_token']:.0f}x)" for k in p["kernels"][:8])
            text += f"\n{label(n)} decode at context {p['context']}: {top}\n"
    print(text)
    with open(os.path.join(out, f"quant_table_{shape}.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
