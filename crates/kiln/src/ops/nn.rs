//! Softmax, normalisation and the fused SwiGLU activation.

use crate::{Error, Result, Tensor};

impl Tensor {
    pub fn softmax(&self, _axis: isize) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "softmax", backend: "api" })
    }

    pub fn log_softmax(&self, _axis: isize) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "log_softmax", backend: "api" })
    }

    /// `x / sqrt(mean(x^2, -1) + eps) * weight`, weight of shape `(d,)`.
    pub fn rms_norm(&self, _weight: &Tensor, _eps: f64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "rms_norm", backend: "api" })
    }

    /// `(x - mean) / sqrt(var + eps) * weight + bias` over the last axis.
    pub fn layer_norm(&self, _weight: &Tensor, _bias: Option<&Tensor>, _eps: f64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "layer_norm", backend: "api" })
    }

    /// `silu(self) * up` (the SwiGLU gate), fused.
    pub fn silu_mul(&self, _up: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "silu_mul", backend: "api" })
    }
}
