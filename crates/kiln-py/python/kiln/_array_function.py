"""NumPy functions on kiln tensors (``Tensor.__array_function__``, NEP 18).

``np.concatenate([t, u])``, ``np.sum(t, axis=0, keepdims=True)``, ``np.empty_like(t, shape=(0, 0))``
and the other functions in ``HANDLED`` run kiln's namespace functions on the tensors' device and
return tensors, so libraries written against NumPy's API (Dask, whose chunks may be any array type
that implements this protocol, as CuPy's do) work on tensors without a copy to the host. NumPy
arrays among the arguments join the first tensor's device. A NumPy function not in ``HANDLED``, or
an argument kiln has no equivalent for (``out=``, ``where=``, ``order="F"``...), raises a TypeError
naming it: kiln never converts to NumPy behind the caller's back (``np.asarray(t)`` does that
explicitly). The ufuncs (``np.add``, ``np.sqrt``, ``np.matmul``...) go through ``__array_ufunc__``
(``kiln._ufunc``) instead.
"""

import builtins as _b

import numpy as _np

import kiln as _k

HANDLED = {}

# NumPy's marker for "argument not given" (``np.sum(x, initial=...)``); absent on some versions.
_NOVALUE = getattr(_np, "_NoValue", object())


def array_function(func, types, args, kwargs):
    """Runs NumPy function `func` on tensors (``Tensor.__array_function__``)."""
    # Another array type that implements the protocol (a Dask array, ...) gets its turn first.
    if not _b.all(issubclass(t, (_k.Tensor, _np.ndarray)) for t in types):
        return NotImplemented
    impl = HANDLED.get(func)
    if impl is None:
        raise TypeError(f"kiln.Tensor does not implement numpy.{_name(func)} (__array_function__); "
                        f"convert with numpy.asarray(tensor) first to run it on the host")
    return impl(*args, **kwargs)


def _name(func):
    """`func`'s public name without the leading ``numpy.`` (``sum``, ``fft.fft``)."""
    module = getattr(func, "__module__", None) or "numpy"
    name = getattr(func, "__name__", repr(func))
    return name if module == "numpy" else f"{module.removeprefix('numpy.')}.{name}"


def _implements(*names):
    """Registers a handler for the NumPy functions `names` that exist in this NumPy version."""
    def register(f):
        for n in names:
            func = getattr(_np, n, None)
            if func is not None:
                HANDLED[func] = f
        return f
    return register


def _unsupported(fname, **given):
    """TypeError for arguments kiln has no equivalent of (given with a value other than the default)."""
    for arg, value in given.items():
        if value is not None and value is not _NOVALUE:
            raise TypeError(f"kiln.Tensor does not implement numpy.{fname}'s {arg}= argument")


def _first_tensor(*xs):
    for x in xs:
        if isinstance(x, _k.Tensor):
            return x
        if isinstance(x, (list, tuple)):
            t = _first_tensor(*x)
            if t is not None:
                return t
    return None


def _t(x, like=None):
    """`x` as a tensor, on `like`'s device when it is converted here."""
    if isinstance(x, _k.Tensor):
        return x
    return _k.asarray(x, device=like.device if like is not None else None)


def _ts(xs):
    like = _first_tensor(*xs)
    return [_t(x, like) for x in xs]


def _arg(x, like):
    """A tensor stays, a NumPy array joins `like`'s device, a Python scalar stays weak."""
    if isinstance(x, (_k.Tensor, bool, int, float)):
        return x
    return _t(x, like)


def _axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def _dtype(dtype):
    return None if dtype is None else _k.DType(dtype)


def _cast(x, dtype):
    return x if dtype is None or x.dtype == dtype else x.astype(_k.DType(dtype))


def _float_default(x):
    """NumPy's float for an integer mean: float64, or float32 on a device without float64."""
    if x.dtype.is_float:
        return x
    return x.astype(_k.float64 if x.device.supports_dtype(_k.float64) else _k.float32)


# Joining and splitting.
def _joined(arrays, dtype):
    """The tensors to join, in `dtype` when given, else promoted to one dtype (NumPy's rule)."""
    ts = [_cast(t, dtype) for t in _ts(list(arrays))]
    if len({t.dtype for t in ts}) > 1:
        rt = _k.result_type(*ts)
        ts = [_cast(t, rt) for t in ts]
    return ts


