"""Every op against an f64 NumPy reference on random inputs, on the CPU and on the GPU: odd sizes,
broadcasting, non-contiguous views, empty tensors, NaN and infinities."""

import math

import numpy as np
import pytest
from conftest import assert_close

import kiln

_erf = np.vectorize(math.erf)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


UNARY = {
    "neg": (lambda x: -x, "basic", None),
    "abs": (np.abs, "basic", None),
    "sign": (np.sign, "basic", None),
    "sqrt": (np.sqrt, "basic", "pos"),
    "rsqrt": (lambda x: 1 / np.sqrt(x), "float", "pos"),
    "exp": (np.exp, "float", None),
    "log": (np.log, "float", "pos"),
    "sin": (np.sin, "float", None),
    "cos": (np.cos, "float", None),
    "tanh": (np.tanh, "float", None),
    "square": (np.square, "basic", None),
    "recip": (lambda x: 1 / x, "basic", "pos"),
    "floor": (np.floor, "basic", None),
    "ceil": (np.ceil, "basic", None),
    "round": (np.round, "basic", None),
    "relu": (lambda x: np.maximum(x, 0), "basic", None),
    "sigmoid": (_sigmoid, "float", None),
    "silu": (lambda x: x * _sigmoid(x), "float", None),
    "gelu": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))), "float", None),
    "gelu_erf": (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), "float", None),
}
# The rest of kiln's unary op table (logical_not takes bool, not these float inputs): NumPy's
# function of the same name (NaN where it is undefined).
UNARY.update({name: (getattr(np, name), "float", None)
              for name in kiln._kiln.UNARY_OPS if name not in UNARY and name != "logical_not"})


def _stored(values, dtype):
    """An f64 reference rounded to the output dtype, as kiln stores it (an f16 exp above 11.09 is
    inf, not the f64 value)."""
    with np.errstate(over="ignore"):
        return np.asarray(values).astype(dtype).astype(np.float64)


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_unary(device, rng, name, dtype):
    ref, kind, domain = UNARY[name]
    x = rng.standard_normal((5, 33)) * 3
    if domain == "pos":
        x = np.abs(x) + 0.1
    x = x.astype(dtype)
    t = kiln.asarray(x, device=device)
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = _stored(ref(x.astype(np.float64)), dtype)
    assert_close(getattr(t, name)(), expected, dtype, kind)
    # A non-contiguous view (the transpose) gives the transposed result.
    assert_close(getattr(t.T, name)(), expected.T, dtype, kind)


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "tanh", "sigmoid", "relu", "abs", "floor"])
def test_unary_nan_inf_and_empty(device, name):
    ref = UNARY[name][0]
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5], dtype=np.float32)
    with np.errstate(all="ignore"):
        expected = ref(x.astype(np.float64))
    assert_close(getattr(kiln.asarray(x, device=device), name)(), expected, "float32", "float")
    e = kiln.zeros((0, 3), device=device)
    assert getattr(e, name)().shape == (0, 3)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_unary_integers(device, rng, dtype):
    x = rng.integers(0 if dtype == "uint8" else -50, 50, (7, 9)).astype(dtype)
    t = kiln.asarray(x, device=device)
    assert_close(t.square(), (x.astype(np.int64) ** 2).astype(dtype))
    if dtype != "uint8":
        assert_close(t.abs(), np.abs(x))
        assert_close(-t, -x)
    with np.errstate(invalid="ignore"):
        assert_close(t.sqrt(), np.sqrt(x.astype(np.float64)), "float32", "float")


