#!/usr/bin/env python3
"""PyTorch (CUDA) reference timings for the GPU set of `kiln bench --device gpu`
(crates/kiln-cli/src/bench/gpu_cases.rs): same row names, shapes and byte/FLOP counts.

Inputs are random on the GPU; each op allocates its output like kiln does. After warm-up (a few runs,
then the op queued back to back for a second, as kiln's side does), the median of many runs, each timed with CUDA events. TF32 is off, so f32 matmul is true SGEMM. Also measures the
limits of the same run: the device copy bandwidth (`clone` of 1 GiB) and cuBLAS SGEMM at 4096 (the
`matmul_f32_4096` row). The `launch_chain_1000` row is host time: 1000 dependent small adds issued
without waiting for the GPU, as kiln measures it; `gpu_chain_100` is the GPU time of 100 such adds (over
100: what one small dependent kernel costs on the GPU). Prints JSON.

Usage: python3 torch_ref.py [--quick] [--filter SUBSTR]
"""

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

F32 = 4
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def count(n):
    return f"{n >> 20}M" if n >= 1 << 20 and n % (1 << 20) == 0 else str(n)


def sizes(quick):
    """Must match `Sizes` in gpu_cases.rs."""
    if quick:
        return dict(n=1 << 20, cols=512, side=512, row_lens=[512, 4096], rows_elems=1 << 17, square=[64, 128, 256],
                    square_f16=[128, 256], llm_k=512, llm_n=[512, 1376], llm_m=[1, 16, 64], heads=(4, 2),
                    seqs=[(64, 128), (128, 128), (128, 256)], cache=512)
    return dict(n=256 << 20, cols=4096, side=16384, row_lens=[4096, 32768], rows_elems=64 << 20,
                square=[1024, 4096, 8192], square_f16=[4096, 8192], llm_k=4096, llm_n=[4096, 11008],
                llm_m=[1, 16, 64], heads=(32, 8), seqs=[(64, 2048), (128, 2048), (128, 8192)], cache=8192)


class Inputs:
    """Random tensors made once per (shape, dtype, seed), like the kiln bench's input cache."""

    def __init__(self):
        self.cache = {}

    def randn(self, shape, seed, dtype=torch.float32):
        key = (tuple(shape), dtype, seed)
        if key not in self.cache:
            g = torch.Generator(device="cuda").manual_seed(seed)
            self.cache[key] = torch.randn(*shape, device="cuda", generator=g, dtype=dtype)
        return self.cache[key]


def realistic_sizes(quick):
    """Must match `Sizes` in realistic_cases.rs."""
    if quick:
        return dict(m=16, k=256, n=688, odd=75, vocab=1000, width=256, ids=64, rope=(1, 4, 128, 64),
                    cat=(4, 256, 64), side=512, n_bf16=1 << 20, mid=(16, 64, 16))
    return dict(m=512, k=4096, n=11008, odd=3000, vocab=128256, width=4096, ids=512, rope=(1, 32, 2048, 128),
                cat=(32, 4096, 128), side=8192, n_bf16=64 << 20, mid=(256, 1024, 256))


