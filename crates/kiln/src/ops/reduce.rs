//! Reductions over all elements or a set of axes, and cumulative sums.

use crate::{Error, Result, Tensor};

impl Tensor {
    /// Sum over `axes` (negative axes count from the end; empty means no reduction).
    pub fn sum(&self, _axes: &[isize], _keepdim: bool) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "sum", backend: "api" })
    }

    /// Sum of all elements, as a rank-0 tensor.
    pub fn sum_all(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "sum_all", backend: "api" })
    }

    pub fn mean(&self, _axes: &[isize], _keepdim: bool) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "mean", backend: "api" })
    }

    pub fn mean_all(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "mean_all", backend: "api" })
    }

    pub fn max(&self, _axes: &[isize], _keepdim: bool) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "max", backend: "api" })
    }

    pub fn max_all(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "max_all", backend: "api" })
    }

    pub fn min(&self, _axes: &[isize], _keepdim: bool) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "min", backend: "api" })
    }

    pub fn min_all(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "min_all", backend: "api" })
    }

    pub fn prod(&self, _axes: &[isize], _keepdim: bool) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "prod", backend: "api" })
    }

    pub fn prod_all(&self) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "prod_all", backend: "api" })
    }

    /// Index (i64) of the first maximum along `axis`.
    pub fn argmax(&self, _axis: isize, _keepdim: bool) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "argmax", backend: "api" })
    }

    pub fn argmin(&self, _axis: isize, _keepdim: bool) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "argmin", backend: "api" })
    }

    /// Variance with `correction` (0: population, 1: sample, like PyTorch).
    pub fn var(&self, _axes: &[isize], _keepdim: bool, _correction: usize) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "var", backend: "api" })
    }

    pub fn std(&self, _axes: &[isize], _keepdim: bool, _correction: usize) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "std", backend: "api" })
    }

    /// Inclusive prefix sum along `axis`.
    pub fn cumsum(&self, _axis: isize) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "cumsum", backend: "api" })
    }
}
