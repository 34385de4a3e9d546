//! Index-driven selection: `index_select`, `embedding`, `gather`.

use crate::{Error, Result, Tensor};

impl Tensor {
    /// Entries of `axis` picked by the 1-D integer tensor `ids` (in that order, repeats allowed).
    pub fn index_select(&self, _ids: &Tensor, _axis: isize) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "index_select", backend: "api" })
    }

    /// Rows of this `(vocab, d)` table for integer `ids` of any shape; output `ids.shape + (d,)`.
    pub fn embedding(&self, _ids: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "embedding", backend: "api" })
    }

    /// PyTorch `gather`: `out[..][j][..] = self[..][ids[..][j][..]][..]` along `axis`.
    pub fn gather(&self, _axis: isize, _ids: &Tensor) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "gather", backend: "api" })
    }
}
