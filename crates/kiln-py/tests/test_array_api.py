"""The array API namespace: functions, dtypes and promotion against NumPy."""

import math

import numpy as np
import pytest

import kiln


def test_namespace():
    t = kiln.ones(3)
    xp = t.__array_namespace__()
    assert xp is kiln and xp.__array_api_version__ == "2023.12"
    for name in ["float32", "int64", "bool", "uint8", "e", "pi", "inf", "nan", "newaxis"]:
        assert hasattr(xp, name)
    with pytest.raises(ValueError):
        t.__array_namespace__(api_version="1999.01")


@pytest.mark.parametrize(
    "name,ref",
    [("tan", np.tan), ("sinh", np.sinh), ("cosh", np.cosh), ("expm1", np.expm1), ("log1p", np.log1p), ("log2", np.log2),
     ("log10", np.log10), ("trunc", np.trunc), ("negative", np.negative), ("reciprocal", np.reciprocal), ("signbit", np.signbit)],
)
def test_elementwise_functions(device, rng, name, ref):
    x = (np.abs(rng.standard_normal(17)) + 0.2).astype(np.float32) * rng.choice([-1, 1], 17).astype(np.float32)
    if name in ("log1p", "log2", "log10"):
        x = np.abs(x)
    got = np.asarray(getattr(kiln, name)(kiln.asarray(x, device=device)))
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=2e-4, atol=2e-5)


def test_predicates_and_binary_functions(device):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0], np.float32)
    t = kiln.asarray(x, device=device)
    np.testing.assert_array_equal(np.asarray(kiln.isnan(t)), np.isnan(x))
    np.testing.assert_array_equal(np.asarray(kiln.isinf(t)), np.isinf(x))
    np.testing.assert_array_equal(np.asarray(kiln.isfinite(t)), np.isfinite(x))
    y = np.array([1.0, -2.0, 3.0, -4.0, 5.0, -6.0], np.float32)
    ty = kiln.asarray(y, device=device)
    for name, ref in [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply), ("maximum", np.maximum),
                      ("less", np.less), ("greater_equal", np.greater_equal), ("hypot", np.hypot), ("logaddexp", np.logaddexp)]:
        with np.errstate(all="ignore"):
            np.testing.assert_allclose(np.asarray(getattr(kiln, name)(ty, ty[::-1])), ref(y, y[::-1]), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(kiln.copysign(ty, -1.0)), np.copysign(y, -1.0))
    np.testing.assert_allclose(np.asarray(kiln.subtract(1.0, ty)), 1.0 - y)
    np.testing.assert_array_equal(np.asarray(kiln.clip(ty, -1, 1)), np.clip(y, -1, 1))


def test_statistics_search_manipulation(device, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = kiln.asarray(x, device=device)
    np.testing.assert_allclose(np.asarray(kiln.sum(t, axis=1)), x.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(kiln.cumulative_sum(t, axis=1, include_initial=True)),
                               np.concatenate([np.zeros((3, 1)), np.cumsum(x, axis=1)], axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(kiln.all(t > -10)), True)
    np.testing.assert_array_equal(np.asarray(kiln.any(t > 0, axis=0)), (x > 0).any(axis=0))
    nz = kiln.nonzero(t > 0)
    for a, b in zip(nz, np.nonzero(x > 0)):
        np.testing.assert_array_equal(np.asarray(a), b)
    np.testing.assert_array_equal(np.asarray(kiln.take(t, kiln.asarray([2, 0]), axis=1)), np.take(x, [2, 0], axis=1))
    np.testing.assert_array_equal(np.asarray(kiln.roll(t, 1, axis=1)), np.roll(x, 1, axis=1))
    np.testing.assert_array_equal(np.asarray(kiln.roll(t, -2)), np.roll(x, -2))
    np.testing.assert_array_equal(np.asarray(kiln.tile(t, (2, 1))), np.tile(x, (2, 1)))
    np.testing.assert_array_equal(np.asarray(kiln.moveaxis(t, 0, -1)), np.moveaxis(x, 0, -1))
    np.testing.assert_array_equal(np.asarray(kiln.permute_dims(t, (1, 0))), x.T)
    np.testing.assert_array_equal(np.asarray(kiln.concat([t, t], axis=None)), np.concatenate([x, x], axis=None))
    assert [u.shape for u in kiln.unstack(t, axis=1)] == [(3,)] * 4
    a, b = kiln.broadcast_arrays(t[:1], kiln.ones((3, 1), device=device))
    assert a.shape == b.shape == (3, 4)
    gx, gy = kiln.meshgrid(kiln.arange(3, device=device), kiln.arange(2, device=device))
    nx, ny = np.meshgrid(np.arange(3), np.arange(2))
    np.testing.assert_array_equal(np.asarray(gx), nx)
    np.testing.assert_array_equal(np.asarray(gy), ny)
    np.testing.assert_allclose(np.asarray(kiln.vecdot(t, t)), (x * x).sum(-1), rtol=1e-5)
    y = rng.standard_normal((4, 2, 5)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(kiln.tensordot(t, kiln.asarray(y, device=device), axes=1)), np.tensordot(x, y, axes=1), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(kiln.matrix_transpose(t)), x.T)


def test_dtype_functions():
    assert kiln.result_type(kiln.int32, kiln.uint32) == kiln.int64
    assert kiln.result_type(kiln.float16, kiln.bfloat16) == kiln.float32
    assert kiln.result_type(kiln.ones(2, dtype="uint8"), 1.0, kiln.int32) == kiln.int32
    assert kiln.can_cast(kiln.int32, kiln.int64) and not kiln.can_cast(kiln.float32, kiln.int32)
    assert kiln.isdtype(kiln.float32, "real floating") and kiln.isdtype(kiln.uint8, ("bool", "integral"))
    assert not kiln.isdtype(kiln.bool, "numeric")
    assert kiln.finfo(kiln.float32).eps == np.finfo(np.float32).eps
    assert kiln.finfo("bfloat16").bits == 16
    assert kiln.iinfo(kiln.int32).max == 2**31 - 1
    assert kiln.float32 == kiln.float32 and kiln.float32 != kiln.float16
    assert kiln.float32 == "float32" and kiln.float32 == "f32"
    assert kiln.ones(2).astype(np.int32).dtype == kiln.int32
    assert kiln.ones(2, dtype=float).dtype == kiln.float32 and kiln.ones(2, dtype=int).dtype == kiln.int64
    assert math.isclose(kiln.pi, math.pi)


def test_docstrings_come_from_rust():
    assert "numerically stable" in kiln.Tensor.softmax.__doc__
    assert "grouped-query attention" in kiln.Tensor.sdpa.__doc__
    assert kiln.Tensor.exp.__doc__ and kiln.exp.__doc__ == kiln.Tensor.exp.__doc__
    assert "read-only view" in kiln.Tensor.__array__.__doc__
    for name in ["zeros", "asarray", "from_dlpack", "arange"]:
        assert getattr(kiln, name).__doc__, name
