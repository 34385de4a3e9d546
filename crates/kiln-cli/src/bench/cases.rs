//! The benchmark set: element-wise, cast, reductions, normalisations, matmul and attention, at full
//! size (32M elements, 4096x4096 rows, 1024/2048 matmuls, LLM shapes) or small `--quick` sizes.

use super::builders::{case, count, matmul, rows_case, sdpa_gqa, unary, Bound, Case, Op, EPS, F32, SEED_A, SEED_B};
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

/// A memory-bound op over the rows of a `rows x cols` f32 input; `bytes` is its whole traffic.
fn rowwise(name: &str, s: &Sizes, bytes: f64, f: fn(&Tensor, &Tensor, &Tensor) -> kiln::Result<Tensor>) -> Case {
    rows_case(name, (s.rows, s.cols), bytes, f)
}

/// Causal attention over `(b, h, t, d)`: FLOPs of the unmasked half of `QK^T` and `PV`.
fn sdpa(b: usize, h: usize, t: usize, d: usize) -> Case {
    sdpa_gqa("sdpa_causal".into(), b, (h, h), t, d)
}

/// The CPU set, in display order (`mod.rs` adds the quantized cases).
pub fn all(quick: bool) -> Vec<Case> {
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
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_bytes_and_flops() {
        let full = all(false);
        let add = full.iter().find(|c| c.name == "add").unwrap();
        assert_eq!(add.bytes, Some(12.0 * (32 << 20) as f64));
        assert_eq!(add.shape, "32M");
        let mm = full.iter().find(|c| c.name == "matmul_f32_1024").unwrap();
        assert_eq!(mm.flops, Some(2.0 * 1024f64.powi(3)));
        assert_eq!(mm.bytes, None);
    }
}
