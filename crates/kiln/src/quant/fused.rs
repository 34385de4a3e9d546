//! `Tensor::qlinear_fused`: `linear_fused` (`ops/decode.rs`) for a quantized weight. On the GPU the
//! matrix-vector kernel (`gpu/quant/matvec.wgsl`) normalises (RMSNorm) or gates (`silu_mul`) its
//! input row itself and adds the residual before its store; otherwise the composed ops.

use super::QTensor;
use crate::gpu::decode::{At, Pro};
use crate::gpu::quant::{qmatmul_fused, Addend, Prologue};
use crate::storage::Storage;
use crate::{DType, Error, LinearInput, Result, Tensor};

impl Tensor {
    /// `residual + input(self) @ w^T` for a quantized `(n, k)` weight: as
    /// [`Tensor::linear_fused`] (f32, f16 or bf16 input; the norm weight and residual in its dtype).
    pub fn qlinear_fused(&self, w: &QTensor, input: LinearInput, residual: Option<&Tensor>) -> Result<Tensor> {
        let op = "qlinear_fused";
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
            return Err(Error::dtype(op, self.dtype(), "qlinear_fused takes f32, f16 or bf16 input"));
        }
        if self.device() != w.device() {
            return Err(Error::DeviceMismatch { op, lhs: self.device().name(), rhs: w.device().name() });
        }
        let out_dims = self.check_fused_operands(op, input, residual, k, n)?;
        if let Some(y) = self.qlinear_fused_gpu(w, input, residual, &out_dims)? {
            return Ok(y);
        }
        let h = match input {
            LinearInput::Plain => self.clone(),
            LinearInput::RmsNorm { weight, eps } => self.rms_norm(weight, eps)?,
            LinearInput::SiluMul => self.narrow(-1, 0, k)?.silu_mul(&self.narrow(-1, k, k)?)?,
        };
        match residual {
            Some(r) => h.qlinear_add(w, r),
            None => h.qlinear(w, None),
        }
    }

    /// The fused kernel, or `None` where it does not apply (the CPU, more than 8 rows, an input
    /// or norm weight not at a multiple of 16 values, an addend the kernel cannot add).
    fn qlinear_fused_gpu(
        &self,
        w: &QTensor,
        input: LinearInput,
        residual: Option<&Tensor>,
        out_dims: &[usize],
    ) -> Result<Option<Tensor>> {
        let (n, k) = (w.dims()[0], w.dims()[1]);
        let kin = self.dims()[self.rank() - 1];
        let m = self.elem_count() / kin.max(1);
        let aligned = |t: &Tensor| t.is_contiguous() && t.layout().offset().is_multiple_of(16);
        if !self.device().is_gpu() || m == 0 || m > 8 || n == 0 || !aligned(self) || !kin.is_multiple_of(16) {
            return Ok(None);
        }
        let (pro, norm) = match input {
            LinearInput::Plain => (Pro::Plain, None),
            LinearInput::RmsNorm { weight, eps } => {
                if !aligned(weight) {
                    return Ok(None);
                }
                (Pro::RmsNorm, Some((weight, eps)))
            }
            LinearInput::SiluMul => (Pro::SiluMul, None),
        };
        if residual.is_some_and(|r| !r.is_contiguous()) {
            return Ok(None);
        }
        let xs = self.storage();
        let ws = w.data().storage();
        let ns = norm.map(|(g, eps)| (g.storage(), g.layout().offset(), eps));
        let rs = residual.map(|r| (r.storage(), r.layout().offset()));
        let (Storage::Gpu(xb), Storage::Gpu(wb)) = (&*xs, &*ws) else { return Ok(None) };
        let nw = match &ns {
            Some((g, off, eps)) => match &**g {
                Storage::Gpu(b) => Some((At { buf: b, offset: *off }, *eps)),
                _ => return Ok(None),
            },
            None => None,
        };
        let add = match &rs {
            Some((g, off)) => match &**g {
                Storage::Gpu(b) => Some(Addend { buf: b, offset: *off, row_stride: n }),
                _ => return Ok(None),
            },
            None => None,
        };
        let pro = Prologue { pro, x_stride: kin, norm: nw };
        let Some(dst) = qmatmul_fused(xb, self.layout().offset(), wb, w.qtype(), n, k, m, add, pro)? else {
            return Ok(None);
        };
        let y = Tensor::from_storage(Storage::Gpu(dst), out_dims.to_vec(), self.device());
        // An odd 16-bit output row is written in f32.
        Ok(Some(if y.dtype() == self.dtype() { y } else { y.to_dtype(self.dtype())? }))
    }
}
