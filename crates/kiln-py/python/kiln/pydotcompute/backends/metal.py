"""pydotcompute's ``MetalBackend`` on kiln: the GPU that wgpu opens (Metal on a Mac, Vulkan or DX12
elsewhere), with pydotcompute's properties, methods, dictionary keys and errors.

Device arrays are ``kiln.Tensor``s; ``import kiln as mx`` stands in for ``import mlx.core as mx``.
kiln runs ops as they are called (queued on the GPU, not a lazy graph): ``mx.eval`` and
``synchronize`` wait for the queued work. ``compile_kernel`` wraps a Python function of array ops
(NumPy arguments are uploaded first); it does not fuse the ops into one kernel. WGSL kernels remain
available through ``kiln.Backend`` (kiln's own API), and ``execute_kernel`` runs them too.

Data types follow pydotcompute's table: float64 becomes float32 ("MLX prefers float32"); every
other listed dtype (int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bool) keeps
its dtype.
"""

import os
import threading
from typing import Any, Callable, Optional

import numpy as np

import kiln as _k

from ..exceptions import BackendNotAvailableError, MetalError, MetalTypeError, MetalValueError
from .base import Backend, BackendType, KernelExecutionResult

__all__ = [
    "MetalBackend",
    "BackendType",
    "KernelExecutionResult",
    "BackendNotAvailableError",
    "MetalError",
    "get_vector_add_kernel",
    "get_matrix_multiply_kernel",
    "get_elementwise_kernel",
]

# NumPy dtype -> the kiln dtype that holds it (pydotcompute's table; see the module doc).
_DTYPE_MAP = {
    "float32": "float32",
    "float16": "float16",
    "float64": "float32",
    "int32": "int32",
    "int64": "int64",
    "int16": "int16",
    "int8": "int8",
    "uint32": "uint32",
    "uint64": "uint64",
    "uint16": "uint16",
    "uint8": "uint8",
    "bool": "bool",
    "bfloat16": "bfloat16",
}


def _kiln_dtype(dtype):
    """The kiln dtype for a NumPy dtype-like (``np.float32``, ``"float32"``, ``np.dtype``, a kiln dtype)."""
    if isinstance(dtype, _k.DType):
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name not in _DTYPE_MAP:
        raise TypeError(f"[MetalBackend] dtype {name} is not supported (supported: {', '.join(_DTYPE_MAP)})")
    return _k.DType(_DTYPE_MAP[name])


def _device_from_env(device_id):
    """The kiln device a MetalBackend uses: ``gpu:<device_id>``, or the CPU when ``KILN_DEVICE=cpu``."""
    if not isinstance(device_id, int) or isinstance(device_id, bool) or device_id < 0:
        raise ValueError(f"[MetalBackend] device_id must be an int >= 0, got {device_id!r}")
    if os.environ.get("KILN_DEVICE", "").strip().lower() == "cpu":
        return _k.Device("cpu")
    try:
        return _k.Device(f"gpu:{device_id}")
    except Exception as e:  # no adapter, or no adapter of that index
        raise BackendNotAvailableError(f"[MetalBackend] no GPU device {device_id}: {e}") from e


