//! Softmax, normalisation and the fused SwiGLU activation.

use crate::{Error, Result, Tensor};

/// An error unless `t` has a float dtype (these ops refuse integers and bool, like PyTorch).
pub(crate) fn require_float(op: &'static str, t: &Tensor) -> Result<()> {
    if !t.dtype().is_float() {
        return Err(Error::dtype(
            op,
            t.dtype(),
            format!(
                "expected a float tensor, got shape {} of dtype {}; cast it with to_dtype first",
                t.shape(),
                t.dtype()
            ),
        ));
    }
    Ok(())
}

impl Tensor {
    /// Softmax along `axis` (negative counts from the end), numerically stable (max subtracted).
    /// A row holding NaN or `+inf` gives NaN, `-inf` entries give 0 and a row of only `-inf` gives NaN,
    /// like PyTorch. Float dtypes only. The result has this tensor's shape; for an axis other than the
    /// last it is a (non-contiguous) view.
    pub fn softmax(&self, axis: isize) -> Result<Tensor> {
        self.softmax_impl("softmax", axis, false)
    }

    /// `log(softmax(x))` along `axis`, computed as `x - max - log(sum(exp(x - max)))`; `-inf` entries
    /// give `-inf`. Same rules as [`Tensor::softmax`].
    pub fn log_softmax(&self, axis: isize) -> Result<Tensor> {
        self.softmax_impl("log_softmax", axis, true)
    }

    fn softmax_impl(&self, op: &'static str, axis: isize, log: bool) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Other,
            op,
            &[self],
            move |t| t[0].softmax_impl(op, axis, log),
        ) {
            return r;
        }
        require_float(op, self)?;
        if self.rank() == 0 {
            // PyTorch accepts axis 0 / -1 on a scalar: a softmax over one element.
            crate::shape::normalize_axis(op, axis, 1, self.shape())?;
            return self.reshape(1)?.softmax_impl(op, 0, log)?.reshape(());
        }
        let axis = self.shape().axis(op, axis)?;
        if self.elem_count() == 0 {
            return self.zeros_like();
        }
        let last = self.rank() - 1;
        if axis != last {
            // The backend works on the last axis: swap `axis` there (a view), run, swap back.
            let t = self.transpose(axis as isize, last as isize)?;
            return t.softmax_impl(op, last as isize, log)?.transpose(axis as isize, last as isize);
        }
        let s = self.storage().softmax_last(self.layout(), log)?;
        Ok(Tensor::from_storage(s, self.shape(), self.device()))
    }

    /// Checks a `(d,)` normalisation parameter against this tensor's last dim.
    fn check_norm_param(&self, op: &'static str, name: &str, p: &Tensor) -> Result<()> {
        self.same_device(op, p)?;
        self.same_dtype(op, p)?;
        let d = *self.dims().last().expect("rank checked by the caller");
        if p.dims() != [d] {
            return Err(Error::shape(
                op,
                format!(
                    "{name} must have shape ({d},) to match the last dim of the input {}, got {}",
                    self.shape(),
                    p.shape()
                ),
            ));
        }
        Ok(())
    }

    fn check_norm_input(&self, op: &'static str, eps: f64) -> Result<()> {
        require_float(op, self)?;
        if self.rank() == 0 {
            return Err(Error::shape(op, format!("expected a tensor of rank >= 1, got shape {}", self.shape())));
        }
        if eps.is_nan() || eps < 0.0 {
            return Err(Error::arg(op, format!("eps must be >= 0, got {eps}")));
        }
        Ok(())
    }

    /// `x / sqrt(mean(x^2, -1) + eps) * weight`, weight of shape `(d,)` (the last dim) and of this
    /// tensor's dtype. Accumulates in f32 (f64 for f64).
    pub fn rms_norm(&self, weight: &Tensor, eps: f64) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Other,
            "rms_norm",
            &[self, weight],
            move |t| t[0].rms_norm(&t[1], eps),
        ) {
            return r;
        }
        const OP: &str = "rms_norm";
        self.check_norm_input(OP, eps)?;
        self.check_norm_param(OP, "weight", weight)?;
        if self.elem_count() == 0 {
            return self.zeros_like();
        }
        let s = self.storage().rms_norm(self.layout(), &weight.storage(), weight.layout(), eps)?;
        Ok(Tensor::from_storage(s, self.shape(), self.device()))
    }

    /// `(x - mean) / sqrt(var + eps) * weight + bias` over the last axis (biased variance, like
    /// PyTorch); `weight` and `bias` have shape `(d,)` and this tensor's dtype. Accumulates in f32
    /// (f64 for f64).
    pub fn layer_norm(&self, weight: &Tensor, bias: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        let ins: Vec<&Tensor> = [self, weight].into_iter().chain(bias).collect();
        let kind = || crate::fusion::trace::Kind::Other;
        if let Some(r) =
            crate::fusion::trace::hook(kind, "layer_norm", &ins, move |t| t[0].layer_norm(&t[1], t.get(2), eps))
        {
            return r;
        }
        const OP: &str = "layer_norm";
        self.check_norm_input(OP, eps)?;
        self.check_norm_param(OP, "weight", weight)?;
        if let Some(b) = bias {
            self.check_norm_param(OP, "bias", b)?;
        }
        if self.elem_count() == 0 {
            return self.zeros_like();
        }
        let w = weight.storage();
        let b = bias.map(|b| (b.storage(), b.layout()));
        let s =
            self.storage().layer_norm(self.layout(), &w, weight.layout(), b.as_ref().map(|(s, l)| (&**s, *l)), eps)?;
        Ok(Tensor::from_storage(s, self.shape(), self.device()))
    }

    /// `silu(self) * up` (the SwiGLU gate), fused into one pass; `silu(x) = x / (1 + e^-x)`. The two
    /// operands broadcast together and must share a float dtype.
    pub fn silu_mul(&self, up: &Tensor) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Other,
            "silu_mul",
            &[self, up],
            |t| t[0].silu_mul(&t[1]),
        ) {
            return r;
        }
        const OP: &str = "silu_mul";
        require_float(OP, self)?;
        self.same_dtype(OP, up)?;
        let (shape, layouts) = Tensor::broadcast_layouts(OP, &[self, up])?;
        if shape.elem_count() == 0 {
            return Tensor::zeros(shape, self.dtype(), self.device());
        }
        let s = self.storage().silu_mul(&layouts[0], &up.storage(), &layouts[1])?;
        Ok(Tensor::from_storage(s, shape, self.device()))
    }
}
