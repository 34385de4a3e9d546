"""The Python array API standard (2023.12) on kiln tensors: the functions the ``kiln`` namespace adds
to the ones implemented in Rust (creation, ``where``, ``concat``, ``stack``).

Covered: all of the standard's functions, constants and the ``__array_namespace_info__``
inspection API, for every real dtype of the standard (bool, int8, int16, int32, int64, uint8,
uint16, uint32, uint64, float16, float32, float64 on the CPU; all but float64 on a GPU) and
bfloat16. Where the work happens: element-wise functions, reductions,
manipulation, indexing and linear algebra run on the tensor's device; ``acos asin atan atan2 acosh
asinh atanh log1p expm1`` are composed there from kiln's kernels (``kiln._math``); ``bitwise_and/or/xor/invert``
run on a GPU as a WGSL kernel (``kiln._bitwise``); ``sort argsort searchsorted unique_*`` and the
shifts compute on the host with NumPy (a round trip for GPU tensors; ``kiln._sorting``); ``t[key] = v`` is copy-on-write (``kiln._setitem``).

Not covered: complex dtypes (kiln has no complex kernels), and the ``linalg`` and ``fft`` extensions
(no factorization or FFT kernels in kiln).
"""

import builtins as _b
import inspect as _inspect
import math as _math

import numpy as _np

from . import _kiln
from . import _math as _m
from ._kiln import Tensor, asarray

_DTYPES = {
    "bool": _kiln.bool,
    "int8": _kiln.int8,
    "int16": _kiln.int16,
    "int32": _kiln.int32,
    "int64": _kiln.int64,
    "uint8": _kiln.uint8,
    "uint16": _kiln.uint16,
    "uint32": _kiln.uint32,
    "uint64": _kiln.uint64,
    "float16": _kiln.float16,
    "bfloat16": _kiln.bfloat16,
    "float32": _kiln.float32,
    "float64": _kiln.float64,
}

e = _math.e
inf = _math.inf
nan = _math.nan
pi = _math.pi
newaxis = None


def _t(x, like=None):
    if isinstance(x, Tensor):
        return x
    return asarray(x, device=like.device if isinstance(like, Tensor) else None)


def _method(name, doc_from=None):
    """The Tensor method `name` as a namespace function `f(x, /, ...)`, with the method's signature."""
    def f(x, /, *args, **kwargs):
        return getattr(_t(x), name)(*args, **kwargs)

    f.__name__ = name
    f.__doc__ = getattr(Tensor, doc_from or name).__doc__
    try:
        sig = _inspect.signature(getattr(Tensor, name))
        params = list(sig.parameters.values())[1:]
        x = _inspect.Parameter("x", _inspect.Parameter.POSITIONAL_ONLY)
        f.__signature__ = sig.replace(parameters=[x] + params)
    except (TypeError, ValueError):  # no text signature: keep (x, /, *args, **kwargs)
        pass
    return f


def _unary(name, method):
    """A one-argument element-wise function `name(x, /)` calling the Tensor method `method`."""
    def f(x, /):
        return getattr(_t(x), method)()

    f.__name__ = f.__qualname__ = name
    f.__doc__ = getattr(Tensor, method).__doc__
    return f


def _scalar_like(s, t):
    """A Python scalar as a rank-0 tensor next to `t` (weak: `t`'s dtype unless the kind is wider)."""
    dt = t.dtype
    if isinstance(s, float) and not dt.is_float:
        dt = _kiln.float32
    elif isinstance(s, int) and not isinstance(s, _b.bool) and dt == _kiln.bool:
        dt = _kiln.int64
    return _kiln.full((), s, dtype=dt, device=t.device)


def _binary(name, method):
    def f(x1, x2, /):
        if not isinstance(x1, Tensor) and isinstance(x2, Tensor):
            x1 = _scalar_like(x1, x2) if _is_scalar(x1) else _t(x1, x2)
        return getattr(_t(x1), method)(x2)

    f.__name__ = name
    f.__doc__ = getattr(Tensor, method).__doc__ or f"`{name}(x1, x2)` with broadcasting."
    return f


def _is_scalar(x):
    return isinstance(x, (_b.bool, int, float)) or isinstance(x, _np.generic)


# Element-wise functions kiln implements.
abs = _unary("abs", "abs")
negative = _unary("negative", "neg")


