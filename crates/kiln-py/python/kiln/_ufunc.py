"""NumPy ufuncs on kiln tensors (``Tensor.__array_ufunc__``).

An operator's ufunc (``ndarray + t``, ``np.add(a, t)``, ``np.less(a, t)``) calls the Tensor's
operator method, as Python would for ``a + t``: the result is a tensor, with kiln's promotion and
weak scalars. A ufunc with a namespace function of the same meaning (``np.sqrt(t)``,
``np.arctan2(t, u)``, ``np.maximum(t, 0)``) runs that function on the tensor's device; ``dtype=``
computes in that dtype. Anything else (``out=``, ``where=``, methods such as ``reduce``, ufuncs kiln
lacks) returns NotImplemented, which NumPy raises as a TypeError: convert with ``np.asarray(t)``
first. So "regular Python
functions" written with NumPy run on tensors (pydotcompute's ``execute_kernel`` promises them).
"""

import numpy as _np

import kiln as _k

# ufunc name -> (operator method, reflected operator method).
_OPERATORS = {
    "add": ("__add__", "__radd__"),
    "subtract": ("__sub__", "__rsub__"),
    "multiply": ("__mul__", "__rmul__"),
    "divide": ("__truediv__", "__rtruediv__"),
    "true_divide": ("__truediv__", "__rtruediv__"),
    "floor_divide": ("__floordiv__", "__rfloordiv__"),
    "remainder": ("__mod__", "__rmod__"),
    "power": ("__pow__", "__rpow__"),
    "matmul": ("__matmul__", "__rmatmul__"),
    "bitwise_and": ("__and__", "__rand__"),
    "bitwise_or": ("__or__", "__ror__"),
    "bitwise_xor": ("__xor__", "__rxor__"),
    "left_shift": ("__lshift__", "__rlshift__"),
    "right_shift": ("__rshift__", "__rrshift__"),
    "equal": ("__eq__", "__eq__"),
    "not_equal": ("__ne__", "__ne__"),
    "less": ("__lt__", "__gt__"),
    "less_equal": ("__le__", "__ge__"),
    "greater": ("__gt__", "__lt__"),
    "greater_equal": ("__ge__", "__le__"),
}

# NumPy ufunc names that differ from the namespace's.
_RENAMED = {
    "absolute": "abs",
    "fabs": "abs",
    "arccos": "acos",
    "arcsin": "asin",
    "arctan": "atan",
    "arctan2": "atan2",
    "arccosh": "acosh",
    "arcsinh": "asinh",
    "arctanh": "atanh",
    "invert": "bitwise_invert",
    "bitwise_not": "bitwise_invert",
    "rint": "round",
    "fmax": None,  # NaN-ignoring: not kiln's maximum
    "fmin": None,
    "conjugate": "conj",
}

_NAMESPACE = set("""abs acos acosh asin asinh atan atan2 atanh bitwise_invert ceil conj copysign cos cosh exp expm1 floor
hypot isfinite isinf isnan log log10 log1p log2 logaddexp logical_and logical_not logical_or logical_xor maximum
minimum negative positive reciprocal round sign signbit sin sinh sqrt square tan tanh trunc""".split())


def array_ufunc(ufunc, method, inputs, kwargs):
    kwargs = dict(kwargs or {})
    dtype = kwargs.pop("dtype", None)
    if method != "__call__" or any(v is not None for v in kwargs.values()):
        return NotImplemented
    if dtype is not None:
        # ``np.add(a, b, dtype=d)`` (Dask's blockwise sums): the inputs in `d`, and so the result.
        d = _k.DType(dtype)
        out = array_ufunc(ufunc, method, [x.astype(d) if isinstance(x, _k.Tensor) else x for x in inputs], None)
        return out if out is NotImplemented or out.dtype == d else out.astype(d)
    name = ufunc.__name__
    if name in _OPERATORS and len(inputs) == 2:
        a, b = inputs
        op, rop = _OPERATORS[name]
        if isinstance(a, _k.Tensor):
            return getattr(a, op)(b)
        return getattr(b, rop)(a)
    name = _RENAMED.get(name, name)
    if name not in _NAMESPACE or ufunc.nin != len(inputs):
        return NotImplemented
    like = next(x for x in inputs if isinstance(x, _k.Tensor))
    # NumPy arrays join the tensor's device; scalars stay scalars (weak, as in operators).
    args = [_k.asarray(x, device=like.device) if isinstance(x, _np.ndarray) else x for x in inputs]
    return getattr(_k, name)(*args)
