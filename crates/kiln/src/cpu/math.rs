//! Scalar math kernels shared by the CPU ops, written to vectorise when called in a loop: no branches
//! (only selects), no table lookups, no calls into libm. Accuracy is stated per function and checked
//! against f64 `std` in the tests below.
// Polynomial coefficients are kept digit for digit as published (Cephes).
#![allow(clippy::excessive_precision)]

/// Runs `f` compiled for the widest vector ISA this CPU has (AVX-512, else AVX2+FMA, else the build's
/// baseline), chosen at run time. `f` should be an `#[inline(always)]` closure running a loop over
/// slices that calls `#[inline(always)]` element kernels, so that all of it is inlined into, and
/// vectorised for, the chosen wrapper (a plain closure may stay out of line and run as baseline code). Besides wider
/// arithmetic this matters for bandwidth: full 64-byte stores let the CPU skip reading output lines
/// before writing them, which a streaming op like `add` needs to match NumPy.
///
/// Results do not depend on the ISA: Rust never contracts `a * b + c` into an FMA by itself.
#[inline(always)]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl") && has!("fma") {
            // SAFETY: the features `avx512` is compiled for were detected on this CPU just above.
            return unsafe { x86::avx512(f) };
        }
        if has!("avx2") && has!("fma") {
            // SAFETY: as above, for `avx2`.
            return unsafe { x86::avx2(f) };
        }
    }
    f()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
    #[inline]
    pub(super) fn avx512<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
    #[inline]
    pub(super) fn avx2<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

/// ln(2) split in a part exact in f32 and a correction (Cephes).
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Adding and subtracting this rounds an f32 of magnitude below 2^22 to the nearest integer.
const ROUND_MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23

/// Largest x with a finite e^x in f32 (ln(f32::MAX)).
const EXP_HI: f32 = 88.722_83;
/// Below this e^x rounds to 0 even as a subnormal.
const EXP_LO: f32 = -104.0;

/// 2^n for integer-valued `n` in [-126, 127], built from the exponent bits.
#[inline(always)]
fn pow2i(n: i32) -> f32 {
    f32::from_bits(((n + 127) as u32) << 23)
}

/// e^x in f32: Cephes range reduction (x = n ln2 + r, |r| <= ln2/2) and a degree-7 polynomial, scaled
/// by 2^n in two steps so subnormal results are right. Relative error below 2e-7 over the whole
/// range; e^x = inf above ln(f32::MAX), 0 far below, NaN stays NaN.
// The if-chain compiles to two selects that vectorise; `clamp` would add a min > max check.
#[allow(clippy::manual_clamp)]
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    let xc = if x > EXP_HI {
        EXP_HI
    } else if x < EXP_LO {
        EXP_LO
    } else {
        x
    };
    // Round x / ln2 to an integer with the magic-number trick; the integer also sits in the low
    // mantissa bits of `t`, which avoids a float-to-int conversion (Rust's saturating `as` does not
    // vectorise).
    let t = xc * std::f32::consts::LOG2_E + ROUND_MAGIC;
    let ni = t.to_bits() as i32 - ROUND_MAGIC.to_bits() as i32;
    let n = t - ROUND_MAGIC;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let z = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 1.666_666_5e-1)
        * r
        + 5.000_000_1e-1;
    let p = p * z + r + 1.0;
    let half = ni >> 1;
    let y = p * pow2i(half) * pow2i(ni - half);
    let y = if x > EXP_HI { f32::INFINITY } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// The logistic function 1 / (1 + e^-x) in f32; relative error a few ulp.
#[inline(always)]
pub(crate) fn sigmoid_f32(x: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-x))
}

/// x * sigmoid(x); silu(-inf) is 0 (the limit) rather than NaN.
#[inline(always)]
pub(crate) fn silu_f32(x: f32) -> f32 {
    let y = x / (1.0 + exp_f32(-x));
    if x == f32::NEG_INFINITY {
        -0.0
    } else {
        y
    }
}

/// tanh in f32: an odd polynomial for |x| < 0.625 (Cephes tanhf), 1 - 2 / (e^2|x| + 1) above, with the
/// sign of x. Relative error a few ulp; +-1 for large |x|; NaN stays NaN.
#[inline(always)]
pub(crate) fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let small = ((((-5.704_988_7e-3 * z + 2.063_908_9e-2) * z - 5.373_971_6e-2) * z + 1.333_144_2e-1) * z
        - 3.333_328_2e-1)
        * z
        * x
        + x;
    let large = 1.0 - 2.0 / (exp_f32(2.0 * a) + 1.0);
    let large = large.copysign(x);
    if a < 0.625 {
        // With the sign of x: for x = -0 the sum above is +0 (-0 * -0 + -0), tanh(-0) is -0.
        small.copysign(x)
    } else {
        large
    }
}

