"""Shared fixtures: `device` runs a test once on the CPU and once on the first GPU adapter (lavapipe
in CI). Without an adapter the GPU half is skipped, unless KILN_REQUIRE_GPU=1 makes it a failure.
GPU outputs are poisoned (NaN bits before each op), so unwritten elements fail the comparisons."""

import os
import zlib

import numpy as np
import pytest

import kiln


def _gpu():
    try:
        d = kiln.Device("gpu")
    except Exception as e:  # no adapter
        if os.environ.get("KILN_REQUIRE_GPU") == "1":
            pytest.fail(f"KILN_REQUIRE_GPU=1 but no GPU device opened: {e}")
        pytest.skip(f"no GPU adapter: {e}")
    d.set_poison(True)
    return d


@pytest.fixture(params=["cpu", "gpu"])
def device(request):
    if request.param == "cpu":
        return kiln.Device("cpu")
    return _gpu()


@pytest.fixture
def gpu():
    return _gpu()


@pytest.fixture
def rng(request):
    # A seed per test from a stable hash of its name (Python salts `hash` of strings per process, so
    # that would not reproduce a failure), the same in every run.
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def tol(dtype, kind="basic"):
    """(rtol, atol) per dtype: f32 element-wise ops within 1e-5 relative (transcendental and
    accumulating ops 1e-4), f16 within 2e-3 (4e-3), bf16 within 1.6e-2 (3e-2), f64 1e-12."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    table = {
        "float32": (1e-5, 1e-6) if kind == "basic" else (1e-4, 1e-5),
        "float16": (2e-3, 1e-3) if kind == "basic" else (4e-3, 2e-3),
        "bfloat16": (1.6e-2, 1e-2) if kind == "basic" else (3e-2, 2e-2),
        "float64": (1e-12, 1e-12),
    }
    return table[name]


def assert_close(actual, expected, dtype="float32", kind="basic"):
    """`actual` (a kiln Tensor) against an f64 NumPy reference; NaN must match NaN."""
    assert isinstance(actual, kiln.Tensor), type(actual)
    a = np.asarray(actual.astype("float32") if actual.dtype == kiln.bfloat16 else actual)
    e = np.asarray(expected)
    assert a.shape == e.shape, (a.shape, e.shape)
    if a.dtype.kind in "biu":
        np.testing.assert_array_equal(a, e)
        return
    rtol, atol = tol(dtype, kind)
    np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
