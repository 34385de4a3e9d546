"""NumPy and DLPack round trips, zero-copy where documented, and the lifetime of shared memory."""

import gc
import os
import pickle
import warnings

import numpy as np
import pytest

import kiln

DTYPES = ["float32", "float64", "float16", "int32", "int64", "uint8", "uint32", "bool", "int8", "int16", "uint16", "uint64"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_round_trip(device, rng, dtype):
    x = (rng.standard_normal((3, 5)) * 10).astype(dtype)
    if dtype == "float64" and device.is_gpu:
        # The GPU backend has no float64: one TypeError, never a silent narrowing (issue 21).
        with pytest.raises(TypeError, match="float64"):
            kiln.asarray(x, device=device)
        return
    t = kiln.asarray(x, device=device)
    assert t.dtype == dtype and t.shape == x.shape
    back = np.asarray(t)
    assert back.dtype == x.dtype
    np.testing.assert_array_equal(back, x)
    # Non-contiguous NumPy input.
    np.testing.assert_array_equal(np.asarray(kiln.asarray(x.T[::2], device=device)), x.T[::2])


def test_numpy_view_is_zero_copy_and_read_only():
    t = kiln.arange(12, dtype="float32", device="cpu").reshape(3, 4)
    a = np.asarray(t)
    b = np.asarray(t)
    assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    assert not a.flags.writeable
    # Views keep their strides and offset: no copy either.
    v = np.asarray(t[1:, ::2].T)
    assert v.__array_interface__["data"][0] == a.__array_interface__["data"][0] + 4 * 4
    np.testing.assert_array_equal(v, np.arange(12).reshape(3, 4)[1:, ::2].T)
    c = np.array(t)  # a copy, writable
    assert c.flags.writeable and c.__array_interface__["data"][0] != a.__array_interface__["data"][0]
    assert t.__array__(copy=False) is not None
    # The array keeps the tensor's memory alive after the tensor is gone.
    del t
    gc.collect()
    np.testing.assert_array_equal(a, np.arange(12).reshape(3, 4))


def test_gpu_to_numpy_copies(gpu):
    t = kiln.arange(6, dtype="float32", device=gpu)
    np.testing.assert_array_equal(np.asarray(t), np.arange(6))
    with pytest.raises(ValueError):
        t.__array__(copy=False)


def test_bfloat16_to_numpy(device):
    # ml_dtypes.bfloat16 when ml_dtypes is installed (test_array_api_properties checks it), else float32.
    t = kiln.asarray([1.5, -2.0], device=device).astype("bfloat16")
    a = np.asarray(t)
    try:
        import ml_dtypes

        assert a.dtype == ml_dtypes.bfloat16
    except ImportError:
        assert a.dtype == np.float32
    np.testing.assert_array_equal(a.astype(np.float32), [1.5, -2.0])


def test_asarray_rules(device):
    assert kiln.asarray([1.0, 2.0], device=device).dtype == kiln.float32
    assert kiln.asarray([1, 2], device=device).dtype == kiln.int64
    assert kiln.asarray([True], device=device).dtype == kiln.bool
    for nd in ["int8", "int16", "uint16", "uint64"]:
        assert kiln.asarray(np.zeros(3, nd), device=device).dtype == getattr(kiln, nd)
    assert kiln.asarray(3.5, device=device).shape == ()
    assert kiln.asarray([1, 2], dtype="float16", device=device).dtype == kiln.float16
    t = kiln.asarray([1.0], device=device)
    assert kiln.asarray(t) is not None and kiln.asarray(t, copy=False).shares_storage_with(t)
    with pytest.raises(ValueError):
        kiln.asarray(np.zeros(3), copy=False)
    with pytest.raises(TypeError):
        kiln.asarray(np.zeros(3, np.complex64))


def test_f64_to_gpu_raises(gpu):
    with pytest.raises(TypeError, match="float64"):
        kiln.asarray(np.arange(3, dtype=np.float64), device=gpu)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kiln.asarray(np.arange(3, dtype=np.float32), device=gpu)
    with pytest.raises(TypeError):
        kiln.asarray(np.arange(3, dtype=np.float64), dtype="float64", device=gpu)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dlpack_to_numpy_zero_copy(dtype):
    t = kiln.asarray(np.arange(12).reshape(3, 4) % 3, dtype=dtype, device="cpu")
    want = np.array(t)
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(a, np.asarray(t))
    assert a.__array_interface__["data"][0] == np.asarray(t).__array_interface__["data"][0]
    assert t.__dlpack_device__() == (1, 0)
    # A strided view exports its strides.
    v = t.T[1:]
    np.testing.assert_array_equal(np.from_dlpack(v), np.asarray(t).T[1:])
    del t, v
    gc.collect()
    np.testing.assert_array_equal(a, want)


def test_dlpack_from_numpy(device, rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    for src in (x, x.T, x[::2, ::-2]):
        t = kiln.from_dlpack(src, device=device)
        np.testing.assert_array_equal(np.asarray(t), src)
    cap = np.arange(4, dtype=np.int32).__dlpack__()
    np.testing.assert_array_equal(np.asarray(kiln.from_dlpack(cap)), np.arange(4))
    with pytest.raises(TypeError):
        kiln.from_dlpack(cap)  # consumed
    # kiln to kiln, through the protocol.
    k = kiln.from_dlpack(kiln.asarray(x, device=device))
    np.testing.assert_array_equal(np.asarray(k), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dlpack_from_numpy_dtypes(dtype):
    x = (np.arange(10) % 4).astype(dtype)
    t = kiln.from_dlpack(x[::-2])
    assert t.dtype == dtype
    np.testing.assert_array_equal(np.asarray(t), x[::-2])


def test_gpu_dlpack_exports_a_host_copy(gpu):
    t = kiln.arange(5, dtype="int32", device=gpu)
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(5))


def _resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_unconsumed_capsule_is_freed():
    # Each capsule keeps the tensor's memory alive; dropped unconsumed, its destructor must let it
    # go. Seen in the resident memory of this process: 64 MiB held while a capsule lives, returned
    # once the last one is gone (a leaked capsule would keep all of it).
    if not os.path.exists("/proc/self/statm"):
        pytest.skip("needs /proc/self/statm (Linux)")
    mib = 2**20
    gc.collect()
    base = _resident_bytes()
    t = kiln.ones(16 * mib, dtype="float32", device="cpu")  # 64 MiB, written so resident
    assert _resident_bytes() - base > 48 * mib
    capsules = [t.__dlpack__() for _ in range(100)]
    del t
    gc.collect()
    assert _resident_bytes() - base > 48 * mib, "the capsules should keep the tensor alive"
    del capsules
    gc.collect()
    assert _resident_bytes() - base < 16 * mib, "dropped unconsumed capsules still hold the tensor"


def test_tolist_item_repr_pickle(device):
    t = kiln.asarray([[1, 2], [3, 4]], dtype="int64", device=device)
    assert t.tolist() == [[1, 2], [3, 4]]
    assert kiln.asarray(2**60, device="cpu").item() == 2**60
    assert float(kiln.asarray(2.5, device=device)) == 2.5
    assert int(kiln.asarray(7, device=device)) == 7
    assert bool(kiln.asarray(True, device=device))
    r = repr(kiln.asarray([[1.0, 2.0], [3.0, 4.0]], device=device))
    assert r == f"tensor([[1., 2.],\n        [3., 4.]], dtype=float32, device={device.name})"
    assert "..." in repr(kiln.zeros(5000, device=device))
    p = pickle.loads(pickle.dumps(t))
    assert p.tolist() == t.tolist() and p.dtype == t.dtype
    assert pickle.loads(pickle.dumps(kiln.float16)) == kiln.float16
