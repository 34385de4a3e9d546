"""``kiln.__array_namespace_info__()``: the array API's inspection object (devices, default
device, dtypes per device, default dtypes, capabilities)."""

from . import _kiln

# The array API's dtypes that kiln has. kiln's float16 and bfloat16 are left out: the standard has
# neither, and a conforming caller (or test suite) would treat them as standard floats
# (``kiln.supported_dtypes(device)`` lists them).
_ALL = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64")

_KINDS = {
    "bool": ("bool",),
    "signed integer": ("int8", "int16", "int32", "int64"),
    "unsigned integer": ("uint8", "uint16", "uint32", "uint64"),
    "integral": ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"),
    "real floating": ("float32", "float64"),
    "complex floating": (),
    "numeric": ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"),
}


def supported_dtypes(device):
    """The names of the array API dtypes tensors on `device` can have: all of them on the CPU; no float64
    on a GPU (kiln's GPU backend has none: Metal has no float64 at all, and Vulkan's lacks the
    transcendental functions; float64 data is converted to float32 on its way to a GPU)."""
    names = [n for n in _ALL if hasattr(_kiln, n)]
    if device.is_gpu:
        names = [n for n in names if n != "float64"]
    return names


class __array_namespace_info__:
    """The array API inspection namespace of kiln (``kiln.__array_namespace_info__()``)."""

    def capabilities(self):
        """Boolean indexing and data-dependent shapes (``nonzero``, ``unique_*``) are supported."""
        return {"boolean indexing": True, "data-dependent shapes": True}

    def default_device(self):
        """The device ``KILN_DEVICE`` names (``auto``, the best hardware GPU else the CPU, when unset)."""
        return _kiln.Device()

    def devices(self):
        """The CPU, then every GPU adapter (``gpu:0``, ``gpu:1``, ...)."""
        out = [_kiln.Device("cpu")]
        for i in range(len(_kiln.Device.adapters())):
            try:
                out.append(_kiln.Device(f"gpu:{i}"))
            except Exception:  # an adapter that fails to open is not a device
                pass
        return out

    def default_dtypes(self, *, device=None):
        """float32, int64 (also for indexing); kiln has no complex dtypes (None)."""
        return {"real floating": _kiln.float32, "complex floating": None, "integral": _kiln.int64,
                "indexing": _kiln.int64}

    def dtypes(self, *, device=None, kind=None):
        """The dtypes a tensor on `device` (default: the default device) can have, as a dict by name,
        of `kind` (None: all; a kind name as in ``isdtype``, or a tuple of them)."""
        dev = self.default_device() if device is None else (device if isinstance(device, _kiln.Device)
                                                            else _kiln.Device(device))
        names = supported_dtypes(dev)
        if kind is not None:
            kinds = kind if isinstance(kind, tuple) else (kind,)
            wanted = set()
            for k in kinds:
                if k not in _KINDS:
                    raise ValueError(f"[dtypes] unknown kind {k!r}; known: {', '.join(_KINDS)}")
                wanted.update(_KINDS[k])
            names = [n for n in names if n in wanted]
        return {n: getattr(_kiln, n) for n in names}