def sign(x, /):
    """-1, 0 or 1 by the sign of `x` (NaN stays NaN). Zeros of either sign give +0, as the standard
    (and NumPy) have it; kiln's `Tensor.sign` keeps the zero's sign."""
    s = _t(x).sign()
    return s + 0.0 if s.dtype.is_float else s  # -0 + 0 = +0 (IEEE round to nearest)


sqrt = _unary("sqrt", "sqrt")
exp = _unary("exp", "exp")
log = _unary("log", "log")
sin = _unary("sin", "sin")
cos = _unary("cos", "cos")
tanh = _unary("tanh", "tanh")
square = _unary("square", "square")
reciprocal = _unary("reciprocal", "recip")
floor = _unary("floor", "floor")
ceil = _unary("ceil", "ceil")
round = _unary("round", "round")
logical_not = _unary("logical_not", "logical_not")
relu = _method("relu")
sigmoid = _method("sigmoid")
silu = _method("silu")
gelu = _method("gelu")
rsqrt = _method("rsqrt")
softmax = _method("softmax")
log_softmax = _method("log_softmax")
rms_norm = _method("rms_norm")
layer_norm = _method("layer_norm")
rope = _method("rope")
sdpa = _method("sdpa")
silu_mul = _method("silu_mul")
linear = _method("linear")
index_select = _method("index_select")
embedding = _method("embedding")
gather = _method("gather")
pad = _method("pad")
split = _method("split")
chunk = _method("chunk")


def tril(x, /, *, k=0):
    """Keeps elements on and below diagonal `k` of the last two axes, zeroes the rest."""
    return _t(x).tril(k)


def triu(x, /, *, k=0):
    """Keeps elements on and above diagonal `k` of the last two axes, zeroes the rest."""
    return _t(x).triu(k)


def reshape(x, /, shape, *, copy=None):
    """The same elements in row-major order with a new shape (one dim may be -1): a view when the
    layout allows it. `copy=False` raises ValueError when a copy would be needed."""
    x = _t(x)
    out = x.reshape(tuple(shape))
    if copy is False and not out.shares_storage_with(x):
        raise ValueError(f"[reshape] shape {tuple(shape)} needs a copy of this layout, but copy=False")
    return out


def permute_dims(x, /, axes):
    """Reorders axes: output axis `i` is input axis `axes[i]` (a view)."""
    return _t(x).permute(tuple(axes))


def flip(x, /, *, axis=None):
    """Reverses the order of elements along `axis` (None: every axis; an int or a tuple)."""
    return _t(x).flip(axis)


def squeeze(x, /, axis):
    """Removes `axis` (an int or tuple) of size 1 (ValueError when an axis is not of size 1)."""
    return _t(x).squeeze(axis)


def expand_dims(x, /, axis=0):
    """A new axis of size 1 at `axis` (-x.ndim - 1 <= axis <= x.ndim; IndexError outside)."""
    x = _t(x)
    if not isinstance(axis, int) or not -x.ndim - 1 <= axis <= x.ndim:
        raise IndexError(f"[expand_dims] axis {axis} is out of range for rank {x.ndim} "
                         f"(valid: {-x.ndim - 1}..{x.ndim})")
    return x.unsqueeze(axis if axis >= 0 else axis + x.ndim + 1)


def broadcast_to(x, /, shape):
    """A view broadcast to `shape` (zero strides, no copy)."""
    return _t(x).broadcast_to(tuple(shape))


def argmax(x, /, *, axis=None, keepdims=False):
    """Index (int64) of the first maximum along `axis` (None: of the flattened tensor)."""
    return _t(x).argmax(axis, keepdims)


def argmin(x, /, *, axis=None, keepdims=False):
    """Index (int64) of the first minimum along `axis` (None: of the flattened tensor)."""
    return _t(x).argmin(axis, keepdims)


_UNSIGNED = ("uint8", "uint16", "uint32", "uint64")


def _default_sum_dtype(x, dtype):
    """The standard's default dtype of a sum or product: unsigned integers accumulate in uint64 (the
    unsigned type of the default integer's width; kiln's Tensor methods give int64 for them)."""
    if dtype is None and x.dtype.name in _UNSIGNED:
        return _kiln.uint64
    return dtype


