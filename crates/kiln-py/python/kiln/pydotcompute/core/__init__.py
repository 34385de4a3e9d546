"""pydotcompute's core types on kiln: ``unified_buffer`` (``UnifiedBuffer``)."""

from .unified_buffer import UnifiedBuffer  # noqa: F401