def realistic(add, quick):
    """The realistic cases of issue 9 (crates/kiln-cli/src/bench/realistic_cases.rs), same names and shapes."""
    s = realistic_sizes(quick)
    m, k, n = s["m"], s["k"], s["n"]
    names = {torch.float16: "f16", torch.float32: "f32", torch.bfloat16: "bf16"}

    def linear(rows, dtype):
        size = torch.tensor([], dtype=dtype).element_size()
        nbytes = size * (rows * k + n * k + rows * n) if rows <= 16 else None
        add(f"linear_{names[dtype]}_m{rows}_n{n}", f"{rows}x{k} . ({n}x{k})^T", nbytes, 2 * rows * k * n,
            lambda I: (lambda x=I.randn([rows, k], 1, dtype), w=I.randn([n, k], 2, dtype) * 0.02: F.linear(x, w)))

    linear(m, torch.float16)
    linear(m, torch.float32)
    linear(m, torch.bfloat16)
    o = s["odd"]
    add(f"matmul_f32_{o}", f"{o}x{o} @ {o}x{o}", None, 2 * o ** 3,
        lambda I: (lambda a=I.randn([o, o], 1), b=I.randn([o, o], 2): a @ b))
    linear(1, torch.float16)
    linear(1, torch.bfloat16)

    def mlp(I):
        h = torch.float16
        x, g = I.randn([1, k], 1, h), I.randn([k], 2, h)
        up, down = I.randn([n, k], 2, h) * 0.02, I.randn([k, n], 3, h) * 0.02
        return lambda: F.linear(F.silu(F.linear(F.rms_norm(x, (k,), g, 1e-5), up)), down)

    add("decode_mlp_f16", f"1x{k} -> {n} -> {k}", 2 * (2 * n * k + 2 * k + 2 * n), None, mlp)
    vocab, width, nid = s["vocab"], s["width"], s["ids"]

    def embedding(dtype):
        size = torch.tensor([], dtype=dtype).element_size()
        ids = torch.tensor([(i * 2654435761) % vocab for i in range(nid)], dtype=torch.int64, device="cuda")
        add(f"embedding_{names[dtype]}_{vocab}", f"{nid} ids into {vocab}x{width}", 2 * size * nid * width + 8 * nid,
            None, lambda I: (lambda t=I.randn([vocab, width], 1, dtype): F.embedding(ids, t)))

    embedding(torch.bfloat16)
    embedding(torch.float32)
    b, h, t, d = s["rope"]

    def rope(I):
        # Hugging Face Llama: (t, d) cos/sin tables made once (cached), x * cos + rotate_half(x) * sin.
        x = I.randn([b, h, t, d], 1, torch.float16)
        inv = 10000.0 ** (-torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d)
        f = torch.outer(torch.arange(t, device="cuda", dtype=torch.float32), inv)
        e = torch.cat([f, f], -1)
        cos, sin = e.cos().half(), e.sin().half()

        def op():
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            return x * cos + torch.cat([-x2, x1], -1) * sin

        return op

    add(f"rope_f16_t{t}", f"{b}x{h}x{t}x{d}", 4 * b * h * t * d, None, rope)
    ca, cb, cc = s["cat"]
    add("concat_f16_axis1", f"2 x {ca}x{cb}x{cc}", 8 * ca * cb * cc, None,
        lambda I: (lambda x=I.randn([ca, cb, cc], 1, torch.float16), y=I.randn([ca, cb, cc], 2, torch.float16):
                   torch.cat([x, y], 1)))
    sd = s["side"]
    add(f"transpose_add_f32_{sd}", f"{sd}x{sd}", 12 * sd * sd, None,
        lambda I: (lambda x=I.randn([sd, sd], 1), y=I.randn([sd, sd], 2): x.t() + y))
    nb = s["n_bf16"]
    add("add_bf16", count(nb), 6 * nb, None,
        lambda I: (lambda x=I.randn([nb], 1, torch.bfloat16), y=I.randn([nb], 2, torch.bfloat16): x + y))
    p, q, r = s["mid"]
    add("sum_mid_axis", f"{p}x{q}x{r}", 4 * (p * q * r + p * r), None,
        lambda I: (lambda x=I.randn([p, q, r], 1): x.sum(1)))


