//! Attention for what the fused `Tensor::sdpa` does not do, composed of kiln ops: Gemma 2's
//! soft-capped scores (`tanh(s / cap) * cap` before the softmax) and sliding windows (a query sees
//! itself and the `window - 1` positions before it). Where neither applies (no cap, every key
//! inside the window) it is `sdpa` itself. Scores, softmax and the weighted sum are computed in f32
//! whatever the model dtype, like `sdpa`.

use crate::Result;
use kiln::{DType, Tensor};

/// Causal attention of queries `(1, nh, t, d)` (the last `t` of the `tk` positions) over keys and
/// values `(1, nkv, tk, d)`, `nh` a multiple of `nkv` (query head `i` reads key/value head
/// `i / (nh / nkv)`), scores scaled by `scale`, soft-capped at `softcap` and limited to the last
/// `window` positions of each query. Returns `(1, nh, t, d)` in the dtype of `q`.
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    softcap: Option<f64>,
    window: Option<usize>,
) -> Result<Tensor> {
    let (nh, t, d) = (q.dims()[1], q.dims()[2], q.dims()[3]);
    let (nkv, tk) = (k.dims()[1], k.dims()[2]);
    // The farthest key a query sees is position 0 from position tk - 1.
    let window = window.filter(|&w| tk > w);
    if softcap.is_none() && window.is_none() {
        return Ok(q.sdpa(k, v, true, Some(scale))?);
    }
    let g = nh / nkv;
    let f32_ = |x: &Tensor| x.to_dtype(DType::F32);
    // The `g` query heads of one key/value head stacked as rows: one product per key/value head.
    let qg = f32_(q)?.contiguous()?.reshape((1, nkv, g * t, d))?;
    let mut s = qg.matmul(&f32_(k)?.transpose(2, 3)?)?.mul_scalar(scale)?; // (1, nkv, g t, tk)
    if let Some(cap) = softcap {
        s = s.div_scalar(cap)?.tanh()?.mul_scalar(cap)?;
    }
    let mask = Tensor::from_vec(mask(t, tk, window), (t, tk), q.device())?;
    let p = s.reshape((1, nkv, g, t, tk))?.add(&mask)?.softmax(-1)?.reshape((1, nkv, g * t, tk))?;
    let out = p.matmul(&f32_(v)?)?.reshape((1, nh, t, d))?;
    Ok(out.to_dtype(q.dtype())?)
}

/// The additive mask `(t, tk)`: 0 where query `i` (position `tk - t + i`) sees key `j` (`j` at most
/// its position and, with a window `w`, less than `w` before it), `-inf` elsewhere.
pub(crate) fn mask(t: usize, tk: usize, window: Option<usize>) -> Vec<f32> {
    let mut m = Vec::with_capacity(t * tk);
    for i in 0..t {
        let p = tk - t + i;
        m.extend((0..tk).map(|j| {
            let seen = j <= p && window.is_none_or(|w| p - j < w);
            if seen {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        }));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::Device;

    /// A direct f64 loop over heads, queries and keys: the reference of the composed ops.
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        (nh, nkv, t, tk, d): (usize, usize, usize, usize, usize),
        scale: f64,
        softcap: Option<f64>,
        window: Option<usize>,
    ) -> Vec<f64> {
        let mut out = vec![0.0; nh * t * d];
        for h in 0..nh {
            let kh = h / (nh / nkv);
            for i in 0..t {
                let p = tk - t + i;
                let mut s: Vec<f64> = (0..tk)
                    .map(|j| {
                        let dot: f64 =
                            (0..d).map(|x| q[(h * t + i) * d + x] as f64 * k[(kh * tk + j) * d + x] as f64).sum();
                        let s = dot * scale;
                        softcap.map_or(s, |c| (s / c).tanh() * c)
                    })
                    .collect();
                for (j, sj) in s.iter_mut().enumerate() {
                    if j > p || window.is_some_and(|w| p - j >= w) {
                        *sj = f64::NEG_INFINITY;
                    }
                }
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                let z: f64 = e.iter().sum();
                for x in 0..d {
                    out[(h * t + i) * d + x] = (0..tk).map(|j| e[j] / z * v[(kh * tk + j) * d + x] as f64).sum::<f64>();
                }
            }
        }
        out
    }

    /// On the CPU and, where there is one, the GPU (the fixture tests cover the GPU through Gemma 2).
    #[test]
    fn composed_attention_matches_an_f64_loop() {
        let (nh, nkv, d) = (4, 2, 8);
        let vals = |n: usize, seed: u32| -> Vec<f32> {
            (0..n)
                .map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 2000) as f32 / 500.0 - 2.0)
                .collect()
        };
        let devs = [Some(Device::cpu()), Device::gpu().ok()];
        let cases =
            [(5, 5, Some(3.0), None), (5, 5, None, Some(2)), (1, 7, Some(2.0), Some(3)), (3, 9, Some(5.0), Some(4))];
        for (dev, (t, tk, softcap, window)) in devs.iter().flatten().flat_map(|d| cases.map(|c| (d, c))) {
            let (qv, kv, vv) = (vals(nh * t * d, 1), vals(nkv * tk * d, 2), vals(nkv * tk * d, 3));
            let q = Tensor::from_vec(qv.clone(), (1, nh, t, d), dev).unwrap();
            let k = Tensor::from_vec(kv.clone(), (1, nkv, tk, d), dev).unwrap();
            let v = Tensor::from_vec(vv.clone(), (1, nkv, tk, d), dev).unwrap();
            let got = attention(&q, &k, &v, 0.3, softcap, window).unwrap().to_vec::<f32>().unwrap();
            let want = reference(&qv, &kv, &vv, (nh, nkv, t, tk, d), 0.3, softcap, window);
            let worst = got.iter().zip(&want).map(|(&g, &w)| (g as f64 - w).abs()).fold(0.0, f64::max);
            assert!(worst < 1e-5, "{dev} t {t} tk {tk} cap {softcap:?} window {window:?}: off by {worst:e}");
        }
    }

    #[test]
    fn mask_keeps_the_window() {
        let m = mask(2, 4, Some(2));
        let seen: Vec<bool> = m.iter().map(|x| *x == 0.0).collect();
        assert_eq!(seen, [false, true, true, false, false, false, true, true]);
    }
}
