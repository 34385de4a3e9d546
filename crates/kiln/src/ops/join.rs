//! Joining and splitting: `concat`, `stack`, `split`, `chunk`, `pad`, `flip`.

use crate::{Error, Result, Tensor};

impl Tensor {
    /// Joins tensors along an existing axis; all other dims must agree.
    pub fn concat(_tensors: &[&Tensor], _axis: isize) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "concat", backend: "api" })
    }

    /// Joins tensors of one shape along a new axis.
    pub fn stack(_tensors: &[&Tensor], _axis: isize) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "stack", backend: "api" })
    }

    /// Views of consecutive pieces of `axis` with the given sizes (they must sum to the axis size).
    pub fn split(&self, _sizes: &[usize], _axis: isize) -> Result<Vec<Tensor>> {
        Err(Error::NotImplemented { op: "split", backend: "api" })
    }

    /// `n` views along `axis`, all of size `ceil(dim / n)` but the last (PyTorch `chunk`).
    pub fn chunk(&self, _n: usize, _axis: isize) -> Result<Vec<Tensor>> {
        Err(Error::NotImplemented { op: "chunk", backend: "api" })
    }

    /// Pads with a constant: `pads[i] = (before, after)` for axis `i`; with fewer pairs than axes, the
    /// pairs apply to the first `pads.len()` axes.
    pub fn pad(&self, _pads: &[(usize, usize)], _value: f64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "pad", backend: "api" })
    }

    /// Reverses the order of entries along each of `axes`.
    pub fn flip(&self, _axes: &[isize]) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "flip", backend: "api" })
    }
}