def _with_dtype(x, dtype, name, axis, keepdims):
    x = _t(x)
    dtype = _default_sum_dtype(x, dtype)
    if dtype is None:
        return getattr(x, name)(axis, keepdims)
    dtype = _to_dtype(dtype)
    out = getattr(x.astype(dtype), name)(axis, keepdims)
    return out if out.dtype == dtype else out.astype(dtype)


def sum(x, /, *, axis=None, dtype=None, keepdims=False):
    """Sum over `axis` (None: all; an int or a tuple), in `dtype` when given. Signed integers and bool
    sum into int64 by default, unsigned ones into uint64 (wrapping); float16/bfloat16 accumulate in
    float32."""
    return _with_dtype(x, dtype, "sum", axis, keepdims)


def prod(x, /, *, axis=None, dtype=None, keepdims=False):
    """Product over `axis`, in `dtype` when given; signed integers and bool multiply into int64 by
    default, unsigned ones into uint64 (wrapping)."""
    return _with_dtype(x, dtype, "prod", axis, keepdims)


def mean(x, /, *, axis=None, keepdims=False):
    """Arithmetic mean over `axis` (NaN for no elements)."""
    return _t(x).mean(axis, keepdims)


def max(x, /, *, axis=None, keepdims=False):
    """NaN-propagating maximum over `axis` (ValueError for an empty axis)."""
    return _t(x).max(axis, keepdims)


def min(x, /, *, axis=None, keepdims=False):
    """NaN-propagating minimum over `axis` (ValueError for an empty axis)."""
    return _t(x).min(axis, keepdims)


def _count(x, axis):
    if axis is None:
        return x.size
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return _math.prod(x.shape[a] for a in axes)


def var(x, /, *, axis=None, correction=0.0, keepdims=False):
    """Variance over `axis`: the sum of squared deviations from the mean divided by
    `max(n - correction, 0)` (`correction` may be any float >= 0: 0 population, 1 sample)."""
    x = _t(x)
    if correction < 0:
        raise ValueError(f"[var] correction must be >= 0, got {correction}")
    if float(correction).is_integer():
        return x.var(axis, correction=int(correction), keepdims=keepdims)
    n = _count(x, axis)
    pop = x.var(axis, correction=0, keepdims=keepdims)
    denom = n - correction
    return pop * (n / denom) if denom > 0 else pop * _math.nan


def std(x, /, *, axis=None, correction=0.0, keepdims=False):
    """Standard deviation: the square root of `var` (same `correction`)."""
    x = _t(x)
    if float(correction).is_integer() and correction >= 0:
        return x.std(axis, correction=int(correction), keepdims=keepdims)
    return var(x, axis=axis, correction=correction, keepdims=keepdims).sqrt()


def astype(x, dtype, /, *, copy=True, device=None):
    """`x` converted to `dtype` (and moved to `device` when given)."""
    x = _t(x)
    out = x.astype(dtype, copy)
    return out if device is None else out.to_device(device)

add = _binary("add", "__add__")
subtract = _binary("subtract", "__sub__")
multiply = _binary("multiply", "__mul__")
divide = _binary("divide", "__truediv__")
floor_divide = _binary("floor_divide", "__floordiv__")
remainder = _binary("remainder", "__mod__")
pow = _binary("pow", "__pow__")
matmul = _binary("matmul", "__matmul__")
maximum = _binary("maximum", "maximum")
minimum = _binary("minimum", "minimum")
equal = _binary("equal", "eq")
not_equal = _binary("not_equal", "ne")
less = _binary("less", "lt")
less_equal = _binary("less_equal", "le")
greater = _binary("greater", "gt")
greater_equal = _binary("greater_equal", "ge")
logical_and = _binary("logical_and", "logical_and")
logical_or = _binary("logical_or", "logical_or")
logical_xor = _binary("logical_xor", "__xor__")


def real(x, /):
    """The real part: `x` itself (kiln has no complex dtypes)."""
    return _t(x)


def imag(x, /):
    """The imaginary part: zeros of `x`'s dtype (kiln has no complex dtypes)."""
    x = _t(x)
    return zeros(x.shape, dtype=x.dtype, device=x.device)


def conj(x, /):
    """The complex conjugate: `x` itself (kiln has no complex dtypes)."""
    return _t(x)


def positive(x, /):
    """`+x`: the tensor itself."""
    return _t(x)


