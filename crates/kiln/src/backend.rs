//! The seam between the tensor API and a backend. `Tensor` validates arguments, broadcasts, promotes
//! dtypes and normalises axes; a backend only ever sees well-formed requests described below, and
//! returns new contiguous storage for the result. A backend that lacks an op returns
//! `Error::NotImplemented`. The fused, quantized and paged ops pass the same seam through
//! [`ExtOps`], whose defaults decline or return that error.
//!
//! Conventions for every method:
//! - a `&Layout` describes the view of the storage it accompanies (shape, strides, offset);
//! - operands of one call share one dtype unless the method says otherwise;
//! - results are contiguous and row-major, with the shape stated per method.

use crate::cpu::CpuStorage;
use crate::fusion::plan::Group;
use crate::op::{AttentionParams, BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::quant::QuantType;
use crate::{DType, Error, Layout, Result, Shape};

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

/// A storage and the view of it an op reads.
pub(crate) type View<'a, S> = (&'a S, &'a Layout);

/// The extension ops: fused, quantized, paged and model-level ops. A backend overrides the ones it
/// accelerates; each default either declines (`Ok(None)` / `Ok(false)`: the tensor layer then runs
/// the composed reference, which is also the fused kernel's test reference) or, where no composed
/// form exists, returns `Error::NotImplemented` naming the op and [`ExtOps::NAME`]. The tensor
/// layer has checked shapes, dtypes and devices before calling, as for [`BackendStorage`].
pub(crate) trait ExtOps: BackendStorage {
    /// The backend's name in errors.
    const NAME: &'static str;

    /// `residual + pro(x) @ w^T`: `x` (`l`) holds `m` rows of `kin` features (`2k` for
    /// [`Prologue::SiluMul`], else `k`), `w` a dense `(n, k)` weight of x's dtype (f32, f16 or bf16),
    /// `residual` `(m, n)`. The result is `(m, n)` in x's dtype.
    fn linear_fused(
        &self,
        _l: &Layout,
        _w: View<Self>,
        _pro: &Prologue<Self>,
        _residual: Option<View<Self>>,
    ) -> Result<Option<Self>> {
        Ok(None)
    }

    /// The values of `blocks` blocks of `qt` whose planar words (u32, from element 0) `self` holds,
    /// in `dtype` (f32, f16 or bf16) or in f32 (the caller casts).
    fn dequantize(&self, _qt: QuantType, _blocks: usize, _dtype: DType) -> Result<Self> {
        Err(Error::NotImplemented { op: "dequantize", backend: Self::NAME })
    }

    /// `x (m, k) @ w^T` for the planar words `w` (from element 0) of a quantized `(n, k)` weight of
    /// `qt`; `x` (`l`, f32, f16 or bf16, any strides) has `m` rows. `add` is an addend in x's dtype
    /// and its row stride (0: a `(n,)` bias, `n`: a `(m, n)` residual), which the backend may add
    /// itself. Returns the `(m, n)` product in x's dtype or in f32 (the caller casts), and whether
    /// it added `add` (if not, the caller does).
    fn qmatmul(
        &self,
        _l: &Layout,
        _w: &Self,
        _qt: QuantType,
        _n: usize,
        _k: usize,
        _add: Option<(View<Self>, usize)>,
    ) -> Result<(Self, bool)> {
        Err(Error::NotImplemented { op: "qlinear", backend: Self::NAME })
    }

    /// [`ExtOps::linear_fused`] for a quantized weight (`w` and `qt` as [`ExtOps::qmatmul`]): the
    /// `(m, n)` result in x's dtype or in f32 (the caller casts).
    #[allow(clippy::too_many_arguments)]
    fn qmatmul_fused(
        &self,
        _l: &Layout,
        _w: &Self,
        _qt: QuantType,
        _n: usize,
        _k: usize,
        _pro: &Prologue<Self>,
        _residual: Option<View<Self>>,
    ) -> Result<Option<Self>> {
        Ok(None)
    }

    /// [`ExtOps::qmatmul_fused`] of several quantized weights with one input (`Tensor::qlinear_fused_cat`):
    /// `ws` holds each weight's storage, format and output size n (all take `k` inputs); the result
    /// `(m, sum n)` in x's dtype holds their outputs side by side. `Ok(None)` where the backend has
    /// no such kernel for these operands: the caller runs each product and concatenates.
    fn qmatmul_fused_cat(
        &self,
        _l: &Layout,
        _ws: &[(&Self, QuantType, usize)],
        _k: usize,
        _pro: &Prologue<Self>,
    ) -> Result<Option<Self>> {
        Ok(None)
    }

    /// Decode attention through a block table (`Tensor::sdpa_paged`): `self` holds the queries
    /// `(b, hq, 1, d)` (any strides), `k` and `v` the contiguous pools `(blocks, hkv, block_size, d)`
    /// and `(.., dv)`. The result is `(b, hq, 1, dv)` in the queries' dtype.
    fn sdpa_paged(&self, _l: &Layout, _k: View<Self>, _v: View<Self>, _t: &Paged<Self>) -> Result<Self> {
        Err(Error::NotImplemented { op: "sdpa_paged", backend: Self::NAME })
    }

    /// The batched decode step's append (`KvBlockPool::write_last`): row `i` of `k` `(b, h, 1, d)` and
    /// `v` `(b, h, 1, dv)` (any strides) into flat slot `slots[i]` (u32 `(b,)`, from element 0) of the
    /// pools `(blocks, h, block_size, d)` and `(.., dv)`. `Ok(false)`: nothing written.
    fn paged_write(
        _k_pool: (&mut Self, &Layout),
        _v_pool: (&mut Self, &Layout),
        _k: View<Self>,
        _v: View<Self>,
        _slots: &Self,
    ) -> Result<bool> {
        Ok(false)
    }

    /// `KvCache::append_rope`: splits `a.qkv` into heads, rotates q and k, writes k and v into the
    /// caches `(1, nkv, max_len, d)` at positions `a.rot.pos..`, and returns q `(t, nh, d)`.
    fn rope_append(
        _a: &RopeAppend<Self>,
        _k_cache: (&mut Self, &Layout),
        _v_cache: (&mut Self, &Layout),
    ) -> Result<Option<Self>> {
        Ok(None)
    }

    /// `KvCache::qlinear_append_rope`: [`ExtOps::qmatmul_fused_cat`] of one row of x (`l`) whose
    /// output row, the stacked q/k/v of one position, goes where [`ExtOps::rope_append`] puts it:
    /// q rotated into the returned `(1, nh, d)`, k rotated and v as they are into the caches at
    /// position `rot.pos`. `Ok(None)` where the backend has no such kernel for these operands: the
    /// caller runs the product, then `rope_append`.
    #[allow(clippy::too_many_arguments)]
    fn qmatmul_rope_append(
        &self,
        _l: &Layout,
        _ws: &[(&Self, QuantType, usize)],
        _k: usize,
        _pro: &Prologue<Self>,
        _rot: &Rotary<Self>,
        _k_cache: (&mut Self, &Layout),
        _v_cache: (&mut Self, &Layout),
    ) -> Result<Option<Self>> {
        Ok(None)
    }

    /// One fused group of `kiln::compile` over its program's leaves (views broadcast to the group's
    /// shape): one contiguous result per output of the group. Declining replays the group's ops.
    fn fused(_group: &Group, _leaves: &[View<Self>]) -> Result<Option<Vec<Self>>> {
        Ok(None)
    }
}

/// What a fused linear product does to its input rows first (`LinearInput` on storage).
pub(crate) enum Prologue<'a, S> {
    Plain,
    /// RMSNorm with a `(k,)` weight of the input's dtype, and its eps.
    RmsNorm(View<'a, S>, f64),
    /// `silu(gate) * up` of each row's two halves (`k` values each).
    SiluMul,
}

/// A batch's block table on storage (`BlockTable`), checked by the API: the u32 ids
/// `(b, max_blocks)` and lengths `(b,)`, both contiguous from element 0, and the lengths on the host.
pub(crate) struct Paged<'a, S> {
    pub table: &'a S,
    pub lens: &'a S,
    pub host_lens: &'a [usize],
    pub max_blocks: usize,
    pub block_size: usize,
    pub scale: f64,
    /// Scores soft-capped (`c tanh(s / c)`), and each query limited to its sequence's last `window`
    /// positions (`Tensor::sdpa_paged_with`).
    pub softcap: Option<f64>,
    pub window: Option<usize>,
}

/// The operands of [`ExtOps::rope_append`]: `t` rows of the stacked q/k/v product `(t, (nh + 2 nkv) d)`
/// and where they go.
pub(crate) struct RopeAppend<'a, S> {
    pub qkv: View<'a, S>,
    pub rot: Rotary<'a, S>,
}

/// Where [`ExtOps::rope_append`] and [`ExtOps::qmatmul_rope_append`] put `t` stacked q/k/v rows: the
/// half-split cos and sin tables `(t, d / 2)` of their dtype, the heads, and the caches' write
/// position and length.
pub(crate) struct Rotary<'a, S> {
    pub cos: View<'a, S>,
    pub sin: View<'a, S>,
    pub nh: usize,
    pub nkv: usize,
    pub d: usize,
    pub pos: usize,
    pub max_len: usize,
}