/// sqrt(2/pi), the GELU tanh-approximation constant.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_C: f64 = 0.044_715;

/// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as
/// x * sigmoid(2u) to avoid the cancellation of 1 + tanh for negative x. gelu(-inf) = 0.
#[inline(always)]
pub(crate) fn gelu_tanh_f32(x: f32) -> f32 {
    let u = (SQRT_2_OVER_PI as f32) * (x + (GELU_C as f32) * x * x * x);
    let y = x / (1.0 + exp_f32(-2.0 * u));
    if x == f32::NEG_INFINITY {
        -0.0
    } else {
        y
    }
}

/// erfc(|x|) for f32 (Numerical Recipes' Chebyshev fit, fractional error below 1.2e-7 everywhere).
#[inline(always)]
fn erfc_abs_f32(a: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.5 * a);
    let p = -1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    t * exp_f32(-a * a + p)
}

/// Odd Taylor polynomial of erf for |x| < 0.5 (relative error below 1e-8 there).
#[inline(always)]
fn erf_small_f32(x: f32) -> f32 {
    let z = x * x;
    let p = ((((-1.0 / 1320.0 * z + 1.0 / 216.0) * z - 1.0 / 42.0) * z + 0.1) * z - 1.0 / 3.0) * z + 1.0;
    x * p * std::f32::consts::FRAC_2_SQRT_PI
}

/// The error function in f32, |error| < 2e-7 (and relative error small near 0).
#[inline(always)]
#[allow(dead_code)] // Only gelu uses erf (through erfc) so far; kept with its tests for an erf op.
pub(crate) fn erf_f32(x: f32) -> f32 {
    let big = (1.0 - erfc_abs_f32(x.abs())).copysign(x);
    if x.abs() < 0.5 {
        erf_small_f32(x)
    } else {
        big
    }
}

/// erfc(x) = 1 - erf(x) in f32, with relative accuracy for large positive x.
#[inline(always)]
pub(crate) fn erfc_f32(x: f32) -> f32 {
    let e = erfc_abs_f32(x.abs());
    let big = if x < 0.0 { 2.0 - e } else { e };
    if x.abs() < 0.5 {
        1.0 - erf_small_f32(x)
    } else {
        big
    }
}

/// GELU with the exact erf: 0.5 x erfc(-x / sqrt 2) (erfc keeps the negative tail accurate).
#[inline(always)]
pub(crate) fn gelu_erf_f32(x: f32) -> f32 {
    let y = 0.5 * x * erfc_f32(-x * std::f32::consts::FRAC_1_SQRT_2);
    if x == f32::NEG_INFINITY {
        -0.0
    } else {
        y
    }
}

/// Round half to even, branch-free (the 1.5 * 2^23 trick); exact for every f32, keeps -0.0, inf, NaN.
#[inline(always)]
pub(crate) fn round_even_f32(x: f32) -> f32 {
    // For 0 <= a < 2^23, a + 2^23 lies in [2^23, 2^24) where the spacing of f32 is exactly 1.
    let r = ((x.abs() + 8_388_608.0) - 8_388_608.0).copysign(x);
    // |x| >= 2^23 is already an integer (and NaN/inf stay as they are).
    if x.abs() < 8_388_608.0 {
        r
    } else {
        x
    }
}

/// Largest integer <= x, branch-free; keeps the sign of zero like `f32::floor`.
#[inline(always)]
pub(crate) fn floor_f32(x: f32) -> f32 {
    let r = round_even_f32(x);
    let r = if r > x { r - 1.0 } else { r };
    r.copysign(x)
}

/// Smallest integer >= x, branch-free; keeps the sign of zero like `f32::ceil`.
#[inline(always)]
pub(crate) fn ceil_f32(x: f32) -> f32 {
    let r = round_even_f32(x);
    let r = if r < x { r + 1.0 } else { r };
    r.copysign(x)
}

/// The error function in f64 (|error| ~ 1e-16): the series e^-x^2 sum 2^n x^(2n+1) / (2n+1)!! for
/// |x| < 2.5, a continued fraction for erfc beyond.
#[allow(dead_code)] // See erf_f32.
pub(crate) fn erf_f64(x: f64) -> f64 {
    let a = x.abs();
    if a.is_nan() {
        return x;
    }
    if a < 2.5 {
        erf_series_f64(x)
    } else {
        (1.0 - erfc_cf_f64(a)).copysign(x)
    }
}

