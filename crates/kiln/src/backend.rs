//! The seam between the tensor API and a backend. `Tensor` validates arguments, broadcasts, promotes
//! dtypes and normalises axes; a backend only ever sees well-formed requests described below, and
//! returns new contiguous storage for the result. A backend that lacks an op returns
//! `Error::NotImplemented`.
//!
//! Conventions for every method:
//! - a `&Layout` describes the view of the storage it accompanies (shape, strides, offset);
//! - operands of one call share one dtype unless the method says otherwise;
//! - results are contiguous and row-major, with the shape stated per method.

use crate::cpu::CpuStorage;
use crate::op::{AttentionParams, BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::{DType, Layout, Result, Shape};

pub trait BackendStorage: Sized + Send + Sync {
    fn dtype(&self) -> DType;

    /// Number of elements the storage holds.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A host copy of the elements in view `l`, row-major.
    fn to_cpu(&self, l: &Layout) -> Result<CpuStorage>;

    /// `op` applied to each element; dtype as the input (already cast per `UnaryOp::input_dtype`).
    fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Self>;

    /// `op` on two views of one shape (broadcasting is done with zero strides) and one dtype.
    fn binary(&self, l: &Layout, rhs: &Self, rl: &Layout, op: BinaryOp) -> Result<Self>;

    /// Whether each element's sign bit is set (bool result): negative numbers, -0.0 and NaNs with the
    /// sign bit; for integers `x < 0`.
    fn signbit(&self, l: &Layout) -> Result<Self>;

    /// Comparison of two views of one shape and dtype; bool result.
    fn cmp(&self, l: &Layout, rhs: &Self, rl: &Layout, op: CmpOp) -> Result<Self>;

    /// `self` is a bool mask; picks from `t` where true, else `f`. All three views share one shape.
    fn where_cond(&self, l: &Layout, t: &Self, tl: &Layout, f: &Self, fl: &Layout) -> Result<Self>;

    /// Converts each element to `dtype` (floats to ints truncate toward zero and saturate; NaN gives 0;
    /// anything nonzero gives `true`).
    fn cast(&self, l: &Layout, dtype: DType) -> Result<Self>;

    /// A contiguous copy of the view.
    fn copy_contiguous(&self, l: &Layout) -> Result<Self>;

    /// Writes the elements of view `l` into the view `dst_l` of `dst` (same shape and dtype).
    fn copy_into(&self, l: &Layout, dst: &mut Self, dst_l: &Layout) -> Result<()>;

    /// Reduction over `axes` (sorted, distinct, non-empty). The result has the input's shape with
    /// every reduced axis set to 1, and dtype `op.output_dtype(dtype)`. ArgMax/ArgMin get one axis.
    /// Reducing an empty axis: sum 0, prod 1; the API refuses max/min/arg* of empty axes first.
    fn reduce(&self, l: &Layout, op: ReduceOp, axes: &[usize]) -> Result<Self>;

    /// Inclusive prefix sum along `axis`; dtype as `ReduceOp::Sum`'s output.
    fn cumsum(&self, l: &Layout, axis: usize) -> Result<Self>;

    /// Batched matrix product. `l` is `(batch.., m, k)` and `rl` is `(batch.., k, n)` with equal
    /// batch dims (broadcast already applied as zero strides); the result is `(batch.., m, n)`.
    /// Either operand may be a transposed view: the backend should not copy it if it can avoid it.
    fn matmul(&self, l: &Layout, rhs: &Self, rl: &Layout) -> Result<Self>;

    /// Softmax (or log-softmax) over the last axis. Float dtypes.
    fn softmax_last(&self, l: &Layout, log: bool) -> Result<Self>;

    /// `x / sqrt(mean(x^2) + eps) * w` over the last axis; `w` has shape `(d,)`.
    fn rms_norm(&self, l: &Layout, w: &Self, wl: &Layout, eps: f64) -> Result<Self>;

    /// `(x - mean) / sqrt(var + eps) * w + b` over the last axis; `w` and `b` have shape `(d,)`.
    fn layer_norm(&self, l: &Layout, w: &Self, wl: &Layout, b: Option<(&Self, &Layout)>, eps: f64) -> Result<Self>;

    /// Rotary embedding of `x` `(b, h, t, d)` with tables `cos`, `sin` of shape `(t, d/2)`.
    /// Half-split: pairs `(i, i + d/2)`; interleaved: pairs `(2i, 2i + 1)`.
    fn rope(&self, l: &Layout, cos: &Self, cl: &Layout, sin: &Self, sl: &Layout, interleaved: bool) -> Result<Self>;

    /// Scaled dot-product attention; see [`AttentionParams`] for shapes and masking.
    fn attention(&self, l: &Layout, k: &Self, kl: &Layout, v: &Self, vl: &Layout, p: AttentionParams) -> Result<Self>;

    /// `silu(self) * up` elementwise, both of one shape.
    fn silu_mul(&self, l: &Layout, up: &Self, ul: &Layout) -> Result<Self>;

    /// Picks slices along `axis` by index: output dim `axis` has `ids.len()` entries. `ids` is a 1-D
    /// i64/i32/u32/u8 view whose values the API has already checked to be in range.
    fn index_select(&self, l: &Layout, ids: &Self, il: &Layout, axis: usize) -> Result<Self>;

    /// `out[i..][j][k..] = self[i..][ids[i..][j][k..]][k..]` along `axis`; `ids` has the output's shape
    /// (same rank as `self`, other dims no larger), values already checked to be in range.
    fn gather(&self, l: &Layout, ids: &Self, il: &Layout, axis: usize) -> Result<Self>;
}

/// Creating storage on a device.
pub trait BackendDevice {
    type Storage: BackendStorage;

    /// Storage of `shape.elem_count()` elements, every one `value` cast to `dtype`.
    fn full(&self, shape: &Shape, dtype: DType, value: f64) -> Result<Self::Storage>;

    /// Uploads host data.
    fn upload(&self, data: &CpuStorage) -> Result<Self::Storage>;
}