def clip(x, /, min=None, max=None):
    """`min(max(x, min), max)`; a missing bound is unbounded (tensor bounds broadcast)."""
    x = _t(x)
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        if min is not None:
            x = x.maximum(min)
        if max is not None:
            x = x.minimum(max)
        return x
    return x.clamp(min, max)


# Composed element-wise functions.
def isnan(x, /):
    """True where `x` is NaN (`not x == x`); all False for integer and bool tensors."""
    x = _t(x)
    return ~(x == x)


def isinf(x, /):
    """True where `x` is +inf or -inf."""
    x = _t(x)
    if not x.dtype.is_float:
        return zeros(x.shape, dtype=_kiln.bool, device=x.device)
    return x.abs() == _math.inf


def isfinite(x, /):
    """True where `x` is neither NaN nor infinite."""
    x = _t(x)
    if not x.dtype.is_float:
        return ones(x.shape, dtype=_kiln.bool, device=x.device)
    return x.abs() < _math.inf


def trunc(x, /):
    """Rounds toward zero."""
    x = _t(x)
    if not x.dtype.is_float:
        return x
    return _kiln.where(x < 0, x.ceil(), x.floor())


def tan(x, /):
    """Tangent (`sin(x) / cos(x)`)."""
    x = _t(x)
    return x.sin() / x.cos()


def sinh(x, /):
    """Hyperbolic sine: `(e + e / (e + 1)) / 2` with `e = expm1(x)` for |x| < 1 (accurate near 0,
    `sinh(-0.0)` is -0.0), `(e^x - e^-x) / 2` beyond."""
    x = _t(x)
    e = expm1(x)
    small = (e + e / (e + 1.0)) * 0.5
    return _kiln.where(x.abs() < 1.0, small, (x.exp() - (-x).exp()) * 0.5)


def cosh(x, /):
    """Hyperbolic cosine (`(e^x + e^-x) / 2`)."""
    x = _t(x)
    return (x.exp() + (-x).exp()) * 0.5


def expm1(x, /):
    """`e^x - 1`, accurate near 0 (Kahan's correction; see ``kiln._math``)."""
    return _m.expm1(_t(x))


def log1p(x, /):
    """`log(1 + x)`, accurate near 0 (Goldberg's correction; see ``kiln._math``)."""
    return _m.log1p(_t(x))


def asin(x, /):
    """Inverse sine, in radians (composed on the device; see ``kiln._math``)."""
    return _m.asin(_t(x))


def acos(x, /):
    """Inverse cosine, in radians, in [0, pi]."""
    return _m.acos(_t(x))


def atan(x, /):
    """Inverse tangent, in radians, in [-pi/2, pi/2]."""
    return _m.atan(_t(x))


def atan2(x1, x2, /):
    """The angle of the point (x2, x1), in radians, in [-pi, pi] (IEEE 754 special cases)."""
    a, b = _pair(x1, x2)
    return _m.atan2(a, b)


def asinh(x, /):
    """Inverse hyperbolic sine."""
    return _m.asinh(_t(x))


def acosh(x, /):
    """Inverse hyperbolic cosine (NaN below 1)."""
    return _m.acosh(_t(x))


def atanh(x, /):
    """Inverse hyperbolic tangent."""
    return _m.atanh(_t(x))


def _pair(x1, x2):
    """Two operands as tensors on one device (a scalar takes the other's dtype when of its kind)."""
    if isinstance(x1, Tensor):
        return x1, (_scalar_like(x2, x1) if _is_scalar(x2) else _t(x2, x1))
    if isinstance(x2, Tensor):
        return (_scalar_like(x1, x2) if _is_scalar(x1) else _t(x1, x2)), x2
    a = _t(x1)
    return a, _t(x2, a)


def log2(x, /):
    """Base-2 logarithm."""
    return _t(x).log() * (1.0 / _math.log(2.0))


def log10(x, /):
    """Base-10 logarithm."""
    return _t(x).log() * (1.0 / _math.log(10.0))


def logaddexp(x1, x2, /):
    """`log(e^x1 + e^x2)`, computed stably."""
    a, b = _t(x1), _t(x2, _t(x1))
    m = a.maximum(b)
    return m + ((a - m).exp() + (b - m).exp()).log()


def hypot(x1, x2, /):
    """`sqrt(x1^2 + x2^2)`."""
    a, b = _t(x1), _t(x2, _t(x1))
    return (a.square() + b.square()).sqrt()


