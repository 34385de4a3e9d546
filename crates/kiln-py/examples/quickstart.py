"""kiln from Python, notebook style: runs on the GPU when there is one and on the CPU.

    python crates/kiln-py/examples/quickstart.py [cpu|gpu]
"""

import sys

import numpy as np

import kiln

device = kiln.Device(sys.argv[1] if len(sys.argv) > 1 else "auto")
print("device:", device)

# Tensors from NumPy and back.
x = kiln.asarray(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4), device=device)
print(x)
print("row sums:", np.asarray(x.sum(axis=1)))

# Operators, indexing and views.
y = (x * 2 - 1) ** 2 / 4
print("y[1:, ::2] =", y[1:, ::2].tolist())
print("positive entries:", x[x > 0].tolist())

# A tiny attention block: linear, RMS norm, RoPE, causal attention, SwiGLU.
b, h, t, d = 1, 2, 5, 8
hidden = kiln.randn((b, t, h * d), seed=1, device=device)
w_qkv = kiln.randn((3 * h * d, h * d), std=0.1, seed=2, device=device)
norm_w = kiln.ones(h * d, device=device)
qkv = hidden.rms_norm(norm_w).linear(w_qkv).reshape(b, t, 3, h, d).permute(2, 0, 3, 1, 4)
q, k, v = qkv[0].rope(), qkv[1].rope(), qkv[2]
attn = q.sdpa(k, v, causal=True)  # (b, h, t, d)
gate = kiln.randn((b, t, 16), seed=3, device=device)
up = kiln.randn((b, t, 16), seed=4, device=device)
mlp = gate.silu_mul(up)
print("attention:", attn.shape, "mlp:", mlp.shape)

# Check against NumPy.
a = np.asarray(attn)
qn, kn, vn = (np.asarray(z).astype(np.float64) for z in (q, k, v))
s = qn @ kn.transpose(0, 1, 3, 2) / np.sqrt(d)
s = np.where(np.triu(np.ones((t, t), bool), 1), -np.inf, s)
p = np.exp(s - s.max(-1, keepdims=True))
ref = (p / p.sum(-1, keepdims=True)) @ vn
err = float(np.abs(a - ref).max())
print(f"max |kiln - numpy| = {err:.2e}")
assert err < 1e-4

# The device API: a custom WGSL kernel (GPU only).
backend = kiln.Backend(device=device.name)
if device.is_gpu:
    added = backend.vector_add(np.arange(8, dtype=np.float32), np.ones(8, dtype=np.float32))
    print("vector_add:", backend.copy_to_host(added))
    print("memory:", backend.get_memory_info())
print("ok")
