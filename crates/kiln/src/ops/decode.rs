//! Fused ops of the single-stream decode step: `linear_fused` (a projection that normalises or
//! gates its own input and adds the residual) and `KvCache::append_rope` (`kv_cache/append_rope.rs`).
//! Each goes through the backend seam (`ExtOps`): on the GPU one kernel (`gpu/matvec/dense.rs`) for up to
//! 8 rows; where the backend declines (the CPU, other shapes) the composed ops
//! (`composed::linear_fused`), which are also their test reference.

use crate::backend::Prologue;
use crate::storage::Storage;
use crate::{DType, Error, Result, Tensor};

/// What `linear_fused` does to its input before the product.
#[derive(Debug, Clone, Copy)]
pub enum LinearInput<'a> {
    /// The input as it is.
    Plain,
    /// `rms_norm(x, weight, eps)` (a `(k,)` weight of the input's dtype).
    RmsNorm { weight: &'a Tensor, eps: f64 },
    /// `silu_mul(x[.., :k], x[.., k..])`: the input holds the gate and up projections side by side
    /// (`2k` features, as a stacked gate/up product writes them).
    SiluMul,
}

impl Tensor {
    /// `residual + input(self) @ w^T` for a dense `(n, k)` weight of `self`'s dtype (f32, f16 or
    /// bf16), `input` as [`LinearInput`] says, `residual` (optional) of the output's shape and
    /// dtype; the output is `(..., n)` in `self`'s dtype. A decoder layer's RMSNorm + projection,
    /// and `silu_mul` + down projection + skip connection, each as one GPU kernel for up to 8 rows
    /// (the sums in f32, the normalised or gated input not rounded to the dtype in between);
    /// otherwise the composed ops.
    pub fn linear_fused(&self, w: &Tensor, input: LinearInput, residual: Option<&Tensor>) -> Result<Tensor> {
        let op = "linear_fused";
        if w.rank() != 2 {
            return Err(Error::shape(op, format!("weight must be (out, in), got shape {}", w.shape())));
        }
        let (n, k) = (w.dims()[0], w.dims()[1]);
        let kin = if matches!(input, LinearInput::SiluMul) { 2 * k } else { k };
        if self.rank() == 0 || self.dims()[self.rank() - 1] != kin {
            return Err(Error::shape(
                op,
                format!(
                    "input of shape {} does not end in the {kin} features weight {} takes",
                    self.shape(),
                    w.shape()
                ),
            ));
        }
        if !matches!(self.dtype(), DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::dtype(op, self.dtype(), "linear_fused takes f32, f16 or bf16 input"));
        }
        self.same_device(op, w)?;
        self.same_dtype(op, w)?;
        let out_dims = self.check_fused_operands(op, input, residual, k, n)?;
        let fused = {
            let (xs, ws) = (self.storage(), w.storage());
            let norm = match input {
                LinearInput::RmsNorm { weight, .. } => Some(weight.storage()),
                _ => None,
            };
            let rs = residual.map(|r| r.storage());
            let pro = input.on_storage(norm.as_deref());
            xs.linear_fused(
                self.layout(),
                (&*ws, w.layout()),
                &pro,
                rs.as_deref().zip(residual).map(|(s, r)| (s, r.layout())),
            )?
        };
        match fused {
            Some(s) => Ok(Tensor::from_storage(s, out_dims, self.device())),
            None => crate::composed::linear_fused(self, w, input, residual),
        }
    }
}

impl<'a> LinearInput<'a> {
    /// The prologue as the backend seam takes it; `norm` is the norm weight's storage for `RmsNorm`.
    pub(crate) fn on_storage<'s>(&self, norm: Option<&'s Storage>) -> Prologue<'s, Storage>
    where
        'a: 's,
    {
        match (*self, norm) {
            (LinearInput::RmsNorm { weight, eps }, Some(g)) => Prologue::RmsNorm((g, weight.layout()), eps),
            (LinearInput::SiluMul, _) => Prologue::SiluMul,
            _ => Prologue::Plain,
        }
    }
}

impl Tensor {
    /// The checks `linear_fused` and `qlinear_fused` share after their own weight checks: the norm
    /// weight of shape `(k,)` and the residual of the output's shape, on this tensor's device and
    /// dtype. Returns the output's dims (the input's with the last one `n`).
    pub(crate) fn check_fused_operands(
        &self,
        op: &'static str,
        input: LinearInput,
        residual: Option<&Tensor>,
        k: usize,
        n: usize,
    ) -> Result<Vec<usize>> {
        let mut out_dims = self.dims().to_vec();
        *out_dims.last_mut().expect("rank >= 1") = n;
        if let LinearInput::RmsNorm { weight, .. } = input {
            self.same_device(op, weight)?;
            self.same_dtype(op, weight)?;
            if weight.dims() != [k] {
                return Err(Error::shape(op, format!("norm weight of shape {} is not ({k},)", weight.shape())));
            }
        }
        if let Some(r) = residual {
            self.same_device(op, r)?;
            self.same_dtype(op, r)?;
            if r.dims() != out_dims {
                return Err(Error::shape(
                    op,
                    format!("residual of shape {} is not the output's shape {:?}", r.shape(), out_dims),
                ));
            }
        }
        Ok(out_dims)
    }
}