@_implements("concatenate", "concat")
def _concatenate(arrays, axis=0, out=None, *, dtype=None, casting=None):
    _unsupported("concatenate", out=out)
    return _k.concat(_joined(arrays, dtype), axis=axis)


@_implements("stack")
def _stack(arrays, axis=0, out=None, *, dtype=None, casting=None):
    _unsupported("stack", out=out)
    return _k.stack(_joined(arrays, dtype), axis=axis)


@_implements("broadcast_arrays")
def _broadcast_arrays(*args, subok=False):
    return _k.broadcast_arrays(*_ts(list(args)))


# Reductions.
def _reduction(name, fname):
    def f(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NOVALUE, where=_NOVALUE):
        _unsupported(fname, out=out, initial=initial, where=where)
        x = _t(a)
        if name in ("sum", "prod"):
            return getattr(_k, name)(x, axis=_axis(axis), dtype=_dtype(dtype), keepdims=bool(keepdims))
        if name == "mean":
            x = _float_default(x) if dtype is None else _cast(x, dtype)
            return _k.mean(x, axis=_axis(axis), keepdims=bool(keepdims))
        _unsupported(fname, dtype=dtype)
        return getattr(_k, name)(x, axis=_axis(axis), keepdims=bool(keepdims))
    f.__name__ = fname
    return f


for _n, _fnames in {"sum": ("sum",), "prod": ("prod", "product"), "mean": ("mean",),
                    "max": ("max", "amax"), "min": ("min", "amin"), "any": ("any",),
                    "all": ("all",)}.items():
    for _fn in _fnames:
        _implements(_fn)(_reduction(_n, _fn))


def _moment(name):
    def f(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=_NOVALUE, mean=_NOVALUE,
          correction=_NOVALUE):
        _unsupported(name, out=out, where=where, mean=mean)
        x = _float_default(_t(a)) if dtype is None else _cast(_t(a), dtype)
        c = ddof if correction is _NOVALUE else correction
        return getattr(_k, name)(x, axis=_axis(axis), correction=c, keepdims=bool(keepdims))
    f.__name__ = name
    return f


_implements("var")(_moment("var"))
_implements("std")(_moment("std"))


@_implements("argmax")
def _argmax(a, axis=None, out=None, *, keepdims=False):
    _unsupported("argmax", out=out)
    return _k.argmax(_t(a), axis=axis, keepdims=bool(keepdims))


@_implements("argmin")
def _argmin(a, axis=None, out=None, *, keepdims=False):
    _unsupported("argmin", out=out)
    return _k.argmin(_t(a), axis=axis, keepdims=bool(keepdims))


@_implements("cumsum")
def _cumsum(a, axis=None, dtype=None, out=None):
    _unsupported("cumsum", out=out)
    x = _t(a)
    if axis is None:
        x, axis = x.flatten(), 0
    return _k.cumulative_sum(x, axis=axis, dtype=_dtype(dtype))


@_implements("count_nonzero")
def _count_nonzero(a, axis=None, *, keepdims=False):
    return _k.sum(_t(a).astype(_k.bool), axis=_axis(axis), keepdims=keepdims)


# Products.
@_implements("tensordot")
def _tensordot(a, b, axes=2):
    x, y = _ts([a, b])
    return _k.tensordot(x, y, axes=axes)


@_implements("dot")
def _dot(a, b, out=None):
    _unsupported("dot", out=out)
    x, y = _ts([a, b])
    if x.ndim == 0 or y.ndim == 0:
        return x * y
    if y.ndim <= 2:
        return x @ y
    return _k.tensordot(x, y, axes=([-1], [-2]))


@_implements("outer")
def _outer(a, b, out=None):
    _unsupported("outer", out=out)
    x, y = _ts([a, b])
    return x.reshape((-1, 1)) * y.reshape((1, -1))


