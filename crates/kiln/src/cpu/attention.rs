//! Scaled dot-product attention, flash-attention style: parallel over (batch, head, block of queries);
//! each query block walks the keys in tiles and keeps a running max, sum and weighted value sum per
//! query (online softmax), so memory is O(block) rather than O(tq * tk). Causal blocks stop at the
//! last key their last query can see. f16/bf16 are computed in f32, f64 in f64.
//!
//! Rows with no visible key (only possible with causal masking when `tq > tk`, or when `tk == 0`) give
//! zeros, like FlashAttention (PyTorch's math path gives NaN there). A sliding window moves each
//! query's first key and the block's first tile; a soft cap maps each score as it is made.

use super::softmax::{dot, max_nan, to_acc, Acc, Compute};
use super::{strided, unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::op::AttentionParams;
use crate::{Layout, Result};
use rayon::prelude::*;
use std::borrow::Cow;

/// Queries per parallel task.
const BQ: usize = 16;
/// Keys per tile.
const BK: usize = 64;

/// A `(b, h, t, e)` operand in the accumulation type whose rows (last dim) are contiguous.
struct Rows<'a, A: Clone> {
    data: Cow<'a, [A]>,
    offset: usize,
    /// Strides of the b, h and t dims.
    strides: [usize; 3],
    e: usize,
}

impl<'a, A: Acc> Rows<'a, A> {
    fn new<T: Compute<A = A>>(data: &'a [T], l: &Layout) -> Self {
        let (dims, st) = (l.dims(), l.strides());
        let e = dims[3];
        match T::as_acc(data) {
            Some(a) if st[3] == 1 || e <= 1 => {
                Rows { data: Cow::Borrowed(a), offset: l.offset(), strides: [st[0], st[1], st[2]], e }
            }
            _ => {
                let c = to_acc::<T>(&strided::contiguous(data, l));
                let strides = [dims[1] * dims[2] * e, dims[2] * e, e];
                Rows { data: Cow::Owned(c), offset: 0, strides, e }
            }
        }
    }

    #[inline(always)]
    fn row(&self, b: usize, h: usize, t: usize) -> &[A] {
        let o = self.offset + b * self.strides[0] + h * self.strides[1] + t * self.strides[2];
        &self.data[o..o + self.e]
    }
}

/// Attention into `out` (`(b, hq, tq, dv)`, contiguous, zero-initialised).
fn attention_into<A: Acc>(q: &Rows<A>, k: &Rows<A>, v: &Rows<A>, dims: [usize; 5], p: AttentionParams, out: &mut [A]) {
    let [_, tq, _, _, dv] = dims;
    out.par_chunks_mut(tq * dv).enumerate().for_each(|(bh, ob)| {
        ob.par_chunks_mut(BQ * dv).enumerate().for_each(|(qb, oblk)| {
            // Compiled for the widest vector ISA: the dots, exps and value sums vectorise.
            super::math::vectorized(
                #[inline(always)]
                || query_block(q, k, v, dims, p, bh, qb * BQ, oblk),
            )
        });
    });
}

