//! Triangular masks: `triu`, `tril`.
//!
//! Both work on the last two axes of tensors of rank ≥ 2 (any batch, non-square matrices, any `k`,
//! every dtype). The output starts as zeros and each row's kept run of columns is copied into it with
//! the backend's `copy_into` (one strided copy per matrix row, covering the whole batch), so masked
//! entries are exactly zero (NaN included) and kept ones are bit-exact copies.

use crate::{Error, Result, Tensor};

impl Tensor {
    /// Keeps elements on and above diagonal `k` of the last two axes, zeroes the rest (PyTorch `triu`).
    pub fn triu(&self, k: i64) -> Result<Tensor> {
        // Row i keeps columns j with j - i >= k.
        self.triangle("triu", |i, n| (clamp_col(i.saturating_add(k), n), n))
    }

    /// Keeps elements on and below diagonal `k` of the last two axes (PyTorch `tril`).
    pub fn tril(&self, k: i64) -> Result<Tensor> {
        // Row i keeps columns j with j - i <= k.
        self.triangle("tril", |i, n| (0, clamp_col(i.saturating_add(k).saturating_add(1), n)))
    }

    /// Copies, for each row `i` of the last two axes, the columns `kept(i, n)` (a half-open range).
    fn triangle(&self, op: &'static str, kept: impl Fn(i64, usize) -> (usize, usize)) -> Result<Tensor> {
        if self.rank() < 2 {
            return Err(Error::shape(op, format!("needs a tensor of rank at least 2, got shape {}", self.shape())));
        }
        let (rows_axis, cols_axis) = (self.rank() - 2, self.rank() - 1);
        let (m, n) = (self.dims()[rows_axis], self.dims()[cols_axis]);
        let out = Tensor::zeros(self.shape(), self.dtype(), self.device())?;
        if self.elem_count() == 0 {
            return Ok(out);
        }
        let src = self.storage();
        let mut dst = out.storage_mut();
        for i in 0..m {
            let (lo, hi) = kept(i as i64, n);
            if lo >= hi {
                continue;
            }
            let sl = self.layout().narrow(op, rows_axis, i, 1)?.narrow(op, cols_axis, lo, hi - lo)?;
            let dl = out.layout().narrow(op, rows_axis, i, 1)?.narrow(op, cols_axis, lo, hi - lo)?;
            src.copy_into(&sl, &mut dst, &dl)?;
        }
        drop(dst);
        Ok(out)
    }
}

/// `c` clamped to the column range `0..=n`.
fn clamp_col(c: i64, n: usize) -> usize {
    c.clamp(0, n as i64) as usize
}
