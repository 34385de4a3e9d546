#!/usr/bin/env python3
"""PyTorch's best path for Gemma 2's attention options beside kiln's bench rows
`sdpa_capped_window_f16_d128_t8192` and `sdpa_decode_{capped,window}_bf16_d128_kv32768`:
FlexAttention (`torch.nn.attention.flex_attention`, compiled) with the soft cap as a score_mod and
the sliding window as a block mask, causal GQA 32/8 heads, d 128; and plain causal SDPA (flash) on
the same shape, without the options, for scale. Timed as torch_ref.py times every op.

Usage: python3 bench/gpu/torch_flex_window.py
"""

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from torch_ref import measure

CAP = 50.0


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    flex = torch.compile(flex_attention, dynamic=False)
    for dtype, name, t, w in [(torch.float16, "f16", 8192, 4096)]:
        g = torch.Generator(device="cuda").manual_seed(1)
        q = torch.randn(1, 32, t, 128, device="cuda", dtype=dtype, generator=g)
        k = torch.randn(1, 8, t, 128, device="cuda", dtype=dtype, generator=g)
        v = torch.randn(1, 8, t, 128, device="cuda", dtype=dtype, generator=g)

        def cap(score, b, h, qi, ki):
            return CAP * torch.tanh(score / CAP)

        def window(b, h, qi, ki):
            return (qi >= ki) & (qi - ki < w)

        mask = create_block_mask(window, None, None, t, t, device="cuda")
        seen = sum(min(i + 1, w) for i in range(t))
        flops = 4.0 * 32 * 128 * seen
        us = measure(lambda: flex(q, k, v, score_mod=cap, block_mask=mask, enable_gqa=True)) * 1e6
        print(f"flex_capped_window_{name}_d128_t{t} w {w}: {us:.1f} us {flops / us / 1e6:.1f} TFLOPS")
        causal = 4.0 * 32 * 128 * t * (t + 1) / 2
        us = measure(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)) * 1e6
        print(f"sdpa_causal_{name}_d128_t{t}: {us:.1f} us {causal / us / 1e6:.1f} TFLOPS")
    # Decode: one query over 32768 keys, bf16, with the cap; and over the last 4096 (the window) by
    # plain SDPA on a view, which is what a windowed decode reads.
    n = 32768
    g = torch.Generator(device="cuda").manual_seed(2)
    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, 8, n, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(1, 8, n, 128, device="cuda", dtype=torch.bfloat16, generator=g)

    def cap(score, b, h, qi, ki):
        return CAP * torch.tanh(score / CAP)

    us = measure(lambda: flex(q, k, v, score_mod=cap, enable_gqa=True)) * 1e6
    print(f"flex_decode_capped_bf16_d128_kv{n}: {us:.1f} us")
    us = measure(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)) * 1e6
    print(f"sdpa_decode_bf16_d128_kv{n}: {us:.1f} us")
    kw, vw = k[:, :, n - n // 8 :], v[:, :, n - n // 8 :]
    us = measure(lambda: F.scaled_dot_product_attention(q, kw, vw, enable_gqa=True)) * 1e6
    print(f"sdpa_decode_window_bf16_d128_kv{n} (last {n // 8} keys): {us:.1f} us")


if __name__ == "__main__":
    main()
