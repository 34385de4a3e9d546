//! Rotary position embedding of `(b, h, t, d)` rows with `(t, d/2)` cos/sin tables, computed in f32
//! (f64 for f64), rows in parallel.

use super::norm::param;
use super::softmax::{map_rows, Compute};
use super::{strided, unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::{Layout, Result};

fn rope_typed<T: Compute>(
    x: &[T],
    l: &Layout,
    cos: &[T],
    cl: &Layout,
    sin: &[T],
    sl: &Layout,
    interleaved: bool,
) -> Vec<T> {
    let dims = l.dims();
    let (t, d) = (dims[2], dims[3]);
    let half = d / 2;
    let x = strided::contiguous(x, l);
    let (cos, sin) = (param(cos, cl), param(sin, sl));
    let mut out = strided::zeroed(x.len());
    map_rows::<T>(&x, d, &mut out, d, |r, xr, or| {
        let ti = r % t;
        let c = &cos[ti * half..(ti + 1) * half];
        let s = &sin[ti * half..(ti + 1) * half];
        if interleaved {
            for (((o, x), &c), &s) in or.chunks_exact_mut(2).zip(xr.chunks_exact(2)).zip(c).zip(s) {
                o[0] = x[0] * c - x[1] * s;
                o[1] = x[1] * c + x[0] * s;
            }
        } else {
            let (x1, x2) = xr.split_at(half);
            let (o1, o2) = or.split_at_mut(half);
            for ((((o1, o2), (&x1, &x2)), &c), &s) in o1.iter_mut().zip(o2).zip(x1.iter().zip(x2)).zip(c).zip(s) {
                *o1 = x1 * c - x2 * s;
                *o2 = x2 * c + x1 * s;
            }
        }
    });
    out
}

pub(crate) fn rope(
    x: &CpuStorage,
    l: &Layout,
    cos: &CpuStorage,
    cl: &Layout,
    sin: &CpuStorage,
    sl: &Layout,
    interleaved: bool,
) -> Result<CpuStorage> {
    Ok(match (x, cos, sin) {
        (CpuStorage::F32(x), CpuStorage::F32(c), CpuStorage::F32(s)) => {
            CpuStorage::F32(rope_typed(x, l, c, cl, s, sl, interleaved))
        }
        (CpuStorage::F64(x), CpuStorage::F64(c), CpuStorage::F64(s)) => {
            CpuStorage::F64(rope_typed(x, l, c, cl, s, sl, interleaved))
        }
        (CpuStorage::F16(x), CpuStorage::F16(c), CpuStorage::F16(s)) => {
            CpuStorage::F16(rope_typed(x, l, c, cl, s, sl, interleaved))
        }
        (CpuStorage::BF16(x), CpuStorage::BF16(c), CpuStorage::BF16(s)) => {
            CpuStorage::BF16(rope_typed(x, l, c, cl, s, sl, interleaved))
        }
        (x, c, _) if x.dtype() != c.dtype() => return Err(x.not_same_dtype("rope", c)),
        (x, _, s) if x.dtype() != s.dtype() => return Err(x.not_same_dtype("rope", s)),
        _ => return Err(unsupported("rope", x.dtype())),
    })
}
