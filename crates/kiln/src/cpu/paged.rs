//! Decode attention through a block table (`Tensor::sdpa_paged`) on the CPU: a direct loop over
//! the pools, without gathering each sequence's keys and values.

use super::CpuStorage;
use crate::{DType, Error, Result, WithDType};
use rayon::prelude::*;

const OP: &str = "sdpa_paged";

/// The sizes of one call: query and key/value heads, head sizes, positions per block.
#[derive(Clone, Copy)]
pub(super) struct Geometry {
    pub hq: usize,
    pub hkv: usize,
    pub d: usize,
    pub dv: usize,
    pub bs: usize,
    pub scale: f32,
    /// Scores soft-capped, and a query limited to its sequence's last `window` positions.
    pub softcap: Option<f32>,
    pub window: Option<usize>,
}

/// The sequences' block ids (`(b, max_blocks)`, row-major) and lengths.
pub(super) struct Table<'a> {
    pub ids: &'a [u32],
    pub max_blocks: usize,
    pub lens: &'a [usize],
}

/// `(b, hq, 1, dv)` in f32 from the f32 queries `q` `(b, hq, 1, d)` (contiguous) and the pools
/// `k`, `v` (elements from `ko`, `vo`) of the pool dtype.
pub(super) fn paged(
    dt: DType,
    q: &[f32],
    (k, ko): (&CpuStorage, usize),
    (v, vo): (&CpuStorage, usize),
    t: &Table,
    g: Geometry,
) -> Result<Vec<f32>> {
    match dt {
        DType::F16 => paged_t::<half::f16>(q, k, v, ko, vo, t, g),
        DType::BF16 => paged_t::<half::bf16>(q, k, v, ko, vo, t, g),
        _ => paged_t::<f32>(q, k, v, ko, vo, t, g),
    }
}

/// Per (sequence, query head) the scores of all positions, read through the table from the pools,
/// then softmax and the weighted value sum, in f32. As the GPU: a NaN score or a row whose weights
/// sum to 0 gives NaN; every position adds `p * v` (a NaN value poisons the row).
fn paged_t<T: WithDType>(
    q: &[f32],
    k: &CpuStorage,
    v: &CpuStorage,
    ko: usize,
    vo: usize,
    t: &Table,
    g: Geometry,
) -> Result<Vec<f32>> {
    let (Some(k), Some(v)) = (T::storage_slice(k), T::storage_slice(v)) else {
        return Err(Error::dtype(OP, T::DTYPE, "pool storage of another dtype"));
    };
    let group = g.hq / g.hkv;
    let mut out = vec![0f32; t.lens.len() * g.hq * g.dv];
    out.par_chunks_mut(g.dv).enumerate().for_each(|(row, o)| {
        let (b, h) = (row / g.hq, row % g.hq);
        let hk = h / group;
        let blocks = &t.ids[b * t.max_blocks..(b + 1) * t.max_blocks];
        let at =
            |j: usize, e: usize, off: usize| off + ((blocks[j / g.bs] as usize * g.hkv + hk) * g.bs + j % g.bs) * e;
        let qr = &q[row * g.d..(row + 1) * g.d];
        let n = t.lens[b];
        // The window's positions: the last `window` of the sequence's.
        let first = g.window.map_or(0, |w| n.saturating_sub(w));
        let scores: Vec<f32> = (first..n)
            .map(|j| {
                let kr = &k[at(j, g.d, ko)..at(j, g.d, ko) + g.d];
                let s = qr.iter().zip(kr).map(|(a, b)| a * g.scale * b.to_f64() as f32).sum::<f32>();
                g.softcap.map_or(s, |c| c * (s / c).tanh())
            })
            .collect();
        let bad = scores.iter().any(|s| s.is_nan());
        let m = scores.iter().copied().filter(|s| *s > f32::NEG_INFINITY).fold(f32::NEG_INFINITY, f32::max);
        let mut l = 0f32;
        for (j, &s) in scores.iter().enumerate() {
            let p = if s > f32::NEG_INFINITY { (s - m).exp() } else { 0.0 };
            l += p;
            let vr = &v[at(first + j, g.dv, vo)..at(first + j, g.dv, vo) + g.dv];
            o.iter_mut().zip(vr).for_each(|(a, x)| *a += p * x.to_f64() as f32);
        }
        if bad || l == 0.0 {
            o.fill(f32::NAN);
        } else {
            o.iter_mut().for_each(|a| *a /= l);
        }
    });
    Ok(out)
}
