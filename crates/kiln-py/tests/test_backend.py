"""The GPU-backend-style device API: buffers, copies, kernels, timing, memory info, UnifiedBuffer."""

import warnings

import numpy as np
import pytest

import kiln

SCALE = """
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;

@compute @workgroup_size(64)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < p[0]) {
        out[i] = x[i] * bitcast<f32>(p[1]);
    }
}
"""


@pytest.fixture
def backend(gpu):
    b = kiln.Backend(device="gpu")
    assert b.is_available()
    return b


def test_copies_and_allocation(backend, rng):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    buf = backend.copy_to_device(x)
    assert buf.shape == (5, 7) and buf.dtype == kiln.float32
    back = backend.copy_to_host(buf)
    np.testing.assert_array_equal(back, x)
    assert back.flags.writeable
    z = backend.allocate_zeros((3, 2), "int32")
    np.testing.assert_array_equal(backend.copy_to_host(z), np.zeros((3, 2), np.int32))
    a = backend.allocate((4,), kiln.float16)
    assert a.nbytes == 8
    backend.free(a)
    assert a.freed
    with pytest.raises(ValueError):
        a.shape
    assert isinstance(backend.device_name(), str) and backend.device_name()


def test_f64_raises_on_a_gpu(backend):
    x = np.arange(4, dtype=np.float64) / 3
    if backend.device.is_gpu:
        # The GPU backend has no float64: a TypeError, as on every path (issue 21).
        with pytest.raises(TypeError, match="float64"):
            backend.copy_to_device(x)
        buf = backend.copy_to_device(x.astype(np.float32))
        assert buf.dtype == kiln.float32
        np.testing.assert_allclose(backend.copy_to_host(buf), x, rtol=1e-7)
    else:
        buf = backend.copy_to_device(x)
        assert buf.dtype == kiln.float64
        np.testing.assert_array_equal(backend.copy_to_host(buf), x)


def test_custom_kernel(backend, rng):
    k = backend.compile_kernel(SCALE, "scale", num_outputs=1)
    assert k.workgroup_size == (64, 1, 1)
    x = rng.standard_normal(1000).astype(np.float32)
    xb = backend.copy_to_device(x)
    out = backend.allocate((1000,), "float32")
    r = backend.execute_kernel(k, (1000 + 63) // 64, (64,), [out, xb, 1000, 2.5])
    assert r.success, r.error
    assert r.error is None and r.execution_time_ms > 0.0
    # GPU timestamps wherever the adapter has timestamp queries (lavapipe does), else the wall clock.
    assert r.gpu_timestamps == ("TIMESTAMP_QUERY" in backend.device_info()["features"])
    np.testing.assert_allclose(backend.copy_to_host(out), x * 2.5, rtol=1e-6)
    # A wrong block size is reported, not raised.
    bad = backend.execute_kernel(k, 16, (32,), [out, xb, 1000, 2.5])
    assert not bad.success and "workgroup_size" in bad.error


def test_compile_errors_raise(backend):
    with pytest.raises(RuntimeError, match="custom_kernel|GPU"):
        backend.compile_kernel("@compute @workgroup_size(1) fn main() { let x: f32 = undefined_thing; }", "main")


def test_ready_kernels(backend, rng):
    a = rng.standard_normal(777).astype(np.float32)
    b = rng.standard_normal(777).astype(np.float32)
    np.testing.assert_allclose(backend.copy_to_host(backend.vector_add(a, b)), a + b, rtol=1e-6)
    m = rng.standard_normal((9, 5)).astype(np.float32)
    n = rng.standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(backend.copy_to_host(backend.matrix_multiply(m, n)), m @ n, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(backend.copy_to_host(backend.elementwise("exp", a)), np.exp(a), rtol=1e-5)
    np.testing.assert_allclose(backend.copy_to_host(backend.elementwise("maximum", a, b)), np.maximum(a, b))
    np.testing.assert_allclose(backend.copy_to_host(backend.elementwise("mul", a, 3.0)), a * 3.0, rtol=1e-6)
    with pytest.raises(ValueError, match="unknown op"):
        backend.elementwise("frobnicate", a)


def test_memory_info_and_cache(backend):
    backend.synchronize()
    backend.clear_cache()
    before = backend.get_memory_info()
    assert set(before) >= {"allocated", "cached", "peak", "buffer_count"}
    bufs = [backend.allocate((1 << 16,), "float32") for _ in range(3)]
    backend.synchronize()
    during = backend.get_memory_info()
    assert during["allocated"] >= before["allocated"] + 3 * (1 << 18)
    assert during["peak"] >= during["allocated"]
    for b in bufs:
        backend.free(b)
    backend.synchronize()
    after = backend.get_memory_info()
    assert after["allocated"] <= during["allocated"] - 3 * (1 << 18)
    assert after["cached"] >= 3 * (1 << 18)
    backend.clear_cache()
    assert backend.get_memory_info()["cached"] == 0


def test_unified_buffer(backend):
    k = backend.compile_kernel(SCALE, "scale")
    host = np.arange(10, dtype=np.float32)
    ub = kiln.UnifiedBuffer(backend, host)
    assert ub.host_dirty and not ub.device_dirty
    out = kiln.UnifiedBuffer(backend, shape=(10,), dtype="float32")
    r = backend.execute_kernel(k, 1, 64, [out, ub, 10, 3.0])
    assert r.success, r.error
    assert not ub.host_dirty  # uploaded for the kernel
    assert out.device_dirty  # the kernel wrote the device copy
    np.testing.assert_allclose(out.host_view(), host * 3)
    assert not out.device_dirty
    # Host writes are uploaded before the next kernel.
    ub.host[:] = 1.0
    assert ub.host_dirty
    backend.execute_kernel(k, 1, 64, [out, ub, 10, 2.0])
    np.testing.assert_allclose(out.host, np.full(10, 2.0))


def test_cpu_backend():
    b = kiln.Backend("cpu")
    assert b.is_available() and b.device_name() == "cpu"
    np.testing.assert_array_equal(b.copy_to_host(b.vector_add([1, 2], [3, 4])), [4, 6])
    assert b.get_memory_info()["allocated"] == 0
    r = b.execute_kernel(kiln.Kernel(SCALE, "scale", 1, (64, 1, 1)), 1, None, [b.allocate(4), b.allocate(4), 4, 1.0])
    assert not r.success and "GPU" in r.error


def test_unavailable_backend():
    b = kiln.Backend("gpu:99")
    assert not b.is_available() and "99" in b.error
    with pytest.raises(RuntimeError):
        b.allocate(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        repr(b)


def test_device_buffers_behave_as_arrays(device):
    b = kiln.Backend(device)
    x, y = b.copy_to_device(np.array([1.0, 2.0, 3.0], np.float32)), b.copy_to_device(np.array([4.0, 5.0, 6.0], np.float32))
    s = x + y
    assert isinstance(s, kiln.DeviceBuffer)
    np.testing.assert_array_equal(np.asarray(s), [5, 7, 9])
    np.testing.assert_array_equal(np.asarray(2 * x - y), [-2, -1, 0])
    np.testing.assert_array_equal(np.asarray(np.ones(3, np.float32) + x), [2, 3, 4])
    np.testing.assert_array_equal(np.asarray(x < y), [True, True, True])
    np.testing.assert_array_equal(np.asarray(-x[1:]), [-2, -3])
    assert np.asarray(x).dtype == np.float32
