//! `Tensor::qlinear_fused`: `linear_fused` (`ops/decode.rs`) for a quantized weight. On the GPU the
//! matrix-vector kernel (`gpu/matvec/quant.rs`) normalises (RMSNorm) or gates (`silu_mul`) its input row
//! itself and adds the residual before its store (`ExtOps::qmatmul_fused`); where the backend
//! declines, the composed ops. `Tensor::qlinear_fused_cat`: the products of several quantized
//! weights, of any formats, with one input, side by side (`ExtOps::qmatmul_fused_cat`): e.g. a GGUF
//! Q4_K_M layer's q/k (Q4_K) and v (Q6_K) projections into one q/k/v row.

use super::QTensor;
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
        let fused = {
            let (xs, ws) = (self.storage(), w.data().storage());
            let norm = match input {
                LinearInput::RmsNorm { weight, .. } => Some(weight.storage()),
                _ => None,
            };
            let rs = residual.map(|r| r.storage());
            let pro = input.on_storage(norm.as_deref());
            let res = rs.as_deref().zip(residual).map(|(s, r)| (s, r.layout()));
            xs.qmatmul_fused(self.layout(), &ws, w.qtype(), (n, k), &pro, res)?
        };
        if let Some(s) = fused {
            let y = Tensor::from_storage(s, out_dims, self.device());
            // An odd 16-bit output row is written in f32.
            return if y.dtype() == self.dtype() { Ok(y) } else { y.to_dtype(self.dtype()) };
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

    /// `input(self) @ [w_0; w_1; ..]^T`: the products of the quantized `(n_i, k)` weights `ws` (any
    /// formats) with one input, their outputs side by side along the last axis, as
    /// `Tensor::concat` of each [`Tensor::qlinear_fused`] would give (no residual). On the GPU each
    /// weight is one dispatch into its columns of one output, normalising or gating x itself.
    pub fn qlinear_fused_cat(&self, ws: &[&QTensor], input: LinearInput) -> Result<Tensor> {
        let op = "qlinear_fused_cat";
        let Some(first) = ws.first() else {
            return Err(Error::shape(op, "no weights".to_string()));
        };
        let k = first.dims()[1];
        if let Some(w) = ws.iter().find(|w| w.dims()[1] != k || w.device() != first.device()) {
            return Err(Error::shape(
                op,
                format!(
                    "weights of shapes {} and {} (on {} and {}) do not share their input size and device",
                    first.shape(),
                    w.shape(),
                    first.device().name(),
                    w.device().name()
                ),
            ));
        }
        let ntot: usize = ws.iter().map(|w| w.dims()[0]).sum();
        if let Ok(out_dims) = self.check_fused_operands(op, input, None, k, ntot) {
            if self.device() == first.device() && matches!(self.dtype(), DType::F32 | DType::F16 | DType::BF16) {
                let norm = match input {
                    LinearInput::RmsNorm { weight, .. } => Some(weight.storage()),
                    _ => None,
                };
                let pro = input.on_storage(norm.as_deref());
                let wsd: Vec<_> = ws.iter().map(|w| w.data().storage()).collect();
                let parts: Vec<_> = ws.iter().zip(&wsd).map(|(w, s)| (&**s, w.qtype(), w.dims()[0])).collect();
                if let Some(s) = self.storage().qmatmul_fused_cat(self.layout(), &parts, k, &pro)? {
                    let y = Tensor::from_storage(s, out_dims, self.device());
                    return if y.dtype() == self.dtype() { Ok(y) } else { y.to_dtype(self.dtype()) };
                }
            }
        }
        let ys = ws.iter().map(|w| self.qlinear_fused(w, input, None)).collect::<Result<Vec<_>>>()?;
        Tensor::concat(&ys.iter().collect::<Vec<_>>(), -1)
    }
}
