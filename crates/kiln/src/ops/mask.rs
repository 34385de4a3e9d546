//! Triangular masks: `triu`, `tril`.

use crate::{Error, Result, Tensor};

impl Tensor {
    /// Keeps elements on and above diagonal `k` of the last two axes, zeroes the rest (PyTorch `triu`).
    pub fn triu(&self, _k: i64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "triu", backend: "api" })
    }

    /// Keeps elements on and below diagonal `k` of the last two axes (PyTorch `tril`).
    pub fn tril(&self, _k: i64) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "tril", backend: "api" })
    }
}
