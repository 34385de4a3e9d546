"""Property tests (hypothesis) of the namespace functions against NumPy, on random shapes, dtypes
and values, on the CPU and the GPU; and the array API behaviours added in issue 25 (sorting, sets,
bitwise functions, inverse trigonometric functions, `__setitem__`, `__array_namespace_info__`,
`from_dlpack(copy=)`, `to_device(stream=)`, bfloat16 as `ml_dtypes.bfloat16`)."""

import math
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kiln

# In CI (CI=true) the examples are derandomized: each test draws the same examples every run (from a
# seed derived from the test), so a red run is reproducible and a green one is not luck. Elsewhere
# hypothesis draws new ones. A failure prints the falsifying example and the blob that replays it
# (`@reproduce_failure`).
IN_CI = os.environ.get("CI", "").lower() in ("true", "1")
SETTINGS = settings(max_examples=30, deadline=None, derandomize=IN_CI, print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
nonempty = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5)
INT_DTYPES = ["uint8", "int32", "uint32", "int64", "int8", "int16", "uint16", "uint64"]


def floats(lo, hi, **kw):
    # Bounds rounded to float32, as hypothesis wants them for width=32.
    return st.floats(float(np.float32(lo)), float(np.float32(hi)), width=32, allow_nan=False, **kw)


def f32_arrays(shape=shapes, lo=-1e4, hi=1e4, **kw):
    return hnp.arrays(np.float32, shape, elements=floats(lo, hi, **kw))


def ints(dtype, shape=shapes):
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -(2**40)), min(info.max, 2**40)
    return hnp.arrays(dtype, shape, elements=st.integers(int(lo), int(hi)))


def dev(x, device):
    return kiln.asarray(x, device=device)


def host(t):
    return np.asarray(t)


# ---- element-wise functions -------------------------------------------------------------------
UNARY = {
    # name: (NumPy reference, low, high)
    "acos": (np.arccos, -1, 1), "asin": (np.arcsin, -1, 1), "atan": (np.arctan, -1e6, 1e6),
    "acosh": (np.arccosh, 1, 1e6), "asinh": (np.arcsinh, -1e6, 1e6), "atanh": (np.arctanh, -0.999, 0.999),
    "log1p": (np.log1p, -0.999, 1e6), "expm1": (np.expm1, -30, 30), "exp": (np.exp, -30, 30),
    "log": (np.log, 1e-6, 1e6), "sqrt": (np.sqrt, 0, 1e6), "sin": (np.sin, -10, 10), "cos": (np.cos, -10, 10),
    "tan": (np.tan, -1.5, 1.5), "tanh": (np.tanh, -20, 20), "sinh": (np.sinh, -20, 20), "cosh": (np.cosh, -20, 20),
    "log2": (np.log2, 1e-6, 1e6), "log10": (np.log10, 1e-6, 1e6), "abs": (np.abs, -1e6, 1e6),
    "negative": (np.negative, -1e6, 1e6), "square": (np.square, -1e3, 1e3), "sign": (np.sign, -10, 10),
    "floor": (np.floor, -1e3, 1e3), "ceil": (np.ceil, -1e3, 1e3), "trunc": (np.trunc, -1e3, 1e3),
    "round": (np.round, -1e3, 1e3), "reciprocal": (np.reciprocal, 0.01, 1e3),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_against_numpy(device, name):
    ref, lo, hi = UNARY[name]

    @SETTINGS
    @given(x=f32_arrays(lo=lo, hi=hi))
    def check(x):
        got = getattr(kiln, name)(dev(x, device))
        assert got.dtype == kiln.float32 and got.shape == x.shape
        with np.errstate(all="ignore"):
            want = ref(x.astype(np.float64))
        np.testing.assert_allclose(host(got), want, rtol=1e-4 if name in ("sin", "cos", "tan") else 2e-5, atol=1e-5 if name in ("sin", "cos", "tan") else 1e-6)

    check()


@pytest.mark.parametrize("name,ref", [("log1p", np.log1p), ("expm1", np.expm1), ("asinh", np.arcsinh),
                                      ("atanh", np.arctanh), ("asin", np.arcsin), ("atan", np.arctan)])
def test_full_relative_precision_near_zero(device, name, ref):
    x = np.concatenate([np.geomspace(1e-30, 1e-2, 41), -np.geomspace(1e-30, 1e-2, 41)]).astype(np.float32)
    got = host(getattr(kiln, name)(dev(x, device)))
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=3e-6, atol=0)


