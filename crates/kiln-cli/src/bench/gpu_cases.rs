//! The GPU benchmark set: the shapes of the GPU performance targets (256M-element element-wise ops,
//! 16384x16384 reductions, rows of 4096 and 32768, square and LLM-shaped matmuls, causal GQA attention
//! and a decode step, the launch cost of a chain of small ops); `mod.rs` adds the realistic layouts of
//! issue 9 (`realistic_cases.rs`) after them. `bench/gpu/torch_ref.py` times the same
//! names and shapes with PyTorch.

use super::builders::{
    case, count, matmul, rows_case, sdpa_gqa, sdpa_gqa_in, sdpa_options_in, unary, Bound, Case, Op, EPS, F32, SEED_A,
    SEED_B, SEED_C,
};
use kiln::{DType, SdpaOptions, Tensor};

/// Problem sizes of one run of the GPU set.
struct Sizes {
    /// Elements of the flat element-wise inputs.
    n: usize,
    /// Columns of the broadcast element-wise cases (`n / cols` rows).
    cols: usize,
    /// Side of the square reduction input.
    side: usize,
    /// Row lengths of softmax and the norms, each over `rows_elems / len` rows.
    row_lens: [usize; 2],
    rows_elems: usize,
    /// Square matmul sizes (f32, then f16).
    square: [usize; 3],
    square_f16: [usize; 2],
    /// K and the two N of the LLM-shaped matmuls, and their M.
    llm_k: usize,
    llm_n: [usize; 2],
    llm_m: [usize; 3],
    /// Attention: heads (query, key/value) and sequence lengths per head dim.
    heads: (usize, usize),
    seqs: [(usize, usize); 3],
    /// Key/value length of the decode step.
    cache: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                n: 1 << 20,
                cols: 512,
                side: 512,
                row_lens: [512, 4096],
                rows_elems: 1 << 17,
                square: [64, 128, 256],
                square_f16: [128, 256],
                llm_k: 512,
                llm_n: [512, 1376],
                llm_m: [1, 16, 64],
                heads: (4, 2),
                seqs: [(64, 128), (128, 128), (128, 256)],
                cache: 512,
            }
        } else {
            Sizes {
                n: 256 << 20,
                cols: 4096,
                side: 16384,
                row_lens: [4096, 32768],
                rows_elems: 64 << 20,
                square: [1024, 4096, 8192],
                square_f16: [4096, 8192],
                llm_k: 4096,
                llm_n: [4096, 11008],
                llm_m: [1, 16, 64],
                heads: (32, 8),
                seqs: [(64, 2048), (128, 2048), (128, 8192)],
                cache: 8192,
            }
        }
    }
}

/// An element-wise binary op of two `shape_a` and `shape_b` f32 inputs (broadcast to `shape_a`).
fn binary(
    name: &str,
    shape_a: Vec<usize>,
    shape_b: Vec<usize>,
    f: fn(&Tensor, &Tensor) -> kiln::Result<Tensor>,
) -> Case {
    let (na, nb): (usize, usize) = (shape_a.iter().product(), shape_b.iter().product());
    let show = |s: &[usize]| if s.len() == 1 { count(s[0]) } else { format!("{}x{}", s[0], s[1]) };
    let shape = if shape_a == shape_b { show(&shape_a) } else { format!("{} . {}", show(&shape_a), show(&shape_b)) };
    let bytes = F32 * (2 * na + nb) as f64;
    case(name, shape, DType::F32, Bound::Memory, Some(bytes), None, move |inp| {
        let a = inp.randn(na, DType::F32, SEED_A)?.reshape(shape_a.clone())?;
        let b = inp.randn(nb, DType::F32, SEED_B)?.reshape(shape_b.clone())?;
        Ok(Box::new(move || f(&a, &b)) as Op)
    })
}

/// [`decode_in`] in bf16 with the keys and values read from memory: each call takes the next of
/// enough copies of them (`DRAM_BYTES`) that none is still in L2; the other decode rows re-read one
/// cache, which stays in a large GPU's L2.
fn decode_dram((hq, hkv): (usize, usize), len: usize, d: usize) -> Case {
    let dt = DType::BF16;
    let cache = dt.size_in_bytes() * 2 * hkv * len * d;
    let bytes = (cache + dt.size_in_bytes() * 2 * hq * d) as f64;
    let copies = super::quant_cases::DRAM_BYTES.div_ceil(cache);
    let shape = format!("1x{hq}/{hkv}x1x{d} kv {len}, {copies} copies");
    case(format!("sdpa_decode_bf16_d{d}_kv{len}_dram"), shape, dt, Bound::Memory, Some(bytes), None, move |inp| {
        let q = inp.randn((1, hq, 1, d), dt, SEED_A)?;
        let kvs = (0..copies as u64)
            .map(|i| Ok((inp.randn((1, hkv, len, d), dt, SEED_B + i)?, inp.randn((1, hkv, len, d), dt, SEED_C + i)?)))
            .collect::<kiln::Result<Vec<_>>>()?;
        Ok(super::quant_cases::cycling(kvs, move |(k, v)| q.sdpa_with(k, v, SdpaOptions::default())))
    })
}

