"""kiln tensors as Dask chunks: NumPy's ``__array_function__`` on tensors against NumPy
on random shapes and chunkings (odd sizes, chunks that do not divide the shape), on the CPU and the
GPU; unsupported functions raise a TypeError naming them; Dask's zero-size meta arrays; and a
``dask.distributed`` cluster whose workers ``kiln.dask.DevicePlugin`` pins to the CPU and the GPU,
including a reduction and a matmul over an array larger than the workers' memory limits together."""

import os

import numpy as np
import pytest

import kiln

da = pytest.importorskip("dask.array", reason="dask[array] is not installed (CI installs it: ci.sh)")
import dask  # noqa: E402

from conftest import assert_close  # noqa: E402


@pytest.fixture
def sync():
    """Dask's single-threaded scheduler: chunks stay on the device they were made on."""
    with dask.config.set(scheduler="synchronous"):
        yield


def _random_case(rng):
    """A 2-D float32 array of odd size and a chunking that does not divide it."""
    shape = tuple(int(n) for n in rng.integers(5, 40, size=2))
    chunks = tuple(int(rng.integers(2, n)) for n in shape)
    return rng.standard_normal(shape).astype(np.float32), chunks


def _kiln_chunks(x, chunks, device):
    d = da.from_array(x, chunks=chunks).map_blocks(kiln.asarray, device=device)
    assert isinstance(d._meta, kiln.Tensor)
    return d


# What Dask computes on the chunks: (name, function of the Dask array or the NumPy one, kind of tolerance).
_CASES = [
    ("elementwise", lambda a, m: (m.exp(a * 0.5) - a) / 3 + 1, "transcendental"),
    ("sum", lambda a, m: a.sum(), "reduction"),
    ("sum axis keepdims", lambda a, m: a.sum(axis=1, keepdims=True), "reduction"),
    ("mean", lambda a, m: a.mean(axis=0), "reduction"),
    ("max", lambda a, m: a.max(axis=1), "basic"),
    ("min", lambda a, m: a.min(), "basic"),
    ("prod", lambda a, m: (a * 0.01 + 1).prod(axis=0), "reduction"),
    ("argmax", lambda a, m: a.argmax(axis=0), "basic"),
    ("argmin flat", lambda a, m: a.argmin(), "basic"),
    ("var", lambda a, m: a.var(axis=0), "reduction"),
    ("std", lambda a, m: a.std(), "reduction"),
    ("matmul", lambda a, m: a @ a.T, "reduction"),
    ("dot", lambda a, m: m.dot(a.T, a), "reduction"),
    ("tensordot", lambda a, m: m.tensordot(a, a, axes=([0], [0])), "reduction"),
    ("einsum", lambda a, m: m.einsum("ij,kj->ik", a, a), "reduction"),
    ("where", lambda a, m: m.where(a > 0, a, -1.0), "basic"),
    ("clip", lambda a, m: m.clip(a, -0.5, 0.5), "basic"),
    ("astype", lambda a, m: a.astype("int32"), "basic"),
    ("transpose", lambda a, m: m.transpose(a) + 0, "basic"),
    ("reshape", lambda a, m: a[:4].reshape((2, 2, -1)), "basic"),
    ("concatenate", lambda a, m: m.concatenate([a, a[::-1]], axis=1), "basic"),
    ("stack", lambda a, m: m.stack([a, a * 2], axis=1), "basic"),
    ("slicing", lambda a, m: a[1:-1:2, ::-3][:, 1:], "basic"),
    ("cumsum", lambda a, m: a.cumsum(axis=0), "reduction"),
    ("any", lambda a, m: (a > 1.5).any(axis=0), "basic"),
    ("squeeze", lambda a, m: m.squeeze(a[:, :1]), "basic"),
]


# Dask combines var/std's partial moments in float64 (moment_combine's dtype="f8"), which a GPU lacks.
_F64_COMBINE = ("var", "std")