@_implements("einsum")
def _einsum(subscripts, *operands, out=None, dtype=None, order="K", casting="safe", optimize=False):
    """Einstein summation by broadcasting: each operand is laid out over all of the indices (a view),
    the operands multiply, and the indices not in the output are summed. No ellipsis, no index
    repeated within one operand (a diagonal)."""
    _unsupported("einsum", out=out)
    if not isinstance(subscripts, str) or "." in subscripts:
        raise TypeError("kiln.Tensor implements numpy.einsum for subscript strings without '...'")
    ts = [_cast(t, dtype) for t in _ts(list(operands))]
    spec = subscripts.replace(" ", "")
    inputs, _, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(ts):
        raise ValueError(f"einsum: {len(terms)} subscripts for {len(ts)} operands")
    if "->" not in spec:
        counts = {c: inputs.count(c) for c in inputs if c != ","}
        output = "".join(sorted(c for c, n in counts.items() if n == 1))
    letters = list(dict.fromkeys(output + inputs.replace(",", "")))
    sizes = {}
    laid = []
    for term, t in zip(terms, ts):
        if len(set(term)) != len(term) or len(term) != t.ndim:
            raise TypeError(f"kiln.Tensor implements numpy.einsum without repeated indices "
                            f"in one operand, got {term!r} for a rank-{t.ndim} operand")
        for c, n in zip(term, t.shape):
            if sizes.setdefault(c, n) != n and n != 1:
                if sizes[c] != 1:
                    raise ValueError(f"einsum: index {c} has sizes {sizes[c]} and {n}")
                sizes[c] = n
        order = sorted(range(len(term)), key=lambda i: letters.index(term[i]))
        v = t.permute(tuple(order)) if t.ndim > 1 else t
        shape = [t.shape[term.index(c)] if c in term else 1 for c in letters]
        laid.append(v.reshape(tuple(shape)))
    prod = laid[0]
    for v in laid[1:]:
        prod = prod * v
    prod = prod.broadcast_to(tuple(sizes.get(c, 1) for c in letters))
    summed = tuple(range(len(output), len(letters)))
    if summed:
        prod = _k.sum(prod, axis=summed)
    return prod


@_implements("where")
def _where(condition, *xy):
    if not xy:
        return _k.nonzero(_t(condition))
    if len(xy) != 2:
        raise ValueError("numpy.where takes one or three arguments")
    like = _first_tensor(condition, *xy)
    c = _t(condition, like).astype(_k.bool)
    return _k.where(c, _arg(xy[0], like), _arg(xy[1], like))


@_implements("clip")
def _clip(a, a_min=_NOVALUE, a_max=_NOVALUE, out=None, *, min=_NOVALUE, max=_NOVALUE, **kwargs):
    _unsupported("clip", out=out, **{k: v for k, v in kwargs.items()})
    lo = a_min if min is _NOVALUE else min
    hi = a_max if max is _NOVALUE else max
    lo, hi = (None if v is _NOVALUE else v for v in (lo, hi))
    x = _t(a)
    return _k.clip(x, _arg(lo, x) if lo is not None else None, _arg(hi, x) if hi is not None else None)


@_implements("round", "around")
def _round(a, decimals=0, out=None):
    _unsupported("round", out=out)
    x = _t(a)
    if decimals == 0:
        return _k.round(x)
    scale = 10.0 ** decimals
    return _k.round(x * scale) / scale


@_implements("isclose")
def _isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    like = _first_tensor(a, b)
    x, y = _t(a, like), _t(b, like)
    close = _k.abs(x - y) <= atol + rtol * _k.abs(y)
    close = _k.logical_or(close, x == y)  # equal infinities
    if equal_nan:
        close = _k.logical_or(close, _k.logical_and(_k.isnan(x), _k.isnan(y)))
    return close


@_implements("allclose")
def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(_k.all(_isclose(a, b, rtol, atol, equal_nan)))


@_implements("array_equal")
def _array_equal(a1, a2, equal_nan=False):
    like = _first_tensor(a1, a2)
    x, y = _t(a1, like), _t(a2, like)
    if x.shape != y.shape:
        return False
    eq = x == y
    if equal_nan:
        eq = _k.logical_or(eq, _k.logical_and(_k.isnan(x), _k.isnan(y)))
    return bool(_k.all(eq))


