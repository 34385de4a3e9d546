//! `Tensor::qlinear`: `x @ w^T (+ bias)` with a quantized `(out, in)` weight.
//!
//! Up to `MAX_SKINNY_ROWS` rows of `x` (decode and small batches) run a kernel that reads the
//! packed weight once per block of up to 8 rows and dequantises in registers (`quant/cpu.rs`,
//! `gpu/matvec/quant.rs`, through `ExtOps::qmatmul`). More rows (prefill) dequantise the weight to `x`'s
//! dtype and use
//! kiln's matmul: a choice made without measurements, simple and already fast where matmul is
//! compute bound; the dequantised copy is temporary.

use super::QTensor;
use crate::{DType, Error, Result, Tensor};

/// Rows of `x` up to which `qlinear` reads the packed weight directly.
pub const MAX_SKINNY_ROWS: usize = 64;

impl Tensor {
    /// `self (..., in) @ w^T (+ bias)` for a quantized `(out, in)` weight: `(..., out)` in
    /// `self`'s dtype (f32, f16 or bf16; computed in f32). `bias` is `(out,)` of the same dtype.
    pub fn qlinear(&self, w: &QTensor, bias: Option<&Tensor>) -> Result<Tensor> {
        self.qlinear_with(w, bias, None)
    }

    /// `residual + self @ w^T` for a quantized `(out, in)` weight, `residual` of the output's shape
    /// and `self`'s dtype (a decoder's skip connection): on the GPU the sum is taken in f32 before
    /// the store, in the same kernel, for up to `MAX_SKINNY_ROWS` rows.
    pub fn qlinear_add(&self, w: &QTensor, residual: &Tensor) -> Result<Tensor> {
        self.qlinear_with(w, None, Some(residual))
    }

    fn qlinear_with(&self, w: &QTensor, bias: Option<&Tensor>, residual: Option<&Tensor>) -> Result<Tensor> {
        let op = if residual.is_some() { "qlinear_add" } else { "qlinear" };
        if w.dims().len() != 2 {
            return Err(Error::shape(op, format!("weight must be (out, in), got shape {}", w.shape())));
        }
        let (n, k) = (w.dims()[0], w.dims()[1]);
        if self.rank() == 0 || self.dims()[self.rank() - 1] != k {
            return Err(Error::shape(
                op,
                format!(
                    "input of shape {} does not end in the {k} inputs of {} weight {}",
                    self.shape(),
                    w.qtype(),
                    w.shape()
                ),
            ));
        }
        if !matches!(self.dtype(), DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::dtype(op, self.dtype(), "qlinear takes f32, f16 or bf16 input"));
        }
        if self.device() != w.device() {
            return Err(Error::DeviceMismatch { op, lhs: self.device().name(), rhs: w.device().name() });
        }
        let m = self.elem_count() / k.max(1);
        let mut out_dims = self.dims().to_vec();
        *out_dims.last_mut().expect("rank >= 1") = n;
        if let Some(b) = bias {
            self.same_device(op, b)?;
            self.same_dtype(op, b)?;
            if b.dims() != [n] {
                return Err(Error::shape(
                    op,
                    format!("bias of shape {} does not match the {n} outputs of weight {}", b.shape(), w.shape()),
                ));
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
        let addend = bias.or(residual);
        if m > MAX_SKINNY_ROWS || m == 0 || n == 0 {
            let wf = w.dequantize(self.dtype())?;
            let y = self.linear(&wf, bias)?;
            return match residual {
                Some(r) => r.add(&y),
                None => Ok(y),
            };
        }
        // The backend may add a contiguous addend before its store (`ExtOps::qmatmul`).
        let stride = if residual.is_some() { n } else { 0 };
        let (storage, fused) = {
            let (xs, ws) = (self.storage(), w.data().storage());
            let gs = addend.map(|a| a.storage());
            let add = gs.as_deref().zip(addend).map(|(s, a)| ((s, a.layout()), stride));
            xs.qmatmul(self.layout(), &ws, w.qtype(), (n, k), add)?
        };
        let y = Tensor::from_storage(storage, out_dims, self.device()).to_dtype(self.dtype())?;
        match addend {
            Some(a) if !fused => a.add(&y),
            _ => Ok(y),
        }
    }
}
