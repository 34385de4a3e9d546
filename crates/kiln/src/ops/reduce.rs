//! Reductions over all elements or a set of axes, and cumulative sums.
//!
//! Dtypes follow [`ReduceOp::output_dtype`]: sum and prod of integers and bool give i64, f16/bf16
//! accumulate in f32; mean, var and std of integers and bool compute in f32 and return f32, and those
//! of f16/bf16 compute in f32 and are rounded back. Empty reductions act like NumPy: sum 0, prod 1,
//! mean NaN; max, min, argmax and argmin of an empty axis are errors.

use crate::op::ReduceOp;
use crate::{DType, Error, Result, Shape, Tensor};

/// The shape after reducing `axes` of `shape`: those dims set to 1 (`keepdim`) or removed.
fn reduced_shape(shape: &Shape, axes: &[usize], keepdim: bool) -> Shape {
    let dims = shape.dims().iter().enumerate().filter_map(|(i, &d)| match axes.contains(&i) {
        true if keepdim => Some(1),
        true => None,
        false => Some(d),
    });
    Shape::new(dims.collect::<Vec<_>>())
}

impl Tensor {
    /// Normalised (sorted, distinct) axes of a reduction, or an error naming `op`.
    fn reduce_axes(&self, op: &'static str, axes: &[isize]) -> Result<Vec<usize>> {
        let mut a = self.shape().axes(op, axes)?;
        a.sort_unstable();
        Ok(a)
    }

    /// The error for a reduction without identity over an empty axis.
    fn empty_reduction(&self, op: &'static str, axes: &[usize]) -> Error {
        Error::shape(
            op,
            format!(
                "cannot reduce over the empty axes {axes:?} of shape {}: the operation has no identity",
                self.shape()
            ),
        )
    }

    /// `op` over the normalised `axes` (sorted, distinct); `name` is the op's user-facing name.
    fn reduce_op(&self, name: &'static str, op: ReduceOp, axes: &[usize], keepdim: bool) -> Result<Tensor> {
        let a = axes.to_vec();
        let kind = || crate::fusion::trace::Kind::Reduce { op, axes: a.clone(), keepdim };
        let b = axes.to_vec();
        if let Some(r) = crate::fusion::trace::hook(kind, name, &[self], move |t| t[0].reduce_op(name, op, &b, keepdim))
        {
            return r;
        }
        let out_dtype = op.output_dtype(self.dtype());
        if axes.is_empty() {
            // NumPy: reducing over no axes is the identity (with the op's output dtype).
            return self.to_dtype(out_dtype);
        }
        let kshape = reduced_shape(self.shape(), axes, true);
        let n_red: usize = axes.iter().map(|&a| self.dims()[a]).product();
        let no_identity = !matches!(op, ReduceOp::Sum | ReduceOp::Prod);
        if n_red == 0 && no_identity {
            return Err(self.empty_reduction(name, axes));
        }
        let out = if kshape.elem_count() == 0 || n_red == 0 {
            let fill = if op == ReduceOp::Prod { 1.0 } else { 0.0 };
            Tensor::full(fill, kshape, out_dtype, self.device())?
        } else {
            let s = self.storage().reduce(self.layout(), op, axes)?;
            Tensor::from_storage(s, kshape, self.device())
        };
        if keepdim {
            Ok(out)
        } else {
            out.reshape(reduced_shape(self.shape(), axes, false))
        }
    }

    /// All axes, for the `*_all` forms.
    fn all_axes(&self) -> Vec<usize> {
        (0..self.rank()).collect()
    }

    /// Sum over `axes` (negative axes count from the end; empty means no reduction). Integers and
    /// bool sum into i64; f16/bf16 accumulate in f32.
    pub fn sum(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce_op("sum", ReduceOp::Sum, &self.reduce_axes("sum", axes)?, keepdim)
    }

    /// Sum of all elements, as a rank-0 tensor.
    pub fn sum_all(&self) -> Result<Tensor> {
        self.reduce_op("sum_all", ReduceOp::Sum, &self.all_axes(), false)
    }

    /// Arithmetic mean over `axes`; integers and bool compute in f32, f16/bf16 accumulate in f32.
    /// The mean of no elements is NaN.
    pub fn mean(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        let axes = self.reduce_axes("mean", axes)?;
        self.mean_impl("mean", &axes, keepdim)
    }

    /// Mean of all elements, as a rank-0 tensor.
    pub fn mean_all(&self) -> Result<Tensor> {
        self.mean_impl("mean_all", &self.all_axes(), false)
    }

    /// The dtype mean/var/std compute in (f64 stays, everything else uses f32), and the result dtype.
    fn float_dtypes(&self) -> (DType, DType) {
        let out = self.dtype().to_float();
        (if out == DType::F64 { DType::F64 } else { DType::F32 }, out)
    }

