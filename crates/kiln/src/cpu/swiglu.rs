//! The fused SwiGLU gate `silu(g) * u`, one pass, computed in f32 (f64 for f64).

use super::softmax::{Acc, Compute};
use super::{strided, unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::{Layout, Result};
use rayon::prelude::*;
use std::borrow::Cow;

/// Elements per parallel task.
const BLOCK: usize = 1 << 14;

/// `silu(g) * u` with `silu(g) = g / (1 + e^-g)`.
#[inline(always)]
fn silu_mul_one<A: Acc>(g: A, u: A) -> A {
    // silu(-inf) is -0 (its limit, as in `silu` and on the GPU), not -inf / inf = NaN.
    let s = if g == A::NEG_INF { A::from_f64(-0.0) } else { g / (A::ONE + (A::ZERO - g).exp()) };
    s * u
}

fn acc_block<T: Compute>(x: &[T]) -> Cow<'_, [T::A]> {
    match T::as_acc(x) {
        Some(a) => Cow::Borrowed(a),
        None => {
            let mut v = vec![T::A::ZERO; x.len()];
            T::load(x, &mut v);
            Cow::Owned(v)
        }
    }
}

fn silu_mul_typed<T: Compute>(g: &[T], gl: &Layout, u: &[T], ul: &Layout) -> Vec<T> {
    // Broadcast or strided operands are gathered first; the common case (both contiguous) is not.
    let g = strided::contiguous(g, gl);
    let u = strided::contiguous(u, ul);
    let mut out = strided::zeroed(g.len());
    out.par_chunks_mut(BLOCK).zip(g.par_chunks(BLOCK)).zip(u.par_chunks(BLOCK)).for_each(|((o, g), u)| {
        let (g, u) = (acc_block(g), acc_block(u));
        let run = |o: &mut [T::A]| {
            for ((o, &g), &u) in o.iter_mut().zip(g.iter()).zip(u.iter()) {
                *o = silu_mul_one(g, u);
            }
        };
        match T::as_acc_mut(o) {
            Some(o) => run(o),
            None => {
                let mut tmp = vec![T::A::ZERO; o.len()];
                run(&mut tmp);
                T::store(&tmp, o);
            }
        }
    });
    out
}

pub(crate) fn silu_mul(g: &CpuStorage, l: &Layout, up: &CpuStorage, ul: &Layout) -> Result<CpuStorage> {
    Ok(match (g, up) {
        (CpuStorage::F32(g), CpuStorage::F32(u)) => CpuStorage::F32(silu_mul_typed(g, l, u, ul)),
        (CpuStorage::F64(g), CpuStorage::F64(u)) => CpuStorage::F64(silu_mul_typed(g, l, u, ul)),
        (CpuStorage::F16(g), CpuStorage::F16(u)) => CpuStorage::F16(silu_mul_typed(g, l, u, ul)),
        (CpuStorage::BF16(g), CpuStorage::BF16(u)) => CpuStorage::BF16(silu_mul_typed(g, l, u, ul)),
        (g, u) if g.dtype() != u.dtype() => return Err(g.not_same_dtype("silu_mul", u)),
        _ => return Err(unsupported("silu_mul", g.dtype())),
    })
}
