//! Fused ops written out from primitive ops. They serve as the fallback where a backend lacks a fused
//! kernel and as the reference the fused kernels are tested against.
//!
//! Only public primitive ops are used here (elementwise, reductions, matmul, views, creation). f16 and
//! bf16 inputs are computed in f32 and cast back, like the fused CPU kernels, so both paths round the
//! same way up to the order of operations.

use crate::{DType, Error, Result, RopeLayout, Tensor};

/// Runs `f` on `x` cast to f32 when `x` is f16/bf16, and casts the result back.
fn in_f32(x: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    match x.dtype() {
        DType::F16 | DType::BF16 => f(&x.to_dtype(DType::F32)?)?.to_dtype(x.dtype()),
        _ => f(x),
    }
}

fn float_only(op: &'static str, x: &Tensor) -> Result<()> {
    if !x.dtype().is_float() {
        return Err(Error::dtype(op, x.dtype(), format!("expected a float tensor, got shape {}", x.shape())));
    }
    Ok(())
}

/// `exp(x - max) / sum(exp(x - max))` along `axis`.
pub fn softmax(x: &Tensor, axis: isize) -> Result<Tensor> {
    float_only("softmax", x)?;
    in_f32(x, |x| {
        let e = x.sub(&x.max(&[axis], true)?)?.exp()?;
        e.div(&e.sum(&[axis], true)?)
    })
}

/// `x - max - log(sum(exp(x - max)))` along `axis`.
pub fn log_softmax(x: &Tensor, axis: isize) -> Result<Tensor> {
    float_only("log_softmax", x)?;
    in_f32(x, |x| {
        let c = x.sub(&x.max(&[axis], true)?)?;
        c.sub(&c.exp()?.sum(&[axis], true)?.log()?)
    })
}

/// `x * rsqrt(mean(x^2, -1) + eps) * weight`.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    float_only("rms_norm", x)?;
    let w = weight.to_dtype(DType::F32.max(x.dtype()))?;
    in_f32(x, |x| x.mul(&x.square()?.mean(&[-1], true)?.add_scalar(eps)?.rsqrt()?)?.mul(&w))
}

/// `(x - mean) * rsqrt(var + eps) * weight + bias` over the last axis (biased variance).
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    float_only("layer_norm", x)?;
    let acc = DType::F32.max(x.dtype());
    let w = weight.to_dtype(acc)?;
    let b = bias.map(|b| b.to_dtype(acc)).transpose()?;
    in_f32(x, |x| {
        let c = x.sub(&x.mean(&[-1], true)?)?;
        let y = c.mul(&c.square()?.mean(&[-1], true)?.add_scalar(eps)?.rsqrt()?)?.mul(&w)?;
        match &b {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    })
}

/// `silu(gate) * up`.
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    float_only("silu_mul", gate)?;
    let u = up.to_dtype(DType::F32.max(gate.dtype()))?;
    in_f32(gate, |g| g.silu()?.mul(&u))
}

/// `residual + input(x) @ w^T` (`Tensor::linear_fused`): the input's RMSNorm or `silu_mul` of its
/// two halves, `linear`, then the residual added.
pub fn linear_fused(x: &Tensor, w: &Tensor, input: crate::LinearInput, residual: Option<&Tensor>) -> Result<Tensor> {
    let h = match input {
        crate::LinearInput::Plain => x.clone(),
        crate::LinearInput::RmsNorm { weight, eps } => x.rms_norm(weight, eps)?,
        crate::LinearInput::SiluMul => {
            let k = w.dims()[w.rank() - 1];
            x.narrow(-1, 0, k)?.silu_mul(&x.narrow(-1, k, k)?)?
        }
    };
    let y = h.linear(w, None)?;
    match residual {
        Some(r) => r.add(&y),
        None => Ok(y),
    }
}

/// A `(rows, cols)` matrix of `dtype` with the given `(row, col, value)` entries and zeros elsewhere.
fn sparse_matrix(rows: usize, cols: usize, entries: &[(usize, usize, f64)], x: &Tensor) -> Result<Tensor> {
    let mut m = vec![0.0; rows * cols];
    for &(r, c, v) in entries {
        m[r * cols + c] = v;
    }
    Tensor::from_f64_values(&m, (rows, cols), x.dtype(), x.device())
}