def test_inverse_functions_special_values(device):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0], np.float32)
    t = dev(x, device)
    with np.errstate(all="ignore"):
        for name, ref in [("asin", np.arcsin), ("acos", np.arccos), ("atan", np.arctan), ("asinh", np.arcsinh),
                          ("acosh", np.arccosh), ("atanh", np.arctanh), ("log1p", np.log1p), ("expm1", np.expm1)]:
            got = host(getattr(kiln, name)(t))
            np.testing.assert_allclose(got, ref(x), rtol=1e-6, atol=0, equal_nan=True, err_msg=name)
            want = ref(x[3:5])
            ok = ~np.isnan(want)  # the sign of zeros (a NaN's sign is unspecified)
            np.testing.assert_array_equal(np.signbit(got[3:5][ok]), np.signbit(want[ok]), err_msg=name)
    # atan2 over every pair of special values (IEEE 754's table).
    a, b = np.meshgrid(x, x)
    got = host(kiln.atan2(dev(a, device), dev(b, device)))
    np.testing.assert_allclose(got, np.arctan2(a, b), rtol=1e-6, atol=0, equal_nan=True)
    want = np.arctan2(a, b)
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))


@given(data=st.data())
@SETTINGS
def test_binary_float_against_numpy(device, data):
    s1, s2 = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4)).input_shapes
    x1 = data.draw(f32_arrays(s1, -100, 100))
    x2 = data.draw(f32_arrays(s2, -100, 100))
    name, ref = data.draw(st.sampled_from([("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                                            ("maximum", np.maximum), ("minimum", np.minimum), ("atan2", np.arctan2),
                                            ("copysign", np.copysign), ("hypot", np.hypot),
                                            ("logaddexp", np.logaddexp), ("less", np.less), ("equal", np.equal)]))
    got = getattr(kiln, name)(dev(x1, device), dev(x2, device))
    want = ref(x1.astype(np.float64), x2.astype(np.float64))
    assert got.shape == want.shape
    np.testing.assert_allclose(host(got).astype(np.float64), want, rtol=2e-5, atol=1e-5)


@given(data=st.data())
@SETTINGS
def test_binary_integer_against_numpy(device, data):
    dtype = data.draw(st.sampled_from(INT_DTYPES))
    s1, s2 = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4)).input_shapes
    x1, x2 = data.draw(ints(dtype, s1)), data.draw(ints(dtype, s2))
    name, ref = data.draw(st.sampled_from([("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                                            ("maximum", np.maximum), ("bitwise_and", np.bitwise_and),
                                            ("bitwise_or", np.bitwise_or), ("bitwise_xor", np.bitwise_xor),
                                            ("greater_equal", np.greater_equal)]))
    got = getattr(kiln, name)(dev(x1, device), dev(x2, device))
    with np.errstate(all="ignore"):
        want = ref(x1, x2)
    assert got.dtype == want.dtype.name
    np.testing.assert_array_equal(host(got), want)


@given(data=st.data())
@SETTINGS
def test_shifts_and_invert(device, data):
    dtype = data.draw(st.sampled_from(INT_DTYPES))
    bits = np.iinfo(dtype).bits
    shape = data.draw(nonempty)
    x = data.draw(ints(dtype, shape))
    s = data.draw(hnp.arrays(dtype, shape, elements=st.integers(0, bits + 3)))
    tx, ts = dev(x, device), dev(s, device)
    small = s < bits
    want_l = np.where(small, np.left_shift(x, np.where(small, s, 0).astype(dtype)), 0).astype(dtype)
    np.testing.assert_array_equal(host(kiln.bitwise_left_shift(tx, ts)), want_l)
    np.testing.assert_array_equal(host(tx << ts), want_l)
    want_r = np.where(small, np.right_shift(x, np.where(small, s, 0).astype(dtype)), np.where(x < 0, -1, 0)).astype(dtype)
    np.testing.assert_array_equal(host(tx >> ts), want_r)
    np.testing.assert_array_equal(host(~tx), np.invert(x))
    np.testing.assert_array_equal(host(tx & 6), x & np.array(6, dtype))
    np.testing.assert_array_equal(host(tx ^ tx), np.zeros_like(x))
    assert (~dev(np.array([True, False]), device)).tolist() == [False, True]


def test_bitwise_errors(device):
    f = dev(np.ones(3, np.float32), device)
    with pytest.raises(TypeError):
        kiln.bitwise_and(f, f)
    with pytest.raises(TypeError):
        ~f
    with pytest.raises(ValueError):
        kiln.bitwise_left_shift(dev(np.ones(2, np.int32), device), dev(np.array([-1, 1], np.int32), device))


# ---- reductions and statistics ------------------------------------------------------------------
def axes_for(shape):
    n = len(shape)
    return st.one_of(st.none(), st.integers(-n, n - 1) if n else st.none(),
                     st.lists(st.integers(0, max(n - 1, 0)), unique=True, max_size=n).map(tuple) if n else st.none())


@given(data=st.data())
@SETTINGS
def test_reductions_against_numpy(device, data):
    x = data.draw(f32_arrays(nonempty, -10, 10))
    axis = data.draw(axes_for(x.shape))
    keepdims = data.draw(st.booleans())
    name = data.draw(st.sampled_from(["sum", "prod", "mean", "max", "min", "var", "std"]))
    kw = {}
    if name in ("var", "std"):
        kw["correction"] = data.draw(st.sampled_from([0, 1, 0.5, 1.5]))
    got = getattr(kiln, name)(dev(x, device), axis=axis, keepdims=keepdims, **kw)
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in ("var", "std"):
            want = getattr(np, name)(x64, axis=axis, keepdims=keepdims, ddof=kw["correction"])
        else:
            want = getattr(np, name)(x64, axis=axis, keepdims=keepdims)
    assert got.shape == np.shape(want)
    scale = 1e-3 if name == "prod" else 1e-4
    np.testing.assert_allclose(host(got), want, rtol=scale, atol=scale, equal_nan=True)


@pytest.mark.parametrize("name", ["sum", "prod"])
def test_sum_prod_dtype(device, name):
    x = np.array([[1, 2, 3], [4, 5, 250]], np.uint8)
    t = dev(x, device)
    for dt in ["int32", "int64", "float32", "uint8"]:
        got = getattr(kiln, name)(t, axis=1, dtype=dt)
        assert got.dtype == dt
        np.testing.assert_array_equal(host(got), getattr(np, name)(x, axis=1, dtype=dt))


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint8", "uint16", "uint32", "uint64", "bool"])
def test_sum_prod_default_dtypes(device, dtype):
    """The standard's defaults, as NumPy's: signed and bool into int64, unsigned into uint64."""
    x = (np.arange(24).reshape(4, 6) * 37 % 11).astype(dtype)
    t = dev(x, device)
    for name in ["sum", "prod"]:
        got = getattr(kiln, name)(t, axis=1)
        want = getattr(np, name)(x, axis=1)
        assert got.dtype == want.dtype.name, (name, got.dtype, want.dtype)
        np.testing.assert_array_equal(host(got), want)
    got = kiln.cumulative_sum(t, axis=1)
    want = np.cumulative_sum(x, axis=1) if hasattr(np, "cumulative_sum") else np.cumsum(x, axis=1)
    assert got.dtype == want.dtype.name
    np.testing.assert_array_equal(host(got), want)


def test_std_var_float_correction(device):
    x = np.arange(10, dtype=np.float32)
    for c in [0.25, 2.5, 9.5, 10.0, 11.5]:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = np.var(x.astype(np.float64), ddof=c)
        got = float(kiln.var(dev(x, device), correction=c))
        if math.isnan(want) or math.isinf(want):
            assert math.isnan(got) or math.isinf(got), (c, got)
        else:
            assert math.isclose(got, want, rel_tol=1e-5), (c, got, want)
    assert math.isclose(float(kiln.std(dev(x, device), correction=0.5)), np.std(x, ddof=0.5), rel_tol=1e-5)


@given(data=st.data())
@SETTINGS
def test_cumulative_sum(device, data):
    x = data.draw(f32_arrays(nonempty, -10, 10))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    inc = data.draw(st.booleans())
    got = kiln.cumulative_sum(dev(x, device), axis=axis, include_initial=inc)
    want = np.cumsum(x.astype(np.float64), axis=axis)
    if inc:
        pad = [(0, 0)] * x.ndim
        pad[axis] = (1, 0)
        want = np.pad(want, pad)
    np.testing.assert_allclose(host(got), want, rtol=1e-4, atol=1e-4)
    xi = x.astype(np.int32)
    assert kiln.cumulative_sum(dev(xi, device), axis=axis, dtype="float32").dtype == kiln.float32


# ---- sorting, searching, sets -------------------------------------------------------------------
def sortable(dtype):
    if dtype == "float32":
        return hnp.arrays(np.float32, nonempty, elements=st.one_of(st.sampled_from([np.nan, 0.0, -0.0, 1.0, np.inf]),
                                                                   st.floats(-5, 5, width=32)))
    return ints(dtype, nonempty).map(lambda a: a % 7)  # many ties


@given(data=st.data())
@SETTINGS
def test_sort_argsort_against_numpy(device, data):
    dtype = data.draw(st.sampled_from(["float32", "int32", "uint8", "int64"]))
    x = data.draw(sortable(dtype))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    desc = data.draw(st.booleans())
    t = dev(x, device)
    idx = kiln.argsort(t, axis=axis, descending=desc)
    s = kiln.sort(t, axis=axis, descending=desc)
    assert idx.dtype == kiln.int64 and s.dtype == t.dtype and s.device == t.device
    if desc:
        key = -x.astype(np.float64) if dtype == "float32" else -x.astype(np.int64)
        want_idx = np.argsort(key, axis=axis, kind="stable")
    else:
        want_idx = np.argsort(x, axis=axis, kind="stable")
    np.testing.assert_array_equal(host(idx), want_idx)
    np.testing.assert_array_equal(host(s), np.take_along_axis(x, want_idx, axis=axis))


@given(data=st.data())
@SETTINGS
def test_searchsorted_against_numpy(device, data):
    a = np.sort(data.draw(hnp.arrays(np.float32, st.integers(0, 12), elements=floats(-5, 5))))
    v = data.draw(f32_arrays(shapes, -6, 6))
    side = data.draw(st.sampled_from(["left", "right"]))
    got = kiln.searchsorted(dev(a, device), dev(v, device), side=side)
    np.testing.assert_array_equal(host(got), np.searchsorted(a, v, side=side))
    perm = np.random.default_rng(0).permutation(a.size)
    got = kiln.searchsorted(dev(a[perm], device), dev(v, device), side=side, sorter=dev(np.argsort(perm), device))
    np.testing.assert_array_equal(host(got), np.searchsorted(a, v, side=side))


@given(data=st.data())
@SETTINGS
def test_unique_against_numpy(device, data):
    dtype = data.draw(st.sampled_from(["float32", "int32", "uint8"]))
    x = data.draw(sortable(dtype))
    t = dev(x, device)
    vals, idx, inv, cnt = np.unique(x.reshape(-1), return_index=True, return_inverse=True, return_counts=True,
                                    equal_nan=False)
    r = kiln.unique_all(t)
    np.testing.assert_array_equal(host(r.values), vals)
    np.testing.assert_array_equal(host(r.indices), idx)
    np.testing.assert_array_equal(host(r.inverse_indices), inv.reshape(x.shape))
    np.testing.assert_array_equal(host(r.counts), cnt)
    np.testing.assert_array_equal(host(kiln.unique_values(t)), vals)
    c = kiln.unique_counts(t)
    np.testing.assert_array_equal(host(c.counts), cnt)
    i = kiln.unique_inverse(t)
    assert i.inverse_indices.shape == x.shape
    # values[inverse] rebuilds x (NaN compared as NaN).
    np.testing.assert_array_equal(host(i.values)[host(i.inverse_indices)], x)


# ---- manipulation and indexing -------------------------------------------------------------------
@given(data=st.data())
@SETTINGS
def test_repeat_against_numpy(device, data):
    x = data.draw(f32_arrays(nonempty))
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    n = x.size if axis is None else x.shape[axis]
    reps = data.draw(st.one_of(st.integers(0, 3), hnp.arrays(np.int64, n, elements=st.integers(0, 3))))
    got = kiln.repeat(dev(x, device), dev(reps, device) if isinstance(reps, np.ndarray) else reps, axis=axis)
    np.testing.assert_array_equal(host(got), np.repeat(x, reps, axis=axis))


def test_expand_dims_range(device):
    t = dev(np.ones((2, 3), np.float32), device)
    for a in (-3, -1, 0, 2):
        assert kiln.expand_dims(t, axis=a).shape == np.expand_dims(np.ones((2, 3)), a).shape
    for a in (-4, 3):
        with pytest.raises(IndexError):
            kiln.expand_dims(t, axis=a)


def keys(shape):
    """Random NumPy-style keys for `shape`: ints, slices with steps, Ellipsis, None, masks, index arrays."""
    def one(n):
        return st.one_of(
            st.integers(-n, n - 1) if n else st.just(slice(None)),
            st.builds(slice, st.one_of(st.none(), st.integers(-n - 1, n + 1)), st.one_of(st.none(), st.integers(-n - 1, n + 1)),
                      st.one_of(st.none(), st.integers(-3, 3).filter(bool))),
        )
    if not shape:
        return st.sampled_from([(), Ellipsis])
    basic = st.tuples(*[one(n) for n in shape])
    mask = hnp.arrays(np.bool_, shape)
    arr = hnp.arrays(np.int64, st.integers(0, 4), elements=st.integers(0, shape[0] - 1)) if shape[0] else st.just(np.zeros(0, np.int64))
    return st.one_of(basic, mask, arr.map(lambda a: (a,)), basic.map(lambda k: (Ellipsis,) + k[1:]))


@given(data=st.data())
@SETTINGS
def test_setitem_against_numpy(device, data):
    x = data.draw(f32_arrays(shapes, -100, 100))
    key = data.draw(keys(x.shape))
    try:
        sel_shape = x[key].shape
    except IndexError:
        assume(False)
    vshape = data.draw(st.sampled_from([(), sel_shape[-1:] if sel_shape else ()]))
    v = data.draw(f32_arrays(st.just(vshape), -100, 100))
    t = dev(x, device)
    before = t[...]  # a view taken earlier keeps the old values (copy-on-write)
    want = x.copy()
    if isinstance(key, np.ndarray) and key.dtype == np.bool_:
        t[dev(key, device)] = v if v.ndim else float(v)
    else:
        t[key] = dev(v, device) if v.ndim else float(v)
    want[key] = v
    np.testing.assert_array_equal(host(t), want)
    np.testing.assert_array_equal(host(before), x)
    assert t.shape == x.shape and t.dtype == kiln.float32 and t.device == device


def test_setitem_casts_and_errors(device):
    t = dev(np.zeros((2, 3), np.int32), device)
    t[0, 1:] = 7
    t[1] = dev(np.array([1.9, 2.1, -3.5], np.float32), device)
    np.testing.assert_array_equal(host(t), [[0, 7, 7], [1, 2, -3]])
    with pytest.raises(IndexError):
        t[5] = 1
    with pytest.raises(ValueError):
        t[0] = dev(np.ones(4, np.int32), device)


# ---- interop and inspection ---------------------------------------------------------------------
def test_namespace_info(device):
    info = kiln.__array_namespace_info__()
    assert info.capabilities()["boolean indexing"] is True
    devs = info.devices()
    assert kiln.Device("cpu") in devs
    if device.is_gpu:
        assert device in devs
    dts = info.dtypes(device=device)
    assert "float32" in dts and dts["int64"] == kiln.int64
    assert ("float64" in dts) == device.is_cpu
    assert set(info.dtypes(device=device, kind="unsigned integer")) == {"uint8", "uint16", "uint32", "uint64"}
    assert set(info.dtypes(device=device, kind=("bool", "signed integer"))) == {"bool", "int8", "int16", "int32",
                                                                              "int64"}
    with pytest.raises(ValueError):
        info.dtypes(kind="complex numbers")
    d = info.default_dtypes(device=device)
    assert d["real floating"] == kiln.float32 and d["indexing"] == kiln.int64
    assert isinstance(info.default_device(), kiln.Device)


def test_from_dlpack_copy_and_to_device_stream(device):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = kiln.from_dlpack(x, copy=True, device=device)
    np.testing.assert_array_equal(host(t), x)
    assert kiln.from_dlpack(x, copy=None).shape == (2, 3)
    with pytest.raises(ValueError):
        kiln.from_dlpack(x, copy=False)
    assert t.to_device("cpu", stream=None).device == kiln.Device("cpu")
    with pytest.raises(ValueError):
        t.to_device("cpu", stream=1)


def test_bfloat16_is_ml_dtypes(device):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    t = kiln.asarray([1.5, -2.0, 3.0e38], device=device).astype("bfloat16")
    a = np.asarray(t)
    assert a.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(a.astype(np.float32), np.array([1.5, -2.0, 3.0e38], np.float32).astype(ml_dtypes.bfloat16).astype(np.float32))
    back = kiln.asarray(a, device=device)
    assert back.dtype == kiln.bfloat16
    np.testing.assert_array_equal(np.asarray(back.astype("float32")), a.astype(np.float32))
    assert kiln.bfloat16 == ml_dtypes.bfloat16 and kiln.ones(2, dtype=ml_dtypes.bfloat16).dtype == kiln.bfloat16


# ---- manipulation, searching, utility and linear algebra functions --------------------------------
ALL_DTYPES = ["bool", "uint8", "int32", "uint32", "int64", "float32", "int8", "int16", "uint16", "uint64"]


def any_array(draw, shape_strategy=nonempty):
    dtype = draw(st.sampled_from(ALL_DTYPES))
    shape = draw(shape_strategy)
    if dtype == "bool":
        return draw(hnp.arrays(np.bool_, shape))
    if dtype == "float32":
        return draw(f32_arrays(st.just(shape), -50, 50))
    return draw(ints(dtype, st.just(shape)))


@given(data=st.data())
@SETTINGS
def test_manipulation_against_numpy(device, data):
    x = any_array(data.draw)
    t = dev(x, device)
    n = x.ndim
    ax = data.draw(st.integers(-n, n - 1))
    eq = np.testing.assert_array_equal
    eq(host(kiln.flip(t, axis=ax)), np.flip(x, axis=ax))
    eq(host(kiln.flip(t)), np.flip(x))
    shift = data.draw(st.integers(-7, 7))
    eq(host(kiln.roll(t, shift, axis=ax)), np.roll(x, shift, axis=ax))
    eq(host(kiln.roll(t, shift)), np.roll(x, shift))
    dst = data.draw(st.integers(-n, n - 1))
    eq(host(kiln.moveaxis(t, ax, dst)), np.moveaxis(x, ax, dst))
    perm = data.draw(st.permutations(range(n)))
    eq(host(kiln.permute_dims(t, tuple(perm))), np.transpose(x, perm))
    reps = tuple(data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=3)))
    eq(host(kiln.tile(t, reps)), np.tile(x, reps))
    eq(host(kiln.expand_dims(t, axis=ax)), np.expand_dims(x, ax))
    eq(host(kiln.reshape(t, (-1,))), x.reshape(-1))
    eq(host(kiln.concat([t, t], axis=ax)), np.concatenate([x, x], axis=ax))
    eq(host(kiln.stack([t, t], axis=ax)), np.stack([x, x], axis=ax))
    for i, u in enumerate(kiln.unstack(t, axis=ax)):
        eq(host(u), np.take(x, i, axis=ax))
    ones = tuple(i for i, s in enumerate(x.shape) if s == 1)
    if ones:
        eq(host(kiln.squeeze(t, axis=ones)), np.squeeze(x, axis=ones))
    big = (2,) + x.shape
    eq(host(kiln.broadcast_to(t, big)), np.broadcast_to(x, big))
    idx = data.draw(hnp.arrays(np.int64, st.integers(0, 5), elements=st.integers(0, x.shape[ax] - 1)))
    eq(host(kiln.take(t, dev(idx, device), axis=ax)), np.take(x, idx, axis=ax))


