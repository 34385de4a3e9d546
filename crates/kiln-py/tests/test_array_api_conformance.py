"""What array-api-tests (2023.12, CPU) still found (issue 38), each case on both devices where the
function runs there: integer bitwise ops and shifts of 0-d tensors, `unique_*` of a 0-d input,
exact `int()`/`str()` of 64-bit integers, `acosh` below 1, the inspection object's dtypes,
`expand_dims`' positional axis, `sign` of zeros and boolean masks with dims of size 0. Also the
distribution name the package installs under."""

import math
import pathlib
import re

import numpy as np
import pytest

import kiln

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bitwise_and_shifts_of_0d_tensors_stay_0d(device, dtype):
    a = kiln.asarray(np.array(6, dtype=dtype), device=device)
    b = kiln.asarray(np.array(3, dtype=dtype), device=device)
    for f, ref in [(kiln.bitwise_and, 6 & 3), (kiln.bitwise_or, 6 | 3), (kiln.bitwise_xor, 6 ^ 3),
                   (kiln.bitwise_left_shift, 6 << 3), (kiln.bitwise_right_shift, 6 >> 3)]:
        r = f(a, b)
        assert r.shape == () and r.dtype == a.dtype, (f.__name__, r.shape)
        assert int(r) == ref
    r = kiln.bitwise_invert(a)
    assert r.shape == () and int(r) == int(np.invert(np.array(6, dtype=dtype)))
    # The in-place forms keep the 0-d shape (they raised when the result came back as shape (1,)).
    for op in ["__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"]:
        c = kiln.asarray(np.array(6, dtype=dtype), device=device)
        c = getattr(c, op)(b)
        assert c.shape == (), op


def test_unique_of_a_0d_input(device):
    x = kiln.asarray(np.array(2.5, np.float32), device=device)
    inv = kiln.unique_inverse(x)
    assert inv.values.shape == (1,) and inv.inverse_indices.shape == ()
    assert int(inv.inverse_indices) == 0
    allr = kiln.unique_all(x)
    assert allr.inverse_indices.shape == () and allr.indices.shape == (1,) and allr.counts.shape == (1,)
    assert float(allr.values[0]) == 2.5 and int(allr.counts[0]) == 1


def test_int_and_str_of_64_bit_integers_are_exact(device):
    big_u = 2**64 - 3
    t = kiln.asarray(np.array(big_u, np.uint64), device=device)
    assert int(t) == big_u and t.__index__() == big_u
    assert int(kiln.asarray(np.array(2**63, np.uint64), device=device)) == 2**63
    big_i = 2**53 + 1
    t = kiln.asarray(np.array([big_i, -big_i - 2], np.int64), device=device)
    assert str(t) == f"[ {big_i} {-big_i - 2}]"
    assert str(t[0]) == str(big_i) and str(kiln.asarray(np.array(big_u, np.uint64), device=device)) == str(big_u)
    # Python's int() semantics for floats: truncation, and NaN/inf raise.
    assert int(kiln.asarray(-2.7, device=device)) == -2
    with pytest.raises(ValueError):
        int(kiln.asarray(math.nan, device=device))
    with pytest.raises(OverflowError):
        int(kiln.asarray(math.inf, device=device))


def test_str_matches_numpy(device):
    a = np.array([[1.5, -2.0], [3.25, 1e-3]], np.float32)
    assert str(kiln.asarray(a, device=device)) == str(a)


def test_acosh_below_one_is_nan(device):
    dt = "float64" if device.is_cpu else "float32"
    x = np.array([-1e300 if dt == "float64" else -1e38, -1e200 if dt == "float64" else -1e30, -1e10, -2.0,
                  -1.0, 0.0, 0.5, 1.0, 2.0, np.inf, -np.inf, np.nan], dt)
    r = np.asarray(kiln.acosh(kiln.asarray(x, device=device)))
    with np.errstate(invalid="ignore"):
        ref = np.arccosh(x)
    np.testing.assert_array_equal(np.isnan(r), np.isnan(ref))
    np.testing.assert_allclose(r[~np.isnan(ref)], ref[~np.isnan(ref)], rtol=1e-6)


