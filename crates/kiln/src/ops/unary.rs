//! Elementwise ops of one operand. Dtype rules (see [`UnaryOp::input_dtype`]): float-only ops
//! (`sqrt`, `exp`, `sigmoid`, ...) cast integer and bool inputs to f32 first; `neg`, `abs`, `sign`,
//! `square`, `relu`, `clamp`, `floor`, `ceil` and `round` keep integer dtypes (integer `floor`/`ceil`/
//! `round` are the identity, `neg` wraps for unsigned types); bool is refused except by `logical_not`,
//! which takes only bool.

use crate::op::UnaryOp;
use crate::{Error, Result, Tensor};

impl Tensor {
    /// Applies a unary op (integer inputs of float-only ops are cast to f32 first).
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Unary(op),
            op.name(),
            &[self],
            move |t| t[0].unary(op),
        ) {
            return r;
        }
        let dtype = op.input_dtype(self.dtype()).ok_or_else(|| {
            let msg = if op == UnaryOp::Not {
                format!("logical_not takes a bool tensor, got shape {}", self.shape())
            } else {
                format!(
                    "{} is not defined on bool tensors (shape {}); cast first or use logical_not",
                    op.name(),
                    self.shape()
                )
            };
            Error::dtype(op.name(), self.dtype(), msg)
        })?;
        if let UnaryOp::Clamp { min, max } = op {
            if min.is_nan() || max.is_nan() || min > max {
                return Err(Error::arg(
                    "clamp",
                    format!("need min <= max (and neither NaN), got min {min} and max {max}"),
                ));
            }
        }
        let x = self.to_dtype(dtype)?;
        if dtype.is_int() && matches!(op, UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round) {
            // Integers are already whole: the identity (tensors are immutable, so sharing is safe).
            return Ok(x);
        }
        let s = x.storage().unary(x.layout(), op)?;
        Ok(Tensor::from_storage(s, x.shape(), x.device()))
    }

    /// Whether the sign bit of each element is set (NumPy `signbit`), as a bool tensor: true for
    /// negative numbers, `-0.0`, `-inf` and NaNs with the sign bit (`signbit(-nan)` is true); for
    /// integers `x < 0`, false for unsigned and bool tensors.
    pub fn signbit(&self) -> Result<Tensor> {
        let s = self.storage().signbit(self.layout())?;
        Ok(Tensor::from_storage(s, self.shape().clone(), self.device()))
    }
}

/// The `Tensor` method of every row of the unary table (`x.exp()`, `x.clamp(min, max)`), with the
/// row's doc.
macro_rules! tensor_methods {
    ($(
        $(#[doc = $doc:literal])*
        $V:ident $({ $($field:ident: $fty:ty = $def:expr),* })? => $name:literal, fn $method:ident, $inputs:ident;
        $(cpu |$a:ident| $f32:expr, |$b:ident| $f64:expr;)?
        wgsl |$t:ident| $wgsl:expr;
    )*) => {
        impl Tensor {
            $(
                $(#[doc = $doc])*
                pub fn $method(&self $($(, $field: $fty)*)?) -> Result<Tensor> {
                    self.unary(UnaryOp::$V $({ $($field),* })?)
                }
            )*
        }
    };
}
crate::for_each_unary_op!(tensor_methods);