# Shape and layout.
@_implements("astype")
def _astype(x, dtype, /, *, copy=True, device=None):
    return _k.astype(_t(x), _k.DType(dtype), copy=copy)


@_implements("transpose", "permute_dims")
def _transpose(a, axes=None):
    x = _t(a)
    return _k.permute_dims(x, tuple(reversed(range(x.ndim))) if axes is None else tuple(axes))


@_implements("matrix_transpose")
def _matrix_transpose(x, /):
    return _k.matrix_transpose(_t(x))


@_implements("reshape")
def _reshape(a, /, shape=None, order="C", *, newshape=None, copy=None):
    if order != "C":
        raise TypeError(f"kiln.Tensor implements numpy.reshape in C order only, not order={order!r}")
    shape = newshape if shape is None else shape
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return _k.reshape(_t(a), shape, copy=copy)


@_implements("ravel")
def _ravel(a, order="C"):
    if order not in ("C", "K", "A"):
        raise TypeError(f"kiln.Tensor implements numpy.ravel in C order only, not order={order!r}")
    return _t(a).flatten()


@_implements("squeeze")
def _squeeze(a, axis=None):
    x = _t(a)
    if axis is None:
        axis = tuple(i for i, n in enumerate(x.shape) if n == 1)
    return _k.squeeze(x, axis=_axis(axis))


@_implements("expand_dims")
def _expand_dims(a, axis):
    x = _t(a)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    rank = x.ndim + len(axes)
    for ax in sorted(ax % rank for ax in axes):
        x = _k.expand_dims(x, axis=ax)
    return x


@_implements("broadcast_to")
def _broadcast_to(array, shape, subok=False):
    return _k.broadcast_to(_t(array), (shape,) if isinstance(shape, int) else tuple(shape))


@_implements("moveaxis")
def _moveaxis(a, source, destination):
    return _k.moveaxis(_t(a), source, destination)


@_implements("swapaxes")
def _swapaxes(a, axis1, axis2):
    x = _t(a)
    order = list(range(x.ndim))
    order[axis1], order[axis2] = order[axis2], order[axis1]
    return x.permute(tuple(order))


@_implements("flip")
def _flip(m, axis=None):
    return _k.flip(_t(m), axis=_axis(axis))


@_implements("roll")
def _roll(a, shift, axis=None):
    return _k.roll(_t(a), shift, axis=_axis(axis))


@_implements("tile")
def _tile(A, reps):
    return _k.tile(_t(A), (reps,) if isinstance(reps, int) else tuple(reps))


@_implements("repeat")
def _repeat(a, repeats, axis=None):
    return _k.repeat(_t(a), repeats, axis=axis)


@_implements("take")
def _take(a, indices, axis=None, out=None, mode="raise"):
    _unsupported("take", out=out)
    x = _t(a)
    if axis is None:
        x, axis = x.flatten(), 0
    return _k.take(x, _arg(indices, x), axis=axis)


def _atleast(n):
    def f(*arys):
        out = []
        for a in arys:
            x = _t(a)
            if x.ndim < n:
                # NumPy's layouts: 1-D (N,) -> (1, N) -> (1, N, 1).
                shape = {0: (1,) * n, 1: ((1, x.shape[0], 1)[:n] if n == 3 else (1,) * (n - 1) + x.shape)}
                x = x.reshape(shape.get(x.ndim, x.shape + (1,)) if n > 1 else (1,))
            out.append(x)
        return out[0] if len(out) == 1 else tuple(out)
    return f


for _i in (1, 2, 3):
    _implements(f"atleast_{_i}d")(_atleast(_i))


@_implements("tril")
def _tril(m, k=0):
    return _k.tril(_t(m), k=k)


@_implements("triu")
def _triu(m, k=0):
    return _k.triu(_t(m), k=k)


@_implements("copy")
def _copy(a, order="K", subok=False):
    return _k.asarray(_t(a), copy=True)


@_implements("sort")
def _sort(a, axis=-1, kind=None, order=None, *, stable=None):
    _unsupported("sort", order=order)
    x = _t(a)
    if axis is None:
        x, axis = x.flatten(), 0
    return _k.sort(x, axis=axis)