/// erfc(x) in f64 with relative accuracy for large positive x.
pub(crate) fn erfc_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x >= 2.5 {
        erfc_cf_f64(x)
    } else if x <= -2.5 {
        2.0 - erfc_cf_f64(-x)
    } else {
        1.0 - erf_series_f64(x)
    }
}

fn erf_series_f64(x: f64) -> f64 {
    let z = x * x;
    let mut term = x;
    let mut sum = x;
    let mut n = 0.0;
    while term.abs() > 1e-17 * sum.abs() {
        n += 1.0;
        term *= 2.0 * z / (2.0 * n + 1.0);
        sum += term;
    }
    sum * (-z).exp() * std::f64::consts::FRAC_2_SQRT_PI
}

/// erfc(x) for x >= 2.5 by the continued fraction e^-x^2 / sqrt(pi) / (x + (1/2) / (x + 1 / (x + ...)))
/// evaluated backwards with a fixed depth that converges to f64 precision at x = 2.5.
fn erfc_cf_f64(x: f64) -> f64 {
    if x > 27.0 {
        return 0.0;
    }
    let mut f = x;
    for k in (1..=120).rev() {
        f = x + (k as f64 / 2.0) / f;
    }
    (-x * x).exp() / f / std::f64::consts::PI.sqrt()
}

/// GELU with the exact erf in f64.
pub(crate) fn gelu_erf_f64(x: f64) -> f64 {
    if x == f64::NEG_INFINITY {
        return -0.0;
    }
    0.5 * x * erfc_f64(-x * std::f64::consts::FRAC_1_SQRT_2)
}

/// GELU, tanh approximation, in f64 (as x * sigmoid(2u)).
pub(crate) fn gelu_tanh_f64(x: f64) -> f64 {
    if x == f64::NEG_INFINITY {
        return -0.0;
    }
    let u = SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
    x / (1.0 + (-2.0 * u).exp())
}

