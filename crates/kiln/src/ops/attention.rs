//! Scaled dot-product attention with causal masking and grouped-query attention.

use crate::{Error, Result, Tensor};

impl Tensor {
    /// Scaled dot-product attention of `self` (queries `(b, hq, tq, d)`) over keys `(b, hkv, tk, d)` and
    /// values `(b, hkv, tk, dv)`; `hq` must be a multiple of `hkv`. `scale` defaults to `1/sqrt(d)`.
    /// With `causal`, query `i` attends to keys `j <= i + tk - tq`.
    pub fn sdpa(&self, _k: &Tensor, _v: &Tensor, _causal: bool, _scale: Option<f64>) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "sdpa", backend: "api" })
    }
}
