//! Scaled dot-product attention with causal masking and grouped-query attention.

use super::nn::require_float;
use crate::op::AttentionParams;
use crate::{Error, Result, Tensor};

impl Tensor {
    /// Scaled dot-product attention of `self` (queries `(b, hq, tq, d)`) over keys `(b, hkv, tk, d)` and
    /// values `(b, hkv, tk, dv)`; `hq` must be a multiple of `hkv` (grouped-query attention: query head
    /// `i` uses key/value head `i / (hq / hkv)`). `scale` defaults to `1/sqrt(d)` (1 when `d == 0`)
    /// and must be finite. With `causal`, query `i` attends to keys `j <= i + tk - tq` (the queries are
    /// the last `tq` of the `tk` positions, as with a KV cache). The result is `(b, hq, tq, dv)`.
    ///
    /// A query with no visible key (`tk == 0`, or causal with `tq > tk` for the first `tq - tk`
    /// queries) gets zeros, like FlashAttention. NaN in a visible score gives a NaN row.
    /// Float dtypes only; f16/bf16 are computed in f32.
    pub fn sdpa(&self, k: &Tensor, v: &Tensor, causal: bool, scale: Option<f64>) -> Result<Tensor> {
        const OP: &str = "sdpa";
        require_float(OP, self)?;
        for t in [k, v] {
            self.same_device(OP, t)?;
            self.same_dtype(OP, t)?;
        }
        let shapes = || format!("q {}, k {}, v {}", self.shape(), k.shape(), v.shape());
        if self.rank() != 4 || k.rank() != 4 || v.rank() != 4 {
            return Err(Error::shape(
                OP,
                format!("expected q (b, hq, tq, d), k (b, hkv, tk, d), v (b, hkv, tk, dv), got {}", shapes()),
            ));
        }
        let (q_, k_, v_) = (self.dims(), k.dims(), v.dims());
        if q_[0] != k_[0] || q_[0] != v_[0] {
            return Err(Error::shape(OP, format!("batch sizes differ: {}", shapes())));
        }
        if k_[1] != v_[1] || k_[2] != v_[2] {
            return Err(Error::shape(OP, format!("k and v must have the same heads and length: {}", shapes())));
        }
        if q_[3] != k_[3] {
            return Err(Error::shape(OP, format!("q and k must have the same head size: {}", shapes())));
        }
        let (hq, hkv) = (q_[1], k_[1]);
        if (hkv == 0 && hq != 0) || (hkv != 0 && hq % hkv != 0) {
            return Err(Error::shape(
                OP,
                format!("the query heads ({hq}) must be a multiple of the key/value heads ({hkv}): {}", shapes()),
            ));
        }
        let d = q_[3];
        let scale = scale.unwrap_or(if d == 0 { 1.0 } else { 1.0 / (d as f64).sqrt() });
        // Scores are computed in f32 on every backend: a scale f32 cannot hold makes every score
        // infinite and the whole output NaN, so it is refused rather than answered with NaN.
        if !scale.is_finite() || scale.abs() > f32::MAX as f64 {
            return Err(Error::arg(
                OP,
                format!("scale must be finite and within f32 range (|scale| <= {:e}), got {scale:e}", f32::MAX),
            ));
        }
        let out_shape = (q_[0], hq, q_[2], v_[3]);
        if q_[0] * hq * q_[2] * v_[3] == 0 || k_[2] == 0 {
            return Tensor::zeros(out_shape, self.dtype(), self.device());
        }
        let s = self.storage().attention(
            self.layout(),
            &k.storage(),
            k.layout(),
            &v.storage(),
            v.layout(),
            AttentionParams { scale, causal },
        )?;
        Ok(Tensor::from_storage(s, out_shape, self.device()))
    }
}
