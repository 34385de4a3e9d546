"""Element-wise functions kiln composes from its kernels, on the tensor's device: inverse
trigonometric and hyperbolic functions, and ``log1p``/``expm1`` without cancellation near 0.

Float16 and bfloat16 compute in float32 and round at the end; float64 (CPU) uses a longer series.
Accuracy (float32, against NumPy in float64): ``atan``/``atan2``/``asin``/``acos`` within a few ulp
(argument reduction ``atan(z) = 2 atan(z / (1 + sqrt(1 + z^2)))`` and an odd Taylor series);
``log1p``/``expm1`` use Goldberg's and Kahan's corrections (``log(u) * x / (u - 1)`` with
``u = 1 + x``; ``(u - 1) * x / log(u)`` with ``u = e^x``), so they keep full relative precision
near 0; ``asinh``/``acosh``/``atanh`` are built on that ``log1p``.
"""

import math

from . import _kiln

_LN2 = math.log(2.0)


def _float(x):
    """`x` as a float tensor to compute in, and the dtype to return."""
    d = x.dtype
    if d.is_float:
        if d in (_kiln.float16, _kiln.bfloat16):
            return x.astype(_kiln.float32), d
        return x, d
    out = _kiln.float32
    return x.astype(out), out


def _done(r, d):
    return r if r.dtype == d else r.astype(d)


def _where(c, a, b):
    return _kiln.where(c, a, b)


def _copysign(mag, sign_of):
    """|mag| with the sign (bit) of `sign_of`; NaN magnitudes stay NaN."""
    neg = (sign_of < 0) | ((sign_of == 0) & ((1.0 / sign_of) < 0))
    m = mag.abs()
    return _where(neg, -m, m)


def _atan01(t, f64):
    """atan of `t` in [0, 1] (also inf-free NaN-propagating)."""
    reductions = 2 if f64 else 1
    for _ in range(reductions):
        t = t / ((t * t + 1.0).sqrt() + 1.0)
    terms = 12 if f64 else 9
    t2 = t * t
    p = None
    for k in reversed(range(terms)):
        c = (-1.0) ** k / (2 * k + 1)
        p = c if p is None else p * t2 + c
    if isinstance(p, float):
        p = t * 0.0 + p
    return t * p * float(2**reductions)


def atan(x, /):
    """Inverse tangent, in radians, in [-pi/2, pi/2]."""
    x, d = _float(x)
    a = x.abs()
    inv = a > 1.0
    z = _where(inv, 1.0 / _where(inv, a, 1.0), a)
    r = _atan01(z, x.dtype == _kiln.float64)
    r = _where(inv, (math.pi / 2) - r, r)
    return _done(_copysign(r, x), d)


def atan2(x1, x2, /):
    """The angle of the point (x2, x1), in radians, in [-pi, pi], with IEEE 754's signed zeros and
    infinities."""
    y, x = x1, x2
    dt = y.dtype.promote(x.dtype)
    y, d = _float(y.astype(dt))
    x, _ = _float(x.astype(dt))
    a, b = y.abs(), x.abs()
    mx, mn = a.maximum(b), a.minimum(b)
    both_inf = (a == math.inf) & (b == math.inf)
    t = _where(mx == 0, 0.0, _where(both_inf, 1.0, mn / _where(mx == 0, 1.0, mx)))
    r = _atan01(t, y.dtype == _kiln.float64)
    r = _where(a > b, (math.pi / 2) - r, r)
    x_neg = (x < 0) | ((x == 0) & ((1.0 / _where(x == 0, x, 1.0)) < 0))
    r = _where(x_neg, math.pi - r, r)
    return _done(_copysign(r, y), d)


def asin(x, /):
    """Inverse sine, in radians (NaN outside [-1, 1])."""
    x, d = _float(x)
    c = ((1.0 - x) * (x + 1.0)).sqrt()
    return _done(atan2(x, c), d)


def acos(x, /):
    """Inverse cosine, in radians, in [0, pi] (NaN outside [-1, 1])."""
    x, d = _float(x)
    s = ((1.0 - x) * (x + 1.0)).sqrt()
    return _done(atan2(s, x), d)


def _series(x, coeffs):
    """`sum(c_k x^(k+1))` by Horner's rule."""
    p = None
    for c in reversed(coeffs):
        p = c if p is None else p * x + c
    return x * p


# Below |x| < 0.1 a series (exact to float32 rounding) replaces the corrected formulas, which need a
# log accurate to a few ulp of its (tiny) result; GPU logs are only absolutely accurate near 1.
_LOG1P = [(-1.0) ** k / (k + 1) for k in range(9)]
_EXPM1 = [1.0 / math.factorial(k + 1) for k in range(8)]


def log1p(x, /):
    """`log(1 + x)`, accurate for `x` near 0 (a series below |x| < 0.1; Goldberg's
    `log(u) * x / (u - 1)`, `u = 1 + x`, above)."""
    x, d = _float(x)
    u = x + 1.0
    um1 = u - 1.0
    safe = _where(um1 == 0, 1.0, um1)
    r = u.log() * (x / safe)
    r = _where(um1 == 0, x, _where(u == math.inf, u, r))
    if x.dtype != _kiln.float64:
        small = x.abs() < 0.1
        r = _where(small, _series(_where(small, x, 0.0), _LOG1P), r)
    return _done(r, d)


def expm1(x, /):
    """`e^x - 1`, accurate for `x` near 0 (a series below |x| < 0.1; Kahan's
    `(u - 1) * x / log(u)`, `u = e^x`, above)."""
    x, d = _float(x)
    u = x.exp()
    um1 = u - 1.0
    lu = u.log()
    r = um1 * (x / _where(lu == 0, 1.0, lu))
    r = _where(u == 1.0, x, _where(um1 == -1.0, um1, _where(u == math.inf, u, r)))
    if x.dtype != _kiln.float64:
        small = x.abs() < 0.1
        r = _where(small, _series(_where(small, x, 0.0), _EXPM1), r)
    return _done(r, d)


def _big(x):
    return 2.0**28 if x.dtype == _kiln.float64 else 2.0**12


def asinh(x, /):
    """Inverse hyperbolic sine."""
    x, d = _float(x)
    a = x.abs()
    big = a > _big(x)
    am = _where(big, 1.0, a)
    small = log1p(am + am * am / ((am * am + 1.0).sqrt() + 1.0))
    r = _where(big, a.log() + _LN2, small)
    return _done(_copysign(r, x), d)


def acosh(x, /):
    """Inverse hyperbolic cosine (NaN below 1)."""
    x, d = _float(x)
    big = x > _big(x)
    t = _where(big, 1.0, x) - 1.0
    small = log1p(t + (t * t + 2.0 * t).sqrt())
    r = _where(big, x.log() + _LN2, small)
    # Below 1 (large negative inputs included, where `small` overflows to inf or cancels to 0): NaN.
    r = _where(x < 1.0, x * math.nan, r)
    return _done(r, d)


def atanh(x, /):
    """Inverse hyperbolic tangent (+-inf at +-1, NaN outside [-1, 1])."""
    x, d = _float(x)
    a = x.abs()
    r = log1p(2.0 * a / (1.0 - a)) * 0.5
    r = _where(a > 1.0, a * math.nan, r)
    return _done(_copysign(r, x), d)