def copysign(x1, x2, /):
    """`|x1|` with the sign of `x2` (the sign of zero is kept); the operands promote like any binary
    function's."""
    a, b = _pair(x1, x2)
    dt = a.dtype.promote(b.dtype)
    a, b = a.astype(dt), b.astype(dt)
    neg = (b < 0) | ((b == 0) & ((1.0 / b) < 0)) if b.dtype.is_float else (b < 0)
    return _kiln.where(neg, -a.abs(), a.abs())


def signbit(x, /):
    """True where the sign bit is set (negative numbers, -0.0, -inf, NaNs with the sign bit)."""
    return _t(x).signbit()


def all(x, /, *, axis=None, keepdims=False):
    """True where every element along `axis` is nonzero."""
    x = _t(x)
    return (x != 0).logical_not().sum(axis=axis, keepdims=keepdims) == 0


def any(x, /, *, axis=None, keepdims=False):
    """True where some element along `axis` is nonzero."""
    x = _t(x)
    return (x != 0).sum(axis=axis, keepdims=keepdims) > 0


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Inclusive prefix sum along `axis` (None only for 1-D input)."""
    x = _t(x)
    if axis is None:
        if x.ndim != 1:
            raise ValueError("[cumulative_sum] axis is required for arrays of rank != 1")
        axis = 0
    if not -x.ndim <= axis < x.ndim:
        raise IndexError(f"[cumulative_sum] axis {axis} is out of range for rank {x.ndim}")
    dtype = _default_sum_dtype(x, dtype)
    if dtype is not None:
        dtype = _to_dtype(dtype)
        x = x.astype(dtype)
    out = x.cumsum(axis)
    if include_initial:
        pads = [(0, 0)] * out.ndim
        pads[axis % out.ndim] = (1, 0)
        out = out.pad(pads, 0.0)
    return out if dtype is None or out.dtype == dtype else out.astype(dtype)


# Manipulation.
def matrix_transpose(x, /):
    """Transposes the last two axes."""
    return _t(x).mT


def vecdot(x1, x2, /, *, axis=-1):
    """Dot product of vectors along `axis` (broadcasting the rest; the two vector lengths must be
    equal), in the operands' promoted dtype (integers wrap in it, as in NumPy)."""
    a, b = _t(x1), _t(x2, _t(x1))
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"[vecdot] needs arrays of rank >= 1, got shapes {a.shape} and {b.shape}")
    n = _b.min(a.ndim, b.ndim)
    if not -n <= axis < n or (axis >= 0 and a.ndim != b.ndim):
        raise ValueError(f"[vecdot] axis {axis} is out of range for shapes {a.shape} and {b.shape}")
    if a.shape[axis] != b.shape[axis]:
        raise ValueError(
            f"[vecdot] the vectors along axis {axis} differ in length: shapes {a.shape} and {b.shape}"
        )
    rt = result_type(a, b)
    out = (a * b).sum(axis=axis)
    return out if out.dtype == rt else out.astype(rt)


def tensordot(x1, x2, /, *, axes=2):
    """Sum of products over `axes` (an int: the last n of x1 with the first n of x2)."""
    a, b = _t(x1), _t(x2, _t(x1))
    if isinstance(axes, int):
        ax_a = list(range(a.ndim - axes, a.ndim))
        ax_b = list(range(axes))
    else:
        ax_a, ax_b = [list(v) for v in axes]
    ax_a = [i % a.ndim for i in ax_a]
    ax_b = [i % b.ndim for i in ax_b]
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    k = _math.prod(a.shape[i] for i in ax_a)
    am = a.permute(free_a + ax_a).reshape(_math.prod(a.shape[i] for i in free_a), k)
    bm = b.permute(ax_b + free_b).reshape(k, _math.prod(b.shape[i] for i in free_b))
    return (am @ bm).reshape(tuple(a.shape[i] for i in free_a) + tuple(b.shape[i] for i in free_b))


def broadcast_arrays(*arrays):
    """Views of the arrays broadcast to their common shape."""
    ts = [_t(a) for a in arrays]
    shape = _np.broadcast_shapes(*[t.shape for t in ts])
    return [t.broadcast_to(shape) for t in ts]