/// The outputs `oblk` (zero-initialised) of the queries from `q0` of (batch, head) `bh`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn query_block<A: Acc>(
    q: &Rows<A>,
    k: &Rows<A>,
    v: &Rows<A>,
    [hq, tq, hkv, tk, dv]: [usize; 5],
    p: AttentionParams,
    bh: usize,
    q0: usize,
    oblk: &mut [A],
) {
    let group = hq / hkv;
    let scale = A::from_f64(p.scale);
    let causal = p.causal;
    let (bi, hi) = (bh / hq, bh % hq);
    let kh = hi / group;
    let nq = oblk.len() / dv;
    // Keys visible to query i: j < i + 1 + tk - tq (causal), else all.
    let visible = |i: usize| if causal { (i + 1 + tk).saturating_sub(tq).min(tk) } else { tk };
    // The first key query i sees: with a window w, the one w - 1 positions before it.
    let first = |i: usize| p.window.map_or(0, |w| (i + 1 + tk).saturating_sub(tq + w));
    let cap = p.softcap.map(A::from_f64);
    let kend = visible(q0 + nq - 1);
    let kbeg = first(q0);
    let mut m = [A::NEG_INF; BQ];
    let mut l = [A::ZERO; BQ];
    let mut sc = [A::ZERO; BK];
    for j0 in (kbeg..kend).step_by(BK) {
        let j1 = (j0 + BK).min(kend);
        for r in 0..nq {
            let i = q0 + r;
            let lim = visible(i).min(j1);
            // This row's keys of the tile: from its first (a window) to its last.
            let j0 = j0.max(first(i));
            if lim <= j0 {
                continue;
            }
            let n = lim - j0;
            let qr = q.row(bi, hi, i);
            for (jj, s) in sc[..n].iter_mut().enumerate() {
                *s = dot(qr, k.row(bi, kh, j0 + jj)) * scale;
            }
            if let Some(c) = cap {
                for s in sc[..n].iter_mut() {
                    *s = c * (*s / c).tanh();
                }
            }
            let mut mt = A::NEG_INF;
            for &s in &sc[..n] {
                mt = max_nan(mt, s);
            }
            let nm = max_nan(m[r], mt);
            if nm == A::NEG_INF {
                // Every score so far is -inf: they weigh nothing (and -inf - -inf would be NaN).
                continue;
            }
            let alpha = (m[r] - nm).exp();
            let acc = &mut oblk[r * dv..(r + 1) * dv];
            if alpha != A::ONE {
                acc.iter_mut().for_each(|a| *a *= alpha);
            }
            // The weights first (a loop of exps that vectorises), then the weighted value sum.
            for s in sc[..n].iter_mut() {
                *s = (*s - nm).exp();
            }
            let mut ps = A::ZERO;
            for &pj in &sc[..n] {
                ps += pj;
            }
            // The value sum four keys per pass over the output row (each element still adds its
            // keys one by one, in order).
            let mut jj = 0;
            while jj + 4 <= n {
                let [v0, v1, v2, v3] = [0, 1, 2, 3].map(|t| &v.row(bi, kh, j0 + jj + t)[..dv]);
                let [p0, p1, p2, p3] = [sc[jj], sc[jj + 1], sc[jj + 2], sc[jj + 3]];
                for ((((a, &x0), &x1), &x2), &x3) in acc.iter_mut().zip(v0).zip(v1).zip(v2).zip(v3) {
                    *a = (((*a + p0 * x0) + p1 * x1) + p2 * x2) + p3 * x3;
                }
                jj += 4;
            }
            for (t, &pj) in sc[jj..n].iter().enumerate() {
                for (a, &vv) in acc.iter_mut().zip(v.row(bi, kh, j0 + jj + t)) {
                    *a += pj * vv;
                }
            }
            l[r] = l[r] * alpha + ps;
            m[r] = nm;
        }
    }
    for r in 0..nq {
        let acc = &mut oblk[r * dv..(r + 1) * dv];
        if m[r].is_nan() {
            acc.fill(A::NAN);
        } else if l[r] == A::ZERO {
            // No visible key: zeros (already there). Visible keys whose scores are all -inf:
            // NaN like a softmax over a row of -inf.
            if visible(q0 + r) > 0 {
                acc.fill(A::NAN);
            }
        } else {
            let inv = A::ONE / l[r];
            acc.iter_mut().for_each(|a| *a *= inv);
        }
    }
}

fn attention_typed<T: Compute>(
    q: &[T],
    ql: &Layout,
    k: &[T],
    kl: &Layout,
    v: &[T],
    vl: &Layout,
    p: AttentionParams,
) -> Vec<T> {
    let (qd, kd, vd) = (ql.dims(), kl.dims(), vl.dims());
    let (b, hq, tq) = (qd[0], qd[1], qd[2]);
    let (hkv, tk, dv) = (kd[1], kd[2], vd[3]);
    let n = b * hq * tq * dv;
    let mut out: Vec<T> = strided::zeroed(n);
    if n == 0 || tk == 0 {
        return out;
    }
    let (qr, kr, vr) = (Rows::new(q, ql), Rows::new(k, kl), Rows::new(v, vl));
    let dims = [hq, tq, hkv, tk, dv];
    match T::as_acc_mut(&mut out) {
        Some(o) => attention_into(&qr, &kr, &vr, dims, p, o),
        None => {
            let mut tmp = strided::zeroed(n);
            attention_into(&qr, &kr, &vr, dims, p, &mut tmp);
            T::store(&tmp, &mut out);
        }
    }
    out
}

pub(crate) fn attention(
    q: &CpuStorage,
    l: &Layout,
    k: &CpuStorage,
    kl: &Layout,
    v: &CpuStorage,
    vl: &Layout,
    p: AttentionParams,
) -> Result<CpuStorage> {
    Ok(match (q, k, v) {
        (CpuStorage::F32(q), CpuStorage::F32(k), CpuStorage::F32(v)) => {
            CpuStorage::F32(attention_typed(q, l, k, kl, v, vl, p))
        }
        (CpuStorage::F64(q), CpuStorage::F64(k), CpuStorage::F64(v)) => {
            CpuStorage::F64(attention_typed(q, l, k, kl, v, vl, p))
        }
        (CpuStorage::F16(q), CpuStorage::F16(k), CpuStorage::F16(v)) => {
            CpuStorage::F16(attention_typed(q, l, k, kl, v, vl, p))
        }
        (CpuStorage::BF16(q), CpuStorage::BF16(k), CpuStorage::BF16(v)) => {
            CpuStorage::BF16(attention_typed(q, l, k, kl, v, vl, p))
        }
        (q, k, _) if q.dtype() != k.dtype() => return Err(q.not_same_dtype("sdpa", k)),
        (q, _, v) if q.dtype() != v.dtype() => return Err(q.not_same_dtype("sdpa", v)),
        _ => return Err(unsupported("sdpa", q.dtype())),
    })
}