def test_namespace_info_dtypes_are_the_standards():
    info = kiln.__array_namespace_info__()
    standard = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32",
                "float64", "complex64", "complex128"}
    for kind in [None, "real floating", "numeric"]:
        names = set(info.dtypes(device=kiln.Device("cpu"), kind=kind))
        assert names <= standard, names - standard
    assert set(info.dtypes(device="cpu", kind="real floating")) == {"float32", "float64"}
    # kiln's own list keeps its extra floats.
    assert kiln.float16 in kiln.supported_dtypes("cpu") and kiln.bfloat16 in kiln.supported_dtypes("cpu")


def test_expand_dims_takes_axis_positionally(device):
    x = kiln.ones((2, 3), device=device)
    assert kiln.expand_dims(x, 1).shape == (2, 1, 3)
    assert kiln.expand_dims(x, -1).shape == (2, 3, 1)
    assert kiln.expand_dims(x, axis=0).shape == (1, 2, 3)


def test_sign_of_zeros_is_positive_zero(device):
    for dt in (["float32", "float64"] if device.is_cpu else ["float32"]):
        x = np.array([-0.0, 0.0, -3.0, 2.0, np.nan, -np.inf], dt)
        r = np.asarray(kiln.sign(kiln.asarray(x, device=device)))
        ref = np.sign(x)
        np.testing.assert_array_equal(r, ref)
        np.testing.assert_array_equal(np.signbit(r[:2]), [False, False])
    i = kiln.asarray(np.array([-4, 0, 9], np.int32), device=device)
    s = kiln.sign(i)
    assert s.dtype == kiln.int32 and np.asarray(s).tolist() == [-1, 0, 1]


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0), (2, 0, 4)])
def test_boolean_mask_with_zero_size_dims(device, shape):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = kiln.asarray(a, device=device)
    m = np.zeros(shape, bool)
    np.testing.assert_array_equal(np.asarray(t[m]), a[m])
    assert t[kiln.asarray(m, device=device)].shape == a[m].shape
    # A mask over the leading dims only.
    m1 = np.zeros(shape[:1], bool)
    assert t[m1].shape == a[m1].shape


@pytest.mark.parametrize("shape, mask", [((0, 1), (0, 0)), ((2, 1), (2, 0)), ((3, 2, 5), (0, 2)), ((1,), (0,))])
def test_boolean_mask_dims_of_size_0_match_any_size(device, shape, mask):
    """A mask dim of size 0 selects nothing whatever the tensor's dim (NumPy's rule; array-api-tests
    draws such masks): `tensor of shape (0, 1)[mask of shape (0, 0)]` raised IndexError."""
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = kiln.asarray(a, device=device)
    m = np.zeros(mask, bool)
    assert t[m].shape == a[m].shape
    assert t[kiln.asarray(m, device=device)].shape == a[m].shape
    with pytest.raises(IndexError):
        t[np.zeros((shape[0] + 1,), bool)]


def test_distribution_name_is_not_the_taken_kiln():
    """`kiln` on PyPI is another project: the package installs as the name pyproject.toml sets (read
    from there, so renaming stays one line) and still imports as `kiln`."""
    importlib_metadata = pytest.importorskip("importlib.metadata")
    text = (pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text()
    name = re.search(r'^\[project\]\s*(?:#.*\n|\s)*name = "([^"]+)"', text, re.M).group(1)
    assert name.lower() != "kiln"
    assert importlib_metadata.version(name) == kiln.__version__
    # A wheel install records which distribution provides `kiln` (an editable one records nothing).
    dists = importlib_metadata.packages_distributions().get("kiln", [])
    assert all(d.lower().replace("_", "-") == name for d in dists), dists
