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

    /// `-x` (wrapping for integers, so unsigned `neg` is `2^n - x`).
    pub fn neg(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Neg)
    }

    /// `|x|` (for signed integers, `abs(MIN)` wraps to `MIN` like NumPy).
    pub fn abs(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Abs)
    }

    /// Whether the sign bit of each element is set (NumPy `signbit`), as a bool tensor: true for
    /// negative numbers, `-0.0`, `-inf` and NaNs with the sign bit (`signbit(-nan)` is true); for
    /// integers `x < 0`, false for unsigned and bool tensors.
    pub fn signbit(&self) -> Result<Tensor> {
        let s = self.storage().signbit(self.layout())?;
        Ok(Tensor::from_storage(s, self.shape().clone(), self.device()))
    }

    /// -1, 0 or 1 by the sign of `x`; zeros keep their sign, NaN stays NaN.
    pub fn sign(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sign)
    }

    /// Square root (NaN for negative inputs).
    pub fn sqrt(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sqrt)
    }

    /// `1 / sqrt(x)`.
    pub fn rsqrt(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Rsqrt)
    }

    /// `e^x`.
    pub fn exp(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Exp)
    }

    /// Natural logarithm (`-inf` at 0, NaN below).
    pub fn log(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Log)
    }

    /// Sine (radians).
    pub fn sin(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sin)
    }

    /// Cosine (radians).
    pub fn cos(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Cos)
    }

    /// Hyperbolic tangent.
    pub fn tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Tanh)
    }

    /// `x * x` (wrapping for integers).
    pub fn square(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Square)
    }

    /// `1 / x`.
    pub fn recip(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Recip)
    }

    /// Largest integer not above `x` (identity on integer dtypes).
    pub fn floor(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Floor)
    }

    /// Smallest integer not below `x` (identity on integer dtypes).
    pub fn ceil(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Ceil)
    }

    /// Rounds to the nearest integer, half to even (identity on integer dtypes).
    pub fn round(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Round)
    }

    /// `max(x, 0)`; NaN stays NaN.
    pub fn relu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Relu)
    }

    /// `1 / (1 + e^-x)`.
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sigmoid)
    }

    /// `x * sigmoid(x)`; `silu(-inf)` is 0.
    pub fn silu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Silu)
    }

    /// GELU, tanh approximation; `gelu(-inf)` is 0.
    pub fn gelu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::GeluTanh)
    }

    /// GELU with the exact erf: `0.5 x (1 + erf(x / sqrt 2))`; `gelu_erf(-inf)` is 0.
    pub fn gelu_erf(&self) -> Result<Tensor> {
        self.unary(UnaryOp::GeluErf)
    }

    /// `min(max(x, min), max)`; NaN elements stay NaN. An error when `min > max` or a bound is NaN.
    /// On integer tensors the bounds are rounded inward (`ceil(min)`, `floor(max)`) and saturated to
    /// the dtype, and the result keeps the dtype.
    pub fn clamp(&self, min: f64, max: f64) -> Result<Tensor> {
        self.unary(UnaryOp::Clamp { min, max })
    }

    /// Logical not of a bool tensor.
    pub fn logical_not(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Not)
    }
}