@_implements("argsort")
def _argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    _unsupported("argsort", order=order)
    x = _t(a)
    if axis is None:
        x, axis = x.flatten(), 0
    return _k.argsort(x, axis=axis)


@_implements("nonzero")
def _nonzero(a):
    return _k.nonzero(_t(a))


# Metadata: answered from the tensor without touching its elements.
@_implements("ndim")
def _ndim(a):
    return _t(a).ndim


@_implements("shape")
def _shape(a):
    return tuple(_t(a).shape)


@_implements("size")
def _size(a, axis=None):
    x = _t(a)
    return x.size if axis is None else x.shape[axis]


def _np_dtype(x):
    if isinstance(x, _k.Tensor):
        return x.dtype.dtype
    if isinstance(x, _k.DType):
        return x.dtype
    return x


@_implements("result_type")
def _result_type(*arrays_and_dtypes):
    return _np.result_type(*[_np_dtype(x) for x in arrays_and_dtypes])


@_implements("can_cast")
def _can_cast(from_, to, casting="safe"):
    return _np.can_cast(_np_dtype(from_), _np_dtype(to), casting)


@_implements("unravel_index")
def _unravel_index(indices, shape, order="C"):
    """Index arithmetic on a 0-d tensor (Dask's arg reductions): Python ints, as NumPy's scalars."""
    x = _t(indices)
    if x.ndim != 0:
        raise TypeError("kiln.Tensor implements numpy.unravel_index for a single (0-d) index only")
    return _np.unravel_index(int(x), shape, order=order)


# Creation: `*_like` keep the prototype's device; `like=` creation (NEP 35) uses the default device.
def _like_shape(prototype, shape):
    if shape is None:
        return tuple(prototype.shape)
    return (shape,) if isinstance(shape, int) else tuple(shape)


def _like_tensor(name, prototype, fill, dtype, order, shape, device):
    _unsupported(name, device=device)
    if order not in ("K", "C", "A"):
        raise TypeError(f"kiln.Tensor implements numpy.{name} in C order only, not order={order!r}")
    x = _t(prototype)
    shape = _like_shape(x, shape)
    dt = x.dtype if dtype is None else _k.DType(dtype)
    if name == "full_like":
        return _k.full(shape, fill, dtype=dt, device=x.device)
    return getattr(_k, name[:-5])(shape, dtype=dt, device=x.device)


def _like(name):
    def f(prototype, dtype=None, order="K", subok=True, shape=None, *, device=None):
        return _like_tensor(name, prototype, None, dtype, order, shape, device)
    f.__name__ = name
    return f


@_implements("full_like")
def _full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return _like_tensor("full_like", a, fill_value, dtype, order, shape, device)


for _n in ("empty_like", "zeros_like", "ones_like"):
    _implements(_n)(_like(_n))


def _created(name):
    def f(shape, *args, dtype=None, order="C", device=None, like=None, **kwargs):
        fill = None
        if name == "full":
            fill, *args = args if args else (kwargs.pop("fill_value"),)
        if args:
            dtype = args[0]
        _unsupported(name, **kwargs)
        return getattr(_k, name)(*(((shape, fill) if name == "full" else (shape,))),
                                 dtype=_dtype(dtype), device=None if device in (None, "cpu") else device)
    f.__name__ = name
    return f


for _n in ("empty", "zeros", "ones", "full"):
    _implements(_n)(_created(_n))


@_implements("array", "asarray", "asanyarray", "ascontiguousarray")
def _asarray(a, dtype=None, *args, copy=None, like=None, device=None, order=None, ndmin=0, subok=False):
    x = _k.asarray(a, dtype=_dtype(dtype), copy=copy)
    while x.ndim < ndmin:
        x = _k.expand_dims(x, axis=0)
    return x


@_implements("arange")
def _arange(start, stop=None, step=None, dtype=None, *, device=None, like=None):
    return _k.arange(start, stop, step, dtype=_dtype(dtype))


def covered():
    """The names of the NumPy functions tensors implement, sorted."""
    return sorted({_name(f) for f in HANDLED})


del _n, _fn, _fnames, _i
