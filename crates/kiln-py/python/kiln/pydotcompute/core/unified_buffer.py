"""pydotcompute's ``UnifiedBuffer`` on kiln: a NumPy array and its device copy, kept in step by
dirty flags.

``UnifiedBuffer(shape, dtype=np.float32)``; ``allocate()``; ``host`` (the NumPy array, brought up to
date from the device when the device side was marked dirty); ``metal`` (the device array, a
``kiln.Tensor``, uploaded when the host side was marked dirty); ``mark_host_dirty()`` after writing
the host array, ``mark_metal_dirty()`` after changing the device array (``t[...] = v`` updates a
kiln tensor in place, copy-on-write, so the buffer sees it). ``device`` is a synonym of ``metal``
(pydotcompute's CUDA name). The device is ``MetalBackend``'s (GPU 0, or the CPU with
``KILN_DEVICE=cpu``).
"""

import threading

import numpy as np

import kiln as _k


class UnifiedBuffer:
    """A host (NumPy) array and a device array of one shape and dtype, synchronised on access."""

    def __init__(self, shape, dtype=np.float32, *, backend=None):
        from ..backends.metal import _kiln_dtype

        self._shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        self._np_dtype = np.dtype(dtype)
        self._kiln_dtype = _kiln_dtype(self._np_dtype)
        self._backend = backend
        self._host = None
        self._metal = None
        self._host_dirty = False
        self._metal_dirty = False
        self._lock = threading.RLock()

    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        """The NumPy dtype of the host array."""
        return self._np_dtype

    @property
    def size(self):
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.size * self._np_dtype.itemsize

    @property
    def is_allocated(self):
        return self._host is not None

    def _dev(self):
        if self._backend is None:
            from ..backends.metal import MetalBackend

            self._backend = MetalBackend()
        return self._backend

    def allocate(self):
        """Allocates both sides, zero-filled (again a no-op once allocated)."""
        with self._lock:
            if self._host is None:
                self._host = np.zeros(self._shape, dtype=self._np_dtype)
                self._metal = _k.zeros(self._shape, dtype=self._kiln_dtype, device=self._dev().device)
                self._host_dirty = self._metal_dirty = False
        return self

    def free(self):
        """Releases both sides."""
        with self._lock:
            self._host = self._metal = None
            self._host_dirty = self._metal_dirty = False

    @property
    def host(self):
        """The NumPy array, synchronised from the device first when the device side is dirty."""
        with self._lock:
            self.allocate()
            if self._metal_dirty:
                src = np.asarray(self._metal)
                self._host[...] = src.astype(self._np_dtype, copy=False).reshape(self._shape)
                self._metal_dirty = False
            return self._host

    @property
    def metal(self):
        """The device array (a ``kiln.Tensor``), uploaded first when the host side is dirty. The same
        tensor object while nothing is dirty."""
        with self._lock:
            self.allocate()
            if self._host_dirty:
                self._metal = _k.asarray(self._host, dtype=self._kiln_dtype, device=self._dev().device)
                self._host_dirty = False
            return self._metal

    device = metal

    def mark_host_dirty(self):
        """Says the host array was written: the next ``metal`` uploads it."""
        with self._lock:
            self._host_dirty = True
            self._metal_dirty = False

    def mark_metal_dirty(self):
        """Says the device array was changed: the next ``host`` downloads it."""
        with self._lock:
            self._metal_dirty = True
            self._host_dirty = False

    mark_device_dirty = mark_metal_dirty

    def sync(self):
        """Brings the stale side up to date."""
        self.host
        self.metal

    def __array__(self, dtype=None, copy=None):
        a = self.host
        if dtype is not None:
            a = a.astype(dtype)
        return a.copy() if copy else a

    def __repr__(self):
        return (f"UnifiedBuffer(shape={self._shape}, dtype={self._np_dtype}, host_dirty={self._host_dirty}, "
                f"metal_dirty={self._metal_dirty})")
