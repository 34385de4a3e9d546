# PyTorch f16/bf16 GEMM and SDPA timings on the shapes of coop_sweep (CUDA events, median of 30 after 0.3 s busy).
import torch, statistics, time
import torch.nn.functional as F
def t(f):
    for _ in range(3): f()
    torch.cuda.synchronize(); s = time.time()
    while time.time() - s < 0.3: f()
    ts = []
    for _ in range(30):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)
for dt in (torch.float16, torch.bfloat16):
    for name, bt, m, k, n, w in [("sq4096",1,4096,4096,4096,0),("sq8192",1,8192,8192,8192,0),("lin512x11008",1,512,4096,11008,1),
                                 ("lin2048x4096",1,2048,4096,4096,1),("lin2048x14336",1,2048,4096,14336,1),("lin512x14336",1,512,4096,14336,1),("bmm32x2048x128",32,2048,128,2048,0),
                                 ("lin32x14336",1,32,4096,14336,1),("lin64x14336",1,64,4096,14336,1),
                                 ("lin16x14336",1,16,4096,14336,1),("lin96x14336",1,96,4096,14336,1),("lin96x4096",1,96,4096,4096,1),
                                 ("lin32x6144",1,32,4096,6144,1),("down32x4096",1,32,14336,4096,1)]:
        sh = (lambda r, c: (bt, r, c) if bt > 1 else (r, c))
        a = torch.randn(*sh(m, k), device="cuda", dtype=dt)
        if w:
            W = torch.randn(n, k, device="cuda", dtype=dt); f = lambda: F.linear(a, W)
        else:
            B = torch.randn(*sh(k, n), device="cuda", dtype=dt); f = lambda: a @ B
        us = t(f); print(f"torch {str(dt)[6:]:<9} {name:<16} {us:9.1f} us {2*bt*m*k*n/us/1e6:7.1f} TFLOPS", flush=True)
for dt in (torch.float16, torch.bfloat16):
    for d in (64, 128):
        q = torch.randn(1, 32, 2048, d, device="cuda", dtype=dt); kk = torch.randn(1, 8, 2048, d, device="cuda", dtype=dt); v = torch.randn_like(kk)
        us = t(lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=True))
        print(f"torch {str(dt)[6:]:<9} sdpa_causal_gqa_d{d}_t2048 {us:9.1f} us", flush=True)
