"""kiln.pydotcompute against every member of pydotcompute's MetalBackend document: properties,
methods, argument names and defaults, dictionary keys, module functions, errors, the dtype table and
UnifiedBuffer's dirty-flag synchronisation; on the CPU (KILN_DEVICE=cpu) and the GPU."""

import inspect
import threading

import numpy as np
import pytest

import kiln
from conftest import _gpu
from kiln.pydotcompute.backends.metal import (
    BackendNotAvailableError,
    BackendType,
    KernelExecutionResult,
    MetalBackend,
    MetalError,
    get_elementwise_kernel,
    get_matrix_multiply_kernel,
    get_vector_add_kernel,
)
from kiln.pydotcompute.core.unified_buffer import UnifiedBuffer


@pytest.fixture(params=["cpu", "gpu"])
def where(request, monkeypatch):
    if request.param == "cpu":
        monkeypatch.setenv("KILN_DEVICE", "cpu")
        return kiln.Device("cpu")
    monkeypatch.delenv("KILN_DEVICE", raising=False)
    return _gpu()


def test_signatures_match_the_document():
    sig = lambda f: str(inspect.signature(f))  # noqa: E731
    assert sig(MetalBackend.__init__) == "(self, device_id: int = 0) -> None"
    assert list(inspect.signature(MetalBackend.allocate).parameters) == ["self", "shape", "dtype"]
    assert list(inspect.signature(MetalBackend.allocate_zeros).parameters) == ["self", "shape", "dtype"]
    assert list(inspect.signature(MetalBackend.free).parameters) == ["self", "array"]
    assert list(inspect.signature(MetalBackend.copy_to_device).parameters) == ["self", "host_array"]
    assert list(inspect.signature(MetalBackend.copy_to_host).parameters) == ["self", "device_array"]
    p = inspect.signature(MetalBackend.execute_kernel).parameters
    assert list(p) == ["self", "kernel", "grid_size", "block_size", "args", "kwargs"]
    assert p["args"].kind is inspect.Parameter.VAR_POSITIONAL and p["kwargs"].kind is inspect.Parameter.VAR_KEYWORD
    p = inspect.signature(MetalBackend.compile_kernel).parameters
    assert list(p) == ["self", "func", "signature"] and p["signature"].default is None
    for name in ["backend_type", "is_available", "device_count", "device_id"]:
        assert isinstance(inspect.getattr_static(MetalBackend, name), property), name
    assert list(inspect.signature(get_elementwise_kernel).parameters) == ["operation"]
    assert not inspect.signature(get_vector_add_kernel).parameters
    assert not inspect.signature(get_matrix_multiply_kernel).parameters
    assert issubclass(BackendNotAvailableError, Exception) and issubclass(MetalError, Exception)
    assert BackendType.METAL.name == "METAL"


def test_properties(where):
    b = MetalBackend()
    assert b.backend_type is BackendType.METAL
    assert b.is_available is True
    assert b.device_id == 0
    assert isinstance(b.device_count, int)
    if where.is_gpu:
        assert b.device_count >= 1
    assert b.device == where


def test_no_such_gpu_raises(monkeypatch):
    monkeypatch.delenv("KILN_DEVICE", raising=False)
    with pytest.raises(BackendNotAvailableError):
        MetalBackend(device_id=1000)
    with pytest.raises(ValueError):
        MetalBackend(device_id=-1)


def test_memory_info_keys_and_registry(where):
    b = MetalBackend()
    info = b.get_memory_info()
    assert set(info) == {"allocated", "buffer_count", "cache_memory", "peak_memory"}
    assert all(isinstance(v, int) for v in info.values())
    a = b.allocate((10, 3), np.float32)
    z = b.allocate_zeros((4,), np.int32)
    info = b.get_memory_info()
    assert info["buffer_count"] == 2 and info["allocated"] == 10 * 3 * 4 + 4 * 4
    np.testing.assert_array_equal(b.copy_to_host(z), np.zeros(4, np.int32))
    assert a.shape == (10, 3) and a.dtype == np.float32 and a.device == where
    b.free(a)
    assert b.get_memory_info()["buffer_count"] == 1
    b.free(a)  # freeing twice is harmless
    b.free(z)
    assert b.get_memory_info() ["buffer_count"] == 0
    if where.is_gpu:
        assert b.get_memory_info()["peak_memory"] > 0
    b.clear_cache()
    b.synchronize()


@pytest.mark.parametrize(
    "np_dtype,kiln_dtype",
    [("float32", "float32"), ("float16", "float16"), ("float64", "float32"), ("int32", "int32"), ("int64", "int64"),
     ("int16", "int16"), ("int8", "int8"), ("uint32", "uint32"), ("uint64", "uint64"), ("uint16", "uint16"),
     ("uint8", "uint8"), ("bool", "bool")],
)
def test_dtype_table(where, np_dtype, kiln_dtype):
    b = MetalBackend()
    host = (np.arange(-3, 5) % 2 == 0) if np_dtype == "bool" else np.arange(0, 8).astype(np_dtype)
    d = b.copy_to_device(host)
    assert d.dtype == kiln_dtype
    back = b.copy_to_host(d)
    np.testing.assert_array_equal(back, host)
    if np_dtype != "float64":
        assert back.dtype == host.dtype
    assert b.allocate((2,), getattr(np, np_dtype)).dtype == kiln_dtype


