"""The Python array API standard (2023.12) on kiln tensors: the functions the ``kiln`` namespace adds
to the ones implemented in Rust (creation, ``where``, ``concat``, ``stack``, ``from_dlpack``).

Covered: creation (``arange asarray empty* eye full* linspace meshgrid ones* tril triu zeros*
from_dlpack``), data type functions (``astype can_cast finfo iinfo isdtype result_type``), the dtypes
kiln has, element-wise functions (below), ``matmul matrix_transpose vecdot tensordot``,
manipulation (``broadcast_arrays broadcast_to concat expand_dims flip moveaxis permute_dims reshape
roll squeeze stack tile unstack``), searching (``argmax argmin nonzero where``), statistics (``max
mean min prod std sum var cumulative_sum``), ``all any``, ``take``, and ``__array_namespace__``.

Not covered: the dtypes kiln lacks (int8, int16, uint16, uint64, complex64/128), in-place updates
(``__setitem__``: tensors are immutable), bitwise functions and shifts, inverse trigonometric and
inverse hyperbolic functions (``acos asin atan atan2 acosh asinh atanh``), ``sort argsort
searchsorted unique_*`` and the ``linalg``/``fft`` extensions. ``expm1``, ``log1p`` and ``sinh`` are
composed from kiln ops with Kahan's and Goldberg's corrections (accurate near 0, -0.0 kept).
"""

import builtins as _b
import math as _math

import numpy as _np

from . import _kiln
from ._kiln import Tensor, asarray

_DTYPES = {
    "bool": _kiln.bool,
    "uint8": _kiln.uint8,
    "int32": _kiln.int32,
    "uint32": _kiln.uint32,
    "int64": _kiln.int64,
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
    def f(x, /, *args, **kwargs):
        return getattr(_t(x), name)(*args, **kwargs)

    f.__name__ = name
    f.__doc__ = getattr(Tensor, doc_from or name).__doc__
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
abs = _method("abs")
negative = _method("neg")
sign = _method("sign")
sqrt = _method("sqrt")
exp = _method("exp")
log = _method("log")
sin = _method("sin")
cos = _method("cos")
tanh = _method("tanh")
square = _method("square")
reciprocal = _method("recip")
floor = _method("floor")
ceil = _method("ceil")
round = _method("round")
logical_not = _method("logical_not")
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
tril = _method("tril")
triu = _method("triu")
reshape = _method("reshape")
permute_dims = _method("permute", "permute")
flip = _method("flip")
squeeze = _method("squeeze")
expand_dims = _method("expand_dims")
broadcast_to = _method("broadcast_to")
argmax = _method("argmax")
argmin = _method("argmin")
sum = _method("sum")
prod = _method("prod")
mean = _method("mean")
max = _method("max")
min = _method("min")
var = _method("var")
std = _method("std")
astype = _method("astype")

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


def _series(x, coeffs):
    """`x * (c0 + x * (c1 + ...))` by Horner's rule (keeps the sign of a zero `x`)."""
    acc = None
    for c in reversed(coeffs):
        acc = _scalar_like(c, x) if acc is None else acc * x + c
    return x * acc


def expm1(x, /):
    """`e^x - 1`: its Taylor series for |x| < 0.1, Kahan's `(u - 1) * x / log(u)` with `u = e^x`
    beyond (accurate near 0 on every device, whatever the accuracy of its `log` near 1; `expm1(-0.0)`
    is -0.0)."""
    x = _t(x)
    u = x.exp()
    x = x.astype(u.dtype)
    um1 = u - 1.0
    r = _kiln.where(u == 1.0, x, um1 * x / u.log())
    r = _kiln.where((um1 == -1.0) | (u == _math.inf), um1, r)
    series = _series(x, [1.0 / _math.factorial(n) for n in range(1, 9)])
    return _kiln.where(x.abs() < 0.1, series, r)


def log1p(x, /):
    """`log(1 + x)`: its Taylor series for |x| < 0.1, Goldberg's `log(u) * x / (u - 1)` with
    `u = 1 + x` beyond (accurate near 0 on every device; `log1p(-0.0)` is -0.0)."""
    x = _t(x)
    u = x + 1.0
    x = x.astype(u.dtype)
    lu = u.log()
    r = _kiln.where(u == 1.0, x, lu * x / (u - 1.0))
    r = _kiln.where((u == 0.0) | (u == _math.inf) | (u < 0.0), lu, r)
    series = _series(x, [(-1.0) ** (n + 1) / n for n in range(1, 10)])
    return _kiln.where(x.abs() < 0.1, series, r)


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
    """`|x1|` with the sign of `x2` (the sign of zero is kept)."""
    a, b = _t(x1), _t(x2, _t(x1))
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
    out = x.cumsum(axis)
    if include_initial:
        pads = [(0, 0)] * out.ndim
        pads[axis % out.ndim] = (1, 0)
        out = out.pad(pads, 0.0)
    return out if dtype is None else out.astype(dtype)


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
        "signed integer": n in ("int32", "int64"),
        "unsigned integer": n in ("uint8", "uint32"),
        "integral": n in ("int32", "int64", "uint8", "uint32"),
        "real floating": dtype.is_float,
        "complex floating": False,
        "numeric": n != "bool",
    }
    if kind not in kinds:
        raise ValueError(f"[isdtype] unknown kind {kind!r}")
    return kinds[kind]


def result_type(*arrays_and_dtypes):
    """The dtype of an op over the arguments (kiln's promotion: int with float gives the float,
    float16 with bfloat16 gives float32, uint32 with a signed int gives int64)."""
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


_ORDER = {"bool": 0, "uint8": 1, "uint32": 2, "int32": 2, "int64": 3, "float16": 4, "bfloat16": 4, "float32": 5, "float64": 6}


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


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("Tensor", "asarray")]