/// Rotary embedding of `x` `(b, h, t, d)` with `(t, d/2)` tables, without gathers or concatenation:
/// `x * cos_full + (x @ R) * sin_full`, where `R` is the signed permutation that maps each pair
/// `(a, b)` to `(-b, a)` and `cos_full = cos @ E` repeats each table column into both slots of its pair.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Result<Tensor> {
    float_only("rope", x)?;
    if x.rank() != 4 || !x.dims()[3].is_multiple_of(2) {
        return Err(Error::shape("rope", format!("expected (b, h, t, d) with even d, got shape {}", x.shape())));
    }
    let d = x.dims()[3];
    let h = d / 2;
    let acc = DType::F32.max(x.dtype());
    let (cos, sin) = (cos.to_dtype(acc)?, sin.to_dtype(acc)?);
    in_f32(x, |x| {
        // Slot pairs (first, second) of pair i.
        let pair = |i: usize| match layout {
            RopeLayout::HalfSplit => (i, i + h),
            RopeLayout::Interleaved => (2 * i, 2 * i + 1),
        };
        let mut r = Vec::with_capacity(d);
        let mut e = Vec::with_capacity(d);
        for i in 0..h {
            let (a, b) = pair(i);
            // rot[a] = -x[b], rot[b] = x[a]; rot = x @ R with R[row = source][col = destination].
            r.push((b, a, -1.0));
            r.push((a, b, 1.0));
            e.push((i, a, 1.0));
            e.push((i, b, 1.0));
        }
        let r = sparse_matrix(d, d, &r, x)?;
        let e = sparse_matrix(h, d, &e, x)?;
        let (cf, sf) = (cos.matmul(&e)?, sin.matmul(&e)?);
        x.mul(&cf)?.add(&x.matmul(&r)?.mul(&sf)?)
    })
}

/// Scaled dot-product attention from matmul, masking and softmax; same contract as
/// [`Tensor::sdpa`] (GQA by repeating key/value heads, causal offset `tk - tq`, zeros for queries with
/// no visible key).
pub fn sdpa(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool, scale: Option<f64>) -> Result<Tensor> {
    float_only("sdpa", q)?;
    if q.rank() != 4 || k.rank() != 4 || v.rank() != 4 {
        return Err(Error::shape(
            "sdpa",
            format!("expected rank-4 q, k, v, got {}, {}, {}", q.shape(), k.shape(), v.shape()),
        ));
    }
    let (b, hq, tq, d) = (q.dims()[0], q.dims()[1], q.dims()[2], q.dims()[3]);
    let (hkv, tk) = (k.dims()[1], k.dims()[2]);
    if hkv == 0 || hq % hkv != 0 {
        return Err(Error::shape("sdpa", format!("query heads {hq} are not a multiple of key/value heads {hkv}")));
    }
    let scale = scale.unwrap_or(if d == 0 { 1.0 } else { 1.0 / (d as f64).sqrt() });
    if tk == 0 {
        // No keys at all: every query sees nothing (a softmax over an empty axis is undefined).
        return Tensor::zeros((b, hq, tq, v.dims()[3]), q.dtype(), q.device());
    }
    let acc = DType::F32.max(q.dtype());
    let (k, v) = (k.to_dtype(acc)?, v.to_dtype(acc)?);
    in_f32(q, |q| {
        // Repeat each key/value head hq / hkv times: (b, hkv, t, e) -> (b, hkv, g, t, e) -> (b, hq, t, e).
        let g = hq / hkv;
        let repeat = |t: &Tensor| -> Result<Tensor> {
            let (tt, e) = (t.dims()[2], t.dims()[3]);
            t.unsqueeze(2)?.broadcast_to((b, hkv, g, tt, e))?.reshape((b, hq, tt, e))
        };
        let (k, v) = (repeat(&k)?, repeat(&v)?);
        let scores = q.matmul(&k.t()?)?.mul_scalar(scale)?;
        if !causal {
            return softmax(&scores, -1)?.matmul(&v);
        }
        // Masked: key j > query i + tk - tq.
        let dev = q.device();
        let i = Tensor::arange(0.0, tq as f64, DType::I64, dev)?.reshape((tq, 1))?;
        let j = Tensor::arange(0.0, tk as f64, DType::I64, dev)?.reshape((1, tk))?;
        let masked = j.gt(&i.add_scalar(tk as f64 - tq as f64)?)?;
        let neg_inf = Tensor::full(f64::NEG_INFINITY, (), scores.dtype(), dev)?;
        let zero = Tensor::zeros((), scores.dtype(), dev)?;
        let p = softmax(&Tensor::where_(&masked, &neg_inf, &scores)?, -1)?;
        // A query with every key masked gets NaN from the softmax; the contract gives it zeros.
        Tensor::where_(&masked, &zero, &p)?.matmul(&v)
    })
}
