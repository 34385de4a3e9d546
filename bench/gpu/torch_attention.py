#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the cases of examples/coop_attention.rs (issue 34's three
shapes first): the same shapes, dtypes and FLOP count, timed as torch_ref.py times every op (its
`measure`: CUDA events, the median of 50 runs after warm-up and a second of back-to-back runs).
Prints one line per case, in the example's naming.

Usage: python3 bench/gpu/torch_attention.py
"""

import torch
import torch.nn.functional as F

from torch_ref import measure

CASES = [
    (1, 32, 8, 2048, 128, True),
    (1, 32, 8, 8192, 128, True),
    (8, 16, 16, 512, 64, False),
    (1, 32, 8, 2048, 64, True),
    (1, 32, 8, 2048, 128, False),
    (1, 32, 32, 1024, 128, True),
]


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for dtype, name in [(torch.float16, "f16"), (torch.bfloat16, "bf16")]:
        for b, hq, hkv, t, d, causal in CASES:
            g = torch.Generator(device="cuda").manual_seed(1)
            q = torch.randn(b, hq, t, d, device="cuda", dtype=dtype, generator=g)
            k = torch.randn(b, hkv, t, d, device="cuda", dtype=dtype, generator=g)
            v = torch.randn(b, hkv, t, d, device="cuda", dtype=dtype, generator=g)
            us = 1e6 * measure(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv))
            pairs = t * (t + 1) // 2 if causal else t * t
            flops = 4 * b * hq * d * pairs
            label = f"{name} {b}x{hq}/{hkv}x{t}x{d}{' causal' if causal else ''}"
            print(f"{label:<28} torch    {us:>9.1f} us {flops / us / 1e6:>7.1f} TFLOPS")


if __name__ == "__main__":
    main()
