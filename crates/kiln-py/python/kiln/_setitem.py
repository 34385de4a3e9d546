"""``t[key] = value`` for kiln tensors: copy-on-write.

kiln's storage is shared by views and immutable once written (the GPU queue may still read it), so
an update is computed as a new tensor: the positions ``key`` selects are found on the host from the
shape alone (``numpy.arange(size).reshape(shape)[key]``, the same indexing rules as ``t[key]``),
then one select or gather on ``t``'s device takes each element from ``t`` or from ``value``.
``Tensor.__setitem__`` (Rust) then gives ``t`` the new storage; views taken earlier keep the old values.

Costs: O(t.size) per assignment: one element-wise select by a mask built on the host when one
value is assigned (``t[i] = 3``, ``t[mask] = 0``), else a gather of the whole tensor by an index
map built on the host. Mask and integer-array keys given as tensors are read back to the host.
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


def setitem(x, key, value):
    """A new tensor equal to `x` except at `x[key]`, which holds `value` (cast to `x`'s dtype,
    broadcast to `x[key]`'s shape)."""
    shape = tuple(x.shape)
    n = x.size
    try:
        pos = np.arange(n, dtype=np.int64).reshape(shape)[_host_key(key)]
    except IndexError as e:
        raise IndexError(f"[setitem] {e}") from None
    pos = np.asarray(pos)
    dev = x.device
    if isinstance(value, _kiln.Tensor):
        v = value.to_device(dev)
    else:
        v = _kiln.asarray(np.asarray(value), device="cpu").to_device(dev) if not isinstance(value, (bool, int, float)) \
            else _kiln.full((), value, dtype=x.dtype, device=dev)
    if v.dtype != x.dtype:
        v = v.astype(x.dtype)
    one = v.reshape(()) if v.size == 1 else None
    try:
        v = v.broadcast_to(pos.shape)
    except ValueError:
        raise ValueError(f"[setitem] a value of shape {tuple(v.shape)} does not broadcast to the selection's "
                         f"shape {pos.shape}") from None
    k = pos.size
    if k == 0:
        return x
    flat = pos.reshape(-1)
    if k == n and np.array_equal(flat, np.arange(n)):
        # Every element, in order: the value is the new tensor.
        return v.reshape(shape).contiguous() if x.ndim else v.reshape(())
    if one is not None:
        # One value (x[i] = 3, x[mask] = 0): an element-wise select by a mask built on the host.
        mask = np.zeros(n, dtype=np.bool_)
        mask[flat] = True
        return _kiln.where(_kiln.asarray(mask.reshape(shape), device=dev), one, x)
    index = np.arange(n, dtype=np.int64)
    index[flat] = n + np.arange(k, dtype=np.int64)  # repeated positions: the last write wins
    both = _kiln.concat([x.reshape(-1), v.reshape(-1)], axis=0)
    return both.index_select(_kiln.asarray(index, device=dev), 0).reshape(shape)
