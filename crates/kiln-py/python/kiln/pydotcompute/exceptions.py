"""The drop-in's exceptions (pydotcompute's names)."""


class PyDotComputeError(Exception):
    """Base of the drop-in's errors."""


class BackendNotAvailableError(PyDotComputeError, RuntimeError):
    """The backend's device cannot be opened (no GPU adapter; wgpu's reason in the message)."""


class MetalError(PyDotComputeError, RuntimeError):
    """A device operation failed (allocation, copy, kernel)."""