def test_uint64_keeps_every_bit(where):
    """uint64 keeps its dtype (the document's table), exactly past 2^53 and 2^63."""
    b = MetalBackend()
    host = np.array([0, 1, 2**53 + 1, 2**63 + 12345, 2**64 - 1], dtype=np.uint64)
    d = b.copy_to_device(host)
    assert d.dtype == "uint64"
    back = b.copy_to_host(d)
    assert back.dtype == np.uint64
    np.testing.assert_array_equal(back, host)


def test_device_arrays_behave_as_arrays(where):
    b = MetalBackend()
    a = b.copy_to_device(np.array([1, 2, 3], np.float32))
    c = b.copy_to_device(np.array([4, 5, 6], np.float32))
    np.testing.assert_array_equal(np.asarray(a + c), [5, 7, 9])
    np.testing.assert_array_equal(np.asarray(a * 2 - c), [-2, -1, 0])
    assert np.asarray(a).dtype == np.float32 and np.asarray(a).shape == (3,)
    assert float(kiln.sum(a)) == 6.0
    assert isinstance(a, kiln.array) and kiln.array([1.0, 2.0]).tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    "op,ref,arity",
    [("add", np.add, 2), ("sub", np.subtract, 2), ("mul", np.multiply, 2), ("div", np.divide, 2), ("sqrt", np.sqrt, 1),
     ("exp", np.exp, 1), ("log", np.log, 1), ("sin", np.sin, 1), ("cos", np.cos, 1), ("abs", np.abs, 1),
     ("square", np.square, 1), ("negative", np.negative, 1)],
)
def test_elementwise_kernels(where, rng, op, ref, arity):
    b = MetalBackend()
    xs = [rng.uniform(0.5, 2.0, 33).astype(np.float32) * (1 if op in ("sqrt", "log") else rng.choice([-1, 1], 33))
          for _ in range(arity)]
    k = get_elementwise_kernel(op)
    assert callable(k)
    got = k(*[b.copy_to_device(x) for x in xs])
    assert got.device == where
    np.testing.assert_allclose(np.asarray(got), ref(*[x.astype(np.float64) for x in xs]), rtol=2e-6, atol=1e-6)


def test_unknown_elementwise_op_is_none(where):
    assert get_elementwise_kernel("frobnicate") is None
    assert get_elementwise_kernel("") is None