/// A reduction of the square `side x side` input.
fn reduce(name: &str, side: usize, out: usize, f: fn(&Tensor) -> kiln::Result<Tensor>) -> Case {
    let bytes = F32 * (side * side + out) as f64;
    case(name, format!("{side}x{side}"), DType::F32, Bound::Memory, Some(bytes), None, move |inp| {
        let x = inp.randn((side, side), DType::F32, SEED_A)?;
        Ok(Box::new(move || f(&x)) as Op)
    })
}

/// One decode step: a single query token per head against a key/value cache of `len` tokens.
fn decode(b: usize, heads: (usize, usize), len: usize, d: usize) -> Case {
    decode_in(format!("sdpa_decode_d{d}_kv{len}"), DType::F32, b, heads, len, d)
}

/// [`decode`] in `dt` (an LLM's bf16 KV cache).
fn decode_in(name: String, dt: DType, b: usize, heads: (usize, usize), len: usize, d: usize) -> Case {
    decode_with(name, dt, b, heads, len, d, SdpaOptions::default())
}

/// [`decode_in`] with attention options (a soft cap; a window, whose keys alone count as bytes).
fn decode_with(
    name: String,
    dt: DType,
    b: usize,
    (hq, hkv): (usize, usize),
    len: usize,
    d: usize,
    opts: SdpaOptions,
) -> Case {
    let seen = opts.window.map_or(len, |w| w.min(len));
    let bytes = (dt.size_in_bytes() * (2 * b * hkv * seen * d + 2 * b * hq * d)) as f64;
    case(name, format!("{b}x{hq}/{hkv}x1x{d} kv {len}"), dt, Bound::Memory, Some(bytes), None, move |inp| {
        let q = inp.randn((b, hq, 1, d), dt, SEED_A)?;
        let k = inp.randn((b, hkv, len, d), dt, SEED_B)?;
        let v = inp.randn((b, hkv, len, d), dt, SEED_C)?;
        Ok(Box::new(move || q.sdpa_with(&k, &v, opts)) as Op)
    })
}

/// `ops` dependent adds of 1024 elements, timed as `bound` says: the GPU time (`gpu_chain_N`: over
/// `ops`, what each small kernel of a decode step costs at least, launch and barrier included; with
/// more than one, bound by the host's recording) or the host's cost of issuing them, without waiting
/// for the GPU (`launch_chain_N`).
fn add_chain(name: &str, ops: usize, bound: Bound) -> Case {
    case(format!("{name}_{ops}"), "1024".into(), DType::F32, bound, None, None, move |inp| {
        let x = inp.randn(1024, DType::F32, SEED_A)?;
        Ok(Box::new(move || {
            let mut y = x.clone();
            for _ in 0..ops {
                y = y.add(&x)?;
            }
            Ok(y)
        }) as Op)
    })
}

