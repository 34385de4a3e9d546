//! Elementwise ops of one operand.

use crate::op::UnaryOp;
use crate::{Error, Result, Tensor};

impl Tensor {
    /// Applies a unary op (integer inputs of float-only ops are cast to f32 first).
    pub fn unary(&self, _op: UnaryOp) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "unary", backend: "api" })
    }

    pub fn neg(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "neg", backend: "api" })
    }

    pub fn abs(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "abs", backend: "api" })
    }

    pub fn sign(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "sign", backend: "api" })
    }

    pub fn sqrt(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "sqrt", backend: "api" })
    }

    pub fn rsqrt(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "rsqrt", backend: "api" })
    }

    pub fn exp(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "exp", backend: "api" })
    }

    pub fn log(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "log", backend: "api" })
    }

    pub fn sin(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "sin", backend: "api" })
    }

    pub fn cos(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "cos", backend: "api" })
    }

    pub fn tanh(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "tanh", backend: "api" })
    }

    pub fn square(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "square", backend: "api" })
    }

    pub fn recip(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "recip", backend: "api" })
    }

    pub fn floor(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "floor", backend: "api" })
    }

    pub fn ceil(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "ceil", backend: "api" })
    }

    pub fn round(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "round", backend: "api" })
    }

    pub fn relu(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "relu", backend: "api" })
    }

    pub fn sigmoid(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "sigmoid", backend: "api" })
    }

    pub fn silu(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "silu", backend: "api" })
    }

    /// GELU, tanh approximation.
    pub fn gelu(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "gelu", backend: "api" })
    }

    /// GELU with the exact erf.
    pub fn gelu_erf(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "gelu_erf", backend: "api" })
    }

    pub fn clamp(&self, _min: f64, _max: f64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "clamp", backend: "api" })
    }

    pub fn logical_not(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "logical_not", backend: "api" })
    }
}