class MetalBackend(Backend):
    """The GPU backend (pydotcompute's ``MetalBackend``) on kiln's device runtime.

    ``MetalBackend(device_id=0)`` opens GPU adapter ``device_id`` (kiln's ``gpu:N`` order: hardware
    first, then software) and raises ``BackendNotAvailableError`` when there is none. With
    ``KILN_DEVICE=cpu`` it runs on kiln's CPU backend instead.
    """

    def __init__(self, device_id: int = 0) -> None:
        self._device = _device_from_env(device_id)
        self._device_id = device_id
        self._lock = threading.RLock()
        self._registry = {}  # id(array) -> array: buffers from allocate*, until free()

    # Properties.
    @property
    def backend_type(self) -> BackendType:
        """``BackendType.METAL``."""
        return BackendType.METAL

    @property
    def is_available(self) -> bool:
        """Whether the device is open (always true: the constructor raises otherwise)."""
        return self._device is not None

    @property
    def device_count(self) -> int:
        """Number of GPU adapters wgpu finds (hardware and software)."""
        return len(_k.Device.adapters())

    @property
    def device_id(self) -> int:
        """The device index given to the constructor."""
        return self._device_id

    @property
    def device(self) -> "_k.Device":
        """The kiln device (kiln's extension)."""
        return self._device

    # Memory.
    def allocate(self, shape: "tuple[int, ...]", dtype: Any) -> Any:
        """A zero-filled device array of `shape` and `dtype` (kiln has no uninitialised memory),
        tracked by the buffer registry until ``free``. Every failure raises ``MetalError``, as the
        document says: a bad dtype or shape as ``MetalError`` subclasses that are also a
        ``TypeError`` or ``ValueError``; out of memory or a device failure as ``MetalError``."""
        try:
            a = _k.zeros(shape, dtype=_kiln_dtype(dtype), device=self._device)
        except TypeError as e:
            raise MetalTypeError(f"[allocate] {e}") from e
        except ValueError as e:
            raise MetalValueError(f"[allocate] {e}") from e
        except Exception as e:
            raise MetalError(f"[allocate] {e}") from e
        with self._lock:
            self._registry[id(a)] = a
        return a

    def allocate_zeros(self, shape: "tuple[int, ...]", dtype: Any) -> Any:
        """A zero-filled device array (tracked like ``allocate``)."""
        return self.allocate(shape, dtype)

    def free(self, array: Any) -> None:
        """Removes `array` from the buffer registry; its memory returns to kiln's cache when the last
        reference goes (``clear_cache`` then gives it back to the driver)."""
        with self._lock:
            self._registry.pop(id(array), None)

    def copy_to_device(self, host_array: np.ndarray) -> Any:
        """A device array holding a copy of `host_array` (dtypes as in the module doc)."""
        a = np.asarray(host_array)
        dt = _kiln_dtype(a.dtype)
        try:
            return _k.asarray(a, dtype=dt, device=self._device)
        except Exception as e:
            raise MetalError(f"[copy_to_device] {e}") from e

    def copy_to_host(self, device_array: Any) -> np.ndarray:
        """A writable NumPy copy of a device array (waits for the work that computes it)."""
        if isinstance(device_array, np.ndarray):
            return device_array.copy()
        if hasattr(device_array, "metal"):  # a UnifiedBuffer
            device_array = device_array.metal
        return np.array(device_array)

    def synchronize(self) -> None:
        """Waits until all work queued on the device has finished."""
        self._device.synchronize()

    # Kernels.
    def _to_device(self, x):
        if isinstance(x, np.ndarray) or (isinstance(x, np.generic) and not isinstance(x, np.bool_)):
            return self.copy_to_device(np.asarray(x))
        if isinstance(x, _k.Tensor) and x.device != self._device:
            return x.to_device(self._device)
        return x

    def execute_kernel(
        self,
        kernel: Callable[..., Any],
        grid_size: "tuple[int, ...]",
        block_size: "tuple[int, ...]",
        *args: Any,
        **kwargs: Any,
    ) -> KernelExecutionResult:
        """Runs `kernel` and times the device work it queues (GPU timestamps where the adapter has
        them). `kernel` is a Python function of array ops or a regular Python function (NumPy code:
        NumPy ufuncs on device arrays run on the device, other NumPy calls convert them to host
        arrays) (NumPy arguments are uploaded first;
        `grid_size` and `block_size` are ignored, as for MLX ops), a ``compile_kernel`` result, or a
        WGSL kernel of ``kiln.Backend.compile_kernel`` (then `grid_size` is the workgroup count and
        `args` the buffers, as in ``kiln.Backend.execute_kernel``). Never raises for kernel errors:
        see ``success`` and ``error``."""
        if isinstance(kernel, _k.Kernel):
            # Output tensors are updated in place (copy-on-write), as WGSL writes its output buffers.
            args = list(args)
            outs = [_k.DeviceBuffer(a) if isinstance(a, _k.Tensor) else a for a in args[: kernel.num_outputs]]
            r = _k.Backend(self._device).execute_kernel(kernel, grid_size, block_size, outs + args[kernel.num_outputs:])
            results = []
            for given, buf in zip(args[: kernel.num_outputs], outs):
                if r.success and isinstance(given, _k.Tensor):
                    given[...] = buf.tensor
                    results.append(given)
                else:
                    results.append(buf)
            return KernelExecutionResult(r.success, r.execution_time_ms, r.error, results if r.success else None,
                                         r.gpu_timestamps)
        try:
            args = [self._to_device(a) for a in args]
            kwargs = {k: self._to_device(v) for k, v in kwargs.items()}
            out, seconds, gpu_ts = self._device.measure(lambda: kernel(*args, **kwargs))
            return KernelExecutionResult(True, seconds * 1e3, None, out, gpu_ts)
        except Exception as e:
            return KernelExecutionResult(False, 0.0, f"{type(e).__name__}: {e}")

    def compile_kernel(self, func: Callable[..., Any], signature: Optional[str] = None) -> Callable[..., Any]:
        """`func` wrapped to run on this backend's device: NumPy array arguments are uploaded
        (dtypes as in the module doc), device arrays are moved here if elsewhere, and the result is a
        device array. Calls with only array arguments go through ``kiln.compile``: traced once per
        signature, chains of elementwise ops fused into one kernel each (other arguments run `func`
        as it is). `signature` names the kernel (its ``__name__``)."""
        if not callable(func):
            raise TypeError(f"[compile_kernel] func must be callable, got {type(func).__name__}")
        backend = self
        fused = _k.compile(func)

        def compiled(*args, **kwargs):
            args = [backend._to_device(a) for a in args]
            kwargs = {k: backend._to_device(v) for k, v in kwargs.items()}
            if kwargs:
                return func(*args, **kwargs)
            return fused(*args)

        compiled.__name__ = signature or getattr(func, "__name__", "kernel")
        compiled.__qualname__ = compiled.__name__
        compiled.__doc__ = func.__doc__
        compiled.__wrapped__ = func
        return compiled

    # Memory information.
    def get_memory_info(self) -> "dict[str, int]":
        """``allocated`` (bytes of the registered buffers), ``buffer_count`` (registered buffers),
        ``cache_memory`` (bytes kiln keeps cached for reuse on the device), ``peak_memory`` (the
        device's peak bytes in use). The cache and peak are 0 on the CPU."""
        with self._lock:
            allocated = sum(a.nbytes for a in self._registry.values())
            count = len(self._registry)
        s = self._device.memory_stats() or {}
        return {
            "allocated": int(allocated),
            "buffer_count": count,
            "cache_memory": int(s.get("cached_bytes", 0)),
            "peak_memory": int(s.get("peak_bytes", 0)),
        }

    def clear_cache(self) -> None:
        """Gives kiln's cached (unused) device buffers back to the driver."""
        self._device.clear_cache()

    def __repr__(self):
        return f"MetalBackend(device_id={self._device_id}, device={self._device.name})"


