"""kiln.compile (issue 26): compiled functions give the eager results (bit for bit on the CPU and
for integers; GPU floats within a few ulps: FMA contraction, summation order), retrace per
signature, fall back to eager for what the tracer cannot follow, and re-raise the function's errors."""

import numpy as np
import pytest

import kiln
from kiln.pydotcompute.backends.metal import MetalBackend


def _check(f, args, device, rtol):
    c = kiln.compile(f)
    eager = f(*args)
    for _ in range(2):
        got = c(*args)
        if device.is_cpu or rtol == 0:
            np.testing.assert_array_equal(np.asarray(got), np.asarray(eager))
        else:
            np.testing.assert_allclose(np.asarray(got), np.asarray(eager), rtol=rtol, atol=rtol)
    return c


def test_chains_and_rows(device, rng):
    a = kiln.asarray(rng.standard_normal((9, 130)).astype(np.float32), device=device)
    b = kiln.asarray(rng.standard_normal((130,)).astype(np.float32), device=device)

    @kiln.compile
    def hypot(x, y):
        return (x * x + y * y).sqrt()

    np.testing.assert_allclose(np.asarray(hypot(a, b)), np.asarray((a * a + b * b).sqrt()), rtol=1e-6)
    assert hypot.stats()["groups"] == 1 and hypot.__name__ == "hypot"

    def rmsnorm(x, w):
        return x * (x * x).mean(axis=-1, keepdims=True).__add__(1e-5).rsqrt() * w

    c = _check(rmsnorm, (a, b), device, 1e-5)
    assert c.stats()["groups"] == 1

    def softmax(x):
        e = (x - x.max(axis=-1, keepdims=True)).exp()
        return e / e.sum(axis=-1, keepdims=True), e

    _check(softmax, (a,), device, 1e-5)


def test_ints_exact_and_retrace(device, rng):
    f = lambda x, y: ((x * y + 3) // (y.abs() + 1), x > y)  # noqa: E731
    c = kiln.compile(f)
    for shape in [(4, 5), (11,), (4, 5)]:
        x = kiln.asarray(rng.integers(-50, 50, shape).astype(np.int32), device=device)
        y = kiln.asarray(rng.integers(-50, 50, shape).astype(np.int32), device=device)
        got, want = c(x, y), f(x, y)
        assert isinstance(got, tuple) and len(got) == 2
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert c.stats()["traces"] == 2


def test_fallback_and_errors(device, rng, capfd):
    x = kiln.asarray(rng.standard_normal((3, 4)).astype(np.float32), device=device)

    def branchy(t):
        # A Python `if` on a tensor's value: the tracer cannot follow it.
        return t.exp() if float(t.sum()) > 0 else -t

    c = kiln.compile(branchy)
    for t in (x, -x):
        np.testing.assert_array_equal(np.asarray(c(t)), np.asarray(branchy(t)))
    assert c.stats()["eager"] == 1
    assert "eagerly" in capfd.readouterr().err

    def bad(t):
        return t + kiln.ones((5,), device=device)

    with pytest.raises(ValueError, match=r"add"):
        kiln.compile(bad)(x)

    def raises(t):
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        kiln.compile(raises)(x)
    # Not tensors in, or not tensors out: the function runs as it is.
    assert kiln.compile(lambda t, k: t * k)(x, 2.0).shape == (3, 4)
    assert kiln.compile(lambda t: t.shape)(x) == (3, 4)


def test_pydotcompute_compile_kernel_fuses(rng):
    b = MetalBackend()
    k = b.compile_kernel(lambda x, y: kiln.exp(-(x * x)) + y)
    x = rng.standard_normal(1000).astype(np.float32)
    y = rng.standard_normal(1000).astype(np.float32)
    out = k(x, y)
    np.testing.assert_allclose(b.copy_to_host(out), np.exp(-(x.astype(np.float64) ** 2)) + y, rtol=1e-5, atol=1e-6)
    assert k(x, y).shape == (1000,)