def _seeds(n):
    return [pytest.param(s, id=f"case{s}") for s in range(n)]


@pytest.mark.parametrize("seed", _seeds(3))
def test_chunks_match_numpy(device, sync, seed):
    """Every case on random shapes and chunkings: the result is a tensor on the chunks' device, equal
    to NumPy's."""
    rng = np.random.default_rng(seed)
    x, chunks = _random_case(rng)
    d = _kiln_chunks(x, chunks, device)
    for name, f, kind in _CASES:
        if device.is_gpu and name in _F64_COMBINE:
            continue
        got = f(d, da).compute()
        assert isinstance(got, kiln.Tensor), name
        assert got.device == device, name
        expected = f(x.astype(np.float64), np).astype(np.dtype(got.dtype)) if name != "argmin flat" else x.argmin()
        assert_close(got, expected, "float32", "basic" if kind == "basic" else "accumulate")


def test_rechunk_and_slice_keep_values(device, sync, rng):
    """Rechunking (concatenate + slicing of chunks) to chunks that cut across the old ones."""
    x, chunks = _random_case(rng)
    d = _kiln_chunks(x, chunks, device)
    r = d.rechunk((3, 7))
    assert r.chunks != d.chunks
    got = r[::2].compute()
    assert isinstance(got, kiln.Tensor)
    np.testing.assert_array_equal(np.asarray(got), x[::2])


def test_random_chunks_then_map_blocks(sync):
    """``da.random`` chunks made on the host, then kiln chunks: a tree reduction with split_every."""
    a = da.random.default_rng(5).random((101, 13), chunks=(10, 5), dtype=np.float32)
    k = a.map_blocks(kiln.asarray)
    got = k.sum(axis=0, split_every=2).compute()
    assert isinstance(got, kiln.Tensor)
    np.testing.assert_allclose(np.asarray(got), a.compute().sum(axis=0), rtol=1e-5)


def test_unsupported_function_raises_naming_it(device):
    t = kiln.asarray(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)
    for f, name in [(np.median, "median"), (np.fft.fft, "fft.fft"), (np.linalg.inv, "linalg.inv")]:
        with pytest.raises(TypeError, match=name):
            f(t)
    with pytest.raises(TypeError, match="out="):
        np.sum(t, out=np.empty(()))
    # Negative control: a covered function with the same arguments works.
    assert float(np.sum(t)) == 15.0


def test_unsupported_function_through_dask(sync):
    d = da.from_array(np.ones((6, 4), np.float32), chunks=3).map_blocks(kiln.asarray)
    # Dask's dtype inference wraps the chunk's TypeError in a ValueError that quotes it.
    with pytest.raises((TypeError, ValueError), match="does not implement numpy.nanmedian"):
        da.nanmedian(d, axis=0).compute()


def test_covered_names():
    from kiln import _array_function as af

    names = af.covered()
    for n in ("concatenate", "stack", "sum", "mean", "max", "min", "prod", "argmax", "tensordot", "einsum",
              "where", "clip", "transpose", "reshape", "empty_like", "zeros_like", "ones_like", "full_like",
              "broadcast_to", "squeeze"):
        assert n in names, n


def test_meta_arrays(device):
    """Dask's meta machinery: zero-size tensors of the chunk type, dtype readable as NumPy's."""
    from dask.array.utils import meta_from_array

    t = kiln.asarray(np.ones((4, 5), np.float32), device=device)
    assert np.dtype(t.dtype) == np.float32 and t.dtype.kind == "f" and t.dtype.type is np.float32
    m = meta_from_array(t, ndim=3)
    assert isinstance(m, kiln.Tensor) and m.shape == (0, 0, 0) and m.device == device
    for f in (np.empty_like, np.zeros_like, np.ones_like):
        z = f(t, shape=(0, 2))
        assert isinstance(z, kiln.Tensor) and z.shape == (0, 2) and z.dtype == kiln.float32
    full = np.full_like(t, 7, shape=(2, 3), dtype="int32")
    assert full.dtype == kiln.int32 and full.device == device and full.tolist() == [[7] * 3] * 2
    assert np.zeros_like(t).tolist() == [[0.0] * 5] * 4
    d = da.from_array(np.ones((7, 3), np.float32), chunks=2).map_blocks(kiln.asarray)
    assert isinstance(d._meta, kiln.Tensor) and d._meta.ndim == 2 and d.dtype == np.float32


