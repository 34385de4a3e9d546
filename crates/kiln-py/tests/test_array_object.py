"""The array API standard's array object beyond the operators' out-of-place forms: in-place operators
(`x += y` keeps `x`'s dtype and shape, as the standard asks, and updates the tensor object itself),
`__complex__`, and NumPy ufuncs called on tensors (`np.sqrt(t)`, `ndarray + t`); on the CPU and
the GPU."""

import numpy as np
import pytest

import kiln

INPLACE = [
    ("+=", lambda a, b: a + b), ("-=", lambda a, b: a - b), ("*=", lambda a, b: a * b),
    ("//=", lambda a, b: a // b), ("%=", lambda a, b: a % b), ("**=", lambda a, b: a ** b),
    ("&=", lambda a, b: a & b), ("|=", lambda a, b: a | b), ("^=", lambda a, b: a ^ b),
    ("<<=", lambda a, b: a << b), (">>=", lambda a, b: a >> b),
]


@pytest.mark.parametrize("op,ref", INPLACE, ids=[o for o, _ in INPLACE])
def test_inplace_integer_operators(device, op, ref):
    a = np.array([[5, -7, 9], [12, 3, -1]], np.int32)
    b = np.array([2, 3, 1], np.int32)
    x = kiln.asarray(a, device=device)
    alias = x
    ns = {"x": x, "y": kiln.asarray(b, device=device)}
    exec(f"x {op} y", ns)
    assert ns["x"] is alias  # the same tensor object, updated
    assert alias.dtype == kiln.int32 and alias.shape == (2, 3) and alias.device == device
    np.testing.assert_array_equal(np.asarray(alias), ref(a, b))


def test_inplace_float_operators_and_views(device):
    x = kiln.asarray(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)
    view = x[0]
    alias = x
    x += 1
    x /= 2
    x *= kiln.asarray(np.array([1, 2, 4], np.float32), device=device)
    np.testing.assert_array_equal(np.asarray(alias), (np.arange(6, dtype=np.float32).reshape(2, 3) + 1) / 2 * [1, 2, 4])
    # Copy-on-write, as t[key] = v: a view taken earlier keeps the old values.
    np.testing.assert_array_equal(np.asarray(view), [0, 1, 2])
    m = kiln.asarray(np.eye(3, dtype=np.float32) * 2, device=device)
    x @= m
    assert x is alias and x.shape == (2, 3)
    np.testing.assert_allclose(np.asarray(x), (np.arange(6).reshape(2, 3) + 1) / 2 * [1, 2, 4] * 2)


def test_inplace_keeps_dtype_and_shape(device):
    x = kiln.asarray(np.array([1, 2, 3], np.int32), device=device)
    with pytest.raises(TypeError, match="dtype"):
        x += 1.5  # NumPy: same_kind casting error; out of place this is float32
    with pytest.raises(TypeError, match="dtype"):
        x /= 2
    with pytest.raises(ValueError, match="shape"):
        x += kiln.ones((2, 3), dtype=kiln.int32, device=device)
    np.testing.assert_array_equal(np.asarray(x), [1, 2, 3])  # unchanged after the errors
    b = kiln.asarray(np.array([True, False]), device=device)
    b &= kiln.asarray(np.array([True, True]), device=device)
    b |= False
    np.testing.assert_array_equal(np.asarray(b), [True, False])


def test_complex(device):
    assert kiln.Tensor.__complex__
    assert complex(kiln.asarray(2.5, device=device)) == 2.5 + 0j
    assert complex(kiln.asarray([3], dtype=kiln.int32, device=device)) == 3 + 0j
    with pytest.raises((TypeError, ValueError)):
        complex(kiln.ones((2,), device=device))


@pytest.mark.parametrize("uf,name", [(np.sqrt, "sqrt"), (np.exp, "exp"), (np.negative, "negative"),
                                     (np.absolute, "abs"), (np.arcsin, "asin"), (np.floor, "floor"),
                                     (np.isnan, "isnan"), (np.square, "square")])
def test_numpy_unary_ufuncs_run_on_the_device(device, uf, name):
    a = np.array([0.25, 0.5, -0.75], np.float32)
    t = kiln.asarray(a, device=device)
    got = uf(t)
    assert isinstance(got, kiln.Tensor) and got.device == device
    np.testing.assert_allclose(np.asarray(got), getattr(kiln, name)(t).cpu(), rtol=0, atol=0, equal_nan=True)
    with np.errstate(invalid="ignore"):
        want = uf(a)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-7, equal_nan=True)


def test_numpy_binary_ufuncs_and_operators(device):
    a = np.array([1.0, 2.0, 3.0], np.float32)
    t = kiln.asarray(np.array([3.0, 2.0, 1.0], np.float32), device=device)
    for got, want in [(a + t, a + [3, 2, 1]), (a - t, a - [3, 2, 1]), (np.multiply(a, t), a * [3, 2, 1]),
                      (a / t, a / [3, 2, 1]), (a ** t, a ** [3, 2, 1]), (np.maximum(a, t), [3, 2, 3]),
                      (np.arctan2(t, a), np.arctan2([3, 2, 1], a)), (np.add(t, 1), [4, 3, 2])]:
        assert isinstance(got, kiln.Tensor) and got.device == device
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    for got, want in [(a < t, [True, False, False]), (np.less(a, t), [True, False, False]),
                      (a >= t, [False, True, True]), (a == t, [False, True, False])]:
        assert isinstance(got, kiln.Tensor) and got.dtype == kiln.bool
        np.testing.assert_array_equal(np.asarray(got), want)
    # int32 array with a float32 tensor: kiln's promotion, as for t.__radd__.
    assert (np.array([1, 2, 3], np.int32) + t).dtype == (t + kiln.asarray(np.array([1, 2, 3], np.int32), device=device)).dtype


def test_numpy_ufuncs_kiln_cannot_do_raise(device):
    t = kiln.asarray(np.array([1.0, 2.0], np.float32), device=device)
    with pytest.raises(TypeError):
        np.add(t, t, out=np.empty(2, np.float32))
    with pytest.raises(TypeError):
        np.add.reduce(t)
    with pytest.raises(TypeError):
        np.fmax(t, t)


def test_inplace_on_an_argument_of_a_compiled_function(device):
    """kiln.compile cannot trace an update of an argument: such a function runs as it is, so the
    caller's tensor is updated on every call, as without compile."""

    def f(x):
        x += 1
        return x * 2

    c = kiln.compile(f)
    for _ in range(3):
        x = kiln.asarray(np.ones(3, np.float32), device=device)
        np.testing.assert_array_equal(np.asarray(c(x)), [4, 4, 4])
        np.testing.assert_array_equal(np.asarray(x), [2, 2, 2])
    # A function that only reads its arguments is still traced and fused.
    g = kiln.compile(lambda x: (x + 1) * 2)
    x = kiln.asarray(np.ones(3, np.float32), device=device)
    np.testing.assert_array_equal(np.asarray(g(x)), [4, 4, 4])
    np.testing.assert_array_equal(np.asarray(x), [1, 1, 1])
    assert g.stats()["groups"] >= 1
