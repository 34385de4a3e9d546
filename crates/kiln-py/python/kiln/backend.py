"""A GPU device API in the style of Python GPU backends, on kiln's device runtime.

``Backend(device="gpu")`` allocates device buffers, copies NumPy arrays in and out, compiles and runs
WGSL compute kernels (timed with GPU timestamps where the adapter has them), reports memory and
offers ready kernels. ``UnifiedBuffer`` keeps a NumPy array and a device copy in step with dirty
flags. kiln tensors are immutable, so a kernel "writing" an output buffer gives that buffer a new
device tensor; the API hides this.

float64 input headed for a GPU raises TypeError, as everywhere in kiln: kiln's GPU backend has no
float64 (Metal has none at all, and Vulkan's lacks exp/log/sin/tanh); convert it to float32 first.
"""

import re
import struct
import time

import numpy as np

from . import _kiln


class DeviceBuffer:
    """Memory on a backend's device: a kiln tensor with its shape and dtype."""

    def __init__(self, tensor):
        self.tensor = tensor

    @property
    def shape(self):
        return self._live().shape

    @property
    def dtype(self):
        return self._live().dtype

    @property
    def nbytes(self):
        return self._live().nbytes

    @property
    def freed(self):
        return self.tensor is None

    def _live(self):
        if self.tensor is None:
            raise ValueError("[DeviceBuffer] the buffer was freed")
        return self.tensor

    def to_numpy(self):
        """A writable host copy."""
        return np.array(self._live())

    def __array__(self, dtype=None, copy=None):
        """``np.asarray(buf)``: the buffer's values (a host copy of GPU memory)."""
        return self._live().__array__(dtype=dtype, copy=copy)

    def __dlpack__(self, **kwargs):
        return self._live().__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._live().__dlpack_device__()

    def __repr__(self):
        if self.tensor is None:
            return "DeviceBuffer(freed)"
        return f"DeviceBuffer(shape={self.shape}, dtype={self.dtype}, device={self.tensor.device})"


def _buffer_operator(name):
    def op(self, *others):
        others = [o._live() if isinstance(o, DeviceBuffer) else o for o in others]
        return DeviceBuffer(getattr(self._live(), name)(*others))

    op.__name__ = name
    op.__doc__ = f"``{name}`` of the buffer's tensor, as a new DeviceBuffer."
    return op


# Device buffers behave as arrays: `a + b`, `a @ b`, `-a`, comparisons, ... give DeviceBuffers.
for _name in ["__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__matmul__",
              "__rmatmul__", "__neg__", "__pos__", "__abs__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__",
              "__ne__", "__and__", "__or__", "__xor__", "__invert__", "__getitem__"]:
    setattr(DeviceBuffer, _name, _buffer_operator(_name))
DeviceBuffer.__hash__ = object.__hash__
DeviceBuffer.__array_ufunc__ = None  # NumPy defers `ndarray + buf` to the buffer


class Kernel:
    """A compiled WGSL compute kernel: ``num_outputs`` read-write bindings first, then the inputs."""

    def __init__(self, source, entry_point, num_outputs, workgroup_size):
        self.source = source
        self.entry_point = entry_point
        self.num_outputs = num_outputs
        self.workgroup_size = workgroup_size

    def __repr__(self):
        return f"Kernel({self.entry_point!r}, outputs={self.num_outputs}, workgroup_size={self.workgroup_size})"


class KernelResult:
    """What ``execute_kernel`` returns: ``success``, ``execution_time_ms`` (from GPU timestamps when
    ``gpu_timestamps`` is true, else the wall clock), ``error`` (the message on failure) and
    ``outputs`` (the output buffers)."""

    def __init__(self, success, execution_time_ms=0.0, error=None, outputs=(), gpu_timestamps=False):
        self.success = success
        self.execution_time_ms = execution_time_ms
        self.error = error
        self.outputs = list(outputs)
        self.gpu_timestamps = gpu_timestamps

    def __bool__(self):
        return self.success

    def __repr__(self):
        if self.success:
            return f"KernelResult(success=True, execution_time_ms={self.execution_time_ms:.4f})"
        return f"KernelResult(success=False, error={self.error!r})"


