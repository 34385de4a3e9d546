//! RMS norm and layer norm over the last axis: rows in parallel, accumulation in f32 (f64 for f64).

use super::softmax::{map_rows, sum_map, to_acc, Acc, Compute};
use super::{strided, unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::{Layout, Result};

/// The row length (last dim; 1 for a scalar) and the view's elements, contiguous.
fn rows_of<'a, T: Compute>(x: &'a [T], l: &Layout) -> (usize, std::borrow::Cow<'a, [T]>) {
    (l.dims().last().copied().unwrap_or(1), strided::contiguous(x, l))
}

/// A `(d,)` parameter view in the accumulation type.
pub(crate) fn param<T: Compute>(w: &[T], l: &Layout) -> Vec<T::A> {
    to_acc(&strided::contiguous(w, l))
}

fn rms_typed<T: Compute>(x: &[T], l: &Layout, w: &[T], wl: &Layout, eps: f64) -> Vec<T> {
    let (d, x) = rows_of(x, l);
    let w = param(w, wl);
    let eps = T::A::from_f64(eps);
    let inv_d = T::A::from_f64(1.0 / d as f64);
    let mut out = strided::zeroed(x.len());
    map_rows::<T>(&x, d, &mut out, d, |_, xr, or| {
        let ss = sum_map(xr, |v| v * v);
        let r = T::A::ONE / (ss * inv_d + eps).sqrt();
        for ((o, &v), &w) in or.iter_mut().zip(xr).zip(&w) {
            *o = v * r * w;
        }
    });
    out
}

fn layer_typed<T: Compute>(x: &[T], l: &Layout, w: &[T], wl: &Layout, b: Option<(&[T], &Layout)>, eps: f64) -> Vec<T> {
    let (d, x) = rows_of(x, l);
    let w = param(w, wl);
    let b = b.map(|(b, bl)| param(b, bl));
    let eps = T::A::from_f64(eps);
    let inv_d = T::A::from_f64(1.0 / d as f64);
    let dn = T::A::from_f64(d as f64);
    let mut out = strided::zeroed(x.len());
    map_rows::<T>(&x, d, &mut out, d, |_, xr, or| {
        // Passes over the row (it is in cache): the mean, corrected by the mean of the residuals (the
        // rounding of a large sum would otherwise leave every v - mean an ulp of the mean away from 0:
        // a row of equal 1e10 gave b - w instead of b), then the centred second moment, which is more
        // accurate than E[x^2] - E[x]^2.
        let m0 = sum_map(xr, |v| v) / dn;
        let mean = m0 + sum_map(xr, |v| v - m0) / dn;
        let var = sum_map(xr, |v| (v - mean) * (v - mean)) * inv_d;
        let r = T::A::ONE / (var + eps).sqrt();
        match &b {
            Some(b) => {
                for (((o, &v), &w), &b) in or.iter_mut().zip(xr).zip(&w).zip(b) {
                    *o = (v - mean) * r * w + b;
                }
            }
            None => {
                for ((o, &v), &w) in or.iter_mut().zip(xr).zip(&w) {
                    *o = (v - mean) * r * w;
                }
            }
        }
    });
    out
}

pub(crate) fn rms_norm(x: &CpuStorage, l: &Layout, w: &CpuStorage, wl: &Layout, eps: f64) -> Result<CpuStorage> {
    Ok(match (x, w) {
        (CpuStorage::F32(x), CpuStorage::F32(w)) => CpuStorage::F32(rms_typed(x, l, w, wl, eps)),
        (CpuStorage::F64(x), CpuStorage::F64(w)) => CpuStorage::F64(rms_typed(x, l, w, wl, eps)),
        (CpuStorage::F16(x), CpuStorage::F16(w)) => CpuStorage::F16(rms_typed(x, l, w, wl, eps)),
        (CpuStorage::BF16(x), CpuStorage::BF16(w)) => CpuStorage::BF16(rms_typed(x, l, w, wl, eps)),
        (x, w) if x.dtype() != w.dtype() => return Err(x.not_same_dtype("rms_norm", w)),
        _ => return Err(unsupported("rms_norm", x.dtype())),
    })
}

pub(crate) fn layer_norm(
    x: &CpuStorage,
    l: &Layout,
    w: &CpuStorage,
    wl: &Layout,
    b: Option<(&CpuStorage, &Layout)>,
    eps: f64,
) -> Result<CpuStorage> {
    if let Some((b, _)) = b {
        if b.dtype() != x.dtype() {
            return Err(x.not_same_dtype("layer_norm", b));
        }
    }
    macro_rules! arm {
        ($var:ident, $x:expr, $w:expr) => {{
            let b = b.map(|(b, bl)| match b {
                CpuStorage::$var(b) => (b.as_slice(), bl),
                _ => unreachable!("dtype checked above"),
            });
            CpuStorage::$var(layer_typed($x, l, $w, wl, b, eps))
        }};
    }
    Ok(match (x, w) {
        (CpuStorage::F32(x), CpuStorage::F32(w)) => arm!(F32, x, w),
        (CpuStorage::F64(x), CpuStorage::F64(w)) => arm!(F64, x, w),
        (CpuStorage::F16(x), CpuStorage::F16(w)) => arm!(F16, x, w),
        (CpuStorage::BF16(x), CpuStorage::BF16(w)) => arm!(BF16, x, w),
        (x, w) if x.dtype() != w.dtype() => return Err(x.not_same_dtype("layer_norm", w)),
        _ => return Err(unsupported("layer_norm", x.dtype())),
    })
}