_default = None
_default_lock = threading.Lock()


def _default_backend():
    """The backend of the module functions (device 0), or None when no GPU is there."""
    global _default
    with _default_lock:
        if _default is None or _default._device_env != os.environ.get("KILN_DEVICE"):
            try:
                _default = MetalBackend()
            except BackendNotAvailableError:
                return None
            _default._device_env = os.environ.get("KILN_DEVICE")
        return _default


def _kernel(name, f, backend):
    def kernel(*args):
        ts = [a for a in args if isinstance(a, _k.Tensor)]
        dev = ts[0].device if ts else backend.device
        conv = [_k.asarray(np.asarray(a), dtype=_kiln_dtype(np.asarray(a).dtype), device=dev)
                if isinstance(a, (np.ndarray, list, tuple)) else a for a in args]
        return f(*conv)

    kernel.__name__ = name
    kernel.__qualname__ = name
    return kernel


def get_vector_add_kernel() -> Optional[Callable[..., Any]]:
    """A kernel computing ``a + b`` (device arrays or NumPy arrays); None when no GPU is there."""
    b = _default_backend()
    return None if b is None else _kernel("vector_add", _k.add, b)


def get_matrix_multiply_kernel() -> Optional[Callable[..., Any]]:
    """A kernel computing ``A @ B`` (kiln's tuned matmul); None when no GPU is there."""
    b = _default_backend()
    return None if b is None else _kernel("matrix_multiply", _k.matmul, b)


_ELEMENTWISE = {
    "add": _k.add,
    "sub": _k.subtract,
    "mul": _k.multiply,
    "div": _k.divide,
    "sqrt": _k.sqrt,
    "exp": _k.exp,
    "log": _k.log,
    "sin": _k.sin,
    "cos": _k.cos,
    "abs": _k.abs,
    "square": _k.square,
    "negative": _k.negative,
}


def get_elementwise_kernel(operation: str) -> Optional[Callable[..., Any]]:
    """The element-wise kernel `operation`: one of add, sub, mul, div (two operands), sqrt, exp,
    log, sin, cos, abs, square, negative (one operand). None for an unknown operation, or when no
    GPU is there."""
    f = _ELEMENTWISE.get(operation)
    b = _default_backend()
    if f is None or b is None:
        return None
    return _kernel(operation, f, b)