def cases(quick):
    """(name, shape, bytes, flops, build) where build(inputs) returns the op to time."""
    s = sizes(quick)
    n, c, side = s["n"], s["cols"], s["side"]
    out = []

    def add(name, shape, nbytes, flops, build):
        out.append((name, shape, nbytes, flops, build))

    def binary(name, sa, sb, f):
        na, nb = sa[0] * (sa[1] if len(sa) > 1 else 1), sb[0] * (sb[1] if len(sb) > 1 else 1)
        show = lambda sh: count(sh[0]) if len(sh) == 1 else f"{sh[0]}x{sh[1]}"
        shape = show(sa) if sa == sb else f"{show(sa)} . {show(sb)}"
        add(name, shape, F32 * (2 * na + nb), None,
            lambda I: (lambda a=I.randn([na], 1).view(*sa), b=I.randn([nb], 2).view(*sb): f(a, b)))

    def unary(name, f, dtype=torch.float32, nbytes=2 * F32):
        add(name, count(n), nbytes * n, None, lambda I: (lambda x=I.randn([n], 1, dtype): f(x)))

    binary("add", [n], [n], torch.add)
    binary("mul", [n], [n], torch.mul)
    binary("add_bcast_row", [n // c, c], [c], torch.add)
    binary("mul_bcast_col", [n // c, c], [n // c, 1], torch.mul)
    unary("exp", torch.exp)
    unary("silu", F.silu)
    unary("gelu", lambda x: F.gelu(x, approximate="tanh"))
    unary("gelu_erf", F.gelu)
    unary("cast_f32_f16", lambda x: x.half(), nbytes=F32 + 2)
    unary("cast_f16_f32", lambda x: x.float(), dtype=torch.float16, nbytes=F32 + 2)

    def reduce(name, nout, f):
        add(name, f"{side}x{side}", F32 * (side * side + nout), None, lambda I: (lambda x=I.randn([side, side], 1): f(x)))

    reduce("sum_all", 1, torch.sum)
    reduce("max_all", 1, torch.max)
    reduce("sum_last_axis", side, lambda x: x.sum(-1))
    reduce("max_last_axis", side, lambda x: x.amax(-1))
    reduce("sum_first_axis", side, lambda x: x.sum(0))
    reduce("max_first_axis", side, lambda x: x.amax(0))
    for ln in s["row_lens"]:
        r = s["rows_elems"] // ln
        rc = r * ln
        shape = f"{r}x{ln}"
        rows = lambda I, r=r, ln=ln: (I.randn([r, ln], 1), I.randn([ln], 2), I.randn([ln], 3))
        add(f"softmax_{ln}", shape, 2 * F32 * rc, None, lambda I, rows=rows: (lambda x=rows(I)[0]: torch.softmax(x, -1)))
        add(f"rms_norm_{ln}", shape, F32 * (2 * rc + ln), None,
            lambda I, rows=rows, ln=ln: (lambda t=rows(I): F.rms_norm(t[0], (ln,), t[1], 1e-5)))
        add(f"layer_norm_{ln}", shape, F32 * (2 * rc + 2 * ln), None,
            lambda I, rows=rows, ln=ln: (lambda t=rows(I): F.layer_norm(t[0], (ln,), t[1], t[2], 1e-5)))

    def matmul(name, m, k, nn, dtype, count_bytes):
        size = 2 if dtype == torch.float16 else F32
        nbytes = size * (m * k + k * nn + m * nn) if count_bytes else None
        add(name, f"{m}x{k} @ {k}x{nn}", nbytes, 2 * m * k * nn,
            lambda I: (lambda a=I.randn([m, k], 1, dtype), b=I.randn([k, nn], 2, dtype): a @ b))

    for sq in s["square"]:
        matmul(f"matmul_f32_{sq}", sq, sq, sq, torch.float32, False)
    for nn in s["llm_n"]:
        for m in s["llm_m"]:
            matmul(f"matmul_f32_m{m}_n{nn}", m, s["llm_k"], nn, torch.float32, True)
    for sq in s["square_f16"]:
        matmul(f"matmul_f16_{sq}", sq, sq, sq, torch.float16, False)
    hq, hkv = s["heads"]
    for d, t in s["seqs"]:
        flops = 4 * hq * d * (t * (t + 1) // 2)
        add(f"sdpa_causal_d{d}_t{t}", f"1x{hq}/{hkv}x{t}x{d}", None, flops,
            lambda I, d=d, t=t: (lambda q=I.randn([1, hq, t, d], 1), k=I.randn([1, hkv, t, d], 2),
                                 v=I.randn([1, hkv, t, d], 3): F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                                              enable_gqa=True)))
    L = s["cache"]
    add(f"sdpa_decode_d128_kv{L}", f"1x{hq}/{hkv}x1x128 kv {L}", F32 * (2 * hkv * L * 128 + 2 * hq * 128), None,
        lambda I: (lambda q=I.randn([1, hq, 1, 128], 1), k=I.randn([1, hkv, L, 128], 2), v=I.randn([1, hkv, L, 128], 3):
                   F.scaled_dot_product_attention(q, k, v, enable_gqa=True)))
    for n in (L // 16, L // 2, L * 4):  # as gpu_cases.rs
        add(f"sdpa_decode_bf16_d128_kv{n}", f"1x{hq}/{hkv}x1x128 kv {n}", 2 * (2 * hkv * n * 128 + 2 * hq * 128), None,
            lambda I, n=n: (lambda q=I.randn([1, hq, 1, 128], 1, torch.bfloat16),
                            k=I.randn([1, hkv, n, 128], 2, torch.bfloat16),
                            v=I.randn([1, hkv, n, 128], 3, torch.bfloat16):
                            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)))
    add("gpu_chain_100", "1024", None, None, lambda I: (lambda x=I.randn([1024], 1): chain(x, 100)))
    realistic(add, quick)
    return out


def chain(x, ops):
    """`ops` dependent adds of a small tensor: GPU time over ops is one small dependent kernel's cost."""
    y = x
    for _ in range(ops):
        y = y + x
    return y


def measure(op, runs=50):
    for _ in range(5):
        op()
    # Kept busy for a second before timing, as `kiln bench --device gpu` does (GPU clocks ramp up).
    busy = time.perf_counter() + 1.0
    k = 0
    while time.perf_counter() < busy:
        op()
        k += 1
        if k % 16 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    times = []
    deadline = time.perf_counter() + 2.0
    while len(times) < runs and (len(times) < 10 or time.perf_counter() < deadline):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        op()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e-3)
    return statistics.median(times)


def launch_chain(ops=1000, runs=20):
    """Host seconds to issue `ops` dependent adds on a 1024-element tensor (the GPU wait not counted)."""
    x = torch.randn(1024, device="cuda")
    times = []
    for i in range(runs + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y = x
        for _ in range(ops):
            y = y + x
        dt = time.perf_counter() - t0
        torch.cuda.synchronize()
        if i >= 3:
            times.append(dt)
    return statistics.median(times)


def copy_bandwidth(nbytes=1 << 30):
    x = torch.empty(nbytes // 4, device="cuda").uniform_()
    t = min(measure(lambda: x.clone(), runs=20) for _ in range(2))
    return 2 * nbytes / t / 1e9


def main():
    quick = "--quick" in sys.argv
    filt = sys.argv[sys.argv.index("--filter") + 1] if "--filter" in sys.argv else None
    rows = []
    inputs = Inputs()
    for name, shape, nbytes, flops, build in cases(quick):
        if filt and filt not in name:
            continue
        try:
            t = measure(build(inputs))
        except Exception as e:  # an op this torch lacks: report it, keep going
            rows.append({"name": name, "shape": shape, "status": "error", "error": str(e)})
            continue
        row = {"name": name, "shape": shape, "median_s": t, "status": "ok"}
        if nbytes:
            row["gbps"] = nbytes / t / 1e9
        if flops:
            row["gflops"] = flops / t / 1e9
        rows.append(row)
    t = launch_chain()
    rows.append({"name": "launch_chain_1000", "shape": "1024", "median_s": t, "ops": 1000, "status": "ok"})
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_gbps": copy_bandwidth(),
           "rows": rows}
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