@given(data=st.data())
@SETTINGS
def test_searching_and_utility_against_numpy(device, data):
    x = any_array(data.draw)
    t = dev(x, device)
    ax = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    keep = data.draw(st.booleans())
    eq = np.testing.assert_array_equal
    if x.dtype != np.bool_:
        eq(host(kiln.argmax(t, axis=ax, keepdims=keep)), np.argmax(x, axis=ax, keepdims=keep))
        eq(host(kiln.argmin(t, axis=ax, keepdims=keep)), np.argmin(x, axis=ax, keepdims=keep))
    eq(host(kiln.all(t, axis=ax, keepdims=keep)), np.all(x, axis=ax, keepdims=keep))
    eq(host(kiln.any(t, axis=ax, keepdims=keep)), np.any(x, axis=ax, keepdims=keep))
    for a, b in zip(kiln.nonzero(t), np.nonzero(x)):
        eq(host(a), b)
    cond = data.draw(hnp.arrays(np.bool_, x.shape))
    y = x[::-1] if x.ndim else x
    eq(host(kiln.where(dev(cond, device), t, dev(np.ascontiguousarray(y), device))), np.where(cond, x, y))
    if x.dtype.kind in "iuf":
        lo, hi = sorted(data.draw(st.lists(st.integers(0, 40), min_size=2, max_size=2)))
        eq(host(kiln.clip(t, lo, hi)), np.clip(x, lo, hi).astype(x.dtype))


@given(data=st.data())
@SETTINGS
def test_linear_algebra_against_numpy(device, data):
    m, k, n = (data.draw(st.integers(1, 6)) for _ in range(3))
    a = data.draw(f32_arrays(st.just((m, k)), -3, 3))
    b = data.draw(f32_arrays(st.just((k, n)), -3, 3))
    ta, tb = dev(a, device), dev(b, device)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(host(kiln.matmul(ta, tb)), a64 @ b64, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(host(kiln.tensordot(ta, tb, axes=1)), np.tensordot(a64, b64, axes=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(host(kiln.vecdot(ta, ta)), (a64 * a64).sum(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(host(kiln.matrix_transpose(ta)), a.T)


def test_real_imag_conj_of_real_tensors(device):
    x = np.array([[1.5, -2.0], [0.0, 3.0]], np.float32)
    t = dev(x, device)
    np.testing.assert_array_equal(host(kiln.real(t)), np.real(x))
    np.testing.assert_array_equal(host(kiln.imag(t)), np.imag(x))
    np.testing.assert_array_equal(host(kiln.conj(t)), np.conj(x))
    assert kiln.imag(t).dtype == kiln.float32 and kiln.imag(t).device == device
