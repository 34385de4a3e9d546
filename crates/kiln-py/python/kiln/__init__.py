"""kiln: tensors on the CPU and on GPUs (wgpu: Vulkan, Metal, DX12) for Python.

``kiln.Tensor`` is kiln's Rust tensor with NumPy-style operators, indexing and printing. The module is
also a Python array API namespace (``x.__array_namespace__()`` returns it); see ``kiln.array_api``
for what is covered. ``kiln.Backend`` is a GPU device API in the style of Python GPU backends;
``kiln.pydotcompute`` is a drop-in for pydotcompute's Metal backend (``import kiln as mx`` stands in
for ``mlx.core`` there).

>>> import kiln, numpy as np
>>> x = kiln.asarray(np.arange(6, dtype=np.float32)).reshape(2, 3)
>>> (x * 2 + 1).sum(axis=1).tolist()
[9.0, 27.0]
"""

from ._kiln import (  # noqa: F401
    Device,
    DType,
    KvCache,
    Tensor,
    __version__,
    arange,
    asarray,
    concat,
    empty,
    empty_like,
    eye,
    from_dlpack,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    rand,
    randn,
    rope_tables,
    stack,
    where,
    zeros,
    zeros_like,
)
from ._kiln import (  # noqa: F401
    bfloat16,
    bool,
    bool_,  # MLX's name (``mx.bool_``) of bool, for ``import kiln as mx``
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .array_api import *  # noqa: F401,F403
from .array_api import __all__ as _array_api_all
from .array_api import __array_namespace_info__  # noqa: F401
from .backend import Backend, DeviceBuffer, Kernel, KernelResult, UnifiedBuffer  # noqa: F401
from ._support import supported_dtypes  # noqa: F401

__array_api_version__ = "2023.12"


class OutOfRangeError(IndexError, ValueError):
    """An index or range outside a dimension (index ops, a full KvCache): an IndexError, as Python
    has it, and a ValueError, as a bad argument."""


def __array_namespace__(api_version=None):
    """The array API namespace: this module."""
    import sys

    return sys.modules[__name__]


def compile(fn):
    """``fn`` (a function of kiln tensors returning a tensor, or a tuple or list of tensors) compiled
    with ``kiln::compile``: traced on the first call of each signature (shapes, dtypes, device), then
    run as fused kernels (chains of elementwise ops with their row reductions: one GPU kernel each).
    Usable as a decorator. A function the tracer cannot follow (a Python ``if`` on a tensor's value,
    an op kiln does not trace) runs eagerly, with a one-time warning; results are never wrong. So,
    silently, does a function that updates an argument in place (``x += 1``): the caller's tensor is
    updated as it would be without ``compile``.
    ``f.stats()`` reports traces and fused groups.

    >>> import kiln
    >>> @kiln.compile
    ... def hypot(a, b):
    ...     return (a * a + b * b).sqrt()
    >>> hypot(kiln.asarray([3.0, 5.0]), kiln.asarray([4.0, 12.0])).tolist()
    [5.0, 13.0]
    """
    import functools

    from ._kiln import _compile

    c = _compile(fn)

    @functools.wraps(fn)
    def compiled(*args):
        return c(*args)

    compiled.stats = c.stats
    return compiled


def device(name=None):
    """The device ``name`` names ("cpu", "gpu", "gpu:N", "auto"; None: ``KILN_DEVICE``, else auto)."""
    return Device(name)


__all__ = [
    "Device",
    "DType",
    "KvCache",
    "OutOfRangeError",
    "Tensor",
    "Backend",
    "DeviceBuffer",
    "Kernel",
    "KernelResult",
    "UnifiedBuffer",
    "arange",
    "asarray",
    "concat",
    "empty",
    "empty_like",
    "eye",
    "from_dlpack",
    "full",
    "full_like",
    "linspace",
    "ones",
    "ones_like",
    "rand",
    "randn",
    "rope_tables",
    "stack",
    "supported_dtypes",
    "where",
    "zeros",
    "zeros_like",
    "bfloat16",
    "bool",
    "bool_",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "device",
    "compile",
] + list(_array_api_all)