def test_prebuilt_kernels_take_numpy(where, rng):
    a, c = rng.standard_normal((7, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    got = get_matrix_multiply_kernel()(a, c)
    np.testing.assert_allclose(np.asarray(got), a.astype(np.float64) @ c, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(get_vector_add_kernel()(a[0], a[1])), a[0] + a[1])


def test_compile_kernel(where, rng):
    b = MetalBackend()

    def kern(x, y, *, scale):
        return kiln.exp(x) * scale + y

    k = b.compile_kernel(kern, "my_kernel")
    assert k.__name__ == "my_kernel" and k.__wrapped__ is kern
    x = rng.standard_normal(19).astype(np.float32)
    y = b.copy_to_device(np.ones(19, np.float32))
    out = k(x, y, scale=2.0)
    assert isinstance(out, kiln.Tensor) and out.device == where
    np.testing.assert_allclose(b.copy_to_host(out), np.exp(x.astype(np.float64)) * 2 + 1, rtol=1e-5)
    # float64 input becomes float32, as in the document's table.
    assert k(x.astype(np.float64), y, scale=1.0).dtype == kiln.float32
    with pytest.raises(TypeError):
        b.compile_kernel(42)


def test_execute_kernel(where):
    b = MetalBackend()
    r = b.execute_kernel(lambda a, b_: kiln.add(a, b_), (1,), (1,), np.ones(5, np.float32), np.ones(5, np.float32))
    assert isinstance(r, KernelExecutionResult) and r.success and r.execution_time_ms >= 0
    np.testing.assert_array_equal(np.asarray(r.output), np.full(5, 2.0))
    r = b.execute_kernel(lambda a: kiln.add(a, kiln.ones(4, device=where)), (1,), (1,), np.ones(5, np.float32))
    assert not r.success and "ValueError" in r.error and not r
    r = b.execute_kernel(lambda: 1 / 0, (1,), (1,))
    assert not r.success and "ZeroDivisionError" in r.error


def test_execute_kernel_runs_wgsl(where):
    if where.is_cpu:
        pytest.skip("WGSL kernels run on GPUs")
    b = MetalBackend()
    k = kiln.Backend(b.device).compile_kernel(kiln.backend.VECTOR_ADD)
    out = b.allocate((300,), np.float32)
    x = np.arange(300, dtype=np.float32)
    r = b.execute_kernel(k, (2,), (256,), out, x, x, 300)
    assert r.success, r.error
    assert len(r.output) == 1 and r.output[0] is out
    np.testing.assert_array_equal(np.asarray(out), 2 * x)


def test_unified_buffer_syncs_both_ways(where):
    buf = UnifiedBuffer((6,), dtype=np.float32)
    assert buf.shape == (6,) and buf.dtype == np.float32
    buf.allocate()
    buf.host[:] = np.arange(6, dtype=np.float32)
    buf.mark_host_dirty()
    m = buf.metal
    assert m.device == where
    np.testing.assert_array_equal(np.asarray(m), np.arange(6))
    assert buf.metal is m  # clean: the same device array
    m[2] = 100.0  # copy-on-write update of the device array itself
    buf.mark_metal_dirty()
    np.testing.assert_array_equal(buf.host, [0, 1, 100, 3, 4, 5])
    # Not marked: the host keeps its values.
    m[0] = -1.0
    np.testing.assert_array_equal(buf.host, [0, 1, 100, 3, 4, 5])
    assert np.asarray(buf).shape == (6,)


def test_unified_buffer_dtypes(where):
    for dt in [np.float32, np.int32, np.uint8, np.float64, np.dtype("int16")]:
        buf = UnifiedBuffer((3, 2), dtype=dt)
        buf.allocate()
        buf.host[:] = 1
        buf.mark_host_dirty()
        assert buf.metal.shape == (3, 2)
        assert buf.host.dtype == np.dtype(dt)


def test_backend_is_thread_safe(where):
    b = MetalBackend()
    errors = []

    def work():
        try:
            for _ in range(20):
                a = b.allocate((8,), np.float32)
                b.free(a)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors and b.get_memory_info()["buffer_count"] == 0


def test_allocation_failure_is_metal_error(where):
    # GPU: beyond the adapter's largest binding; CPU: more host memory than there is.
    with pytest.raises(MetalError, match="allocate"):
        MetalBackend().allocate((2**44,), np.float32)
    with pytest.raises(TypeError):
        MetalBackend().allocate((3,), np.complex64)


def test_mlx_dtype_names_of_the_table(where):
    """The table's MLX dtypes are the names `import kiln as mx` gives (`mx.bool_` included)."""
    import kiln as mx

    b = MetalBackend()
    for name in ["float32", "float16", "int32", "int64", "int16", "int8", "uint32", "uint64", "uint16", "uint8",
                 "bool_"]:
        dt = getattr(mx, name)
        assert b.allocate((2,), dt).dtype == dt, name
    assert mx.bool_ == mx.bool and b.copy_to_device(np.array([True, False])).dtype == mx.bool_


def test_execute_kernel_runs_regular_python_functions(where):
    """"Regular Python functions" (the document's second kernel kind): NumPy code on device arrays
    and on NumPy arguments, as well as functions returning several arrays or none."""
    b = MetalBackend()
    x = np.array([1.0, 4.0, 9.0], np.float32)
    d = b.copy_to_device(x)

    def numpy_kernel(a, c):
        return np.sqrt(a) + np.multiply(c, 2.0)

    for args in [(d, d), (x, x), (d, x)]:
        r = b.execute_kernel(numpy_kernel, (1,), (1,), *args)
        assert r.success, r.error
        np.testing.assert_allclose(b.copy_to_host(r.output), np.sqrt(x) + 2 * x, rtol=1e-6)
    r = b.execute_kernel(lambda a: float(np.asarray(a).sum()), (1,), (1,), d)
    assert r.success and r.output == 14.0
    r = b.execute_kernel(lambda a, c: (a + c, a * c), (64,), (256,), d, d)
    assert r.success and [np.asarray(o).tolist() for o in r.output] == [[2, 8, 18], [1, 16, 81]]
    r = b.execute_kernel(lambda a, scale=1.0: None, (1,), (1,), d, scale=2.0)
    assert r.success and r.output is None


def test_allocation_errors_are_metal_errors(where):
    """allocate raises MetalError "if allocation fails", bad arguments included (as MetalError
    subclasses that are also TypeError / ValueError)."""
    b = MetalBackend()
    with pytest.raises(MetalError) as e:
        b.allocate((3,), np.complex64)
    assert isinstance(e.value, TypeError)
    with pytest.raises(MetalError) as e:
        b.allocate((-1,), np.float32)
    assert isinstance(e.value, ValueError)
    with pytest.raises(MetalError):
        b.allocate_zeros((-1, 2), np.float32)
    assert b.get_memory_info()["buffer_count"] == 0


def test_clear_cache_frees_the_cache(where):
    """Performance tip 5: clear_cache() after large batches frees memory (cache_memory drops to 0)."""
    b = MetalBackend()
    arrays = [b.allocate((1 << 16,), np.float32) for _ in range(4)]
    for a in arrays:
        b.free(a)
    del arrays, a
    b.synchronize()
    if where.is_gpu:
        assert b.get_memory_info()["cache_memory"] >= 4 * (1 << 18)
    b.clear_cache()
    assert b.get_memory_info()["cache_memory"] == 0
