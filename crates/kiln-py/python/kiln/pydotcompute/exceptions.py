"""The drop-in's exceptions (pydotcompute's names)."""


class PyDotComputeError(Exception):
    """Base of the drop-in's errors."""


class BackendNotAvailableError(PyDotComputeError, RuntimeError):
    """The backend's device cannot be opened (no GPU adapter; wgpu's reason in the message)."""


class MetalError(PyDotComputeError, RuntimeError):
    """A device operation failed (allocation, copy, kernel)."""


class MetalTypeError(MetalError, TypeError):
    """A dtype or argument type the device cannot take (a ``MetalError`` and a ``TypeError``)."""


class MetalValueError(MetalError, ValueError):
    """A bad argument value, such as a negative dimension (a ``MetalError`` and a ``ValueError``)."""
