"""``t[key] = value`` for kiln tensors: copy-on-write.

kiln's storage is shared by views and immutable once written (the GPU queue may still read it), so
an update is computed as a new tensor: the positions ``key`` selects are found on the host from the
shape alone (``numpy.arange(size).reshape(shape)[key]``, the same indexing rules as ``t[key]``),
then one select or gather on ``t``'s device takes each element from ``t`` or from ``value``.
``Tensor.__setitem__`` (Rust) then gives ``t`` the new storage; views taken earlier keep the old values.

Costs: a key of ints and step-1 slices (a box: ``t[2] = v``, ``t[1:5, 3] = v``) pads the value and
a mask out to ``t``'s shape on the device and selects (no host work of ``t``'s size); other keys
with one value (``t[mask] = 0``) select by a mask built on the host; the rest gather the whole
tensor by an index map built on the host. Mask and integer-array keys given as tensors are read
back to the host.
"""

import numpy as np

from . import _kiln


def _host_key(key):
    """The key with kiln tensors replaced by NumPy arrays (masks and integer index arrays)."""
    if isinstance(key, tuple):
        return tuple(_host_key(k) for k in key)
    if isinstance(key, _kiln.Tensor):
        if key.ndim == 0 and key.dtype != _kiln.bool:
            return int(key)
        return np.asarray(key)
    if isinstance(key, list):
        return np.asarray(key)
    return key


def _box(key, shape):
    """`(starts, stops)` when `key` selects a box (ints, slices of step 1, one Ellipsis), else None."""
    key = key if isinstance(key, tuple) else (key,)
    for k in key:
        if not (k is Ellipsis or isinstance(k, slice) or (isinstance(k, (int, np.integer)) and not isinstance(k, bool))):
            return None
    if sum(k is Ellipsis for k in key) > 1:
        return None
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (len(shape) - len(key) + 1) + key[i + 1:]
    key = key + (slice(None),) * (len(shape) - len(key))
    if len(key) != len(shape):
        return None
    starts, stops = [], []
    for k, n in zip(key, shape):
        if isinstance(k, slice):
            a, b, step = k.indices(n)
            if step != 1:
                return None
            starts.append(a)
            stops.append(max(a, b))
        else:
            k = int(k) + n if int(k) < 0 else int(k)
            if not 0 <= k < n:
                return None  # the general path raises the IndexError
            starts.append(k)
            stops.append(k + 1)
    return starts, stops


def setitem(x, key, value):
    """A new tensor equal to `x` except at `x[key]`, which holds `value` (cast to `x`'s dtype,
    broadcast to `x[key]`'s shape)."""
    shape = tuple(x.shape)
    n = x.size
    hkey = _host_key(key)
    try:
        # NumPy's rules on a broadcast scalar: the selection's shape without touching x-sized memory.
        sel_shape = np.broadcast_to(np.zeros((), np.bool_), shape)[hkey].shape
    except IndexError as e:
        raise IndexError(f"[setitem] {e}") from None
    dev = x.device
    if isinstance(value, _kiln.Tensor):
        v = value.to_device(dev)
    elif isinstance(value, (bool, int, float)):
        v = _kiln.full((), value, dtype=x.dtype, device=dev)
    else:
        v = _kiln.asarray(np.asarray(value), device="cpu").to_device(dev)
    if v.dtype != x.dtype:
        v = v.astype(x.dtype)
    one = v.reshape(()) if v.size == 1 else None
    try:
        v = v.broadcast_to(sel_shape)
    except ValueError:
        raise ValueError(f"[setitem] a value of shape {tuple(v.shape)} does not broadcast to the selection's "
                         f"shape {sel_shape}") from None
    if v.size == 0:
        return x
    box = _box(hkey, shape) if x.ndim else None
    if box is not None:
        # A box (ints and step-1 slices): value and mask padded out to x's shape, then one select.
        starts, stops = box
        full = tuple(b - a for a, b in zip(starts, stops))
        pads = [(a, m - b) for a, b, m in zip(starts, stops, shape)]
        filled = (one.broadcast_to(full) if one is not None else v.reshape(full)).pad(pads, 0.0)
        mask = _kiln.ones(full, dtype=_kiln.bool, device=dev).pad(pads, 0.0)
        return _kiln.where(mask, filled, x)
    pos = np.asarray(np.arange(n, dtype=np.int64).reshape(shape)[hkey])
    k = pos.size
    flat = pos.reshape(-1)
    if k == n and np.array_equal(flat, np.arange(n)):
        # Every element, in order: the value is the new tensor.
        return v.reshape(shape).contiguous() if x.ndim else v.reshape(())
    if one is not None:
        # One value (x[mask] = 0, x[::2] = 1): an element-wise select by a mask built on the host.
        mask = np.zeros(n, dtype=np.bool_)
        mask[flat] = True
        return _kiln.where(_kiln.asarray(mask.reshape(shape), device=dev), one, x)
    index = np.arange(n, dtype=np.int64)
    index[flat] = n + np.arange(k, dtype=np.int64)  # repeated positions: the last write wins
    both = _kiln.concat([x.reshape(-1), v.reshape(-1)], axis=0)
    return both.index_select(_kiln.asarray(index, device=dev), 0).reshape(shape)
