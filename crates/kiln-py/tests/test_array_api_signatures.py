"""The namespace functions have the array API standard's (2023.12) signatures: every parameter of
the standard exists, positional-only ones are accepted by position, keyword-only ones by name with
the standard's default (a kiln parameter may be more permissive: positional-or-keyword)."""

import inspect

import pytest

import kiln

UNARY = ("abs acos acosh asin asinh atan atanh bitwise_invert ceil conj cos cosh exp expm1 floor imag isfinite isinf "
         "isnan real "
         "log log1p log2 log10 logical_not negative positive round sign signbit sin sinh square sqrt tan tanh "
         "trunc").split()
BINARY = ("add atan2 bitwise_and bitwise_left_shift bitwise_or bitwise_right_shift bitwise_xor copysign divide "
          "equal floor_divide greater greater_equal hypot less less_equal logaddexp logical_and logical_or "
          "logical_xor maximum minimum multiply not_equal pow remainder subtract").split()

STANDARD = {name: "(x, /)" for name in UNARY}
STANDARD.update({name: "(x1, x2, /)" for name in BINARY})
STANDARD.update({
    "clip": "(x, /, min=None, max=None)",
    "arange": "(start, /, stop=None, step=1, *, dtype=None, device=None)",
    "asarray": "(obj, /, *, dtype=None, device=None, copy=None)",
    "empty": "(shape, *, dtype=None, device=None)",
    "empty_like": "(x, /, *, dtype=None, device=None)",
    "eye": "(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None)",
    "from_dlpack": "(x, /, *, device=None, copy=None)",
    "full": "(shape, fill_value, *, dtype=None, device=None)",
    "full_like": "(x, /, fill_value, *, dtype=None, device=None)",
    "linspace": "(start, stop, /, num, *, dtype=None, device=None, endpoint=True)",
    "meshgrid": "(*arrays, indexing='xy')",
    "ones": "(shape, *, dtype=None, device=None)",
    "ones_like": "(x, /, *, dtype=None, device=None)",
    "tril": "(x, /, *, k=0)",
    "triu": "(x, /, *, k=0)",
    "zeros": "(shape, *, dtype=None, device=None)",
    "zeros_like": "(x, /, *, dtype=None, device=None)",
    "astype": "(x, dtype, /, *, copy=True, device=None)",
    "can_cast": "(from_, to, /)",
    "isdtype": "(dtype, kind)",
    "result_type": "(*arrays_and_dtypes)",
    "take": "(x, indices, /, *, axis=None)",
    "matmul": "(x1, x2, /)",
    "matrix_transpose": "(x, /)",
    "tensordot": "(x1, x2, /, *, axes=2)",
    "vecdot": "(x1, x2, /, *, axis=-1)",
    "broadcast_arrays": "(*arrays)",
    "broadcast_to": "(x, /, shape)",
    "concat": "(arrays, /, *, axis=0)",
    "expand_dims": "(x, /, *, axis=0)",
    "flip": "(x, /, *, axis=None)",
    "moveaxis": "(x, source, destination, /)",
    "permute_dims": "(x, /, axes)",
    "repeat": "(x, repeats, /, *, axis=None)",
    "reshape": "(x, /, shape, *, copy=None)",
    "roll": "(x, /, shift, *, axis=None)",
    "squeeze": "(x, /, axis)",
    "stack": "(arrays, /, *, axis=0)",
    "tile": "(x, repetitions, /)",
    "unstack": "(x, /, *, axis=0)",
    "argmax": "(x, /, *, axis=None, keepdims=False)",
    "argmin": "(x, /, *, axis=None, keepdims=False)",
    "nonzero": "(x, /)",
    "searchsorted": "(x1, x2, /, *, side='left', sorter=None)",
    "where": "(condition, x1, x2, /)",
    "unique_all": "(x, /)",
    "unique_counts": "(x, /)",
    "unique_inverse": "(x, /)",
    "unique_values": "(x, /)",
    "argsort": "(x, /, *, axis=-1, descending=False, stable=True)",
    "sort": "(x, /, *, axis=-1, descending=False, stable=True)",
    "cumulative_sum": "(x, /, *, axis=None, dtype=None, include_initial=False)",
    "max": "(x, /, *, axis=None, keepdims=False)",
    "mean": "(x, /, *, axis=None, keepdims=False)",
    "min": "(x, /, *, axis=None, keepdims=False)",
    "prod": "(x, /, *, axis=None, dtype=None, keepdims=False)",
    "std": "(x, /, *, axis=None, correction=0.0, keepdims=False)",
    "sum": "(x, /, *, axis=None, dtype=None, keepdims=False)",
    "var": "(x, /, *, axis=None, correction=0.0, keepdims=False)",
    "all": "(x, /, *, axis=None, keepdims=False)",
    "any": "(x, /, *, axis=None, keepdims=False)",
})

P = inspect.Parameter


def _sig(text):
    ns = {}
    exec(f"def f{text}: pass", ns)
    return inspect.signature(ns["f"])


@pytest.mark.parametrize("name", sorted(STANDARD))
def test_signature(name):
    want = _sig(STANDARD[name])
    f = getattr(kiln, name)
    have = inspect.signature(f)
    hp = list(have.parameters.values())
    if any(p.kind is P.VAR_POSITIONAL for p in hp) and any(p.kind is P.VAR_KEYWORD for p in hp):
        pytest.fail(f"{name}{have}: a catch-all signature")
    pos = [p for p in hp if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in hp}
    i = 0
    for p in want.parameters.values():
        if p.kind is P.POSITIONAL_ONLY:
            assert i < len(pos), f"{name}{have}: no positional parameter for {p.name}"
            if p.default is not P.empty:
                assert pos[i].default is not P.empty, f"{name}{have}: {p.name} must be optional"
            i += 1
        elif p.kind is P.POSITIONAL_OR_KEYWORD:
            assert i < len(pos) and pos[i].name == p.name, f"{name}{have}: {p.name} at position {i}"
            if p.default is not P.empty and p.name not in ("step",):
                assert pos[i].default == p.default, f"{name}{have}: default of {p.name}"
            i += 1
        elif p.kind is P.KEYWORD_ONLY:
            q = by_name.get(p.name)
            assert q is not None and q.kind in (P.KEYWORD_ONLY, P.POSITIONAL_OR_KEYWORD), f"{name}{have}: {p.name}"
            assert q.default == p.default, f"{name}{have}: default of {p.name} is {q.default!r}, not {p.default!r}"
        elif p.kind is P.VAR_POSITIONAL:
            assert any(q.kind is P.VAR_POSITIONAL for q in hp), f"{name}{have}: *{p.name}"
    # No required parameter beyond the standard's.
    required = [q for q in hp if q.default is P.empty and q.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    assert len(required) <= len([p for p in want.parameters.values()
                                 if p.default is P.empty and p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]), \
        f"{name}{have}"


def test_namespace_is_complete():
    missing = [n for n in STANDARD if not hasattr(kiln, n)]
    assert not missing
    for n in ["e", "inf", "nan", "newaxis", "pi", "finfo", "iinfo", "__array_namespace_info__"]:
        assert hasattr(kiln, n), n


def test_kiln_extensions_have_real_signatures():
    # Functions made from Tensor methods keep the method's parameters.
    assert str(inspect.signature(kiln.softmax)) == "(x, /, axis=-1)"
    assert "eps" in inspect.signature(kiln.rms_norm).parameters