# dask.distributed: one cluster for the module (its start is most of these tests' time).
MEMORY_LIMIT = 200_000_000


def _gpu_available():
    if kiln.Device.adapters():
        return True
    if os.environ.get("KILN_REQUIRE_GPU") == "1":
        pytest.fail("KILN_REQUIRE_GPU=1 but wgpu lists no adapter")
    return False


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed", reason="distributed is not installed (ci.sh installs it)")
    import kiln.dask

    devices = ["cpu", "gpu:0"] if _gpu_available() else ["cpu", "cpu"]
    # A memory limit the out-of-core test exceeds; spilling to disk stays on, pausing and killing off
    # (a worker's own imports use a good part of 200 MB).
    cfg = {"distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": False}
    with dask.config.set(cfg):
        cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                           memory_limit=MEMORY_LIMIT, dashboard_address=None)
        c = distributed.Client(cluster)
        c.register_plugin(kiln.dask.DevicePlugin(devices))
        c.kiln_devices = devices
        yield c
        c.close()
        cluster.close()


def test_plugin_pins_worker_devices(client):
    names = {int(w["name"]): addr for addr, w in client.scheduler_info()["workers"].items()}
    for i, addr in names.items():
        made = client.submit(lambda: kiln.asarray(np.ones(2, np.float32)).device.name, workers=[addr],
                             pure=False).result()
        assert made == kiln.Device(client.kiln_devices[i]).name


def test_distributed_matches_numpy(client):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((53, 41)).astype(np.float32)
    d = da.from_array(x, chunks=(10, 9)).map_blocks(kiln.asarray)
    total, gram, col_max, cut = dask.compute((d * 2 - 1).sum(axis=0), d @ d.T, d.max(axis=0),
                                             d.rechunk((7, 20))[5:40:3, ::2])
    for got in (total, gram, col_max, cut):
        assert isinstance(got, kiln.Tensor)
    assert_close(total, (x.astype(np.float64) * 2 - 1).sum(axis=0), "float32", "accumulate")
    assert_close(gram, x.astype(np.float64) @ x.T.astype(np.float64), "float32", "accumulate")
    np.testing.assert_array_equal(np.asarray(col_max), x.max(axis=0))
    np.testing.assert_array_equal(np.asarray(cut), x[5:40:3, ::2])


def test_out_of_core_reduction_and_matmul(client):
    """A 440 MB array (random chunks made inside the workers) over workers of 200 MB each: a column
    sum and the Gram matrix ``a.T @ a`` (8 x 8) against the same graph on NumPy chunks, computed
    together so each random chunk is made once."""
    limits = [w["memory_limit"] for w in client.scheduler_info()["workers"].values()]
    a = da.random.default_rng(0).random((13_750_000, 8), chunks=(1_375_000, 8), dtype=np.float32)
    assert a.nbytes > 2 * max(limits) and max(limits) == MEMORY_LIMIT
    k = a.map_blocks(kiln.asarray)
    a64 = a.astype(np.float64)
    ks, kg, ns, ng = dask.compute(k.sum(axis=0), k.T @ k, a64.sum(axis=0), a64.T @ a64)
    assert isinstance(ks, kiln.Tensor) and isinstance(kg, kiln.Tensor) and kg.shape == (8, 8)
    np.testing.assert_allclose(np.asarray(ks), ns, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(kg), ng, rtol=1e-4)
