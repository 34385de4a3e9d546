//! Matrix products with NumPy `matmul` rules, `linear` and `dot`.

use crate::{Error, Result, Tensor};

impl Tensor {
    /// NumPy `matmul`: 1-D operands are promoted to matrices and the added axis removed; batch axes
    /// broadcast. Transposed views are used as they are.
    pub fn matmul(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "matmul", backend: "api" })
    }

    /// `self @ w^T + bias` with `w` of shape `(out, in)` (PyTorch's `nn.Linear`).
    pub fn linear(&self, _w: &Tensor, _bias: Option<&Tensor>) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "linear", backend: "api" })
    }

    /// Inner product of two 1-D tensors, rank 0.
    pub fn dot(&self, _rhs: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "dot", backend: "api" })
    }
}
