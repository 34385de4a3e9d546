"""Wrong answers found by a NumPy oracle over the package (issue 21), each with the inputs that showed
it, against NumPy on both devices: integer and float `//` and `%`, advanced-index placement, 0-d
boolean masks, signbit/sinh/log1p/expm1 signs, vecdot, causal attention rows without keys, the
float64 rule per device, and argument errors that must be ValueError naming the op."""

import math

import numpy as np
import pytest

import kiln


def np_of(t):
    return np.asarray(t.astype("float32") if t.dtype == kiln.bfloat16 else t)


# --- // and % -----------------------------------------------------------------------------------


def test_integer_floordiv_and_mod_are_exact(device):
    a = np.array([16777217, 2147483647, -51963695 * 7 + 3, -(2**62) - 3, 7, -7, 0, 2**40 + 1], dtype=np.int64)
    b = np.array([1, 1, 7, 5, -2, 2, 3, -3], dtype=np.int64)
    ta, tb = kiln.asarray(a, device=device), kiln.asarray(b, device=device)
    np.testing.assert_array_equal(np.asarray(ta // tb), a // b)
    np.testing.assert_array_equal(np.asarray(ta % tb), a % b)
    a32 = np.array([-51963695 * 7 + 3, 16777217, -(2**31), 2**31 - 1, -5], dtype=np.int32)
    b32 = np.array([7, 3, 7, -7, 3], dtype=np.int32)
    ta, tb = kiln.asarray(a32, device=device), kiln.asarray(b32, device=device)
    assert (ta // tb).dtype == kiln.int32
    np.testing.assert_array_equal(np.asarray(ta // tb), a32 // b32)
    np.testing.assert_array_equal(np.asarray(ta % tb), a32 % b32)
    # Scalars on either side, and NumPy's zero-divisor result (0) without its warning.
    np.testing.assert_array_equal(np.asarray(ta // 4), a32 // 4)
    np.testing.assert_array_equal(np.asarray(100 % ta), 100 % a32)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(np.asarray(ta // 0), a32 // np.int32(0))
        np.testing.assert_array_equal(np.asarray(ta % 0), a32 % np.int32(0))


def test_random_integer_floordiv_and_mod(device, rng):
    for dt in ["int32", "int64", "uint32", "uint8"]:
        info = np.iinfo(dt)
        a = rng.integers(info.min // 2, info.max // 2, 1000, dtype=dt)
        b = rng.integers(info.min // 2 if info.min else 1, info.max // 2, 1000, dtype=dt)
        b[b == 0] = 3
        ta, tb = kiln.asarray(a, device=device), kiln.asarray(b, device=device)
        np.testing.assert_array_equal(np.asarray(ta // tb), a // b, err_msg=dt)
        np.testing.assert_array_equal(np.asarray(ta % tb), a % b, err_msg=dt)


def test_float_floordiv_and_mod_round_once(device, rng):
    # bf16: the quotient used to be rounded to bf16 before the floor (12.5 // 0.6953 gave 18).
    t = kiln.asarray([12.5], dtype="bfloat16", device=device)
    d = kiln.asarray([0.6953], dtype="bfloat16", device=device)
    assert np_of(t // d).tolist() == [17.0]
    a = (rng.standard_normal(2000) * 10).astype(np.float32)
    b = rng.standard_normal(2000).astype(np.float32)
    b[np.abs(b) < 1e-3] = 0.5
    ta, tb = kiln.asarray(a, device=device), kiln.asarray(b, device=device)
    # f32: NumPy's float32 results exactly (fmod-based, computed in f32).
    np.testing.assert_array_equal(np.asarray(ta // tb), a // b)
    np.testing.assert_array_equal(np.asarray(ta % tb), a % b)
    # f16: computed in f32 from the f16 inputs, rounded once to f16.
    a16, b16 = a.astype(np.float16), b.astype(np.float16)
    ta, tb = kiln.asarray(a16, device=device), kiln.asarray(b16, device=device)
    want_q = (a16.astype(np.float32) // b16.astype(np.float32)).astype(np.float16)
    want_r = (a16.astype(np.float32) % b16.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(np.asarray(ta // tb), want_q)
    np.testing.assert_array_equal(np.asarray(ta % tb), want_r)


def test_float_mod_specials(device):
    a = np.array([0.0, -0.0, 5.0, -5.0, 1.0, -1.0, np.inf, 3.0], dtype=np.float32)
    b = np.array([3.0, 3.0, -3.0, 3.0, np.inf, np.inf, 2.0, 0.0], dtype=np.float32)
    ta, tb = kiln.asarray(a, device=device), kiln.asarray(b, device=device)
    with np.errstate(all="ignore"):
        want_r, want_q = a % b, a // b
    got_r, got_q = np.asarray(ta % tb), np.asarray(ta // tb)
    np.testing.assert_array_equal(got_r, want_r)
    ok = ~np.isnan(want_r)  # the sign of a NaN carries nothing
    np.testing.assert_array_equal(np.signbit(got_r)[ok], np.signbit(want_r)[ok])
    np.testing.assert_array_equal(got_q, want_q)


# --- Indexing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        (0, slice(None), [1, 2, 0]),
        (slice(None), 0, [1, 2]),
        ([1, 0], slice(None), 2),
        (0, [1, 2], [0, 3]),
        ([1, 0], None, [2, 2]),
        (Ellipsis, 1, [0, 3]),
        (1, Ellipsis, [3, 2]),
        (0, slice(1, 3), [[0, 1], [2, 3]]),
    ],
)
def test_advanced_index_placement(device, key):
    # An integer counts as an advanced index when arrays are present: separated from the others by a
    # slice, None or ellipsis, the advanced dims go first (NumPy's rule).
    x = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    t = kiln.asarray(x, device=device)
    got, want = t[key], x[key]
    assert got.shape == want.shape, (key, got.shape, want.shape)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_issue_shape_advanced_index(device):
    x = np.arange(9 * 10 * 7, dtype=np.float32).reshape(9, 10, 7)
    t = kiln.asarray(x, device=device)
    idx = [0, 5, 2]
    assert t[0, :, idx].shape == x[0, :, idx].shape == (3, 10)
    np.testing.assert_array_equal(np.asarray(t[0, :, idx]), x[0, :, idx])


def test_zero_d_boolean_masks(device):
    x0 = kiln.asarray(np.float32(3.5), device=device)
    assert x0[False].shape == (0,)
    assert x0[True].shape == (1,)
    assert np.asarray(x0[True]).tolist() == [3.5]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = kiln.asarray(x, device=device)
    for key in [True, False, (Ellipsis, True), (0, True), (np.bool_(True),)]:
        assert t[key].shape == x[key].shape, key
        np.testing.assert_array_equal(np.asarray(t[key]), x[key])


# --- Signs of zero and NaN ----------------------------------------------------------------------


def test_signbit_of_negative_nan(device):
    x = np.array([-np.nan, np.nan, -0.0, 0.0, -np.inf, np.inf, -1.0, 1.0], dtype=np.float32)
    x[0] = np.float32(-np.nan)
    assert np.signbit(x[0])
    for dt in ["float32", "float16", "bfloat16"]:
        # Cast on the host: lavapipe's f32 -> bf16 cast loses the sign of a NaN (known difference).
        t = kiln.asarray(x).astype(dt).to_device(device)
        assert np.asarray(kiln.signbit(t)).tolist() == np.signbit(x).tolist(), dt
    ti = kiln.asarray(np.array([-3, 0, 4], dtype=np.int32), device=device)
    assert np.asarray(kiln.signbit(ti)).tolist() == [True, False, False]


@pytest.mark.parametrize("name", ["sinh", "log1p", "expm1"])
def test_negative_zero_is_kept(device, name):
    x = np.array([-0.0, 0.0, 1e-7, -1e-7, 1e-3, -0.5, 0.75, 3.0, -3.0, np.nan], dtype=np.float32)
    t = kiln.asarray(x, device=device)
    got = np.asarray(getattr(kiln, name)(t))
    with np.errstate(invalid="ignore"):
        want = getattr(np, name)(x.astype(np.float64))
    assert np.signbit(got[0]) and got[0] == 0, (name, got[0])
    assert not np.signbit(got[1]) and got[1] == 0
    # Accurate near 0 (the plain compositions lost every digit at 1e-7).
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0, equal_nan=True)


def test_log1p_expm1_edges(device):
    x = np.array([-1.0, -2.0, np.inf, -np.inf, 80.0, -80.0], dtype=np.float32)
    t = kiln.asarray(x, device=device)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(np.asarray(kiln.log1p(t))[:3], np.log1p(x[:3]), rtol=1e-6, equal_nan=True)
        np.testing.assert_allclose(np.asarray(kiln.expm1(t))[2:], np.expm1(x[2:].astype(np.float64)), rtol=1e-5)


# --- vecdot -------------------------------------------------------------------------------------


def test_vecdot_shapes_and_dtype(device):
    a = kiln.asarray(np.array([1.0], np.float32), device=device)
    b = kiln.asarray(np.array([1.0, 2.0, 3.0], np.float32), device=device)
    with pytest.raises(ValueError, match=r"\[vecdot\]"):
        kiln.vecdot(a, b)
    u = np.array([[200, 3, 7], [1, 2, 255]], dtype=np.uint8)
    v = np.array([2, 100, 9], dtype=np.uint8)
    got = kiln.vecdot(kiln.asarray(u, device=device), kiln.asarray(v, device=device))
    assert got.dtype == kiln.uint8
    np.testing.assert_array_equal(np.asarray(got), np.vecdot(u, v) if hasattr(np, "vecdot") else (u * v).sum(-1, dtype=np.uint8))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(np.asarray(kiln.vecdot(kiln.asarray(x, device=device), kiln.asarray(x[0], device=device))), (x * x[0]).sum(-1))


# --- Attention ----------------------------------------------------------------------------------


def test_causal_sdpa_rows_without_keys(device, rng):
    q = rng.standard_normal((1, 1, 5, 4)).astype(np.float32)
    k = rng.standard_normal((1, 1, 1, 4)).astype(np.float32)
    v = rng.standard_normal((1, 1, 1, 4)).astype(np.float32)
    out = np.asarray(kiln.asarray(q, device=device).sdpa(kiln.asarray(k, device=device), kiln.asarray(v, device=device), causal=True))
    np.testing.assert_array_equal(out[0, 0, :4], np.zeros((4, 4), np.float32))
    np.testing.assert_allclose(out[0, 0, 4], v[0, 0, 0], rtol=1e-6)


# --- float64 --------------------------------------------------------------------------------------


def test_float64_rule_is_one_error_on_a_gpu(gpu):
    assert kiln.float64 not in kiln.supported_dtypes(gpu)
    assert kiln.supported_dtypes("cpu") == tuple(kiln.Device("cpu").dtypes())
    assert kiln.float64 in kiln.supported_dtypes("cpu")
    assert not gpu.supports_dtype("float64") and gpu.supports_dtype(kiln.float32)
    x64 = np.arange(3, dtype=np.float64) / 3
    for make in [
        lambda: kiln.asarray(x64, device=gpu),
        lambda: kiln.asarray(x64, dtype="float64", device=gpu),
        lambda: kiln.asarray([1.0, 2.0], dtype=kiln.float64, device=gpu),
        lambda: kiln.zeros(3, dtype="float64", device=gpu),
        lambda: kiln.full((2,), 1.5, dtype="float64", device=gpu),
        lambda: kiln.asarray(kiln.asarray(x64), device=gpu),
        lambda: kiln.from_dlpack(x64, device=gpu),
        lambda: kiln.zeros_like(kiln.zeros(2, device=gpu), dtype="float64"),
    ]:
        with pytest.raises(TypeError, match="float64"):
            make()
    # Converted first, it works; Python floats take the default float32.
    assert kiln.asarray(x64.astype(np.float32), device=gpu).dtype == kiln.float32
    assert kiln.asarray([1.0, 2.0], device=gpu).dtype == kiln.float32


def test_float64_on_the_cpu(device):
    if device.is_cpu:
        t = kiln.asarray(np.arange(3, dtype=np.float64), device=device)
        assert t.dtype == kiln.float64
    assert set(kiln.supported_dtypes(device)) == set(device.dtypes())


# --- Arguments ----------------------------------------------------------------------------------


def test_negative_sizes_are_value_errors(device):
    t = kiln.zeros((2, 3), device=device)
    with pytest.raises(ValueError, match=r"\[pad\]"):
        t.pad([(-1, 0)])
    with pytest.raises(ValueError, match=r"\[linspace\]"):
        kiln.linspace(0, 1, num=-1, device=device)


def test_custom_kernel_arguments(gpu):
    src = """
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < arrayLength(&out)) { out[g.x] = a[g.x] + 1.0; }
}
"""
    a = kiln.asarray(np.arange(4, dtype=np.float32), device=gpu)
    with pytest.raises(ValueError, match=r"\[custom_kernel\]"):
        gpu.custom_kernel(src, "main", [a], [((4,), "float32")], (-1, 1, 1))
    with pytest.raises(ValueError, match=r"\[custom_kernel\].*binding 2"):
        gpu.custom_kernel(src, "main", [a, a], [((4,), "float32")], (1, 1, 1))
    (out,), _, _ = gpu.custom_kernel(src, "main", [a], [((4,), "float32")], (1, 1, 1))
    assert np.asarray(out).tolist() == [1.0, 2.0, 3.0, 4.0]
    backend = kiln.Backend(device=gpu)
    k = backend.compile_kernel(src)
    buf = backend.allocate((4,), "float32")
    r = backend.execute_kernel(k, -2, None, [buf, np.arange(4, dtype=np.float32)])
    assert not r.success and "ValueError" in r.error and "[execute_kernel]" in r.error
    r = backend.execute_kernel(k, 1, None, [buf, np.arange(4, dtype=np.float32), np.ones(4, np.float32)])
    assert not r.success and "binding 2" in r.error
    assert math.isfinite(backend.execute_kernel(k, 1, None, [buf, np.arange(4, dtype=np.float32)]).execution_time_ms)
