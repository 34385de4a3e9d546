//! Fused ops of the single-stream decode step: `linear_fused` (a projection that normalises or
//! gates its own input and adds the residual) and `KvCache::append_rope` (`kv_cache/append_rope.rs`).
//! On the GPU each is one kernel (`gpu/decode/`) for up to 8 rows; otherwise, and on the
//! CPU, they run the composed ops (`composed::linear_fused`), which are also their test reference.

use crate::gpu::decode::{self, At, MatvecArgs};
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
        if let Some(y) = self.linear_fused_gpu(w, input, residual, &out_dims)? {
            return Ok(y);
        }
        crate::composed::linear_fused(self, w, input, residual)
    }

    /// The fused kernel, or `None` where it does not apply (CPU, more than 8 rows, layouts not
    /// in whole 16-byte units, an odd 16-bit output row).
    fn linear_fused_gpu(
        &self,
        w: &Tensor,
        input: LinearInput,
        residual: Option<&Tensor>,
        out_dims: &[usize],
    ) -> Result<Option<Tensor>> {
        let (n, k) = (w.dims()[0], w.dims()[1]);
        let kin = self.dims()[self.rank() - 1];
        let m = self.elem_count() / kin.max(1);
        if !self.device().is_gpu() || m == 0 || m > decode::MAX_ROWS || n == 0 || k == 0 {
            return Ok(None);
        }
        let vals = decode::unit_values(self.dtype());
        let unit = |t: &Tensor| t.is_contiguous() && t.layout().offset().is_multiple_of(vals);
        let wide = self.dtype() != DType::F32;
        let norm_ok = match input {
            LinearInput::RmsNorm { weight, .. } => unit(weight),
            _ => true,
        };
        let res_ok = residual.is_none_or(|r| r.is_contiguous() && (!wide || r.layout().offset().is_multiple_of(2)));
        if !k.is_multiple_of(vals) || !unit(w) || !norm_ok || !res_ok || (wide && !n.is_multiple_of(2)) {
            return Ok(None);
        }
        let x = if unit(self) {
            self.clone()
        } else {
            let s = self.storage().copy_contiguous(self.layout())?;
            Tensor::from_storage(s, self.shape(), self.device())
        };
        let xs = x.storage();
        let ws = w.storage();
        let (Storage::Gpu(xb), Storage::Gpu(wb)) = (&*xs, &*ws) else { return Ok(None) };
        let ns = match input {
            LinearInput::RmsNorm { weight, eps } => Some((weight.storage(), weight.layout().offset(), eps)),
            _ => None,
        };
        let rs = residual.map(|r| (r.storage(), r.layout().offset()));
        let norm = match &ns {
            Some((g, off, eps)) => match &**g {
                Storage::Gpu(b) => Some((At { buf: b, offset: *off }, *eps)),
                _ => return Ok(None),
            },
            None => None,
        };
        let res = match &rs {
            Some((g, off)) => match &**g {
                Storage::Gpu(b) => Some(At { buf: b, offset: *off }),
                _ => return Ok(None),
            },
            None => None,
        };
        let dst = decode::matvec(&MatvecArgs {
            x: At { buf: xb, offset: x.layout().offset() },
            x_stride: kin,
            w: At { buf: wb, offset: w.layout().offset() },
            norm,
            silu_mul: matches!(input, LinearInput::SiluMul),
            residual: res,
            m,
            n,
            k,
        })?;
        Ok(Some(Tensor::from_storage(Storage::Gpu(dst), out_dims.to_vec(), self.device())))
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
