//! The realistic GPU cases of issue 9: layouts real model code produces (`linear` with the Hugging Face
//! `(out, in)` weight, odd sizes, one-row decode, a decode MLP step, i64 embedding lookups, RoPE,
//! concat of KV-cache-sized tensors, a transposed operand, bf16 element-wise, a middle-axis sum).
//! `bench/gpu/torch_ref.py` times the same names and shapes with PyTorch.

use super::builders::{case, count, matmul, Bound, Case, Op, EPS, SEED_A, SEED_B, SEED_C};
use kiln::{DType, RopeLayout, Tensor};

/// Problem sizes of the realistic cases (`quick`: small enough for lavapipe).
struct Sizes {
    /// Rows, inputs and outputs of the prefill `linear` (Llama-7B MLP up-projection).
    m: usize,
    k: usize,
    n: usize,
    /// Side of the odd-sized square f32 matmul.
    odd: usize,
    /// Embedding vocabulary (Llama 3), width and number of ids.
    vocab: usize,
    width: usize,
    ids: usize,
    /// RoPE input (b, h, t, d).
    rope: [usize; 4],
    /// Each concat part (a, b, c), joined along axis 1.
    cat: [usize; 3],
    /// Side of the transposed add.
    side: usize,
    /// Elements of the bf16 add.
    n_bf16: usize,
    /// The middle-axis sum input.
    mid: [usize; 3],
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                m: 16,
                k: 256,
                n: 688,
                odd: 75,
                vocab: 1000,
                width: 256,
                ids: 64,
                rope: [1, 4, 128, 64],
                cat: [4, 256, 64],
                side: 512,
                n_bf16: 1 << 20,
                mid: [16, 64, 16],
            }
        } else {
            Sizes {
                m: 512,
                k: 4096,
                n: 11008,
                odd: 3000,
                vocab: 128256,
                width: 4096,
                ids: 512,
                rope: [1, 32, 2048, 128],
                cat: [32, 4096, 128],
                side: 8192,
                n_bf16: 64 << 20,
                mid: [256, 1024, 256],
            }
        }
    }
}

/// `x.linear(w)` with x `(m, k)` and the `(n, k)` weight of `nn.Linear`; bytes counted for decode rows.
fn linear(name: String, (m, k, n): (usize, usize, usize), dtype: DType) -> Case {
    let size = dtype.size_in_bytes() as f64;
    let bytes = (m <= 16).then(|| size * (m * k + n * k + m * n) as f64);
    let flops = 2.0 * (m * k * n) as f64;
    let bound = if m <= 16 { Bound::Memory } else { Bound::Compute };
    case(name, format!("{m}x{k} . ({n}x{k})^T"), dtype, bound, bytes, Some(flops), move |inp| {
        let x = inp.randn((m, k), dtype, SEED_A)?;
        let w = inp.randn((n, k), dtype, SEED_B)?.mul_scalar(0.02)?;
        Ok(Box::new(move || x.linear(&w, None)) as Op)
    })
}

/// `table.embedding(ids)` for `ids` random i64 ids into a `(vocab, width)` table.
fn embedding(name: String, (vocab, width, ids): (usize, usize, usize), dtype: DType) -> Case {
    let size = dtype.size_in_bytes() as f64;
    let bytes = 2.0 * size * (ids * width) as f64 + 8.0 * ids as f64;
    case(name, format!("{ids} ids into {vocab}x{width}"), dtype, Bound::Memory, Some(bytes), None, move |inp| {
        let table = inp.randn((vocab, width), dtype, SEED_A)?;
        // A fixed scatter of ids over the whole table (a multiplicative hash of the position).
        let v: Vec<i64> = (0..ids as u64).map(|i| ((i * 2_654_435_761) % vocab as u64) as i64).collect();
        let ids = Tensor::from_vec(v, ids, inp.device())?;
        Ok(Box::new(move || table.embedding(&ids)) as Op)
    })
}