BINARY = {
    "add": (np.add, "__add__"),
    "sub": (np.subtract, "__sub__"),
    "mul": (np.multiply, "__mul__"),
    "div": (np.divide, "__truediv__"),
    "maximum": (np.maximum, None),
    "minimum": (np.minimum, None),
    "pow": (np.power, "__pow__"),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_binary_broadcast(device, rng, name, dtype):
    ref, op = BINARY[name]
    a = rng.standard_normal((4, 1, 17)).astype(dtype)
    b = rng.standard_normal((3, 1)).astype(dtype)
    if name == "pow":
        a = np.abs(a) + 0.5
    ta, tb = kiln.asarray(a, device=device), kiln.asarray(b, device=device)
    expected = ref(a.astype(np.float64), b.astype(np.float64))
    assert_close(getattr(ta, name)(tb), expected, dtype, "float")
    if op:
        assert_close(getattr(ta, op)(tb), expected, dtype, "float")


def test_operators_and_scalars(device, rng):
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    ta, tb = kiln.asarray(a, device=device), kiln.asarray(b, device=device)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert_close(ta + tb, a64 + b64)
    assert_close(ta - 2, a64 - 2)
    assert_close(2 - ta, 2 - a64)
    assert_close(3.5 * ta, 3.5 * a64)
    assert_close(ta / tb, a64 / b64, kind="float")
    assert_close(1 / tb, 1 / b64, kind="float")
    assert_close(abs(ta), np.abs(a64))
    assert_close(-ta, -a64)
    assert_close(+ta, a64)
    assert_close(ta**2, a64**2, kind="float")
    assert_close(2**ta, 2**a64, kind="float")
    assert_close(ta // tb, np.floor_divide(a64, b64), kind="float")
    assert_close(ta % tb, np.remainder(a64, b64), kind="float")
    assert_close(ta @ tb.T, a64 @ b64.T, kind="float")
    # NumPy arrays on either side become tensors.
    assert_close(a + tb, a64 + b64)
    assert_close(ta * b, a64 * b64)
    for op in ["__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"]:
        r = getattr(ta, op)(tb)
        assert r.dtype == kiln.bool
        np.testing.assert_array_equal(np.asarray(r), getattr(a, op)(b))
    m = (ta > 0) & (tb > 0) | ~(ta < -1)
    np.testing.assert_array_equal(np.asarray(m), (a > 0) & (b > 0) | ~(a < -1))
    np.testing.assert_array_equal(np.asarray((ta > 0) ^ (tb > 0)), (a > 0) ^ (b > 0))


def test_scalar_promotion(device):
    i = kiln.arange(5, device=device)
    assert i.dtype == kiln.int64
    assert (i + 1).dtype == kiln.int64
    assert (i * 1.5).dtype == kiln.float32
    assert_close(i * 1.5, np.arange(5) * 1.5)
    assert (i / 2).dtype == kiln.float32
    f16 = kiln.ones((3,), dtype="float16", device=device)
    assert (f16 + 1.0).dtype == kiln.float16
    assert (kiln.asarray([True, False], device=device) + 1).dtype == kiln.int64
    assert (kiln.ones((2,), dtype="int32", device=device) + kiln.ones((2,), dtype="uint32", device=device)).dtype == kiln.int64


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int64"])
def test_binary_integers(device, rng, dtype):
    lo = 0 if dtype == "uint8" else -20
    a = rng.integers(lo, 20, (5, 8)).astype(dtype)
    b = rng.integers(1, 9, (8,)).astype(dtype)
    ta, tb = kiln.asarray(a, device=device), kiln.asarray(b, device=device)
    assert_close(ta + tb, (a + b).astype(dtype))
    assert_close(ta * tb, (a * b).astype(dtype))
    assert_close(ta.maximum(tb), np.maximum(a, b))
    assert_close(ta // tb, np.floor_divide(a, b))
    assert_close(ta % tb, np.remainder(a, b))
    assert_close(ta / tb, a / b, "float32", "float")


def test_binary_nan(device):
    a = np.array([np.nan, 1.0, np.inf, -np.inf, 2.0], np.float32)
    b = np.array([1.0, np.nan, 1.0, np.inf, -np.inf], np.float32)
    ta, tb = kiln.asarray(a, device=device), kiln.asarray(b, device=device)
    for name in ["add", "mul", "maximum", "minimum"]:
        with np.errstate(all="ignore"):
            assert_close(getattr(ta, name)(tb), getattr(np, {"add": "add", "mul": "multiply"}.get(name, name))(a, b))
    np.testing.assert_array_equal(np.asarray(ta == ta), a == a)
    # NaN is unequal to itself on every backend (kiln writes `ne` as !(a == b) for that reason): a
    # regression here is a failure, not an expected one.
    np.testing.assert_array_equal(np.asarray(ta != ta), a != a)


REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


@pytest.mark.parametrize("name", sorted(REDUCE))
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
def test_reductions(device, rng, name, axis):
    x = rng.standard_normal((3, 7, 5)).astype(np.float32)
    if name == "prod":
        x = 0.5 + np.abs(x) * 0.5
    t = kiln.asarray(x, device=device)
    expected = REDUCE[name](x.astype(np.float64), axis=axis)
    assert_close(getattr(t, name)(axis=axis), expected, kind="float")
    kd = getattr(t, name)(axis=axis, keepdims=True)
    assert kd.shape == REDUCE[name](x, axis=axis, keepdims=True).shape
    # On a transposed (non-contiguous) view.
    assert_close(getattr(t.T, name)(axis=axis), REDUCE[name](x.astype(np.float64).T, axis=axis), kind="float")


def test_var_std_arg_cumsum(device, rng):
    x = rng.standard_normal((6, 11)).astype(np.float32)
    x[2, 3] = 5.0
    t = kiln.asarray(x, device=device)
    x64 = x.astype(np.float64)
    assert_close(t.var(axis=1), x64.var(axis=1), kind="float")
    assert_close(t.var(axis=0, correction=1), x64.var(axis=0, ddof=1), kind="float")
    assert_close(t.std(), x64.std(), kind="float")
    assert_close(t.argmax(axis=1), x.argmax(axis=1))
    assert_close(t.argmin(axis=0), x.argmin(axis=0))
    assert t.argmax().item() == x.argmax()
    assert_close(t.cumsum(axis=1), np.cumsum(x64, axis=1), kind="float")
    i = kiln.asarray(np.arange(10, dtype=np.int32), device=device)
    assert i.sum().dtype == kiln.int64 and i.sum().item() == 45
    assert_close(i.cumsum(), np.cumsum(np.arange(10)))


def test_reduction_nan_and_empty(device):
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], np.float32)
    t = kiln.asarray(x, device=device)
    assert_close(t.sum(axis=1), x.sum(axis=1))
    assert_close(t.max(axis=1), x.max(axis=1))
    assert t.argmax(axis=1).tolist() == [1, 2]
    e = kiln.zeros((0, 4), device=device)
    assert_close(e.sum(axis=0), np.zeros(4))
    with pytest.raises(ValueError):
        e.max(axis=0)


@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((7,), (7, 4)), ((2, 3, 5), (5, 6)), ((2, 1, 4, 3), (5, 3, 2)), ((9,), (9,))])
def test_matmul(device, rng, shapes):
    a = rng.standard_normal(shapes[0]).astype(np.float32)
    b = rng.standard_normal(shapes[1]).astype(np.float32)
    ta, tb = kiln.asarray(a, device=device), kiln.asarray(b, device=device)
    assert_close(ta @ tb, a.astype(np.float64) @ b.astype(np.float64), kind="float")
    assert_close(kiln.matmul(ta, tb), a.astype(np.float64) @ b.astype(np.float64), kind="float")


