"""pydotcompute's backends on kiln: ``metal`` (``MetalBackend``)."""

from .base import Backend, BackendType, KernelExecutionResult  # noqa: F401
