//! The benchmark set: element-wise, cast, reductions, normalisations, matmul and attention, at full
//! size (32M elements, 4096x4096 rows, 1024/2048 matmuls, LLM shapes) or small `--quick` sizes.

use super::{Bound, Case, Inputs, Op};
use kiln::{DType, Tensor};

/// Problem sizes of one run of the set.
struct Sizes {
    /// Elements of the flat element-wise inputs.
    n: usize,
    /// Rows and columns of the row-wise inputs (reductions, softmax, norms).
    rows: usize,
    cols: usize,
    /// Square matmul sizes (f32).
    square: [usize; 2],
    /// Square f16 matmul size.
    square_f16: usize,
    /// K = N of the LLM-shaped matmuls.
    llm: usize,
    /// Sequence length of the attention case.
    seq: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes { n: 1 << 20, rows: 512, cols: 512, square: [128, 256], square_f16: 128, llm: 512, seq: 128 }
        } else {
            Sizes { n: 32 << 20, rows: 4096, cols: 4096, square: [1024, 2048], square_f16: 1024, llm: 4096, seq: 1024 }
        }
    }
}

pub(super) const F32: f64 = 4.0;
pub(super) const SEED_A: u64 = 1;
pub(super) const SEED_B: u64 = 2;
pub(super) const SEED_C: u64 = 3;
pub(super) const EPS: f64 = 1e-5;

/// `32M` for powers of two that are whole mebi-counts, else the plain number.
pub(super) fn count(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else {
        n.to_string()
    }
}

pub(super) fn case(
    name: impl Into<String>,
    shape: String,
    dtype: DType,
    bound: Bound,
    bytes: Option<f64>,
    flops: Option<f64>,
    build: impl Fn(&mut Inputs) -> kiln::Result<Op> + 'static,
) -> Case {
    Case { name: name.into(), shape, dtype, bound, bytes, flops, build: Box::new(build) }
}

/// A memory-bound op of one flat f32 input of `n` elements: `bytes_per_elem` counts input + output.
pub(super) fn unary(name: &str, n: usize, bytes_per_elem: f64, f: fn(&Tensor) -> kiln::Result<Tensor>) -> Case {
    case(name, count(n), DType::F32, Bound::Memory, Some(bytes_per_elem * n as f64), None, move |inp| {
        let x = inp.randn(n, DType::F32, SEED_A)?;
        Ok(Box::new(move || f(&x)) as Op)
    })
}

/// A memory-bound op over the rows of a `rows x cols` f32 input; `bytes` is its whole traffic.
fn rowwise(name: &str, s: &Sizes, bytes: f64, f: fn(&Tensor, &Tensor, &Tensor) -> kiln::Result<Tensor>) -> Case {
    rows_case(name, (s.rows, s.cols), bytes, f)
}

/// A memory-bound op over the rows of an `r x c` f32 input with per-column weights `w` and `b`.
pub(super) fn rows_case(
    name: &str,
    (r, c): (usize, usize),
    bytes: f64,
    f: fn(&Tensor, &Tensor, &Tensor) -> kiln::Result<Tensor>,
) -> Case {
    case(name, format!("{r}x{c}"), DType::F32, Bound::Memory, Some(bytes), None, move |inp| {
        let x = inp.randn((r, c), DType::F32, SEED_A)?;
        let w = inp.randn(c, DType::F32, SEED_B)?;
        let b = inp.randn(c, DType::F32, SEED_C)?;
        Ok(Box::new(move || f(&x, &w, &b)) as Op)
    })
}

/// `(m, k) @ (k, n)`: compute-bound, plus the bytes when `count_bytes` (matrix-vector-like shapes
/// stream the weight matrix and are bounded by memory).
pub(super) fn matmul(name: String, (m, k, n): (usize, usize, usize), dtype: DType, count_bytes: bool) -> Case {
    let size = dtype.size_in_bytes() as f64;
    let bytes = count_bytes.then(|| size * (m * k + k * n + m * n) as f64);
    let flops = 2.0 * (m * k * n) as f64;
    case(name, format!("{m}x{k} @ {k}x{n}"), dtype, Bound::Compute, bytes, Some(flops), move |inp| {
        let a = inp.randn((m, k), dtype, SEED_A)?;
        let b = inp.randn((k, n), dtype, SEED_B)?;
        Ok(Box::new(move || a.matmul(&b)) as Op)
    })
}

/// Causal attention over `(b, h, t, d)`: FLOPs of the unmasked half of `QK^T` and `PV`.
fn sdpa(b: usize, h: usize, t: usize, d: usize) -> Case {
    sdpa_gqa("sdpa_causal".into(), b, (h, h), t, d)
}