/// silu in f64; silu(-inf) = 0.
pub(crate) fn silu_f64(x: f64) -> f64 {
    if x == f64::NEG_INFINITY {
        return -0.0;
    }
    x / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Max relative error (vs `exact`) of `f` over `n` points in [lo, hi].
    fn max_rel(lo: f64, hi: f64, n: usize, f: impl Fn(f32) -> f32, exact: impl Fn(f64) -> f64, floor: f64) -> f64 {
        (0..=n)
            .map(|i| {
                let x = (lo + (hi - lo) * i as f64 / n as f64) as f32;
                let e = exact(x as f64);
                let g = f(x) as f64;
                (g - e).abs() / e.abs().max(floor)
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn exp_accuracy_and_edges() {
        let err = max_rel(-87.0, 88.7, 2_000_000, exp_f32, f64::exp, 0.0);
        assert!(err < 2e-7, "exp rel err {err}");
        // Subnormal results: absolute error within half the smallest subnormal or so.
        for x in [-88.0f32, -95.0, -100.0, -103.0] {
            let (g, e) = (exp_f32(x) as f64, (x as f64).exp());
            assert!((g - e).abs() <= 2.0 * f32::from_bits(1) as f64 + 1e-6 * e, "exp({x}) = {g}, want {e}");
        }
        assert_eq!(exp_f32(88.8), f32::INFINITY);
        assert_eq!(exp_f32(1e30), f32::INFINITY);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-200.0), 0.0);
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert!(exp_f32(88.72).is_finite());
    }

    #[test]
    fn tanh_sigmoid_silu_accuracy() {
        let err = max_rel(-12.0, 12.0, 1_000_000, tanh_f32, f64::tanh, 0.0);
        assert!(err < 4e-7, "tanh rel err {err}");
        let err = max_rel(-1e-3, 1e-3, 10_000, tanh_f32, f64::tanh, 1e-30);
        assert!(err < 2e-7, "tanh small rel err {err}");
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
        let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
        let err = max_rel(-80.0, 80.0, 1_000_000, sigmoid_f32, sig, 0.0);
        assert!(err < 4e-7, "sigmoid rel err {err}");
        let err = max_rel(-80.0, 80.0, 1_000_000, silu_f32, |x| x * sig(x), 1e-30);
        assert!(err < 4e-7, "silu rel err {err}");
        assert_eq!(sigmoid_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(sigmoid_f32(f32::INFINITY), 1.0);
        assert_eq!(silu_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(silu_f32(f32::INFINITY), f32::INFINITY);
        assert!(silu_f32(f32::NAN).is_nan() && sigmoid_f32(f32::NAN).is_nan());
    }

    #[test]
    fn erf_and_gelu_accuracy() {
        // Reference erf by composite Simpson integration of 2/sqrt(pi) e^(-t^2), independent of erf_f64.
        let erf_ref = |x: f64| {
            let n = 20_000;
            let h = x / n as f64;
            let f = |t: f64| (-t * t).exp();
            let mut s = f(0.0) + f(x);
            for i in 1..n {
                s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
            }
            s * h / 3.0 * std::f64::consts::FRAC_2_SQRT_PI
        };
        for i in 0..=600 {
            let x = -6.0 + i as f64 * 0.02;
            let e = erf_ref(x);
            assert!((erf_f64(x) - e).abs() < 1e-13, "erf_f64({x}) = {}, want {e}", erf_f64(x));
            let g = erf_f32(x as f32) as f64;
            let e32 = erf_ref(x as f32 as f64);
            assert!(
                (g - e32).abs() < 1e-6 && (g - e32).abs() <= 1e-6 * e32.abs().max(1e-3),
                "erf_f32({x}) = {g}, want {e32}"
            );
        }
        // Relative accuracy of the tails (published values of erfc).
        for (x, e) in
            [(3.0, 2.209_049_699_858_544e-5), (5.0, 1.537_459_794_428_035e-12), (10.0, 2.088_487_583_762_545e-45)]
        {
            let g = erfc_f64(x);
            assert!((g - e).abs() <= 1e-13 * e, "erfc_f64({x}) = {g}, want {e}");
            let g = erfc_f32(x as f32) as f64;
            assert!(x > 9.0 || (g - e).abs() <= 2e-6 * e, "erfc_f32({x}) = {g}, want {e}");
        }
        let (x, e) = (1e-6f32, 1e-6f32 as f64 * std::f64::consts::FRAC_2_SQRT_PI);
        assert!((erf_f32(x) as f64 - e).abs() < 2e-7 * e, "erf_f32 near 0 is relatively accurate");
        assert_eq!(erf_f32(f32::INFINITY), 1.0);
        assert_eq!(erf_f32(f32::NEG_INFINITY), -1.0);
        assert_eq!(erf_f64(f64::INFINITY), 1.0);
        assert!(erf_f32(f32::NAN).is_nan() && erf_f64(f64::NAN).is_nan());
        // GELU against 0.5 x (1 + erf(x / sqrt 2)) in f64.
        for i in 0..=400 {
            let x = -10.0 + i as f64 * 0.05;
            let e = 0.5 * x * (1.0 + erf_ref(x / std::f64::consts::SQRT_2));
            let g = gelu_erf_f32(x as f32) as f64;
            assert!((g - e).abs() < 1e-6 + 1e-6 * e.abs(), "gelu_erf_f32({x}) = {g}, want {e}");
            assert!((gelu_erf_f64(x) - e).abs() < 1e-12 + 1e-13 * e.abs(), "gelu_erf_f64({x})");
            let u = SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
            let et = 0.5 * x * (1.0 + u.tanh());
            let gt = gelu_tanh_f32(x as f32) as f64;
            assert!((gt - et).abs() < 1e-6 + 1e-6 * et.abs(), "gelu_tanh_f32({x}) = {gt}, want {et}");
            assert!((gelu_tanh_f64(x) - et).abs() < 1e-13 + 1e-12 * et.abs(), "gelu_tanh_f64({x})");
        }
        assert_eq!(gelu_erf_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(gelu_tanh_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(gelu_erf_f32(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn rounding_matches_std() {
        let mut xs: Vec<f32> = vec![
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            0.49999997,
            -0.49999997,
            8_388_607.5,
            -8_388_607.5,
            8_388_608.0,
            16_777_217.0,
            1e30,
            -1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            -1e-40,
        ];
        xs.extend((0..20_000).map(|i| (i as f32 - 10_000.0) * 0.0137));
        for x in xs {
            for (g, e, name) in [
                (round_even_f32(x), x.round_ties_even(), "round"),
                (floor_f32(x), x.floor(), "floor"),
                (ceil_f32(x), x.ceil(), "ceil"),
            ] {
                assert_eq!(g.to_bits(), e.to_bits(), "{name}({x}) = {g}, want {e}");
            }
        }
        assert!(round_even_f32(f32::NAN).is_nan() && floor_f32(f32::NAN).is_nan() && ceil_f32(f32::NAN).is_nan());
    }
}