def test_matmul_views_linear_dot(device, rng):
    a = rng.standard_normal((6, 4)).astype(np.float32)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    ta, tw, tbias = (kiln.asarray(v, device=device) for v in (a, w, bias))
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    assert_close(ta @ tw.T, a64 @ w64.T, kind="float")
    assert_close(ta.linear(tw, tbias), a64 @ w64.T + bias, kind="float")
    assert_close(ta[:, 0].dot(ta[:, 1]), a64[:, 0] @ a64[:, 1], kind="float")
    i = kiln.asarray(np.arange(6, dtype=np.int32).reshape(2, 3), device=device)
    assert_close(i @ i.T, np.arange(6).reshape(2, 3) @ np.arange(6).reshape(2, 3).T)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_softmax_log_softmax(device, rng, dtype):
    x = (rng.standard_normal((3, 4, 37)) * 4).astype(np.float32)
    t = kiln.asarray(x, device=device).astype(dtype)
    x64 = np.asarray(t.astype("float32")).astype(np.float64)
    for axis in [-1, 1, 0]:
        assert_close(t.softmax(axis), _softmax(x64, axis), dtype, "float")
        assert_close(t.log_softmax(axis), np.log(_softmax(x64, axis)), dtype, "float")
    m = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]], np.float32)
    assert_close(kiln.asarray(m, device=device).softmax(), [[_softmax(np.array([0.0, 1.0]), 0)[0], 0, _softmax(np.array([0.0, 1.0]), 0)[1]], [np.nan] * 3])


