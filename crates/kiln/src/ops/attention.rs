//! Scaled dot-product attention with causal masking and grouped-query attention, and the
//! options of Gemma 2, Mistral and their kin: soft-capped scores and sliding windows.

use super::nn::require_float;
use crate::op::AttentionParams;
use crate::{Error, Result, Tensor};

/// What [`Tensor::sdpa_with`] computes besides plain scaled dot-product attention. `Default` is
/// non-causal, scale `1/sqrt(d)`, no soft cap, no window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SdpaOptions {
    /// Query `i` sees keys `j <= i + tk - tq` (the queries are the last `tq` of the `tk` positions).
    pub causal: bool,
    /// The score scale; `1/sqrt(d)` when `None` (1 when `d == 0`). Finite and within f32 range.
    pub scale: Option<f64>,
    /// Scores soft-capped to `cap * tanh(score / cap)` after scaling, before the softmax (Gemma 2's
    /// `attn_logit_softcapping`). Finite and positive.
    pub softcap: Option<f64>,
    /// A sliding window (causal only): the query at position `p` sees keys `j` with
    /// `p - window < j <= p`, itself and the `window - 1` before it (Mistral's and Gemma 2's
    /// `sliding_window`, as transformers masks it). At least 1.
    pub window: Option<usize>,
}

impl SdpaOptions {
    /// Causal attention with the default scale.
    pub fn causal() -> Self {
        SdpaOptions { causal: true, ..Self::default() }
    }
}

/// A soft cap must be a positive normal f32 (every backend computes in f32), a window at least 1.
pub(crate) fn check_cap_window(op: &'static str, softcap: Option<f64>, window: Option<usize>) -> Result<()> {
    if let Some(cap) = softcap {
        if !(cap >= f32::MIN_POSITIVE as f64 && cap <= f32::MAX as f64) {
            return Err(Error::arg(
                op,
                format!(
                    "softcap must be positive and finite (a normal f32, at least {:e}), got {cap:e}",
                    f32::MIN_POSITIVE
                ),
            ));
        }
    }
    if window == Some(0) {
        return Err(Error::arg(op, "window must be at least 1 (a query sees itself)"));
    }
    Ok(())
}

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
        self.sdpa_with(k, v, SdpaOptions { causal, scale, ..SdpaOptions::default() })
    }

    /// [`Tensor::sdpa`] with a soft cap on the scores and a sliding window ([`SdpaOptions`]), in the
    /// same fused kernels: no `tq x tk` score matrix is made. Keys before a query's window weigh
    /// nothing, like keys past a causal query; a soft-capped score is finite for finite and infinite
    /// inputs alike (NaN stays NaN).
    pub fn sdpa_with(&self, k: &Tensor, v: &Tensor, opts: SdpaOptions) -> Result<Tensor> {
        const OP: &str = "sdpa";
        let SdpaOptions { causal, scale, softcap, window } = opts;
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
        check_cap_window(OP, softcap, window)?;
        if let (Some(w), false) = (window, causal) {
            return Err(Error::arg(OP, format!("a sliding window ({w}) needs causal attention (causal=true)")));
        }
        // A window no shorter than the keys hides none of them (the farthest key a query sees is
        // position 0 from position tk - 1).
        let window = window.filter(|&w| w < k_[2]);
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
            AttentionParams { scale, causal, softcap, window },
        )?;
        Ok(Tensor::from_storage(s, out_shape, self.device()))
    }
}
