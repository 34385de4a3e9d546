//! Elementwise ops of two operands with NumPy broadcasting and dtype promotion, tensor-scalar forms,
//! comparisons, `where_` and logical ops.
//!
//! Dtypes: both operands are promoted with [`DType::promote`], then [`BinaryOp::compute_dtype`] picks
//! the dtype the op runs in and returns (`div` of integers runs in f32, arithmetic on bool in u8,
//! logical ops take bool only). Comparisons promote both sides and return bool. Scalars take the
//! tensor's dtype, so they never widen it; see [`Tensor::binary_scalar`] for the exceptions.

use crate::op::{BinaryOp, CmpOp};
use crate::storage::Storage;
use crate::{DType, Error, Layout, Result, Shape, Tensor};
use std::ops::Deref;

/// The storages of several tensors, read-locked once each even when they share storage (taking a
/// second read lock on one `RwLock` from the same thread can deadlock behind a waiting writer).
struct Locked<'a> {
    guards: Vec<std::sync::RwLockReadGuard<'a, Storage>>,
    which: Vec<usize>,
}

impl<'a> Locked<'a> {
    fn new(tensors: &[&'a Tensor]) -> Self {
        let mut guards = Vec::with_capacity(tensors.len());
        let mut owners: Vec<&Tensor> = Vec::with_capacity(tensors.len());
        let mut which = Vec::with_capacity(tensors.len());
        for &t in tensors {
            match owners.iter().position(|o| o.shares_storage_with(t)) {
                Some(i) => which.push(i),
                None => {
                    which.push(guards.len());
                    guards.push(t.storage());
                    owners.push(t);
                }
            }
        }
        Locked { guards, which }
    }

    fn get(&self, i: usize) -> &Storage {
        self.guards[self.which[i]].deref()
    }
}

/// The dtype a scalar operand gets next to a tensor of `dtype`, per [`Tensor::binary_scalar`].
fn scalar_dtype(op: &'static str, dtype: DType, v: f64, for_cmp: bool) -> Result<DType> {
    if dtype.is_float() {
        return Ok(dtype);
    }
    let integral = v.is_finite() && v.fract() == 0.0;
    if !integral {
        // A fractional (or non-finite) scalar: floats. Comparisons use f64 so integers stay exact.
        return Ok(if for_cmp { DType::F64 } else { DType::F32 });
    }
    if dtype == DType::Bool {
        return Ok(match v {
            0.0 | 1.0 => DType::Bool,
            _ if for_cmp => DType::F64,
            _ => DType::I64,
        });
    }
    let two_63 = -(i64::MIN as f64);
    let fits = match dtype {
        DType::U8 => (0.0..=u8::MAX as f64).contains(&v),
        DType::I32 => (i32::MIN as f64..=i32::MAX as f64).contains(&v),
        DType::U32 => (0.0..=u32::MAX as f64).contains(&v),
        DType::I8 => (i8::MIN as f64..=i8::MAX as f64).contains(&v),
        DType::I16 => (i16::MIN as f64..=i16::MAX as f64).contains(&v),
        DType::U16 => (0.0..=u16::MAX as f64).contains(&v),
        DType::U64 => (0.0..2.0 * two_63).contains(&v),
        _ => (-two_63..two_63).contains(&v),
    };
    if fits {
        Ok(dtype)
    } else if for_cmp {
        Ok(DType::F64)
    } else {
        Err(Error::arg(op, format!("scalar {v} is out of range for a tensor of dtype {dtype}")))
    }
}

impl Tensor {
    /// `op` of two tensors with broadcasting and promotion; see the module docs for dtypes.
    pub fn binary(&self, rhs: &Tensor, op: BinaryOp) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Binary(op),
            op.name(),
            &[self, rhs],
            move |t| t[0].binary(&t[1], op),
        ) {
            return r;
        }
        let name = op.name();
        let promoted = self.dtype().promote(rhs.dtype());
        let dtype = op.compute_dtype(promoted).ok_or_else(|| {
            Error::dtype(
                name,
                promoted,
                format!(
                    "{name} takes bool tensors, got {} {} and {} {}",
                    self.dtype(),
                    self.shape(),
                    rhs.dtype(),
                    rhs.shape()
                ),
            )
        })?;
        self.same_device(name, rhs)?;
        if self.dtype() == dtype && rhs.dtype() == dtype && self.dims() == rhs.dims() {
            // The common case (`a + b` of one shape and dtype): the views as they are, with no
            // broadcast layouts, casts or lock lists to build (most of a small op's cost).
            let ga = self.storage();
            let s = if self.shares_storage_with(rhs) {
                ga.binary(self.layout(), &ga, rhs.layout(), op)?
            } else {
                ga.binary(self.layout(), &rhs.storage(), rhs.layout(), op)?
            };
            return Ok(Tensor::from_storage(s, self.shape().clone(), self.device()));
        }
        // Check the shapes before paying for any cast.
        Shape::broadcast(name, self.shape(), rhs.shape())?;
        let (a, b) = (self.to_dtype(dtype)?, rhs.to_dtype(dtype)?);
        let (shape, layouts) = Tensor::broadcast_layouts(name, &[&a, &b])?;
        let locked = Locked::new(&[&a, &b]);
        let s = locked.get(0).binary(&layouts[0], locked.get(1), &layouts[1], op)?;
        Ok(Tensor::from_storage(s, shape, self.device()))
    }

    /// `self + rhs` (integers wrap).
    pub fn add(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Add)
    }

    /// `self - rhs` (integers wrap).
    pub fn sub(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Sub)
    }

    /// `self * rhs` (integers wrap).
    pub fn mul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Mul)
    }

    /// True division `self / rhs`; integer and bool operands give f32.
    pub fn div(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Div)
    }

    /// `self ^ rhs`. Floats follow C `pow`; integers give wrapping integer powers, and a negative
    /// exponent gives 0 except for bases 1 (1) and -1 (+-1).
    pub fn pow(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Pow)
    }

    /// Floor division `self // rhs` (NumPy `floor_divide`, Python's `//`) in the promoted dtype.
    /// Integers divide exactly (no float round trip), rounding toward -inf; division by zero gives 0
    /// and `MIN // -1` wraps to `MIN`, as in NumPy. Floats follow NumPy: `(a - fmod(a, b)) / b`
    /// rounded to the nearest integer toward the true floor, so the result agrees with
    /// [`Tensor::remainder`]; `x // 0` is `x / 0` (+-inf, NaN for 0 // 0). f16 and bf16 compute in f32
    /// and round once.
    pub fn floor_div(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::FloorDiv)
    }

    /// Remainder `self % rhs` with the sign of `rhs` (NumPy `remainder`, Python's `%`) in the
    /// promoted dtype: exact integer arithmetic (`x % 0` gives 0, as in NumPy); floats from the exact
    /// `fmod` (a zero result takes the sign of `rhs`; `x % 0` and `inf % y` are NaN); f16 and bf16
    /// computed in f32 and rounded once.
    pub fn remainder(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Remainder)
    }

    /// Elementwise maximum; NaN in either operand gives NaN (NumPy `maximum`).
    pub fn maximum(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Maximum)
    }

    /// Elementwise minimum; NaN in either operand gives NaN (NumPy `minimum`).
    pub fn minimum(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Minimum)
    }

    /// Logical and of two bool tensors.
    pub fn logical_and(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::And)
    }

    /// Logical or of two bool tensors.
    pub fn logical_or(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Or)
    }

    /// The op with a scalar right operand; the scalar takes the tensor's dtype (an integer tensor with
    /// a non-integer scalar computes in f32).
    ///
    /// In full: a float tensor keeps its dtype (the scalar is rounded to it). An integer tensor keeps
    /// its dtype for an integral scalar, and an integral scalar outside the dtype's range is an error
    /// (as in NumPy 2); a fractional or non-finite scalar makes the op compute in f32. A bool tensor
    /// keeps bool for 0 and 1, computes in i64 for other integral scalars and in f32 otherwise. The
    /// scalar is a rank-0 tensor broadcast with zero strides: nothing is copied.
    pub fn binary_scalar(&self, rhs: f64, op: BinaryOp) -> Result<Tensor> {
        let dtype = scalar_dtype(op.name(), self.dtype(), rhs, false)?;
        let s = Tensor::scalar(rhs, dtype, self.device())?;
        self.binary(&s, op)
    }

    /// `self + rhs` with a scalar (see [`Tensor::binary_scalar`] for its dtype).
    pub fn add_scalar(&self, rhs: f64) -> Result<Tensor> {
        self.binary_scalar(rhs, BinaryOp::Add)
    }

    /// `self - rhs` with a scalar.
    pub fn sub_scalar(&self, rhs: f64) -> Result<Tensor> {
        self.binary_scalar(rhs, BinaryOp::Sub)
    }

    /// `self * rhs` with a scalar.
    pub fn mul_scalar(&self, rhs: f64) -> Result<Tensor> {
        self.binary_scalar(rhs, BinaryOp::Mul)
    }

    /// `self / rhs` with a scalar (true division).
    pub fn div_scalar(&self, rhs: f64) -> Result<Tensor> {
        self.binary_scalar(rhs, BinaryOp::Div)
    }

    /// `self ^ rhs` with a scalar exponent.
    pub fn pow_scalar(&self, rhs: f64) -> Result<Tensor> {
        self.binary_scalar(rhs, BinaryOp::Pow)
    }

    /// NaN-propagating maximum with a scalar.
    pub fn maximum_scalar(&self, rhs: f64) -> Result<Tensor> {
        self.binary_scalar(rhs, BinaryOp::Maximum)
    }

    /// NaN-propagating minimum with a scalar.
    pub fn minimum_scalar(&self, rhs: f64) -> Result<Tensor> {
        self.binary_scalar(rhs, BinaryOp::Minimum)
    }

    /// Comparison with broadcasting; both sides are promoted to a common dtype, the result is bool.
    /// NaN compares unequal to everything (so `ne` is true and the rest false).
    pub fn cmp(&self, rhs: &Tensor, op: CmpOp) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Cmp(op),
            op.name(),
            &[self, rhs],
            move |t| t[0].cmp(&t[1], op),
        ) {
            return r;
        }
        let name = op.name();
        self.same_device(name, rhs)?;
        Shape::broadcast(name, self.shape(), rhs.shape())?;
        let dtype = self.dtype().promote(rhs.dtype());
        let (a, b) = (self.to_dtype(dtype)?, rhs.to_dtype(dtype)?);
        let (shape, layouts) = Tensor::broadcast_layouts(name, &[&a, &b])?;
        let locked = Locked::new(&[&a, &b]);
        let s = locked.get(0).cmp(&layouts[0], locked.get(1), &layouts[1], op)?;
        Ok(Tensor::from_storage(s, shape, self.device()))
    }

    /// `self == rhs`.
    pub fn eq(&self, rhs: &Tensor) -> Result<Tensor> {
        self.cmp(rhs, CmpOp::Eq)
    }

    /// `self != rhs`.
    pub fn ne(&self, rhs: &Tensor) -> Result<Tensor> {
        self.cmp(rhs, CmpOp::Ne)
    }

    /// `self < rhs`.
    pub fn lt(&self, rhs: &Tensor) -> Result<Tensor> {
        self.cmp(rhs, CmpOp::Lt)
    }

    /// `self <= rhs`.
    pub fn le(&self, rhs: &Tensor) -> Result<Tensor> {
        self.cmp(rhs, CmpOp::Le)
    }

    /// `self > rhs`.
    pub fn gt(&self, rhs: &Tensor) -> Result<Tensor> {
        self.cmp(rhs, CmpOp::Gt)
    }

    /// `self >= rhs`.
    pub fn ge(&self, rhs: &Tensor) -> Result<Tensor> {
        self.cmp(rhs, CmpOp::Ge)
    }

    /// Comparison with a scalar. The scalar takes the tensor's dtype when it holds it exactly;
    /// otherwise (a fractional or out-of-range scalar next to an integer or bool tensor) both sides
    /// are compared in f64, so the answer is exact.
    pub fn cmp_scalar(&self, rhs: f64, op: CmpOp) -> Result<Tensor> {
        let mut dtype = scalar_dtype(op.name(), self.dtype(), rhs, true)?;
        if dtype == DType::F64 && self.dtype() != DType::F64 && !self.device().is_cpu() {
            // GPUs have no f64: compare in f32 (exact for every integer below 2^24 in magnitude).
            dtype = DType::F32;
        }
        let s = Tensor::scalar(rhs, dtype, self.device())?;
        self.cmp(&s, op)
    }

    /// Elementwise `if mask { on_true } else { on_false }` with broadcasting of all three; `mask` is
    /// bool, the branches are promoted to a common dtype.
    pub fn where_(mask: &Tensor, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Where,
            "where",
            &[mask, on_true, on_false],
            |t| Tensor::where_(&t[0], &t[1], &t[2]),
        ) {
            return r;
        }
        const OP: &str = "where";
        if mask.dtype() != DType::Bool {
            return Err(Error::dtype(
                OP,
                mask.dtype(),
                format!("the mask must be bool (mask shape {}); compare first, e.g. with ne", mask.shape()),
            ));
        }
        mask.same_device(OP, on_true)?;
        mask.same_device(OP, on_false)?;
        let s = Shape::broadcast(OP, mask.shape(), on_true.shape())?;
        Shape::broadcast(OP, &s, on_false.shape()).map_err(|_| Error::ShapeMismatch {
            op: OP,
            msg: format!(
                "mask {}, on_true {} and on_false {} cannot be broadcast together",
                mask.shape(),
                on_true.shape(),
                on_false.shape()
            ),
        })?;
        let dtype = on_true.dtype().promote(on_false.dtype());
        let (t, f) = (on_true.to_dtype(dtype)?, on_false.to_dtype(dtype)?);
        let (shape, layouts): (Shape, Vec<Layout>) = Tensor::broadcast_layouts(OP, &[mask, &t, &f])?;
        let locked = Locked::new(&[mask, &t, &f]);
        let s = locked.get(0).where_cond(&layouts[0], locked.get(1), &layouts[1], locked.get(2), &layouts[2])?;
        Ok(Tensor::from_storage(s, shape, mask.device()))
    }
}