def test_norms(device, rng):
    x = rng.standard_normal((4, 5, 24)).astype(np.float32)
    w = rng.standard_normal(24).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    t, tw, tb = (kiln.asarray(v, device=device) for v in (x, w, b))
    x64 = x.astype(np.float64)
    rms = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-6) * w
    assert_close(t.rms_norm(tw, 1e-6), rms, kind="float")
    mu = x64.mean(-1, keepdims=True)
    ln = (x64 - mu) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w + b
    assert_close(t.layer_norm(tw, tb, 1e-5), ln, kind="float")
    assert_close(t.layer_norm(tw), (x64 - mu) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w, kind="float")
    # A permuted (non-contiguous) input.
    tp = kiln.asarray(x.transpose(1, 0, 2).copy(), device=device).permute(1, 0, 2)
    assert_close(tp.rms_norm(tw, 1e-6), rms, kind="float")


def _rope_ref(x, offset, theta, interleaved):
    b, h, t, d = x.shape
    inv = theta ** (-np.arange(0, d, 2) / d)
    ang = (np.arange(t) + offset)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope(device, rng, interleaved):
    x = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    t = kiln.asarray(x, device=device)
    assert_close(t.rope(offset=3, theta=10000.0, interleaved=interleaved), _rope_ref(x.astype(np.float64), 3, 10000.0, interleaved), kind="float")
    cos, sin = kiln.rope_tables(5, 8, 3, device=device)
    assert_close(t.rope_with_tables(cos, sin, interleaved), _rope_ref(x.astype(np.float64), 3, 10000.0, interleaved), kind="float")