def _workgroup_size(source, entry_point):
    """The `@workgroup_size(x, y, z)` of `entry_point` in WGSL `source` (None when not literal)."""
    pat = r"@workgroup_size\(\s*([0-9]+)\s*(?:,\s*([0-9]+)\s*)?(?:,\s*([0-9]+)\s*)?\)[^@]*?fn\s+" + re.escape(entry_point) + r"\b"
    m = re.search(pat, source, re.S)
    if not m:
        return None
    return tuple(int(g) if g else 1 for g in m.groups())


def _triple(v, name):
    if v is None:
        return None
    if isinstance(v, int):
        v = (v,)
    v = tuple(int(i) for i in v)
    if not 1 <= len(v) <= 3:
        raise ValueError(f"[execute_kernel] {name} needs 1 to 3 entries, got {v}")
    if any(i < 0 for i in v):
        raise ValueError(f"[execute_kernel] {name} entries must be >= 0, got {v}")
    return v + (1,) * (3 - len(v))


VECTOR_ADD = """
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < p[0]) {
        out[i] = a[i] + b[i];
    }
}
"""

# The unary ops are kiln's op table (crates/kiln/src/ops/unary_table.rs), without clamp's bounds.
_ELEMENTWISE_UNARY = _kiln.UNARY_OPS
_ELEMENTWISE_BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
                       "logical_and", "logical_or", "silu_mul")


