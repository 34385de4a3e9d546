#!/usr/bin/env python3
"""The copy bandwidth of the GPU PyTorch sees (1 GiB copy_, 20 times after 3 warm-ups, CUDA events):
the roof that the device scripts (decode_call.sh, attn_decode_call.sh) put beside kiln's GB/s."""
import torch

x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
y = torch.empty_like(x)
for _ in range(3):
    y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda.synchronize()
s.record()
for _ in range(20):
    y.copy_(x)
e.record()
torch.cuda.synchronize()
print(f"copy bandwidth (torch copy_, 1 GiB): {2 * 20 * (1 << 30) / (s.elapsed_time(e) / 1e3) / 1e9:.0f} GB/s")