    fn mean_impl(&self, name: &'static str, axes: &[usize], keepdim: bool) -> Result<Tensor> {
        let (compute, out) = self.float_dtypes();
        self.to_dtype(compute)?.mean_in_dtype(name, axes, keepdim)?.to_dtype(out)
    }

    /// The mean in this tensor's own (float) dtype: the sum divided by the element count.
    fn mean_in_dtype(&self, name: &'static str, axes: &[usize], keepdim: bool) -> Result<Tensor> {
        let n: usize = axes.iter().map(|&a| self.dims()[a]).product();
        self.reduce_op(name, ReduceOp::Sum, axes, keepdim)?.div_scalar(n as f64)
    }

    /// NaN-propagating maximum over `axes`; an error for an empty axis.
    pub fn max(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce_op("max", ReduceOp::Max, &self.reduce_axes("max", axes)?, keepdim)
    }

    /// Maximum of all elements, as a rank-0 tensor; an error for an empty tensor.
    pub fn max_all(&self) -> Result<Tensor> {
        self.reduce_op("max_all", ReduceOp::Max, &self.all_axes(), false)
    }

    /// NaN-propagating minimum over `axes`; an error for an empty axis.
    pub fn min(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce_op("min", ReduceOp::Min, &self.reduce_axes("min", axes)?, keepdim)
    }

    /// Minimum of all elements, as a rank-0 tensor; an error for an empty tensor.
    pub fn min_all(&self) -> Result<Tensor> {
        self.reduce_op("min_all", ReduceOp::Min, &self.all_axes(), false)
    }

    /// Product over `axes`; integers and bool multiply into i64 (wrapping).
    pub fn prod(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce_op("prod", ReduceOp::Prod, &self.reduce_axes("prod", axes)?, keepdim)
    }

    /// Product of all elements, as a rank-0 tensor.
    pub fn prod_all(&self) -> Result<Tensor> {
        self.reduce_op("prod_all", ReduceOp::Prod, &self.all_axes(), false)
    }

    /// Index (i64) of the first maximum along `axis`; NaN counts as the maximum (like NumPy).
    pub fn argmax(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        let a = self.shape().axis("argmax", axis)?;
        self.reduce_op("argmax", ReduceOp::ArgMax, &[a], keepdim)
    }

    /// Index (i64) of the first minimum along `axis`; NaN counts as the minimum (like NumPy).
    pub fn argmin(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        let a = self.shape().axis("argmin", axis)?;
        self.reduce_op("argmin", ReduceOp::ArgMin, &[a], keepdim)
    }

    /// Variance over `axes` with `correction` (0: population, 1: sample, like PyTorch): the sum of
    /// squared deviations from the mean (two passes) divided by `max(n - correction, 0)`.
    pub fn var(&self, axes: &[isize], keepdim: bool, correction: usize) -> Result<Tensor> {
        let axes = self.reduce_axes("var", axes)?;
        let (v, out) = self.var_impl(&axes, keepdim, correction)?;
        v.to_dtype(out)
    }

    /// Standard deviation: the square root of [`Tensor::var`].
    pub fn std(&self, axes: &[isize], keepdim: bool, correction: usize) -> Result<Tensor> {
        let axes = self.reduce_axes("std", axes)?;
        let (v, out) = self.var_impl(&axes, keepdim, correction)?;
        v.sqrt()?.to_dtype(out)
    }

    /// The variance in the compute dtype, and the dtype the result is returned in.
    fn var_impl(&self, axes: &[usize], keepdim: bool, correction: usize) -> Result<(Tensor, DType)> {
        let (compute, out) = self.float_dtypes();
        let n: usize = axes.iter().map(|&a| self.dims()[a]).product();
        let x = self.to_dtype(compute)?;
        let mean = x.mean_in_dtype("var", axes, true)?;
        let dev = x.sub(&mean)?;
        let ss = dev.square()?.reduce_op("var", ReduceOp::Sum, axes, keepdim)?;
        Ok((ss.div_scalar(n.saturating_sub(correction) as f64)?, out))
    }

    /// Inclusive prefix sum along `axis`; the dtype is that of [`Tensor::sum`] (integers give i64).
    pub fn cumsum(&self, axis: isize) -> Result<Tensor> {
        let a = self.shape().axis("cumsum", axis)?;
        let out_dtype = ReduceOp::Sum.output_dtype(self.dtype());
        if self.elem_count() == 0 {
            return Tensor::zeros(self.shape(), out_dtype, self.device());
        }
        let s = self.storage().cumsum(self.layout(), a)?;
        Ok(Tensor::from_storage(s, self.shape(), self.device()))
    }
}
