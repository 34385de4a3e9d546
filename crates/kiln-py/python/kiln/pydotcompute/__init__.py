"""A drop-in for pydotcompute's Metal backend, on kiln.

Code written for pydotcompute's ``MetalBackend`` runs on kiln by changing two import lines::

    from pydotcompute.backends.metal import MetalBackend   ->  from kiln.pydotcompute.backends.metal import MetalBackend
    import mlx.core as mx                                   ->  import kiln as mx

The modules mirror pydotcompute's: ``kiln.pydotcompute.backends.metal`` (``MetalBackend``,
``get_vector_add_kernel``, ``get_matrix_multiply_kernel``, ``get_elementwise_kernel``,
``BackendType``, ``KernelExecutionResult``, ``BackendNotAvailableError``, ``MetalError``) and
``kiln.pydotcompute.core.unified_buffer`` (``UnifiedBuffer``). Device arrays are ``kiln.Tensor``s
(MLX arrays in the original): they take operators (``a + b``), NumPy (``np.asarray(a)``) and the
``kiln`` namespace (``mx.add``, ``mx.exp``, ``mx.sum``, ``mx.eval`` ...).

The GPU is whatever wgpu opens (Metal on a Mac, Vulkan or DX12 elsewhere). ``KILN_DEVICE=cpu`` runs
the same code on kiln's CPU backend (kiln's extension: for machines without a GPU, and for tests).
"""

from .backends.base import Backend, BackendType, KernelExecutionResult  # noqa: F401
from .exceptions import BackendNotAvailableError, MetalError, PyDotComputeError  # noqa: F401
