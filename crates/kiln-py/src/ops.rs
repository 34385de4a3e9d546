//! kiln's ops as `Tensor` methods (docs copied from the Rust ones) and as module functions
//! (`where`, `concat`, `stack`, `matmul`, ...). Every call releases the GIL while kiln computes.

use crate::creation::shape_arg;
use crate::errors::{run, value_err};
use crate::tensor::PyTensor;
use kiln::{RopeLayout, Tensor};
use pyo3::prelude::*;

/// Generates one no-argument method per unary op, with its Rust doc.
macro_rules! unary {
    ($($(#[doc = $doc:literal])* $name:ident;)*) => { $(
        #[pymethods]
        impl PyTensor {
            $(#[doc = $doc])*
            fn $name(&self, py: Python<'_>) -> PyResult<PyTensor> {
                let t = self.t.clone();
                Ok(run(py, stringify!($name), move || t.$name())?.into())
            }
        }
    )* };
}

unary! {
    /// Whether the sign bit is set (bool): negative numbers, -0.0, -inf and NaNs with the sign bit;
    /// `x < 0` for integers.
    signbit;
}

/// The Python method of every row of kiln's unary op table without parameters (`clamp`, which
/// takes optional bounds, is written out below), with the row's doc.
macro_rules! table_methods {
    ($(
        $(#[doc = $doc:literal])*
        $V:ident $({ $($field:ident: $fty:ty = $def:expr),* })? => $name:literal, fn $method:ident, $inputs:ident;
        $(cpu |$a:ident| $f32:expr, |$b:ident| $f64:expr;)?
        wgsl |$t:ident| $wgsl:expr;
    )*) => {
        $( table_methods!(@one $method [$($($field)*)?] $($doc)*); )*
    };
    (@one $method:ident [] $($doc:literal)*) => {
        unary! { $(#[doc = $doc])* $method; }
    };
    (@one $method:ident [$($field:ident)+] $($doc:literal)*) => {};
}
kiln::for_each_unary_op!(table_methods);

/// Generates one method per binary op taking a Tensor, a scalar or anything `kiln.asarray` takes.
macro_rules! binary {
    ($($name:ident => $doc:literal),* $(,)?) => { $(
        #[pymethods]
        impl PyTensor {
            #[doc = $doc]
            fn $name(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
                let (a, b) = (self.t.clone(), PyTensor::operand(&self.t, other)?);
                Ok(run(py, stringify!($name), move || a.$name(&b))?.into())
            }
        }
    )* };
}

binary! {
    add => "`self + rhs` with broadcasting and promotion (integers wrap).",
    sub => "`self - rhs` (integers wrap).",
    mul => "`self * rhs` (integers wrap).",
    div => "True division `self / rhs`; integer and bool operands give f32.",
    pow => "`self ^ rhs`. Floats follow C `pow`; integers give wrapping integer powers, and a negative\nexponent gives 0 except for bases 1 (1) and -1 (+-1).",
    floor_div => "Floor division `self // rhs` (NumPy `floor_divide`): exact for integers (`x // 0` is 0),\nNumPy's fmod-based formula for floats (f16/bf16 computed in f32, rounded once).",
    remainder => "Remainder `self % rhs` with the sign of `rhs` (NumPy `remainder`): exact for integers (`x % 0`\nis 0), from the exact fmod for floats.",
    maximum => "Elementwise maximum; NaN in either operand gives NaN (NumPy `maximum`).",
    minimum => "Elementwise minimum; NaN in either operand gives NaN (NumPy `minimum`).",
    logical_and => "Logical and of two bool tensors.",
    logical_or => "Logical or of two bool tensors.",
    eq => "`self == rhs` (bool result; both sides promoted to a common dtype; NaN is unequal to all).",
    ne => "`self != rhs`.",
    lt => "`self < rhs`.",
    le => "`self <= rhs`.",
    gt => "`self > rhs`.",
    ge => "`self >= rhs`.",
    matmul => "NumPy `matmul`: 1-D operands are promoted to matrices and the added axis removed; batch axes\nbroadcast. Transposed views are used as they are. Mixed dtypes promote; bool is refused. A\nzero-length contracted dim gives zeros.",
    dot => "Inner product of two 1-D tensors, rank 0.",
    silu_mul => "`silu(self) * up` (the SwiGLU gate), fused into one pass; `silu(x) = x / (1 + e^-x)`. The two\noperands broadcast together and must share a float dtype.",
}

/// Generates reductions over `axis` (None: all axes; an int or a tuple of ints). `dtype=` (NumPy's
/// keyword, which Dask passes to chunks' methods) reduces in that dtype: the input is cast to it and
/// so is the result.
macro_rules! reduce {
    ($($name:ident => $doc:literal),* $(,)?) => { $(
        #[pymethods]
        impl PyTensor {
            #[doc = $doc]
            #[pyo3(signature = (axis = None, keepdims = false, *, dtype = None))]
            fn $name(
                &self,
                py: Python<'_>,
                axis: Option<&Bound<'_, PyAny>>,
                keepdims: bool,
                dtype: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<PyTensor> {
                let axes = self.axes(axis)?;
                let dtype = dtype.filter(|d| !d.is_none()).map(crate::dtype::to_dtype).transpose()?;
                let t = self.t.clone();
                Ok(run(py, stringify!($name), move || match dtype {
                    None => t.$name(&axes, keepdims),
                    Some(d) => t.to_dtype(d)?.$name(&axes, keepdims)?.to_dtype(d),
                })?.into())
            }
        }
    )* };
}

reduce! {
    sum => "Sum over `axis` (None: all; an int or a tuple). Integers and bool sum into int64;\nfloat16/bfloat16 accumulate in float32.",
    mean => "Arithmetic mean over `axis`; integers and bool compute in float32, float16/bfloat16 accumulate in\nfloat32. The mean of no elements is NaN.",
    max => "NaN-propagating maximum over `axis`; an error for an empty axis.",
    min => "NaN-propagating minimum over `axis`; an error for an empty axis.",
    prod => "Product over `axis`; integers and bool multiply into int64 (wrapping).",
}

/// Generates argmax/argmin: over `axis`, or over the flattened tensor when `axis` is None.
macro_rules! arg_reduce {
    ($($name:ident => $doc:literal),* $(,)?) => { $(
        #[pymethods]
        impl PyTensor {
            #[doc = $doc]
            #[pyo3(signature = (axis = None, keepdims = false))]
            fn $name(&self, py: Python<'_>, axis: Option<isize>, keepdims: bool) -> PyResult<PyTensor> {
                let t = self.t.clone();
                Ok(run(py, stringify!($name), move || match axis {
                    Some(a) => t.$name(a, keepdims),
                    None => {
                        let r = t.flatten()?.$name(0, false)?;
                        if keepdims { r.reshape(vec![1; t.rank()]) } else { Ok(r) }
                    }
                })?.into())
            }
        }
    )* };
}

arg_reduce! {
    argmax => "Index (int64) of the first maximum along `axis` (None: of the flattened tensor); NaN counts\nas the maximum (like NumPy).",
    argmin => "Index (int64) of the first minimum along `axis` (None: of the flattened tensor); NaN counts\nas the minimum (like NumPy).",
}

#[pymethods]
impl PyTensor {
    /// Variance over `axis` with `correction` (0: population, 1: sample): the sum of squared
    /// deviations from the mean (two passes) divided by `max(n - correction, 0)`.
    #[pyo3(signature = (axis = None, *, correction = 0, keepdims = false))]
    fn var(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        correction: usize,
        keepdims: bool,
    ) -> PyResult<PyTensor> {
        let axes = self.axes(axis)?;
        let t = self.t.clone();
        Ok(run(py, "var", move || t.var(&axes, keepdims, correction))?.into())
    }

    /// Standard deviation: the square root of `var`.
    #[pyo3(signature = (axis = None, *, correction = 0, keepdims = false))]
    fn std(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        correction: usize,
        keepdims: bool,
    ) -> PyResult<PyTensor> {
        let axes = self.axes(axis)?;
        let t = self.t.clone();
        Ok(run(py, "std", move || t.std(&axes, keepdims, correction))?.into())
    }

    /// Inclusive prefix sum along `axis` (None: of the flattened tensor); integers give int64.
    #[pyo3(signature = (axis = None))]
    fn cumsum(&self, py: Python<'_>, axis: Option<isize>) -> PyResult<PyTensor> {
        let t = self.t.clone();
        Ok(run(py, "cumsum", move || match axis {
            Some(a) => t.cumsum(a),
            None => t.flatten()?.cumsum(0),
        })?
        .into())
    }

    /// `min(max(x, min), max)`; NaN elements stay NaN. An error when `min > max` or a bound is NaN.
    /// On integer tensors the bounds are rounded inward (`ceil(min)`, `floor(max)`) and saturated to
    /// the dtype, and the result keeps the dtype. A missing bound is unbounded.
    #[pyo3(signature = (min = None, max = None))]
    fn clamp(&self, py: Python<'_>, min: Option<f64>, max: Option<f64>) -> PyResult<PyTensor> {
        let t = self.t.clone();
        let (lo, hi) = (min.unwrap_or(f64::NEG_INFINITY), max.unwrap_or(f64::INFINITY));
        Ok(run(py, "clamp", move || t.clamp(lo, hi))?.into())
    }

    /// Softmax along `axis` (negative counts from the end), numerically stable (max subtracted).
    /// A row holding NaN or `+inf` gives NaN, `-inf` entries give 0 and a row of only `-inf` gives NaN,
    /// like PyTorch. Float dtypes only. The result has this tensor's shape; for an axis other than the
    /// last it is a (non-contiguous) view.
    #[pyo3(signature = (axis = -1), text_signature = "($self, axis=-1)")]
    fn softmax(&self, py: Python<'_>, axis: isize) -> PyResult<PyTensor> {
        let t = self.t.clone();
        Ok(run(py, "softmax", move || t.softmax(axis))?.into())
    }

    /// `log(softmax(x))` along `axis`, computed as `x - max - log(sum(exp(x - max)))`; `-inf` entries
    /// give `-inf`. Same rules as `softmax`.
    #[pyo3(signature = (axis = -1), text_signature = "($self, axis=-1)")]
    fn log_softmax(&self, py: Python<'_>, axis: isize) -> PyResult<PyTensor> {
        let t = self.t.clone();
        Ok(run(py, "log_softmax", move || t.log_softmax(axis))?.into())
    }

    /// `x / sqrt(mean(x^2, -1) + eps) * weight`, weight of shape `(d,)` (the last dim) and of this
    /// tensor's dtype. Accumulates in f32 (f64 for f64).
    #[pyo3(signature = (weight, eps = 1e-6))]
    fn rms_norm(&self, py: Python<'_>, weight: &Bound<'_, PyAny>, eps: f64) -> PyResult<PyTensor> {
        let (t, w) = (self.t.clone(), PyTensor::operand(&self.t, weight)?);
        Ok(run(py, "rms_norm", move || t.rms_norm(&w, eps))?.into())
    }

    /// `(x - mean) / sqrt(var + eps) * weight + bias` over the last axis (biased variance, like
    /// PyTorch); `weight` and `bias` have shape `(d,)` and this tensor's dtype. Accumulates in f32
    /// (f64 for f64).
    #[pyo3(signature = (weight, bias = None, eps = 1e-5))]
    fn layer_norm(
        &self,
        py: Python<'_>,
        weight: &Bound<'_, PyAny>,
        bias: Option<&Bound<'_, PyAny>>,
        eps: f64,
    ) -> PyResult<PyTensor> {
        let t = self.t.clone();
        let w = PyTensor::operand(&self.t, weight)?;
        let b = bias.filter(|b| !b.is_none()).map(|b| PyTensor::operand(&self.t, b)).transpose()?;
        Ok(run(py, "layer_norm", move || t.layer_norm(&w, b.as_ref(), eps))?.into())
    }

    /// Rotary embedding of `self` `(b, h, t, d)` for positions `offset..offset + t` with base `theta`
    /// (10000 in Llama). `interleaved` pairs features `(2i, 2i + 1)` (GPT-J), else `(i, i + d/2)`
    /// (GPT-NeoX, Llama in Hugging Face). The tables are computed in f64 and cast to this tensor's
    /// dtype. `d` must be even.
    #[pyo3(signature = (offset = 0, theta = 10000.0, interleaved = false))]
    fn rope(&self, py: Python<'_>, offset: usize, theta: f64, interleaved: bool) -> PyResult<PyTensor> {
        let t = self.t.clone();
        let layout = if interleaved { RopeLayout::Interleaved } else { RopeLayout::HalfSplit };
        Ok(run(py, "rope", move || t.rope(offset, theta, layout))?.into())
    }

    /// Rotary embedding with given `(t, d/2)` `cos` and `sin` tables (see `rope`).
    #[pyo3(signature = (cos, sin, interleaved = false))]
    fn rope_with_tables(
        &self,
        py: Python<'_>,
        cos: &PyTensor,
        sin: &PyTensor,
        interleaved: bool,
    ) -> PyResult<PyTensor> {
        let (t, c, s) = (self.t.clone(), cos.t.clone(), sin.t.clone());
        let layout = if interleaved { RopeLayout::Interleaved } else { RopeLayout::HalfSplit };
        Ok(run(py, "rope", move || t.rope_with_tables(&c, &s, layout))?.into())
    }

    /// Scaled dot-product attention of `self` (queries `(b, hq, tq, d)`) over keys `(b, hkv, tk, d)` and
    /// values `(b, hkv, tk, dv)`; `hq` must be a multiple of `hkv` (grouped-query attention: query head
    /// `i` uses key/value head `i / (hq / hkv)`). `scale` defaults to `1/sqrt(d)` (1 when `d == 0`)
    /// and must be finite. With `causal`, query `i` attends to keys `j <= i + tk - tq` (the queries are
    /// the last `tq` of the `tk` positions, as with a KV cache). The result is `(b, hq, tq, dv)`.
    ///
    /// A query with no visible key (`tk == 0`, or causal with `tq > tk` for the first `tq - tk`
    /// queries) gets zeros, like FlashAttention. NaN in a visible score gives a NaN row.
    /// Float dtypes only; f16/bf16 are computed in f32.
    ///
    /// `softcap` caps each scaled score to `softcap * tanh(score / softcap)` (Gemma 2); `window`
    /// (with `causal` only) limits each query to itself and the `window - 1` positions before it
    /// (Mistral's and Gemma 2's sliding window). Both run in the same fused kernels.
    #[pyo3(signature = (k, v, causal = false, scale = None, softcap = None, window = None))]
    #[allow(clippy::too_many_arguments)]
    fn sdpa(
        &self,
        py: Python<'_>,
        k: &PyTensor,
        v: &PyTensor,
        causal: bool,
        scale: Option<f64>,
        softcap: Option<f64>,
        window: Option<usize>,
    ) -> PyResult<PyTensor> {
        let (q, k, v) = (self.t.clone(), k.t.clone(), v.t.clone());
        let opts = kiln::SdpaOptions { causal, scale, softcap, window };
        Ok(run(py, "sdpa", move || q.sdpa_with(&k, &v, opts))?.into())
    }

    /// `self @ w^T + bias` with `w` of shape `(out, in)` (PyTorch's `nn.Linear`); `w^T` is a view, no
    /// copy. `self` is `(.., in)`; `bias`, if given, is `(out,)`.
    #[pyo3(signature = (w, bias = None))]
    fn linear(&self, py: Python<'_>, w: &PyTensor, bias: Option<&PyTensor>) -> PyResult<PyTensor> {
        let (t, w, b) = (self.t.clone(), w.t.clone(), bias.map(|b| b.t.clone()));
        Ok(run(py, "linear", move || t.linear(&w, b.as_ref()))?.into())
    }

    /// The same elements in row-major order with a new shape (one dim may be -1). A view when the
    /// layout allows it (always for contiguous data), else a copy. Takes `reshape(2, 3)` or
    /// `reshape((2, 3))`.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, py: Python<'_>, shape: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<PyTensor> {
        let dims: Vec<isize> = if shape.len() == 1 && shape.get_item(0)?.extract::<isize>().is_err() {
            shape.get_item(0)?.extract()?
        } else {
            shape.extract()?
        };
        let t = self.t.clone();
        Ok(run(py, "reshape", move || t.reshape_infer(&dims))?.into())
    }

    /// All elements as one axis (a view when contiguous).
    fn flatten(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = self.t.clone();
        Ok(run(py, "flatten", move || t.flatten())?.into())
    }

    /// NumPy's name for `flatten` (Dask's arg reductions call `arg.ravel()` on chunks).
    fn ravel(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.flatten(py)
    }

    /// Reorders axes: output axis `i` is input axis `axes[i]` (a view). Takes `permute(1, 0)` or
    /// `permute((1, 0))`; negative axes count from the end.
    #[pyo3(signature = (*axes))]
    fn permute(&self, axes: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<PyTensor> {
        let axes: Vec<isize> = if axes.len() == 1 && axes.get_item(0)?.extract::<isize>().is_err() {
            axes.get_item(0)?.extract()?
        } else {
            axes.extract()?
        };
        let rank = self.t.rank() as isize;
        let perm: Vec<usize> =
            axes.iter().map(|&a| if a < 0 { (a + rank).max(0) as usize } else { a as usize }).collect();
        Ok(self.t.permute(&perm).map_err(crate::errors::to_py)?.into())
    }

    /// `transpose()` reverses the axes (NumPy), `transpose(a, b)` swaps two axes (PyTorch), and
    /// `transpose(axes)` with one entry per axis permutes (NumPy). All are views.
    #[pyo3(signature = (*axes))]
    fn transpose(&self, axes: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<PyTensor> {
        let rank = self.t.rank();
        if axes.is_empty() {
            return self.permute(&pyo3::types::PyTuple::new(axes.py(), (0..rank).rev())?);
        }
        let list: Vec<isize> = if axes.len() == 1 { axes.get_item(0)?.extract()? } else { axes.extract()? };
        if list.len() == 2 && rank != 2 {
            return Ok(self.t.transpose(list[0], list[1]).map_err(crate::errors::to_py)?.into());
        }
        self.permute(&pyo3::types::PyTuple::new(axes.py(), list)?)
    }

    /// The transpose of a rank-2 tensor (a view).
    fn t(&self) -> PyResult<PyTensor> {
        Ok(self.t.t().map_err(crate::errors::to_py)?.into())
    }

    /// `length` entries of `axis` from `start` (a view).
    fn narrow(&self, axis: isize, start: usize, length: usize) -> PyResult<PyTensor> {
        Ok(self.t.narrow(axis, start, length).map_err(crate::errors::to_py)?.into())
    }

    /// Entry `index` of `axis`, that axis removed (a view).
    fn select(&self, axis: isize, index: usize) -> PyResult<PyTensor> {
        Ok(self.t.select(axis, index).map_err(crate::errors::to_py)?.into())
    }

    /// A view broadcast to `shape` (zero strides, no copy).
    fn broadcast_to(&self, shape: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(self.t.broadcast_to(shape_arg(shape)?).map_err(crate::errors::to_py)?.into())
    }

    /// PyTorch `expand`: like `broadcast_to`.
    #[pyo3(signature = (*shape))]
    fn expand(&self, shape: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<PyTensor> {
        let s = if shape.len() == 1 { shape_arg(&shape.get_item(0)?)? } else { shape_arg(shape.as_any())? };
        Ok(self.t.expand(s).map_err(crate::errors::to_py)?.into())
    }

    /// Removes `axis` (an int or tuple) of size 1, or every size-1 axis when `axis` is None.
    #[pyo3(signature = (axis = None))]
    fn squeeze(&self, axis: Option<&Bound<'_, PyAny>>) -> PyResult<PyTensor> {
        let t = match axis.filter(|a| !a.is_none()) {
            None => self.t.squeeze_all(),
            Some(a) => {
                let mut axes = self.axes(Some(a))?;
                let rank = self.t.rank() as isize;
                // Highest first, so earlier removals do not shift later axes.
                axes.iter_mut().for_each(|x| *x = if *x < 0 { *x + rank } else { *x });
                axes.sort_unstable_by(|a, b| b.cmp(a));
                axes.iter().try_fold(self.t.clone(), |t, &x| t.squeeze(x))
            }
        };
        Ok(t.map_err(crate::errors::to_py)?.into())
    }

    /// A new axis of size 1 at `axis` (a view).
    fn unsqueeze(&self, axis: isize) -> PyResult<PyTensor> {
        Ok(self.t.unsqueeze(axis).map_err(crate::errors::to_py)?.into())
    }

    /// Array API `expand_dims`: like `unsqueeze`.
    #[pyo3(signature = (axis = 0))]
    fn expand_dims(&self, axis: isize) -> PyResult<PyTensor> {
        self.unsqueeze(axis)
    }

    /// Reverses the order of entries along `axis` (None: every axis; an int or a tuple). A copy.
    #[pyo3(signature = (axis = None))]
    fn flip(&self, py: Python<'_>, axis: Option<&Bound<'_, PyAny>>) -> PyResult<PyTensor> {
        let axes = self.axes(axis)?;
        let t = self.t.clone();
        Ok(run(py, "flip", move || t.flip(&axes))?.into())
    }

    /// Keeps elements on and above diagonal `k` of the last two axes, zeroes the rest.
    #[pyo3(signature = (k = 0))]
    fn triu(&self, py: Python<'_>, k: i64) -> PyResult<PyTensor> {
        let t = self.t.clone();
        Ok(run(py, "triu", move || t.triu(k))?.into())
    }

    /// Keeps elements on and below diagonal `k` of the last two axes, zeroes the rest.
    #[pyo3(signature = (k = 0))]
    fn tril(&self, py: Python<'_>, k: i64) -> PyResult<PyTensor> {
        let t = self.t.clone();
        Ok(run(py, "tril", move || t.tril(k))?.into())
    }

    /// Pads with a constant: `pads[i] = (before, after)` for axis `i`; with fewer pairs than axes, the
    /// pairs apply to the first `len(pads)` axes. `value` is converted to the dtype.
    #[pyo3(signature = (pads, value = 0.0))]
    fn pad(&self, py: Python<'_>, pads: Vec<(i64, i64)>, value: f64) -> PyResult<PyTensor> {
        if let Some(p) = pads.iter().find(|p| p.0 < 0 || p.1 < 0) {
            return Err(value_err("pad", format!("pad widths must be >= 0, got {p:?} in {pads:?}")));
        }
        let pads: Vec<(usize, usize)> = pads.iter().map(|&(a, b)| (a as usize, b as usize)).collect();
        let t = self.t.clone();
        Ok(run(py, "pad", move || t.pad(&pads, value))?.into())
    }

    /// Entries of `axis` picked by the 1-D integer tensor `ids` (in that order, repeats allowed).
    #[pyo3(signature = (ids, axis = 0))]
    fn index_select(&self, py: Python<'_>, ids: &Bound<'_, PyAny>, axis: isize) -> PyResult<PyTensor> {
        let size = self.t.dim(axis).map_err(crate::errors::to_py)?;
        let (t, i) = (self.t.clone(), crate::indexing::index_tensor(py, "index_select", &self.t, ids, size)?);
        Ok(run(py, "index_select", move || t.index_select(&i, axis))?.into())
    }

    /// Rows of this `(vocab, d)` table for integer `ids` of any shape; output `ids.shape + (d,)`.
    fn embedding(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let size = self.t.dims().first().copied().unwrap_or(0);
        let (t, i) = (self.t.clone(), crate::indexing::index_tensor(py, "embedding", &self.t, ids, size)?);
        Ok(run(py, "embedding", move || t.embedding(&i))?.into())
    }

    /// PyTorch `gather`: `out[..][j][..] = self[..][ids[..][j][..]][..]` along `axis`. `ids` has the
    /// rank of `self` and no dim larger than `self`'s except along `axis`; the result has `ids`'s shape.
    fn gather(&self, py: Python<'_>, axis: isize, ids: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let size = self.t.dim(axis).map_err(crate::errors::to_py)?;
        let (t, i) = (self.t.clone(), crate::indexing::index_tensor(py, "gather", &self.t, ids, size)?);
        Ok(run(py, "gather", move || t.gather(axis, &i))?.into())
    }

    /// Views of consecutive pieces of `axis`: `split(n)` gives `n` equal pieces, `split([2, 3])`
    /// pieces of those sizes (they must sum to the axis size).
    #[pyo3(signature = (sizes, axis = 0))]
    fn split(&self, py: Python<'_>, sizes: &Bound<'_, PyAny>, axis: isize) -> PyResult<Vec<PyTensor>> {
        let t = self.t.clone();
        let sizes: Vec<usize> = match sizes.extract::<usize>() {
            Ok(n) => {
                let d = t.dim(axis).map_err(crate::errors::to_py)?;
                if n == 0 || d % n != 0 {
                    return Err(value_err("split", format!("axis of size {d} does not split into {n} equal pieces")));
                }
                vec![d / n; n]
            }
            Err(_) => sizes.extract()?,
        };
        let parts = run(py, "split", move || t.split(&sizes, axis))?;
        Ok(parts.into_iter().map(PyTensor::from).collect())
    }

    /// `n` views along `axis`, all of size `ceil(dim / n)` but the last (PyTorch `chunk`).
    #[pyo3(signature = (n, axis = 0))]
    fn chunk(&self, py: Python<'_>, n: usize, axis: isize) -> PyResult<Vec<PyTensor>> {
        let t = self.t.clone();
        let parts = run(py, "chunk", move || t.chunk(n, axis))?;
        Ok(parts.into_iter().map(PyTensor::from).collect())
    }
}

fn tensors(list: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    let items: Vec<Bound<'_, PyAny>> = list.extract()?;
    let first = items.iter().find_map(|i| i.cast::<PyTensor>().ok().map(|t| t.borrow().t.clone()));
    items
        .iter()
        .map(|i| match &first {
            Some(f) => PyTensor::operand(f, i),
            None => Ok(crate::interop::asarray_impl(i.py(), i, None, None, None)?),
        })
        .collect()
}

/// Joins tensors along an existing axis; all other dims must agree. Dtypes are promoted like a
/// binary op's; empty inputs are allowed.
#[pyfunction]
#[pyo3(signature = (arrays, /, axis = 0))]
fn concat(py: Python<'_>, arrays: &Bound<'_, PyAny>, axis: isize) -> PyResult<PyTensor> {
    let ts = tensors(arrays)?;
    Ok(run(py, "concat", move || Tensor::concat(&ts.iter().collect::<Vec<_>>(), axis))?.into())
}

/// Joins tensors of one shape along a new axis (`axis` may be `-1`, meaning after the last).
#[pyfunction]
#[pyo3(signature = (arrays, /, axis = 0))]
fn stack(py: Python<'_>, arrays: &Bound<'_, PyAny>, axis: isize) -> PyResult<PyTensor> {
    let ts = tensors(arrays)?;
    Ok(run(py, "stack", move || Tensor::stack(&ts.iter().collect::<Vec<_>>(), axis))?.into())
}

/// Elementwise `x if condition else y` with broadcasting of all three; `condition` is bool, the
/// branches are promoted to a common dtype (Python scalars take the other branch's dtype).
#[pyfunction]
#[pyo3(name = "where", signature = (condition, x1, x2, /))]
fn where_(py: Python<'_>, condition: &PyTensor, x1: &Bound<'_, PyAny>, x2: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
    let like = |o: &Bound<'_, PyAny>| o.cast::<PyTensor>().ok().map(|t| t.borrow().t.clone());
    let base = like(x1).or_else(|| like(x2)).unwrap_or_else(|| condition.t.clone());
    let base = if like(x1).is_none() && like(x2).is_none() {
        // Two scalars: the dtype comes from them alone.
        let a = crate::interop::asarray_impl(py, x1, None, Some(condition.t.device().clone()), None)?;
        let b = crate::interop::asarray_impl(py, x2, None, Some(condition.t.device().clone()), None)?;
        let (c, a2, b2) = (condition.t.clone(), a.clone(), b.clone());
        return Ok(run(py, "where", move || Tensor::where_(&c, &a2, &b2))?.into());
    } else {
        base
    };
    let (a, b) = (PyTensor::operand(&base, x1)?, PyTensor::operand(&base, x2)?);
    let c = condition.t.clone();
    Ok(run(py, "where", move || Tensor::where_(&c, &a, &b))?.into())
}

/// The `(t, d/2)` cos and sin tables of `rope` for positions `offset..offset + t`, head size `d`
/// (even), base `theta`: entry `(p, i)` is `cos/sin((offset + p) * theta^(-2i/d))`, computed in
/// f64 and then cast to `dtype`.
#[pyfunction]
#[pyo3(signature = (t, d, offset = 0, theta = 10000.0, *, dtype = None, device = None))]
fn rope_tables(
    py: Python<'_>,
    t: usize,
    d: usize,
    offset: usize,
    theta: f64,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<(PyTensor, PyTensor)> {
    let dev = crate::device::to_device(py, device)?;
    let dt = match dtype.filter(|d| !d.is_none()) {
        Some(d) => crate::dtype::to_dtype(d)?,
        None => kiln::DType::F32,
    };
    let (c, s) = run(py, "rope_tables", move || Tensor::rope_tables(t, d, offset, theta, dt, &dev))?;
    Ok((c.into(), s.into()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(concat, m)?)?;
    m.add_function(wrap_pyfunction!(stack, m)?)?;
    m.add_function(wrap_pyfunction!(where_, m)?)?;
    m.add_function(wrap_pyfunction!(rope_tables, m)?)?;
    // The methods of kiln's unary op table that take no parameters, in table order: `backend.py`'s
    // `elementwise` and the tests iterate them.
    let unary: Vec<&str> =
        kiln::op::UnaryOp::ALL.iter().filter(|o| o.params().is_empty()).map(|o| o.method()).collect();
    m.add("UNARY_OPS", pyo3::types::PyTuple::new(m.py(), unary)?)?;
    Ok(())
}