/// Every GPU case, in display order.
pub fn all(quick: bool) -> Vec<Case> {
    let s = Sizes::new(quick);
    let (n, c) = (s.n, s.cols);
    let mut v = vec![
        binary("add", vec![n], vec![n], |a, b| a.add(b)),
        binary("mul", vec![n], vec![n], |a, b| a.mul(b)),
        binary("add_bcast_row", vec![n / c, c], vec![c], |a, b| a.add(b)),
        binary("mul_bcast_col", vec![n / c, c], vec![n / c, 1], |a, b| a.mul(b)),
        unary("exp", n, 2.0 * F32, |x| x.exp()),
        unary("silu", n, 2.0 * F32, |x| x.silu()),
        unary("gelu", n, 2.0 * F32, |x| x.gelu()),
        unary("gelu_erf", n, 2.0 * F32, |x| x.gelu_erf()),
        unary("cast_f32_f16", n, F32 + 2.0, |x| x.to_dtype(DType::F16)),
        case("cast_f16_f32", count(n), DType::F16, Bound::Memory, Some((2.0 + F32) * n as f64), None, move |inp| {
            let x = inp.randn(n, DType::F16, SEED_A)?;
            Ok(Box::new(move || x.to_dtype(DType::F32)) as Op)
        }),
    ];
    let side = s.side;
    v.push(reduce("sum_all", side, 1, |x| x.sum_all()));
    v.push(reduce("max_all", side, 1, |x| x.max_all()));
    v.push(reduce("sum_last_axis", side, side, |x| x.sum(&[-1], false)));
    v.push(reduce("max_last_axis", side, side, |x| x.max(&[-1], false)));
    v.push(reduce("sum_first_axis", side, side, |x| x.sum(&[0], false)));
    v.push(reduce("max_first_axis", side, side, |x| x.max(&[0], false)));
    for len in s.row_lens {
        let rows = s.rows_elems / len;
        let (rc, c) = ((rows * len) as f64, len as f64);
        v.push(rows_case(&format!("softmax_{len}"), (rows, len), 2.0 * F32 * rc, |x, _, _| x.softmax(-1)));
        v.push(rows_case(&format!("rms_norm_{len}"), (rows, len), F32 * (2.0 * rc + c), |x, w, _| x.rms_norm(w, EPS)));
        v.push(rows_case(&format!("layer_norm_{len}"), (rows, len), F32 * (2.0 * rc + 2.0 * c), |x, w, b| {
            x.layer_norm(w, Some(b), EPS)
        }));
    }
    for sq in s.square {
        v.push(matmul(format!("matmul_f32_{sq}"), (sq, sq, sq), DType::F32, false));
    }
    for nn in s.llm_n {
        for m in s.llm_m {
            v.push(matmul(format!("matmul_f32_m{m}_n{nn}"), (m, s.llm_k, nn), DType::F32, true));
        }
    }
    for sq in s.square_f16 {
        v.push(matmul(format!("matmul_f16_{sq}"), (sq, sq, sq), DType::F16, false));
    }
    for sq in s.square_f16 {
        v.push(matmul(format!("matmul_bf16_{sq}"), (sq, sq, sq), DType::BF16, false));
    }
    for (d, t) in s.seqs {
        v.push(sdpa_gqa(format!("sdpa_causal_d{d}_t{t}"), 1, s.heads, t, d));
        for dt in [DType::F16, DType::BF16] {
            v.push(sdpa_gqa_in(format!("sdpa_causal_{dt}_d{d}_t{t}"), dt, 1, s.heads, t, d));
        }
    }
    // Gemma 2's options on the longest prefill: a soft cap of 50, a window of half the tokens (the
    // kernels skip the tiles before each block's window), and both.
    let (d, t) = s.seqs[2];
    for (what, cap, w) in
        [("capped", Some(50.0), None), ("window", None, Some(t / 2)), ("capped_window", Some(50.0), Some(t / 2))]
    {
        v.push(sdpa_options_in(format!("sdpa_{what}_f16_d{d}_t{t}"), DType::F16, s.heads, t, d, cap, w));
    }
    v.push(decode(1, s.heads, s.cache, 128));
    // An 8B-shaped decode step's attention in bf16, short context to long (issue 35's targets: 512,
    // 4096 and 32768 keys in the full set).
    for len in [s.cache / 16, s.cache / 2, s.cache * 4] {
        v.push(decode_in(format!("sdpa_decode_bf16_d128_kv{len}"), DType::BF16, 1, s.heads, len, 128));
    }
    // The 512-key step with its keys and values read from memory, as in a model's decode step.
    if !quick {
        v.push(decode_dram(s.heads, s.cache / 16, 128));
    }
    // The same steps at the longest context with a soft cap, and with a window of an eighth of it.
    let (len, capped) = (s.cache * 4, SdpaOptions { causal: true, softcap: Some(50.0), ..SdpaOptions::default() });
    v.push(decode_with(format!("sdpa_decode_capped_bf16_d128_kv{len}"), DType::BF16, 1, s.heads, len, 128, capped));
    let windowed = SdpaOptions { window: Some(len / 8), ..capped };
    v.push(decode_with(format!("sdpa_decode_window_bf16_d128_kv{len}"), DType::BF16, 1, s.heads, len, 128, windowed));
    v.push(add_chain("gpu_chain", 1, Bound::Compute));
    v.push(add_chain("gpu_chain", 100, Bound::Compute));
    v.push(add_chain("launch_chain", 1000, Bound::Launch { ops: 1000 }));
    v
}