def _sdpa_ref(q, k, v, causal, scale, softcap=None, window=None):
    b, hq, tq, d = q.shape
    hk, tk = k.shape[1], k.shape[2]
    k = np.repeat(k, hq // hk, axis=1)
    v = np.repeat(v, hq // hk, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    pos = np.arange(tq)[:, None] + tk - tq
    if causal:
        s = np.where(np.arange(tk)[None, :] > pos, -np.inf, s)
    if window is not None:
        s = np.where(np.arange(tk)[None, :] <= pos - window, -np.inf, s)
    return _softmax(s, -1) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_gqa(device, rng, causal):
    q = rng.standard_normal((2, 4, 5, 16)).astype(np.float32)
    k = rng.standard_normal((2, 2, 7, 16)).astype(np.float32)
    v = rng.standard_normal((2, 2, 7, 8)).astype(np.float32)
    tq, tk, tv = (kiln.asarray(a, device=device) for a in (q, k, v))
    ref = _sdpa_ref(*(a.astype(np.float64) for a in (q, k, v)), causal, 1 / 4)
    assert_close(tq.sdpa(tk, tv, causal=causal), ref, kind="float")
    assert_close(tq.sdpa(tk, tv, causal, 0.3), _sdpa_ref(*(a.astype(np.float64) for a in (q, k, v)), causal, 0.3), kind="float")


def test_sdpa_softcap_window(device, rng):
    q = rng.standard_normal((1, 4, 9, 16)).astype(np.float32) * 3
    k = rng.standard_normal((1, 2, 12, 16)).astype(np.float32)
    v = rng.standard_normal((1, 2, 12, 8)).astype(np.float32)
    tq, tk, tv = (kiln.asarray(a, device=device) for a in (q, k, v))
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    ref = _sdpa_ref(q64, k64, v64, True, 0.25, softcap=1.5, window=4)
    assert_close(tq.sdpa(tk, tv, causal=True, softcap=1.5, window=4), ref, kind="float")
    # The options change the result: neither the plain result nor a window of 5 matches.
    assert not np.allclose(tq.sdpa(tk, tv, causal=True).numpy(), ref, atol=1e-3)
    assert not np.allclose(_sdpa_ref(q64, k64, v64, True, 0.25, softcap=1.5, window=5), ref, atol=1e-3)
    with pytest.raises(ValueError, match="causal"):
        tq.sdpa(tk, tv, window=4)
    with pytest.raises(ValueError, match="softcap"):
        tq.sdpa(tk, tv, causal=True, softcap=-1.0)


def test_silu_mul_clamp_where(device, rng):
    g = rng.standard_normal((3, 10)).astype(np.float32)
    u = rng.standard_normal((3, 10)).astype(np.float32)
    tg, tu = kiln.asarray(g, device=device), kiln.asarray(u, device=device)
    g64 = g.astype(np.float64)
    assert_close(tg.silu_mul(tu), g64 * _sigmoid(g64) * u, kind="float")
    assert_close(tg.clamp(-0.5, 0.5), np.clip(g64, -0.5, 0.5))
    assert_close(tg.clamp(min=0), np.maximum(g64, 0))
    assert_close(kiln.where(tg > 0, tg, tu), np.where(g > 0, g, u))
    assert_close(kiln.where(tg > 0, tg, 0.0), np.where(g > 0, g, 0))


def test_shape_ops(device, rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    t = kiln.asarray(x, device=device)
    assert_close(t.reshape(4, -1), x.reshape(4, -1))
    assert_close(t.reshape((3, 8)), x.reshape(3, 8))
    assert_close(t.permute(2, 0, 1), x.transpose(2, 0, 1))
    assert_close(t.transpose(), x.transpose())
    assert_close(t.transpose(0, 2), x.swapaxes(0, 2))
    assert_close(t.T, x.T)
    assert_close(t.mT, np.swapaxes(x, -1, -2))
    assert_close(t.flatten(), x.ravel())
    assert_close(t.T.flatten(), x.T.ravel())
    assert_close(t.narrow(2, 1, 2), x[:, :, 1:3])
    assert_close(t.select(1, 2), x[:, 2])
    assert_close(t[:, :1].squeeze(1), x[:, 0])
    assert_close(t.unsqueeze(0), x[None])
    assert_close(t[:, :1].broadcast_to((2, 5, 4)), np.broadcast_to(x[:, :1], (2, 5, 4)))
    assert_close(t.flip(1), np.flip(x, 1))
    assert_close(t.flip(), np.flip(x))
    assert_close(kiln.concat([t, t * 2], axis=1), np.concatenate([x, x * 2], axis=1))
    assert_close(kiln.stack([t, t], axis=-1), np.stack([x, x], axis=-1))
    parts = t.split([1, 3], axis=2)
    assert_close(parts[1], x[:, :, 1:])
    assert [p.shape for p in t.chunk(2, axis=1)] == [(2, 2, 4), (2, 1, 4)]
    assert_close(t.pad([(1, 0), (0, 2)], 7.0), np.pad(x, [(1, 0), (0, 2), (0, 0)], constant_values=7.0))
    m = rng.standard_normal((5, 6)).astype(np.float32)
    tm = kiln.asarray(m, device=device)
    assert_close(tm.triu(1), np.triu(m, 1))
    assert_close(tm.tril(-1), np.tril(m, -1))
    ids = np.array([4, 0, 2, 2])
    assert_close(tm.index_select(ids, 0), m[ids])
    assert_close(tm.embedding([[1, 2], [3, 4]]), m[np.array([[1, 2], [3, 4]])])
    gi = np.array([[0, 5], [1, 1], [2, 0], [3, 3], [4, 2]])
    assert_close(tm.gather(1, gi), np.take_along_axis(m, gi, 1))


def test_creation(device):
    assert_close(kiln.zeros((2, 3), device=device), np.zeros((2, 3)))
    assert_close(kiln.ones(4, dtype="int32", device=device), np.ones(4, np.int32))
    assert_close(kiln.full((2, 2), 7, device=device), np.full((2, 2), 7))
    assert kiln.full((2,), 7, device=device).dtype == kiln.int64
    assert_close(kiln.arange(5, device=device), np.arange(5))
    assert_close(kiln.arange(1.0, 2.0, 0.25, device=device), np.arange(1.0, 2.0, 0.25))
    assert_close(kiln.arange(5, 0, -2, device=device), np.arange(5, 0, -2))
    assert_close(kiln.linspace(0, 1, 7, device=device), np.linspace(0, 1, 7))
    assert_close(kiln.linspace(0, 1, 4, endpoint=False, device=device), np.linspace(0, 1, 4, endpoint=False))
    assert_close(kiln.eye(3, device=device), np.eye(3))
    assert_close(kiln.eye(3, 5, k=1, device=device), np.eye(3, 5, k=1))
    a = kiln.rand((100,), seed=3, device=device)
    b = kiln.rand((100,), seed=3, device="cpu")
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert 0 <= np.asarray(a).min() and np.asarray(a).max() < 1
    n = np.asarray(kiln.randn((4000,), mean=2.0, std=0.5, seed=1, device=device))
    assert abs(n.mean() - 2.0) < 0.05 and abs(n.std() - 0.5) < 0.05
    assert not np.array_equal(np.asarray(kiln.randn((10,), seed=1)), np.asarray(kiln.randn((10,), seed=2)))
    z = kiln.zeros_like(a)
    assert z.shape == a.shape and z.device == a.device
    assert_close(kiln.full_like(a, 2.0), np.full(100, 2.0))


def test_kv_cache_matches_full_attention(device, rng):
    q = rng.standard_normal((1, 2, 6, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 6, 8)).astype(np.float32)
    v = rng.standard_normal((1, 2, 6, 8)).astype(np.float32)
    cache = kiln.KvCache(8)
    kk, vv = cache.append(kiln.asarray(k[:, :, :4], device=device), kiln.asarray(v[:, :, :4], device=device))
    assert len(cache) == 4 and kk.shape == (1, 2, 4, 8)
    for t in (4, 5):
        kk, vv = cache.append(kiln.asarray(k[:, :, t : t + 1], device=device), kiln.asarray(v[:, :, t : t + 1], device=device))
        out = kiln.asarray(q[:, :, t : t + 1], device=device).sdpa(kk, vv, causal=True)
        ref = _sdpa_ref(*(a.astype(np.float64) for a in (q[:, :, t : t + 1], k[:, :, : t + 1], v[:, :, : t + 1])), True, 1 / np.sqrt(8))
        assert_close(out, ref, kind="float")
    with pytest.raises(ValueError, match="kv_cache"):
        cache.append(kiln.asarray(k[:, :, :3], device=device), kiln.asarray(v[:, :, :3], device=device))
    cache.reset()
    assert len(cache) == 0 and cache.current() is None and cache.max_len == 8