def moveaxis(x, source, destination, /):
    """Moves axes to new positions (a view)."""
    x = _t(x)
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [s % x.ndim for s in src]
    dst = [d % x.ndim for d in dst]
    order = [i for i in range(x.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return x.permute(order)


def roll(x, /, shift, *, axis=None):
    """Rolls elements along `axis` (None: of the flattened tensor, then reshaped)."""
    x = _t(x)
    if axis is None:
        return roll(x.flatten(), shift, axis=0).reshape(x.shape)
    shifts = [shift] if isinstance(shift, int) else list(shift)
    axes = [axis] if isinstance(axis, int) else list(axis)
    for s, a in zip(shifts, axes):
        n = x.shape[a]
        if n == 0:
            continue
        s %= n
        if s:
            lo, hi = x.split([n - s, s], axis=a)
            x = concat([hi, lo], axis=a)
    return x


def tile(x, repetitions, /):
    """Repeats `x` along each axis."""
    x = _t(x)
    reps = tuple(repetitions)
    if len(reps) < x.ndim:
        reps = (1,) * (x.ndim - len(reps)) + reps
    x = x.reshape((1,) * (len(reps) - x.ndim) + x.shape)
    for a, r in enumerate(reps):
        if r != 1:
            x = concat([x] * r, axis=a) if r > 0 else x.narrow(a, 0, 0)
    return x


def unstack(x, /, *, axis=0):
    """The views `x[..., i, ...]` along `axis`."""
    x = _t(x)
    return tuple(x.select(axis, i) for i in range(x.shape[axis]))


def meshgrid(*arrays, indexing="xy"):
    """Coordinate grids from 1-D arrays (`indexing` "xy" or "ij")."""
    ts = [_t(a) for a in arrays]
    shape = [t.shape[0] for t in ts]
    if indexing == "xy" and len(ts) >= 2:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, t in enumerate(ts):
        pos = i
        if indexing == "xy" and len(ts) >= 2 and i < 2:
            pos = 1 - i
        view = [1] * len(ts)
        view[pos] = t.shape[0]
        out.append(t.reshape(view).broadcast_to(shape))
    return out


def take(x, indices, /, *, axis=None):
    """Elements of `x` at `indices` along `axis` (negative indices count from the end)."""
    x = _t(x)
    if axis is None:
        if x.ndim != 1:
            raise ValueError("[take] axis is required for arrays of rank != 1")
        axis = 0
    key = [slice(None)] * x.ndim
    key[axis] = indices
    return x[tuple(key)]


def nonzero(x, /):
    """Indices of the nonzero elements, one int64 tensor per axis (computed on the host)."""
    x = _t(x)
    if x.ndim == 0:
        raise ValueError("[nonzero] needs rank >= 1")
    host = _np.asarray(x.astype(_kiln.bool))
    return tuple(asarray(i.astype(_np.int64), device=x.device) for i in _np.nonzero(host))


def zeros(shape, *, dtype=None, device=None):
    return _kiln.zeros(shape, dtype=dtype, device=device)


def ones(shape, *, dtype=None, device=None):
    return _kiln.ones(shape, dtype=dtype, device=device)


zeros.__doc__ = _kiln.zeros.__doc__
ones.__doc__ = _kiln.ones.__doc__


def concat(arrays, /, *, axis=0):
    """Joins tensors along an existing axis (None: flattened first)."""
    if axis is None:
        return _kiln.concat([_t(a).flatten() for a in arrays], axis=0)
    return _kiln.concat(arrays, axis=axis)


# Data type functions.
def isdtype(dtype, kind):
    """Whether `dtype` is of `kind` ("bool", "signed integer", "unsigned integer", "integral",
    "real floating", "complex floating", "numeric", a dtype, or a tuple of those)."""
    if isinstance(kind, tuple):
        return _b.any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, _kiln.DType):
        return dtype == kind
    n = dtype.name
    kinds = {
        "bool": n == "bool",
        "signed integer": n in ("int8", "int16", "int32", "int64"),
        "unsigned integer": n in ("uint8", "uint16", "uint32", "uint64"),
        "integral": n in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"),
        "real floating": dtype.is_float,
        "complex floating": False,
        "numeric": n != "bool",
    }
    if kind not in kinds:
        raise ValueError(f"[isdtype] unknown kind {kind!r}")
    return kinds[kind]


def result_type(*arrays_and_dtypes):
    """The dtype of an op over the arguments (kiln's promotion: the standard's table for integers,
    int with float gives the float, float16 with bfloat16 gives float32; uint64 with a signed int,
    which the standard leaves out, gives int64)."""
    dts = []
    for a in arrays_and_dtypes:
        if isinstance(a, Tensor):
            dts.append(a.dtype)
        elif isinstance(a, _kiln.DType):
            dts.append(a)
        elif isinstance(a, (_b.bool, int, float)):
            continue
        else:
            dts.append(_to_dtype(a))
    if not dts:
        raise ValueError("[result_type] needs at least one array or dtype")
    out = dts[0]
    for d in dts[1:]:
        out = out.promote(d)
    return out


def _to_dtype(d):
    if isinstance(d, _kiln.DType):
        return d
    return _kiln.zeros((), dtype=d, device="cpu").dtype


def can_cast(from_, to, /):
    """Whether `from_` (a dtype or tensor) promotes to `to` without changing kind downward."""
    f = from_.dtype if isinstance(from_, Tensor) else _to_dtype(from_)
    t = _to_dtype(to)
    return f.promote(t) == t


class finfo:
    """Machine limits of a float dtype (bits, eps, max, min, smallest_normal, dtype)."""

    def __init__(self, dtype):
        d = dtype.dtype if isinstance(dtype, Tensor) else _to_dtype(dtype)
        if not d.is_float:
            raise ValueError(f"[finfo] {d} is not a float dtype")
        self.dtype = d
        if d.name == "bfloat16":
            self.bits, self.eps, self.max = 16, 2.0**-7, 3.3895313892515355e38
            self.smallest_normal = 1.1754943508222875e-38
        else:
            f = _np.finfo(d.name)
            self.bits, self.eps, self.max = f.bits, float(f.eps), float(f.max)
            self.smallest_normal = float(f.smallest_normal)
        self.min = -self.max

    def __repr__(self):
        return f"finfo(dtype={self.dtype}, bits={self.bits}, eps={self.eps}, max={self.max})"


class iinfo:
    """Limits of an integer dtype (bits, max, min, dtype)."""

    def __init__(self, dtype):
        d = dtype.dtype if isinstance(dtype, Tensor) else _to_dtype(dtype)
        if not d.is_int:
            raise ValueError(f"[iinfo] {d} is not an integer dtype")
        self.dtype = d
        i = _np.iinfo(d.name)
        self.bits, self.max, self.min = i.bits, int(i.max), int(i.min)

    def __repr__(self):
        return f"iinfo(dtype={self.dtype}, bits={self.bits}, min={self.min}, max={self.max})"


# Sorting, searching, sets (host NumPy; kiln._sorting) and bitwise functions (kiln._bitwise).
from ._bitwise import (  # noqa: E402
    bitwise_and as _bitwise_and,
    bitwise_invert as _bitwise_invert,
    bitwise_left_shift as _bitwise_left_shift,
    bitwise_or as _bitwise_or,
    bitwise_right_shift as _bitwise_right_shift,
    bitwise_xor as _bitwise_xor,
)
from ._sorting import (  # noqa: E402,F401 (the result types are part of the namespace)
    UniqueAllResult,
    UniqueCountsResult,
    UniqueInverseResult,
    argsort as _argsort,
    searchsorted as _searchsorted,
    sort as _sort,
    unique_all as _unique_all,
    unique_counts as _unique_counts,
    unique_inverse as _unique_inverse,
    unique_values as _unique_values,
)


def sort(x, /, *, axis=-1, descending=False, stable=True):
    """`x` sorted along `axis` (NaN last). Computed on the host (a round trip for GPU tensors)."""
    return _sort(_t(x), axis=axis, descending=descending, stable=stable)


def argsort(x, /, *, axis=-1, descending=False, stable=True):
    """Indices (int64) that sort `x` along `axis`, stable. Computed on the host."""
    return _argsort(_t(x), axis=axis, descending=descending, stable=stable)


def searchsorted(x1, x2, /, *, side="left", sorter=None):
    """Insertion indices (int64) of `x2`'s elements into the sorted 1-D `x1`. Computed on the host."""
    a = _t(x1)
    return _searchsorted(a, _t(x2, a), side=side, sorter=sorter)


def unique_all(x, /):
    """Distinct values, first indices, inverse indices and counts (computed on the host)."""
    return _unique_all(_t(x))


def unique_counts(x, /):
    """Distinct values and their counts (computed on the host)."""
    return _unique_counts(_t(x))


def unique_inverse(x, /):
    """Distinct values and the inverse indices (`x`'s shape; computed on the host)."""
    return _unique_inverse(_t(x))


def unique_values(x, /):
    """Distinct values, sorted (computed on the host)."""
    return _unique_values(_t(x))


def bitwise_and(x1, x2, /):
    """Bitwise and of integer or bool operands (a WGSL kernel on a GPU, NumPy on the CPU)."""
    return _bitwise_and(*_pair(x1, x2))


def bitwise_or(x1, x2, /):
    """Bitwise or of integer or bool operands (a WGSL kernel on a GPU, NumPy on the CPU)."""
    return _bitwise_or(*_pair(x1, x2))


def bitwise_xor(x1, x2, /):
    """Bitwise exclusive or of integer or bool operands (a WGSL kernel on a GPU, NumPy on the CPU)."""
    return _bitwise_xor(*_pair(x1, x2))


def bitwise_left_shift(x1, x2, /):
    """`x1 << x2` of integers (computed on the host)."""
    return _bitwise_left_shift(*_pair(x1, x2))


def bitwise_right_shift(x1, x2, /):
    """`x1 >> x2` of integers, arithmetic for signed ones (computed on the host)."""
    return _bitwise_right_shift(*_pair(x1, x2))


def bitwise_invert(x, /):
    """Bitwise not of an integer tensor, logical not of a bool one (a WGSL kernel on a GPU)."""
    return _bitwise_invert(_t(x))


def repeat(x, repeats, /, *, axis=None):
    """Each element (`axis` None: of the flattened tensor) or each entry along `axis`, repeated
    `repeats` times (an int, or one count per entry). A gather on `x`'s device; the indices are
    built on the host."""
    x = _t(x)
    if axis is None:
        x, axis = x.reshape(-1), 0
    if not -x.ndim <= axis < x.ndim:
        raise IndexError(f"[repeat] axis {axis} is out of range for rank {x.ndim}")
    n = x.shape[axis]
    r = _np.asarray(repeats.cpu() if isinstance(repeats, Tensor) else repeats)
    if r.dtype.kind not in "iub":
        raise TypeError(f"[repeat] repeats must be integers, got {r.dtype}")
    if (r < 0).any():
        raise ValueError("[repeat] repeats must be >= 0")
    if r.ndim > 1 or (r.ndim == 1 and r.shape[0] not in (1, n)):
        raise ValueError(f"[repeat] repeats must be an int or have one entry per element ({n}), got shape {r.shape}")
    idx = _np.repeat(_np.arange(n, dtype=_np.int64), r)
    return x.index_select(asarray(idx, device=x.device), axis)


def from_dlpack(x, /, *, device=None, copy=None):
    """A tensor from any object with ``__dlpack__`` (NumPy, PyTorch, JAX, kiln). kiln's storage owns
    its memory, so the data is always copied: `copy=False` raises ValueError (BufferError would
    mean the producer failed)."""
    if copy is False:
        raise ValueError("[from_dlpack] copy=False is impossible: kiln's storage owns its memory, so the data is "
                         "always copied")
    return _kiln.from_dlpack(x, device=device)


from_dlpack.__doc__ += "\n\n" + (_kiln.from_dlpack.__doc__ or "")


def eval(*arrays):
    """Waits until the work that computes `arrays` (tensors, or lists, tuples and dicts of them) has
    finished (MLX's ``mx.eval``): kiln runs ops as they are called, so this is a synchronize of
    their devices."""
    seen = []

    def walk(a):
        if isinstance(a, Tensor):
            d = a.device
            if d not in seen:
                seen.append(d)
        elif isinstance(a, (list, tuple)):
            for v in a:
                walk(v)
        elif isinstance(a, dict):
            for v in a.values():
                walk(v)

    walk(arrays)
    for d in seen:
        d.synchronize()


array = Tensor  # MLX's name: ``mx.array([1, 2, 3])``; ``isinstance(t, kiln.array)``

from ._namespace_info import __array_namespace_info__  # noqa: E402,F401

__all__ = [n for n in dir() if not n.startswith("_") and n not in ("Tensor", "asarray")]