/// Causal attention with `hq` query heads over `hkv` key/value heads (GQA when they differ).
pub(super) fn sdpa_gqa(name: String, b: usize, (hq, hkv): (usize, usize), t: usize, d: usize) -> Case {
    let flops = 4.0 * (b * hq * d) as f64 * (t * (t + 1) / 2) as f64;
    let shape = if hq == hkv { format!("{b}x{hq}x{t}x{d}") } else { format!("{b}x{hq}/{hkv}x{t}x{d}") };
    case(name, shape, DType::F32, Bound::Compute, None, Some(flops), move |inp| {
        let q = inp.randn((b, hq, t, d), DType::F32, SEED_A)?;
        let k = inp.randn((b, hkv, t, d), DType::F32, SEED_B)?;
        let v = inp.randn((b, hkv, t, d), DType::F32, SEED_C)?;
        Ok(Box::new(move || q.sdpa(&k, &v, true, None)) as Op)
    })
}

/// Every case for `device`, in display order: the GPU set ([`super::gpu_cases`]) on a GPU.
pub fn all(quick: bool, gpu: bool) -> Vec<Case> {
    if gpu {
        let mut v = super::gpu_cases::all(quick);
        v.extend(super::quant_cases::all(quick));
        return v;
    }
    let s = Sizes::new(quick);
    let (n, r, c) = (s.n, s.rows, s.cols);
    let rc = (r * c) as f64;
    let mut v = vec![
        case("add", count(n), DType::F32, Bound::Memory, Some(3.0 * F32 * n as f64), None, move |inp| {
            let a = inp.randn(n, DType::F32, SEED_A)?;
            let b = inp.randn(n, DType::F32, SEED_B)?;
            Ok(Box::new(move || a.add(&b)) as Op)
        }),
        {
            let rows = n / c;
            let bytes = F32 * (2 * n + c) as f64;
            case(
                "mul_row_bcast",
                format!("{rows}x{c} * {c}"),
                DType::F32,
                Bound::Memory,
                Some(bytes),
                None,
                move |inp| {
                    let x = inp.randn(n, DType::F32, SEED_A)?.reshape((rows, c))?;
                    let w = inp.randn(c, DType::F32, SEED_B)?;
                    Ok(Box::new(move || x.mul(&w)) as Op)
                },
            )
        },
        unary("exp", n, 2.0 * F32, |x| x.exp()),
        unary("silu", n, 2.0 * F32, |x| x.silu()),
        unary("cast_f32_f16", n, F32 + 2.0, |x| x.to_dtype(DType::F16)),
        unary("sum_all", n, F32, |x| x.sum_all()),
        rowwise("sum_last_axis", &s, F32 * (rc + r as f64), |x, _, _| x.sum(&[-1], false)),
        rowwise("sum_first_axis", &s, F32 * (rc + c as f64), |x, _, _| x.sum(&[0], false)),
        rowwise("softmax", &s, 2.0 * F32 * rc, |x, _, _| x.softmax(-1)),
        rowwise("rms_norm", &s, F32 * (2.0 * rc + c as f64), |x, w, _| x.rms_norm(w, EPS)),
        rowwise("layer_norm", &s, F32 * (2.0 * rc + 2.0 * c as f64), |x, w, b| x.layer_norm(w, Some(b), EPS)),
    ];
    for sq in s.square {
        v.push(matmul(format!("matmul_f32_{sq}"), (sq, sq, sq), DType::F32, false));
    }
    for m in [1, 16] {
        v.push(matmul(format!("matmul_f32_llm_m{m}"), (m, s.llm, s.llm), DType::F32, true));
    }
    let h = s.square_f16;
    v.push(matmul(format!("matmul_f16_{h}"), (h, h, h), DType::F16, false));
    v.push(sdpa(1, 8, s.seq, 64));
    v.extend(super::quant_cases::all(quick));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_stable() {
        let full = all(false, false);
        let names: Vec<&str> = full.iter().map(|c| c.name.as_str()).collect();
        let mut dedup = names.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), names.len());
        assert!(names.contains(&"matmul_f32_1024") && names.contains(&"matmul_f32_2048"));
        assert_eq!(all(true, false).len(), full.len());
        let gpu: Vec<String> = all(false, true).into_iter().map(|c| c.name).collect();
        let mut g = gpu.clone();
        g.sort();
        g.dedup();
        assert_eq!(g.len(), gpu.len());
        assert_eq!(all(true, true).len(), gpu.len());
    }

    #[test]
    fn counts_bytes_and_flops() {
        let full = all(false, false);
        let add = full.iter().find(|c| c.name == "add").unwrap();
        assert_eq!(add.bytes, Some(12.0 * (32 << 20) as f64));
        assert_eq!(add.shape, "32M");
        let mm = full.iter().find(|c| c.name == "matmul_f32_1024").unwrap();
        assert_eq!(mm.flops, Some(2.0 * 1024f64.powi(3)));
        assert_eq!(mm.bytes, None);
    }
}