/// Every realistic case, in display order.
pub fn all(quick: bool) -> Vec<Case> {
    let s = Sizes::new(quick);
    let (m, k, n) = (s.m, s.k, s.n);
    let mut v = vec![
        linear(format!("linear_f16_m{m}_n{n}"), (m, k, n), DType::F16),
        linear(format!("linear_f32_m{m}_n{n}"), (m, k, n), DType::F32),
        linear(format!("linear_bf16_m{m}_n{n}"), (m, k, n), DType::BF16),
        matmul(format!("matmul_f32_{}", s.odd), (s.odd, s.odd, s.odd), DType::F32, false),
        linear(format!("linear_f16_m1_n{n}"), (1, k, n), DType::F16),
        linear(format!("linear_bf16_m1_n{n}"), (1, k, n), DType::BF16),
    ];
    let mlp_bytes = 2.0 * (2 * n * k + 2 * k + 2 * n) as f64;
    v.push(case("decode_mlp_f16", format!("1x{k} -> {n} -> {k}"), DType::F16, Bound::Memory, Some(mlp_bytes), None, {
        move |inp| {
            let x = inp.randn((1, k), DType::F16, SEED_A)?;
            let g = inp.randn(k, DType::F16, SEED_B)?;
            let up = inp.randn((n, k), DType::F16, SEED_B)?.mul_scalar(0.02)?;
            let down = inp.randn((k, n), DType::F16, SEED_C)?.mul_scalar(0.02)?;
            Ok(Box::new(move || x.rms_norm(&g, EPS)?.linear(&up, None)?.silu()?.linear(&down, None)) as Op)
        }
    }));
    let emb = (s.vocab, s.width, s.ids);
    v.push(embedding(format!("embedding_bf16_{}", s.vocab), emb, DType::BF16));
    v.push(embedding(format!("embedding_f32_{}", s.vocab), emb, DType::F32));
    let [b, h, t, d] = s.rope;
    let rn = b * h * t * d;
    v.push(case(
        format!("rope_f16_t{t}"),
        format!("{b}x{h}x{t}x{d}"),
        DType::F16,
        Bound::Memory,
        Some(4.0 * rn as f64),
        None,
        {
            move |inp| {
                let x = inp.randn((b, h, t, d), DType::F16, SEED_A)?;
                Ok(Box::new(move || x.rope(0, 10000.0, RopeLayout::HalfSplit)) as Op)
            }
        },
    ));
    let [ca, cb, cc] = s.cat;
    let cn = ca * cb * cc;
    v.push(case(
        "concat_f16_axis1",
        format!("2 x {ca}x{cb}x{cc}"),
        DType::F16,
        Bound::Memory,
        Some(8.0 * cn as f64),
        None,
        {
            move |inp| {
                let x = inp.randn((ca, cb, cc), DType::F16, SEED_A)?;
                let y = inp.randn((ca, cb, cc), DType::F16, SEED_B)?;
                Ok(Box::new(move || Tensor::concat(&[&x, &y], 1)) as Op)
            }
        },
    ));
    let sd = s.side;
    v.push(case(
        format!("transpose_add_f32_{sd}"),
        format!("{sd}x{sd}"),
        DType::F32,
        Bound::Memory,
        Some(12.0 * (sd * sd) as f64),
        None,
        {
            move |inp| {
                let x = inp.randn((sd, sd), DType::F32, SEED_A)?;
                let y = inp.randn((sd, sd), DType::F32, SEED_B)?;
                Ok(Box::new(move || x.t()?.add(&y)) as Op)
            }
        },
    ));
    let nb = s.n_bf16;
    v.push(case("add_bf16", count(nb), DType::BF16, Bound::Memory, Some(6.0 * nb as f64), None, move |inp| {
        let x = inp.randn(nb, DType::BF16, SEED_A)?;
        let y = inp.randn(nb, DType::BF16, SEED_B)?;
        Ok(Box::new(move || x.add(&y)) as Op)
    }));
    let [p, q, r] = s.mid;
    v.push(case(
        "sum_mid_axis",
        format!("{p}x{q}x{r}"),
        DType::F32,
        Bound::Memory,
        Some(4.0 * (p * q * r + p * r) as f64),
        None,
        {
            move |inp| {
                let x = inp.randn((p, q, r), DType::F32, SEED_A)?;
                Ok(Box::new(move || x.sum(&[1], false)) as Op)
            }
        },
    ));
    v
}
