//! Softmax and log-softmax over the last axis, plus the row machinery the other transformer kernels
//! (norms, rope, attention) share: an accumulation float type (`Acc`: f32, or f64 for f64 data), the
//! bridge from a storage dtype to it (`Compute`: f16/bf16 rows are bulk-converted to f32), lane-split
//! reductions that the compiler vectorises, and a parallel row driver (`map_rows`).

use super::math::exp_f32;
use super::{strided, unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::{Layout, Result, WithDType};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Sub};

/// Number of independent accumulators of the lane-split reductions: wide enough for AVX2 f32 and to
/// hide the latency of dependent adds.
pub(crate) const LANES: usize = 8;

/// Elements of one parallel task of the row kernels.
const TASK_ELEMS: usize = 1 << 13;

/// The float type a kernel computes in.
pub(crate) trait Acc:
    Copy
    + Send
    + Sync
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + AddAssign
    + MulAssign
    + bytemuck::Zeroable
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    const NEG_INF: Self;
    const NAN: Self;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    fn is_nan(self) -> bool;
    fn is_finite(self) -> bool;
    fn from_f64(v: f64) -> Self;
}

impl Acc for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const NEG_INF: Self = f32::NEG_INFINITY;
    const NAN: Self = f32::NAN;
    #[inline(always)]
    fn exp(self) -> Self {
        exp_f32(self)
    }
    #[inline(always)]
    fn tanh(self) -> Self {
        f32::tanh(self)
    }
    #[inline(always)]
    fn ln(self) -> Self {
        f32::ln(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Acc for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const NEG_INF: Self = f64::NEG_INFINITY;
    const NAN: Self = f64::NAN;
    #[inline(always)]
    fn exp(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn tanh(self) -> Self {
        f64::tanh(self)
    }
    #[inline(always)]
    fn ln(self) -> Self {
        f64::ln(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// A storage float type and the `Acc` type its kernels compute in. f32 and f64 rows are used in
/// place (`as_acc`); f16 and bf16 rows are converted in bulk (`load`/`store`).
pub(crate) trait Compute: WithDType {
    type A: Acc;
    fn as_acc(s: &[Self]) -> Option<&[Self::A]>;
    fn as_acc_mut(s: &mut [Self]) -> Option<&mut [Self::A]>;
    fn load(src: &[Self], dst: &mut [Self::A]);
    fn store(src: &[Self::A], dst: &mut [Self]);
}

macro_rules! direct_compute {
    ($t:ty) => {
        impl Compute for $t {
            type A = $t;
            fn as_acc(s: &[Self]) -> Option<&[Self]> {
                Some(s)
            }
            fn as_acc_mut(s: &mut [Self]) -> Option<&mut [Self]> {
                Some(s)
            }
            fn load(src: &[Self], dst: &mut [Self]) {
                dst.copy_from_slice(src)
            }
            fn store(src: &[Self], dst: &mut [Self]) {
                dst.copy_from_slice(src)
            }
        }
    };
}
direct_compute!(f32);
direct_compute!(f64);

macro_rules! half_compute {
    ($t:ty) => {
        impl Compute for $t {
            type A = f32;
            fn as_acc(_: &[Self]) -> Option<&[f32]> {
                None
            }
            fn as_acc_mut(_: &mut [Self]) -> Option<&mut [f32]> {
                None
            }
            fn load(src: &[Self], dst: &mut [f32]) {
                src.convert_to_f32_slice(dst)
            }
            fn store(src: &[f32], dst: &mut [Self]) {
                dst.convert_from_f32_slice(src)
            }
        }
    };
}
half_compute!(f16);
half_compute!(bf16);

/// NaN-propagating maximum (NaN wins whichever side it is on).
#[inline(always)]
pub(crate) fn max_nan<A: Acc>(a: A, b: A) -> A {
    if b > a || b.is_nan() {
        b
    } else {
        a
    }
}

/// NaN-propagating maximum of a slice; `-inf` for an empty one.
#[inline]
pub(crate) fn max_of<A: Acc>(x: &[A]) -> A {
    let mut lanes = [A::NEG_INF; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for j in 0..LANES {
            lanes[j] = max_nan(lanes[j], c[j]);
        }
    }
    let mut m = lanes.iter().fold(A::NEG_INF, |a, &b| max_nan(a, b));
    for &v in rest {
        m = max_nan(m, v);
    }
    m
}

/// `sum(f(x))` with lane-split accumulators.
#[inline(always)]
pub(crate) fn sum_map<A: Acc>(x: &[A], f: impl Fn(A) -> A) -> A {
    let mut lanes = [A::ZERO; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for j in 0..LANES {
            lanes[j] += f(c[j]);
        }
    }
    let mut s = A::ZERO;
    for &v in rest {
        s += f(v);
    }
    lanes.iter().fold(A::ZERO, |a, &b| a + b) + s
}

/// Dot product with lane-split accumulators.
#[inline(always)]
pub(crate) fn dot<A: Acc>(a: &[A], b: &[A]) -> A {
    debug_assert_eq!(a.len(), b.len());
    let mut lanes = [A::ZERO; LANES];
    let ca = a.chunks_exact(LANES);
    let cb = b.chunks_exact(LANES);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..LANES {
            lanes[j] += x[j] * y[j];
        }
    }
    let mut s = A::ZERO;
    for (&x, &y) in ra.iter().zip(rb) {
        s += x * y;
    }
    lanes.iter().fold(A::ZERO, |a, &b| a + b) + s
}

/// Runs `f(first_row, rows_in, rows_out)` over groups of rows in parallel: `x` holds rows of `d_in`
/// elements, `out` rows of `d_out`; `f` gets the rows in the accumulation type (converted through
/// per-task scratch buffers for f16/bf16, in place for f32/f64) and calls `row` once per row.
pub(crate) fn map_rows<T: Compute>(
    x: &[T],
    d_in: usize,
    out: &mut [T],
    d_out: usize,
    row: impl Fn(usize, &[T::A], &mut [T::A]) + Sync,
) {
    if out.is_empty() {
        return;
    }
    let rows = out.len() / d_out;
    debug_assert_eq!(x.len(), rows * d_in);
    let per_task = (TASK_ELEMS / d_in.max(d_out).max(1)).max(1);
    let task = |(t, o): (usize, &mut [T])| {
        let first = t * per_task;
        let n = o.len() / d_out;
        let xs = &x[first * d_in..(first + n) * d_in];
        let mut xin = Vec::new();
        let mut xout = Vec::new();
        for r in 0..n {
            let xr = &xs[r * d_in..(r + 1) * d_in];
            let or = &mut o[r * d_out..(r + 1) * d_out];
            let xa: &[T::A] = match T::as_acc(xr) {
                Some(a) => a,
                None => {
                    xin.resize(d_in, T::A::ZERO);
                    T::load(xr, &mut xin);
                    &xin
                }
            };
            match T::as_acc_mut(or) {
                Some(oa) => row(first + r, xa, oa),
                None => {
                    xout.resize(d_out, T::A::ZERO);
                    row(first + r, xa, &mut xout);
                    T::store(&xout, or);
                }
            }
        }
    };
    if rows <= per_task {
        task((0, out));
    } else {
        out.par_chunks_mut(per_task * d_out).enumerate().for_each(task);
    }
}

/// Converts a whole slice to the accumulation type (in parallel for large slices).
pub(crate) fn to_acc<T: Compute>(x: &[T]) -> Vec<T::A> {
    let mut v = strided::zeroed(x.len());
    v.par_chunks_mut(strided::CHUNK).zip(x.par_chunks(strided::CHUNK)).for_each(|(o, i)| T::load(i, o));
    v
}

/// Softmax (or log-softmax) of one row in two passes over memory and one `exp` per element.
/// Pass 1 walks blocks with an online max and sum; for softmax it also stores each block's
/// `exp(x - running max)` in `out` and remembers that max. Pass 2 rescales each block by
/// `exp(block max - final max) / sum` (log-softmax instead writes `x - max - ln(sum)`).
/// NaN or `+inf` anywhere gives a NaN row; `-inf` entries give 0 (log: `-inf`); a row of all `-inf`
/// gives NaN, like PyTorch.
pub(crate) fn softmax_row<A: Acc>(x: &[A], out: &mut [A], log: bool) {
    const BLOCK: usize = 256;
    let mut m = A::NEG_INF;
    let mut s = A::ZERO;
    let mut block_max = Vec::with_capacity(if log { 0 } else { x.len().div_ceil(BLOCK) });
    for (blk, ob) in x.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
        let nm = max_nan(m, max_of(blk));
        if !log {
            block_max.push(nm);
        }
        if nm == A::NEG_INF {
            // Nothing but -inf so far: weighs exp(-inf) = 0 (and -inf - -inf would be NaN).
            if !log {
                ob.fill(A::ZERO);
            }
            continue;
        }
        let bs = if log {
            sum_map(blk, |v| (v - nm).exp())
        } else {
            let mut lanes = [A::ZERO; LANES];
            let (xc, oc) = (blk.chunks_exact(LANES), ob.chunks_exact_mut(LANES));
            let (xr, rest) = (xc.remainder(), blk.len() - blk.len() % LANES);
            for (x8, o8) in xc.zip(oc) {
                for j in 0..LANES {
                    let e = (x8[j] - nm).exp();
                    o8[j] = e;
                    lanes[j] += e;
                }
            }
            let mut t = A::ZERO;
            for (&v, o) in xr.iter().zip(&mut ob[rest..]) {
                let e = (v - nm).exp();
                *o = e;
                t += e;
            }
            lanes.iter().fold(A::ZERO, |a, &b| a + b) + t
        };
        s = s * (m - nm).exp() + bs;
        m = nm;
    }
    if !m.is_finite() {
        // The max is NaN, +inf or -inf (a NaN entry, a +inf entry, or nothing but -inf): the whole row
        // is NaN as in PyTorch (explicit, so that it does not depend on how `exp` treats NaN).
        out.fill(A::NAN);
        return;
    }
    if log {
        // (x - max) - ln(sum), not x - (max + ln(sum)): with a large max, max + ln(sum) rounds away
        // the ln(sum) ([1e10, 1e10] would give [0, 0] instead of -ln 2).
        let ls = s.ln();
        for (o, &v) in out.iter_mut().zip(x) {
            *o = (v - m) - ls;
        }
    } else {
        let inv = A::ONE / s;
        for (ob, &bm) in out.chunks_mut(BLOCK).zip(&block_max) {
            // exp(-inf - m) = 0 for leading all -inf blocks (already zero).
            let f = (bm - m).exp() * inv;
            ob.iter_mut().for_each(|o| *o *= f);
        }
    }
}

/// Softmax of one f32 row with every loop inlined into the caller, which runs it under the widest
/// vector ISA (`math::vectorized`): a NaN-propagating max, `exp(x - max)` stored with its sum, then one
/// scale. Same special values as [`softmax_row`]: NaN or `+inf` anywhere, or a row of all `-inf`,
/// gives NaN.
#[inline(always)]
fn softmax_row_f32(x: &[f32], out: &mut [f32]) {
    const L: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; L];
    let mut bad = [0.0f32; L];
    let mut xc = x.chunks_exact(L);
    for c in &mut xc {
        for i in 0..L {
            lanes[i] = if c[i] > lanes[i] { c[i] } else { lanes[i] };
            // NaN and +inf both turn `v * 0` into NaN; finite values give 0 (-inf, which would also
            // give NaN, is masked out).
            bad[i] += if c[i] == f32::NEG_INFINITY { 0.0 } else { c[i] * 0.0 };
        }
    }
    let mut m = f32::NEG_INFINITY;
    let mut poisoned = false;
    for &v in xc.remainder() {
        m = if v > m { v } else { m };
        poisoned |= v.is_nan() || v == f32::INFINITY;
    }
    for i in 0..L {
        m = if lanes[i] > m { lanes[i] } else { m };
        poisoned |= bad[i].is_nan();
    }
    if poisoned || m == f32::NEG_INFINITY {
        out.fill(f32::NAN);
        return;
    }
    let mut sums = [0.0f32; L];
    let mut oc = out.chunks_exact_mut(L);
    let mut xc = x.chunks_exact(L);
    for (o, c) in (&mut oc).zip(&mut xc) {
        for i in 0..L {
            let e = exp_f32(c[i] - m);
            o[i] = e;
            sums[i] += e;
        }
    }
    let mut s: f32 = 0.0;
    for (o, &v) in oc.into_remainder().iter_mut().zip(xc.remainder()) {
        *o = exp_f32(v - m);
        s += *o;
    }
    s += sums.iter().sum::<f32>();
    let r = 1.0 / s;
    for o in out.iter_mut() {
        *o *= r;
    }
}

fn softmax_typed<T: Compute>(data: &[T], l: &Layout, log: bool) -> Vec<T> {
    let x = strided::contiguous(data, l);
    let d = l.dims().last().copied().unwrap_or(1);
    let mut out = strided::zeroed(x.len());
    map_rows::<T>(&x, d, &mut out, d, |_, xr, or| softmax_row(xr, or, log));
    out
}

/// f32 softmax (not log-softmax) over contiguous rows: the vectorised row kernel, rows in parallel.
fn softmax_f32(data: &[f32], l: &Layout) -> Vec<f32> {
    let x = strided::contiguous(data, l);
    let d = l.dims().last().copied().unwrap_or(1).max(1);
    let mut out: Vec<f32> = strided::zeroed(x.len());
    let per_task = (TASK_ELEMS / d).max(1);
    out.par_chunks_mut(per_task * d).zip(x.par_chunks(per_task * d)).for_each(|(o, xs)| {
        super::math::vectorized(
            #[inline(always)]
            || {
                for (or, xr) in o.chunks_mut(d).zip(xs.chunks(d)) {
                    softmax_row_f32(xr, or);
                }
            },
        )
    });
    out
}

pub(crate) fn softmax_last(s: &CpuStorage, l: &Layout, log: bool) -> Result<CpuStorage> {
    Ok(match s {
        CpuStorage::F32(v) if !log => CpuStorage::F32(softmax_f32(v, l)),
        CpuStorage::F32(v) => CpuStorage::F32(softmax_typed(v, l, log)),
        CpuStorage::F64(v) => CpuStorage::F64(softmax_typed(v, l, log)),
        CpuStorage::F16(v) => CpuStorage::F16(softmax_typed(v, l, log)),
        CpuStorage::BF16(v) => CpuStorage::BF16(softmax_typed(v, l, log)),
        _ => return Err(unsupported(if log { "log_softmax" } else { "softmax" }, s.dtype())),
    })
}