class Backend:
    """A device for buffers and kernels: ``Backend(device="gpu")`` (also "cpu", "gpu:N", "auto").

    Opening never raises: ``is_available()`` says whether the device opened, ``error`` why not.
    """

    def __init__(self, device="gpu"):
        self.error = None
        try:
            self.device = _kiln.Device(device)
        except Exception as e:  # no adapter: report through is_available()
            self.device = None
            self.error = str(e)

    def is_available(self):
        """Whether the device opened."""
        return self.device is not None

    def _dev(self):
        if self.device is None:
            raise RuntimeError(f"[Backend] device not available: {self.error}")
        return self.device

    def device_name(self):
        """The adapter's name (e.g. "llvmpipe (LLVM 15.0.7, 256 bits)"), or "cpu"."""
        info = self._dev().info()
        return info["name"] if info else "cpu"

    def device_info(self):
        """The adapter's details (backend, driver, features, limits) or None on the CPU."""
        return self._dev().info()

    # Memory.
    def allocate(self, shape, dtype="float32"):
        """A device buffer of `shape` and `dtype` (zero-filled: kiln has no uninitialised memory)."""
        return DeviceBuffer(_kiln.zeros(shape, dtype=dtype, device=self._dev()))

    def allocate_zeros(self, shape, dtype="float32"):
        """A zero-filled device buffer."""
        return DeviceBuffer(_kiln.zeros(shape, dtype=dtype, device=self._dev()))

    def free(self, buf):
        """Releases a buffer: its memory returns to kiln's cache (``clear_cache`` gives it back)."""
        if isinstance(buf, UnifiedBuffer):
            buf.free()
        else:
            buf.tensor = None

    def copy_to_device(self, array):
        """A device buffer holding a copy of `array` (float64 raises TypeError on a GPU)."""
        return DeviceBuffer(_kiln.asarray(np.asarray(array), device=self._dev()))

    def copy_to_host(self, buf):
        """A writable NumPy copy of a buffer (DeviceBuffer, UnifiedBuffer or Tensor)."""
        if isinstance(buf, UnifiedBuffer):
            return np.array(buf.host_view())
        t = buf._live() if isinstance(buf, DeviceBuffer) else buf
        return np.array(t)

    def synchronize(self):
        """Waits for all queued device work (the GIL is released meanwhile)."""
        self._dev().synchronize()

    def get_memory_info(self):
        """Device memory: ``allocated`` (bytes of live buffers), ``cached`` (kept for reuse), ``peak``,
        ``buffer_count`` (live and cached buffers), ``cache_hits``, ``device_allocations``. Zeros on the CPU."""
        s = self._dev().memory_stats()
        if s is None:
            return {"allocated": 0, "cached": 0, "peak": 0, "buffer_count": 0, "cache_hits": 0, "device_allocations": 0}
        return {
            "allocated": s["active_bytes"],
            "cached": s["cached_bytes"],
            "peak": s["peak_bytes"],
            "buffer_count": s["live_buffers"],
            "cache_hits": s["cache_hits"],
            "device_allocations": s["device_allocations"],
        }

    def clear_cache(self):
        """Releases every cached (unused) device buffer."""
        self._dev().clear_cache()

    # Kernels.
    def compile_kernel(self, wgsl_source, entry_point="main", num_outputs=1):
        """Compiles `entry_point` of `wgsl_source` (RuntimeError with the compiler's message when it
        does not compile). Binding convention: ``@group(0)`` holds `num_outputs` read-write storage
        arrays at bindings 0.., then the inputs (read-only); ``@group(1) @binding(0)`` may declare
        ``var<storage, read> p: array<u32, 64>`` for scalar arguments."""
        dev = self._dev()
        if dev.is_gpu:
            n_bindings = len(set(re.findall(r"@group\(\s*0\s*\)\s*@binding\(\s*([0-9]+)\s*\)", wgsl_source)))
            n_inputs = max(n_bindings - num_outputs, 0)
            dummy = _kiln.zeros((1,), dtype="uint32", device=dev)
            # A dispatch of no workgroups compiles the pipeline without running anything.
            dev.custom_kernel(wgsl_source, entry_point, [dummy] * n_inputs, [((1,), "uint32")] * num_outputs, (0, 0, 0))
        return Kernel(wgsl_source, entry_point, num_outputs, _workgroup_size(wgsl_source, entry_point))

    def execute_kernel(self, kernel, grid, block=None, args=()):
        """Runs `kernel` over `grid` workgroups (an int or up to 3 ints). `block` is the workgroup size,
        fixed by the WGSL's ``@workgroup_size``; when given it must match. `args`: the first
        ``kernel.num_outputs`` are output buffers (DeviceBuffer or UnifiedBuffer: their shape and dtype
        say what the kernel writes, and they hold the result afterwards), then input buffers
        (DeviceBuffer, UnifiedBuffer, Tensor or NumPy array) and finally scalars (ints as u32, floats
        as f32 bits) passed in the parameter block. Never raises for kernel errors: see the result."""
        try:
            dev = self._dev()
            wg = _triple(grid, "grid")
            blk = _triple(block, "block")
            if blk is not None and kernel.workgroup_size is not None and blk != kernel.workgroup_size:
                raise ValueError(f"block {blk} differs from the kernel's @workgroup_size {kernel.workgroup_size}")
            args = list(args)
            outs, rest = args[: kernel.num_outputs], args[kernel.num_outputs :]
            if len(outs) != kernel.num_outputs:
                raise ValueError(f"{kernel.num_outputs} output buffers expected, {len(outs)} given")
            inputs, params = [], []
            for a in rest:
                if isinstance(a, (bool, int, np.integer)):
                    params.append(int(a) & 0xFFFFFFFF)
                elif isinstance(a, (float, np.floating)):
                    params.append(struct.unpack("<I", struct.pack("<f", float(a)))[0])
                elif isinstance(a, UnifiedBuffer):
                    inputs.append(a.device_tensor())
                elif isinstance(a, DeviceBuffer):
                    inputs.append(a._live())
                elif isinstance(a, _kiln.Tensor):
                    inputs.append(a.to_device(dev))
                else:
                    inputs.append(_kiln.asarray(np.asarray(a), device=dev))
            specs = []
            for o in outs:
                t = o.device_tensor() if isinstance(o, UnifiedBuffer) else o._live()
                specs.append((list(t.shape), t.dtype))
            t0 = time.perf_counter()
            tensors, seconds, gpu_ts = dev.custom_kernel(kernel.source, kernel.entry_point, inputs, specs, wg, params)
            if not gpu_ts:
                seconds = time.perf_counter() - t0
            for o, t in zip(outs, tensors):
                if isinstance(o, UnifiedBuffer):
                    o._set_device(t)
                else:
                    o.tensor = t
            return KernelResult(True, seconds * 1e3, None, outs, gpu_ts)
        except Exception as e:
            return KernelResult(False, 0.0, f"{type(e).__name__}: {e}")

    # Ready kernels.
    def vector_add(self, a, b):
        """`a + b` of two float32 vectors through a WGSL kernel; returns a DeviceBuffer."""
        a = a if isinstance(a, DeviceBuffer) else self.copy_to_device(np.asarray(a, dtype=np.float32))
        b = b if isinstance(b, DeviceBuffer) else self.copy_to_device(np.asarray(b, dtype=np.float32))
        n = a.shape[0]
        if a.shape != b.shape or len(a.shape) != 1:
            raise ValueError(f"[vector_add] needs two vectors of one length, got {a.shape} and {b.shape}")
        if self._dev().is_cpu:
            return DeviceBuffer(a._live().astype("float32") + b._live().astype("float32"))
        out = self.allocate((n,), "float32")
        k = self._kernel("vector_add", VECTOR_ADD)
        r = self.execute_kernel(k, ((n + 255) // 256,), (256,), [out, a, b, n])
        if not r.success:
            raise RuntimeError(f"[vector_add] {r.error}")
        return out

    def matrix_multiply(self, a, b):
        """`a @ b` with kiln's tuned matmul kernels; returns a DeviceBuffer."""
        return DeviceBuffer(self._tensor(a) @ self._tensor(b))

    def elementwise(self, name, a, b=None):
        """The kiln element-wise op `name` ("exp", "relu", "add", "maximum", ...) of one or two
        operands (buffers, tensors or arrays; `b` may be a scalar); returns a DeviceBuffer."""
        x = self._tensor(a)
        if name in _ELEMENTWISE_UNARY:
            if b is not None:
                raise ValueError(f"[elementwise] {name} takes one operand")
            return DeviceBuffer(getattr(x, name)())
        if name in _ELEMENTWISE_BINARY:
            if b is None:
                raise ValueError(f"[elementwise] {name} takes two operands")
            y = b if isinstance(b, (int, float)) else self._tensor(b)
            return DeviceBuffer(getattr(x, name)(y))
        raise ValueError(f"[elementwise] unknown op {name!r}; known: {', '.join(_ELEMENTWISE_UNARY + _ELEMENTWISE_BINARY)}")

    def _tensor(self, x):
        if isinstance(x, DeviceBuffer):
            return x._live()
        if isinstance(x, UnifiedBuffer):
            return x.device_tensor()
        if isinstance(x, _kiln.Tensor):
            return x.to_device(self._dev())
        return _kiln.asarray(np.asarray(x), device=self._dev())

    def _kernel(self, name, source):
        cache = self.__dict__.setdefault("_kernels", {})
        if name not in cache:
            cache[name] = self.compile_kernel(source, "main", 1)
        return cache[name]

    def __repr__(self):
        if self.device is None:
            return f"Backend(unavailable: {self.error})"
        return f"Backend({self.device.name}: {self.device_name()})"


class UnifiedBuffer:
    """A NumPy array and its device copy, kept in step: ``host`` (the array, synced from the device when
    the device copy is newer; taking it for writing marks the host side dirty), ``host_view()`` (a
    read-only look that does not mark it), ``device_tensor()`` (uploads when the host is newer).
    Kernels that write it make the device side newer."""

    def __init__(self, backend, array=None, shape=None, dtype="float32"):
        self.backend = backend
        if array is None:
            array = np.zeros(shape, dtype=np.dtype(str(dtype)))
        self._host = np.array(array)  # our own writable copy
        self._device = None
        self.host_dirty = True  # the host holds data the device lacks
        self.device_dirty = False  # the device holds data the host lacks

    @property
    def shape(self):
        return self._host.shape

    @property
    def host(self):
        """The NumPy array, brought up to date; the caller may write it (so it counts as dirty)."""
        self._sync_to_host()
        self.host_dirty = True
        return self._host

    def host_view(self):
        """The NumPy array, up to date, read-only (does not mark the host dirty)."""
        self._sync_to_host()
        v = self._host.view()
        v.flags.writeable = False
        return v

    def device_tensor(self):
        """The device copy, uploaded first when the host side is newer."""
        if self.host_dirty or self._device is None:
            self._device = _kiln.asarray(self._host, device=self.backend._dev())
            self.host_dirty = False
        return self._device

    def mark_host_dirty(self):
        """Say the NumPy array was written (when it was changed through a reference kept earlier)."""
        self.host_dirty = True

    def sync(self):
        """Brings both sides up to date."""
        self._sync_to_host()
        self.device_tensor()

    def free(self):
        self._device = None
        self.host_dirty = True

    def _set_device(self, t):
        self._device = t
        self.device_dirty = True
        self.host_dirty = False

    def _sync_to_host(self):
        if self.device_dirty:
            src = np.asarray(self._device)
            if src.dtype != self._host.dtype:
                self._host = self._host.astype(src.dtype)
            self._host[...] = src.reshape(self._host.shape)
            self.device_dirty = False

    def __repr__(self):
        return f"UnifiedBuffer(shape={self.shape}, host_dirty={self.host_dirty}, device_dirty={self.device_dirty})"
