//! Elementwise ops of two operands with NumPy broadcasting and dtype promotion, tensor-scalar forms,
//! comparisons, `where_` and logical ops.

use crate::op::{BinaryOp, CmpOp};
use crate::{Error, Result, Tensor};

impl Tensor {
    pub fn binary(&self, _rhs: &Tensor, _op: BinaryOp) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "binary", backend: "api" })
    }

    pub fn add(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "add", backend: "api" })
    }

    pub fn sub(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "sub", backend: "api" })
    }

    pub fn mul(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "mul", backend: "api" })
    }

    pub fn div(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "div", backend: "api" })
    }

    pub fn pow(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "pow", backend: "api" })
    }

    pub fn maximum(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "maximum", backend: "api" })
    }

    pub fn minimum(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "minimum", backend: "api" })
    }

    pub fn logical_and(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "logical_and", backend: "api" })
    }

    pub fn logical_or(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "logical_or", backend: "api" })
    }

    /// The op with a scalar right operand; the scalar takes the tensor's dtype (an integer tensor with
    /// a non-integer scalar computes in f32).
    pub fn binary_scalar(&self, _rhs: f64, _op: BinaryOp) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "binary_scalar", backend: "api" })
    }

    pub fn add_scalar(&self, _rhs: f64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "add_scalar", backend: "api" })
    }

    pub fn sub_scalar(&self, _rhs: f64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "sub_scalar", backend: "api" })
    }

    pub fn mul_scalar(&self, _rhs: f64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "mul_scalar", backend: "api" })
    }

    pub fn div_scalar(&self, _rhs: f64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "div_scalar", backend: "api" })
    }

    pub fn pow_scalar(&self, _rhs: f64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "pow_scalar", backend: "api" })
    }

    pub fn maximum_scalar(&self, _rhs: f64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "maximum_scalar", backend: "api" })
    }

    pub fn minimum_scalar(&self, _rhs: f64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "minimum_scalar", backend: "api" })
    }

    pub fn cmp(&self, _rhs: &Tensor, _op: CmpOp) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "cmp", backend: "api" })
    }

    pub fn eq(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "eq", backend: "api" })
    }

    pub fn ne(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "ne", backend: "api" })
    }

    pub fn lt(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "lt", backend: "api" })
    }

    pub fn le(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "le", backend: "api" })
    }

    pub fn gt(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "gt", backend: "api" })
    }

    pub fn ge(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "ge", backend: "api" })
    }

    pub fn cmp_scalar(&self, _rhs: f64, _op: CmpOp) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "cmp_scalar", backend: "api" })
    }

    /// Elementwise `if mask { on_true } else { on_false }` with broadcasting of all three; `mask` is
    /// bool, the branches are promoted to a common dtype.
    pub fn where_(_mask: &Tensor, _on_true: &Tensor, _on_false: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "where_", backend: "api" })
    }
}
