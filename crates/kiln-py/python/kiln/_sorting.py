"""Sorting, searching and set functions of the array API: ``sort argsort searchsorted unique_all
unique_counts unique_inverse unique_values``.

They compute on the host with NumPy: a CPU tensor is read in place (no copy) and the result copied
once into a new tensor; a GPU tensor makes a round trip through host memory (kiln has no GPU sort
kernel yet). Results keep the input's device. NaNs sort last (NumPy's and the standard's
order); ``unique_*`` treat every NaN as distinct, as the standard asks.
"""

from typing import NamedTuple

import numpy as np

from . import _kiln


def _host(x):
    if x.dtype == _kiln.bfloat16:
        return np.asarray(x.astype(_kiln.float32)), _kiln.bfloat16
    return np.asarray(x), None


def _back(a, like, dtype):
    return _kiln.asarray(np.asarray(a, order="C"), dtype=dtype, device=like.device)


def _index(a, like):
    return _kiln.asarray(np.asarray(a, dtype=np.int64, order="C"), device=like.device)


def _axis(x, axis):
    if x.ndim == 0:
        raise ValueError("[sort] needs rank >= 1")
    if not -x.ndim <= axis < x.ndim:
        raise IndexError(f"[sort] axis {axis} is out of range for rank {x.ndim}")
    return axis % x.ndim


def argsort(x, /, *, axis=-1, descending=False, stable=True):
    """Indices (int64) that sort `x` along `axis` (NaN last; stable keeps equal elements in order,
    also when descending)."""
    axis = _axis(x, axis)
    h, _ = _host(x)
    if not descending:
        return _index(np.argsort(h, axis=axis, kind="stable"), x)
    if h.dtype.kind == "f":
        # -x keeps NaN last and ties in order.
        return _index(np.argsort(-h, axis=axis, kind="stable"), x)
    # Reverse, sort ascending (stable), reverse again: equal elements keep their order.
    n = h.shape[axis]
    r = np.flip(np.argsort(np.flip(h, axis=axis), axis=axis, kind="stable"), axis=axis)
    return _index(n - 1 - r, x)


def sort(x, /, *, axis=-1, descending=False, stable=True):
    """`x` sorted along `axis` (NaN last)."""
    axis = _axis(x, axis)
    h, bf = _host(x)
    if descending:
        idx = np.asarray(argsort(x, axis=axis, descending=True).cpu())
        s = np.take_along_axis(h, idx, axis=axis)
    else:
        s = np.sort(h, axis=axis, kind="stable")
    return _back(s, x, bf or x.dtype)


def searchsorted(x1, x2, /, *, side="left", sorter=None):
    """Indices (int64) where the elements of `x2` would be inserted into the sorted 1-D `x1` (with
    `sorter`, `x1[sorter]` is the sorted order). `side` "left" or "right"."""
    if x1.ndim != 1:
        raise ValueError(f"[searchsorted] x1 must be 1-D, got shape {tuple(x1.shape)}")
    if side not in ("left", "right"):
        raise ValueError(f"[searchsorted] side must be 'left' or 'right', got {side!r}")
    a, _ = _host(x1)
    v = np.asarray(x2.astype(_kiln.float32)) if x2.dtype == _kiln.bfloat16 else np.asarray(x2)
    s = None if sorter is None else np.asarray(sorter).astype(np.int64)
    return _index(np.searchsorted(a, v, side=side, sorter=s), x2 if isinstance(x2, _kiln.Tensor) else x1)


class UniqueAllResult(NamedTuple):
    values: object
    indices: object
    inverse_indices: object
    counts: object


class UniqueCountsResult(NamedTuple):
    values: object
    counts: object


class UniqueInverseResult(NamedTuple):
    values: object
    inverse_indices: object


def _unique(x):
    h, bf = _host(x)
    flat = h.reshape(-1)
    vals, idx, inv, cnt = np.unique(flat, return_index=True, return_inverse=True, return_counts=True, equal_nan=False)
    return vals, idx, inv.reshape(h.shape), cnt, bf or x.dtype


def unique_all(x, /):
    """The distinct values of `x` (flattened, sorted; every NaN distinct), the index of each one's
    first occurrence, the index into the values of every element of `x` (`x`'s shape) and the
    counts."""
    v, i, inv, c, d = _unique(x)
    return UniqueAllResult(_back(v, x, d), _index(i, x), _index(inv, x), _index(c, x))


def unique_counts(x, /):
    """The distinct values of `x` and how often each occurs."""
    v, _, _, c, d = _unique(x)
    return UniqueCountsResult(_back(v, x, d), _index(c, x))


def unique_inverse(x, /):
    """The distinct values of `x` and, for every element, the index of its value (`x`'s shape)."""
    v, _, inv, _, d = _unique(x)
    return UniqueInverseResult(_back(v, x, d), _index(inv, x))


def unique_values(x, /):
    """The distinct values of `x`, sorted (every NaN distinct)."""
    v, _, _, _, d = _unique(x)
    return _back(v, x, d)
