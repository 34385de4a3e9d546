"""What each device supports (kiln's ``Device::dtypes``)."""

from . import _kiln


def supported_dtypes(device=None):
    """The dtypes tensors on `device` may have (a ``kiln.Device`` or a name; None: the default
    device), in kiln's order: every kiln dtype on the CPU, all but float64 on a GPU (kiln's GPU
    backend has no float64; asking for it there raises TypeError on every path)."""
    if not isinstance(device, _kiln.Device):
        device = _kiln.Device(device)
    return tuple(device.dtypes())
