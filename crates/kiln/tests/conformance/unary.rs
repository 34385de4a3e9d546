//! Every unary op (and clamp, logical_not) on every dtype it accepts, against an f64 reference of the
//! same rounded inputs (integers: exact, with wrapping computed in i128), on odd sizes, views
//! (transposed, stepped, broadcast), empty and 0-d tensors, and the specials NaN, +-inf, +-0.
//!
//! Tolerances, per op, in ulps of the result in f32 (the compute type of f32, f16 and bf16) plus an
//! absolute term, from WGSL's stated accuracy where kiln uses a builtin (`exp`: 3 + 2|x| ulp, `log`:
//! 3 ulp or 2^-21 absolute near 1, division 2.5 ulp) and from the error of kiln's own formulas
//! otherwise (see `budget`); f16/bf16 add one ulp of the output (the f32 result rounded to the
//! neighbour on the other side of a rounding boundary). Ops that are exact in IEEE arithmetic (neg,
//! abs, sign, square, floor, ceil, round, relu, clamp) must equal the rounded reference exactly, and
//! an exactly-zero reference must have the same sign of zero.
use crate::backend_tests;
use crate::bounds::{int_vec, ulp_f32, ulp_of, wrap};
use crate::common::*;
use kiln::op::UnaryOp;
use kiln::{DType, Device, Tensor};
use rand::RngExt;

/// True for the ops whose IEEE result is exact after one rounding (checked exactly).
fn is_exact(op: UnaryOp) -> bool {
    use UnaryOp::*;
    matches!(op, Neg | Abs | Sign | Square | Floor | Ceil | Round | Relu | Clamp { .. } | Not)
}

/// Error budget of `op` at input `x` for f32 compute: (ulps of the result, absolute term).
///
/// The terms that grow with |x| stop growing at |x| = 104: beyond it f32's `exp` is 0 or inf (or a
/// subnormal a GPU may flush), so every op below returns its limit (x, 0, 1 or 0 * x) with no error
/// from the exponential left to grow; an infinite input gets the budget of x = 0 (its result is the
/// limit, exact up to the op's own rounding). Without the cap, exp(+inf) and sigmoid(+-inf) had an
/// infinite budget and accepted any finite answer.
fn budget(op: UnaryOp, x: f64) -> (f64, f64) {
    use UnaryOp::*;
    let x = if x.is_finite() { x.clamp(-104.0, 104.0) } else { 0.0 };
    let a = x.abs();
    match op {
        // WGSL: sqrt 2.5 ulp (inherited from 1 / inverseSqrt), division 2.5 ulp.
        Sqrt | Recip => (3.0, 0.0),
        Rsqrt => (6.0, 0.0),
        // WGSL exp: 3 + 2|x| ulp; the CPU's Cephes exp is within 2.
        Exp => (3.0 + 2.0 * a, 0.0),
        // WGSL log and log2: 3 ulp, absolute 2^-21 on [0.5, 2].
        Log | Log2 => (3.0, 2f64.powi(-21)),
        // After kiln's 2 pi reduction (Cody-Waite below 2^16, exact above; the reduced angle is within
        // an f32 rounding of the true one) the builtin's error near 0.
        Sin | Cos => (4.0, 2e-6),
        Tanh => (8.0, 2f64.powi(-24)),
        // 1 / (1 + e^-x): exp's error at -x, one add, one division; where e^-x overflows f32 (x below
        // -88.7) the result is 0 instead of a value below 2^-128 (times |x| for silu).
        Sigmoid => (6.0 + 2.0 * a, 2f64.powi(-128)),
        Silu => (8.0 + 2.0 * a, a * 2f64.powi(-128)),
        // x / (1 + e^-2u) with u = c (x + 0.044715 x^3): exp's error at 2u plus u's own rounding
        // carried through exp (relative error 2u * 4 ulp).
        GeluTanh => {
            let u = 0.797_884_560_802_865_4 * (x + 0.044_715 * x * x * x);
            (8.0 + 10.0 * (2.0 * u).abs(), a * 2f64.powi(-128))
        }
        // 0.5 x erfc(-x / sqrt 2): erfc's Chebyshev fit (1.2e-7 relative) times exp(-x^2/2 + p), whose
        // argument's rounding and exp's own error grow with x^2.
        GeluErf => (8.0 + 5.0 * x * x, 2f64.powi(-30) * a),
        _ => (0.0, 0.0),
    }
}

fn erfc(x: f64) -> f64 {
    libm::erfc(x)
}

/// The f64 reference of a float op (`x` already rounded to the compute dtype).
fn reference(op: UnaryOp, x: f64) -> f64 {
    use UnaryOp::*;
    match op {
        Neg => -x,
        Abs => x.abs(),
        Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }
        Sqrt => x.sqrt(),
        Rsqrt => 1.0 / x.sqrt(),
        Exp => x.exp(),
        Log => x.ln(),
        Log2 => x.log2(),
        Sin => x.sin(),
        Cos => x.cos(),
        Tanh => x.tanh(),
        Square => x * x,
        Recip => 1.0 / x,
        Floor => x.floor(),
        Ceil => x.ceil(),
        Round => x.round_ties_even(),
        Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Silu | GeluTanh | GeluErf if x == f64::NEG_INFINITY => -0.0,
        Silu => x / (1.0 + (-x).exp()),
        GeluTanh => {
            let u = 0.797_884_560_802_865_4 * (x + 0.044_715 * x * x * x);
            x / (1.0 + (-2.0 * u).exp())
        }
        GeluErf => 0.5 * x * erfc(-x * std::f64::consts::FRAC_1_SQRT_2),
        Clamp { min, max } => {
            if x.is_nan() {
                x
            } else {
                x.max(min).min(max)
            }
        }
        Not => (x == 0.0) as u8 as f64,
    }
}

/// Per-element bound of a float result `want` of input `x` in `dtype` (NaN/inf handled by the check).
fn bound(op: UnaryOp, x: f64, want: f64, dtype: DType) -> f64 {
    if is_exact(op) {
        // Exact, except that a GPU may flush a subnormal f32 result to zero.
        return if dtype == DType::F32 && want.abs() < f32::MIN_POSITIVE as f64 { want.abs() } else { 0.0 };
    }
    let (ulps, abs) = budget(op, x);
    match dtype {
        // kiln's f64 erfc below 2.5 is 1 - erf (absolute accuracy ~1e-16), so f64 gelu_erf's
        // negative tail is accurate to |x| 2^-51 absolute, not relatively.
        DType::F64 if op == UnaryOp::GeluErf => ulps * ulp_of(want, DType::F64) + x.abs() * 2f64.powi(-51),
        DType::F64 => ulps * ulp_of(want, DType::F64) + abs * 2f64.powi(-29),
        DType::F32 => ulps * ulp_f32(want) + abs + f32::MIN_POSITIVE as f64,
        // The f32 compute type may flush a subnormal result (bf16 shares f32's range).
        _ => ulps * ulp_f32(want) + abs + ulp_of(want, dtype) + f32::MIN_POSITIVE as f64,
    }
}

/// Float inputs: normals scaled by 3 with the specials spread over them.
fn float_values(n: usize, seed: u64) -> Vec<f64> {
    let sp = [
        0.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        -3.5,
        1e-3,
        -1e-3,
        10.0,
        -10.0,
        30.0,
        -30.0,
        88.0,
        -88.0,
        100.0,
        -100.0,
        1e-30,
        3e38,
        -3e38,
        65504.0,
        70000.0,
    ];
    let mut v: Vec<f64> = random_values(n, DType::F32, seed).iter().map(|x| 3.0 * x).collect();
    for (i, x) in v.iter_mut().enumerate() {
        if i % 3 == 1 {
            *x = sp[(i / 3 + seed as usize) % sp.len()];
        }
    }
    v
}

/// Integer inputs of `dtype`: small values with the type's extremes spread over them (all exactly
/// representable in f64).
fn int_values(n: usize, dtype: DType, seed: u64) -> Vec<f64> {
    let sp: &[f64] = match dtype {
        DType::I32 => &[i32::MIN as f64, i32::MAX as f64, -1.0, 0.0, 46341.0, -46341.0],
        DType::I64 => &[i64::MIN as f64, -(2f64.powi(53)), 2f64.powi(53), 3037000500.0, -1.0, 0.0],
        DType::U32 => &[u32::MAX as f64, 0.0, 65536.0, 2147483648.0],
        DType::U8 => &[255.0, 0.0, 16.0, 128.0],
        _ => &[0.0, 1.0],
    };
    let mut v = random_values(n, dtype, seed);
    for (i, x) in v.iter_mut().enumerate() {
        if i % 4 == 1 {
            *x = sp[(i / 4 + seed as usize) % sp.len()];
        }
    }
    v
}

/// The integer reference of an op that keeps integer dtypes.
fn int_reference(op: UnaryOp, x: i128, dtype: DType) -> i128 {
    use UnaryOp::*;
    let w = |v| wrap(v, dtype);
    match op {
        Neg => w(-x),
        Abs => w(x.abs()),
        Sign => x.signum(),
        Square => w(x * x),
        Floor | Ceil | Round => x,
        Relu => x.max(0),
        Clamp { min, max } => x.max(min.ceil() as i128).min(max.floor() as i128),
        Not => (x == 0) as i128,
        _ => unreachable!("{op:?} computes integers in f32"),
    }
}

/// The shapes every op runs on: odd sizes, a 3-D tensor (for the views), 0-d, empty.
const SHAPES: &[&[usize]] = &[&[1031], &[3, 5, 7], &[], &[0], &[2, 0, 3]];

/// The ops tested on floats (clamp with a few bounds).
fn float_ops() -> Vec<UnaryOp> {
    let mut ops: Vec<UnaryOp> = UnaryOp::ALL.iter().copied().filter(|&o| o != UnaryOp::Not).collect();
    ops.push(UnaryOp::Clamp { min: -2.5, max: 0.5 });
    ops.push(UnaryOp::Clamp { min: 0.0, max: 0.0 });
    ops.push(UnaryOp::Clamp { min: f64::NEG_INFINITY, max: 1.5 });
    ops
}

/// Checks one float op on one input tensor against the reference; `vals` are the values the tensor
/// holds (row-major), already rounded to `dtype`.
fn check_float(op: UnaryOp, x: &Tensor, vals: &[f64], ctx: &str) {
    let dtype = x.dtype();
    let got = x.unary(op).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(got.dtype(), dtype, "{ctx}: dtype");
    assert_eq!(got.dims(), x.dims(), "{ctx}: shape");
    let g = got.to_f64_vec().unwrap();
    let wants: Vec<f64> = vals.iter().map(|&x| reference(op, x)).collect();
    let stored_all = round_to(&wants, dtype);
    let mut bad = Vec::new();
    for (i, (&x, &gv)) in vals.iter().zip(&g).enumerate() {
        let (want, stored) = (wants[i], stored_all[i]);
        let ok = accepts(op, x, want, stored, gv, dtype);
        if !ok && bad.len() < 6 {
            bad.push(format!("x = {x:e}: got {gv:e}, expected {want:e} (stored {stored:e})"));
        }
    }
    assert!(bad.is_empty(), "{ctx}: {}", bad.join("; "));
}

/// Whether `gv` is an acceptable result of float `op` at input `x` in `dtype`, where `want` is the f64
/// reference and `stored` that reference rounded to `dtype`. A non-finite reference must be matched
/// exactly (NaN by NaN, an infinity by the same infinity).
fn accepts(op: UnaryOp, x: f64, want: f64, stored: f64, gv: f64, dtype: DType) -> bool {
    if want.is_nan() || gv.is_nan() {
        want.is_nan() && gv.is_nan()
    } else if is_exact(op) {
        // Exact ops: the rounded reference (or a flushed subnormal) with its sign of zero (not
        // for clamp to a bound of 0, where max(-0, 0) may be either zero).
        let zero_bound = matches!(op, UnaryOp::Clamp { min, max } if min == 0.0 || max == 0.0);
        (gv == stored && (stored != 0.0 || zero_bound || gv.is_sign_negative() == stored.is_sign_negative()))
            || (gv == 0.0 && bound(op, x, want, dtype) > 0.0)
    } else if want.is_infinite() {
        gv == want
    } else if stored.is_infinite() || gv.is_infinite() {
        // Overflow in the output dtype of a finite reference: the one-ulp budget allows the finite
        // neighbour of the largest value to round either way.
        gv == stored || (gv.is_finite() && (gv - want).abs() <= bound(op, x, want, dtype))
    } else {
        let zero_sign_ok = !(x == 0.0 && want == 0.0) || gv.is_sign_negative() == want.is_sign_negative();
        (gv - want).abs() <= bound(op, x, want, dtype) && zero_sign_ok
    }
}

/// The check rejects wrong answers at the specials and at large |x|, where the old budget grew
/// without limit: a finite exp(+inf), any other sigmoid(+-inf) than 1 and 0, the wrong infinity, a
/// zero for exp(1), a sigmoid(1e5) of 0.5.
#[test]
fn accepts_rejects_wrong_specials() {
    use UnaryOp::*;
    let inf = f64::INFINITY;
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let ok = |op, x: f64, gv: f64| {
            let x = round_to(&[x], dt)[0];
            let want = reference(op, x);
            accepts(op, x, want, round_to(&[want], dt)[0], gv, dt)
        };
        assert!(ok(Exp, inf, inf) && ok(Exp, -inf, 0.0) && ok(Sigmoid, inf, 1.0) && ok(Sigmoid, -inf, 0.0));
        assert!(ok(Exp, 1.0, round_to(&[1f64.exp()], dt)[0]), "{dt}");
        for (op, x, gv) in [
            (Exp, inf, 3e38),
            (Exp, inf, 0.0),
            (Exp, inf, -inf),
            (Exp, -inf, 1.0),
            (Exp, 1.0, 0.0),
            (Sigmoid, inf, 0.5),
            (Sigmoid, inf, 0.0),
            (Sigmoid, -inf, 0.5),
            (Sigmoid, -inf, 1.0),
            (Sigmoid, 1e5, 0.5),
            (Silu, inf, 1e30),
            (Silu, -inf, -1.0),
            (Tanh, inf, 0.5),
            (GeluErf, -inf, -1.0),
            (Log, 0.0, 0.0),
        ] {
            assert!(!ok(op, x, gv), "{dt}: {op:?}({x}) = {gv} accepted");
        }
    }
}

/// Checks one integer-keeping op exactly.
fn check_int(op: UnaryOp, x: &Tensor, vals: &[f64], ctx: &str) {
    let dtype = x.dtype();
    let got = x.unary(op).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(got.dtype(), dtype, "{ctx}: dtype");
    assert_eq!(got.dims(), x.dims(), "{ctx}: shape");
    let want: Vec<i128> = vals.iter().map(|&v| int_reference(op, v as i128, dtype)).collect();
    let g = int_vec(&got);
    let bad: Vec<String> = vals
        .iter()
        .zip(g.iter().zip(&want))
        .filter(|(_, (g, w))| g != w)
        .take(6)
        .map(|(x, (g, w))| format!("x = {x}: got {g}, expected {w}"))
        .collect();
    assert!(bad.is_empty(), "{ctx}: {}", bad.join("; "));
}

/// Runs `f(tensor, values, ctx)` on every shape in every layout (and a broadcast view) for `dtype`.
fn for_each_input(dev: &Device, dtype: DType, seed: u64, mut f: impl FnMut(&Tensor, &[f64], &str)) {
    for (si, &shape) in SHAPES.iter().enumerate() {
        let n = shape.iter().product();
        let raw =
            if dtype.is_float() { float_values(n, seed + si as u64) } else { int_values(n, dtype, seed + si as u64) };
        let vals = round_to(&raw, dtype);
        for kind in ALL_LAYOUTS {
            if kind == Layouts::Transposed && shape.len() < 2 {
                continue; // the same as contiguous
            }
            let t = tensor_in(&vals, shape, dtype, kind, dev);
            f(&t, &vals, &format!("{dtype} {shape:?} {kind:?}"));
        }
    }
    // A broadcast view (zero strides): a column repeated over 6 columns.
    let col = round_to(&(if dtype.is_float() { float_values(9, seed) } else { int_values(9, dtype, seed) }), dtype);
    let t = tensor(&col, &[9, 1], dtype, dev).broadcast_to((9, 6)).unwrap();
    let vals: Vec<f64> = (0..54).map(|i| col[i / 6]).collect();
    f(&t, &vals, &format!("{dtype} broadcast (9, 1) -> (9, 6)"));
}

fn unary_floats(dev: &Device) {
    for dtype in supported(dev, &FLOATS) {
        for (oi, op) in float_ops().into_iter().enumerate() {
            for_each_input(dev, dtype, 100 + oi as u64, |t, vals, ctx| {
                check_float(op, t, vals, &format!("{} {ctx}", op.name()));
            });
        }
    }
}

fn unary_ints(dev: &Device) {
    // Every op of the table that keeps integer dtypes, clamp with a few bounds.
    let mut keep: Vec<UnaryOp> = UnaryOp::ALL
        .iter()
        .copied()
        .filter(|o| !o.is_float_only() && o.params().is_empty() && o.input_dtype(DType::I32).is_some())
        .collect();
    keep.extend([
        UnaryOp::Clamp { min: -1.5, max: 2.5 },
        UnaryOp::Clamp { min: -7.0, max: 300.0 },
        UnaryOp::Clamp { min: 3.0, max: 3.0 },
    ]);
    for dtype in INTS {
        for (oi, &op) in keep.iter().enumerate() {
            for_each_input(dev, dtype, 200 + oi as u64, |t, vals, ctx| {
                check_int(op, t, vals, &format!("{} {ctx}", op.name()));
            });
        }
    }
}

/// Float-only ops on integer inputs compute in f32: the reference is the op of the f32-rounded input.
fn unary_float_ops_on_ints(dev: &Device) {
    let ops: Vec<UnaryOp> = UnaryOp::ALL.iter().copied().filter(|o| o.is_float_only()).collect();
    for dtype in INTS {
        for op in &ops {
            let vals = round_to(&int_values(257, dtype, 7), dtype);
            for kind in [Layouts::Contiguous, Layouts::Stepped] {
                let t = tensor_in(&vals, &[257], dtype, kind, dev);
                let got = t.unary(*op).unwrap();
                assert_eq!(got.dtype(), DType::F32, "{} of {dtype}", op.name());
                let as_f32 = round_to(&vals, DType::F32);
                let want = tensor(&as_f32, &[257], DType::F32, dev);
                let expected = want.unary(*op).unwrap();
                // The same op on the f32 values, which `unary_floats` checks against the reference.
                check_float(*op, &want, &as_f32, &format!("{} {dtype} as f32 {kind:?}", op.name()));
                assert_eq!(
                    got.to_f64_vec().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    expected.to_f64_vec().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{} of {dtype} {kind:?} differs from the op on its f32 cast",
                    op.name()
                );
            }
        }
    }
}

fn logical_not(dev: &Device) {
    for_each_input(dev, DType::Bool, 300, |t, vals, ctx| {
        let got = t.logical_not().unwrap();
        assert_eq!(got.dtype(), DType::Bool, "{ctx}");
        let want: Vec<i128> = vals.iter().map(|&v| (v == 0.0) as i128).collect();
        assert_eq!(int_vec(&got), want, "logical_not {ctx}");
    });
    // Twice is the identity; on a non-bool tensor it is an error naming the op and dtype.
    let v = round_to(&random_values(37, DType::Bool, 1), DType::Bool);
    let t = tensor(&v, &[37], DType::Bool, dev);
    assert_eq!(int_vec(&t.logical_not().unwrap().logical_not().unwrap()), int_vec(&t));
    for dtype in supported(dev, &[DType::F32, DType::I32, DType::U8, DType::F64]) {
        assert_err(tensor(&[1.0], &[1], dtype, dev).logical_not(), &["logical_not", dtype.as_str()]);
    }
}

/// sin and cos over every binade of f32 from 2^-10 to the largest finite value (the GPU reduces
/// arguments from 2^16 on exactly, below by Cody-Waite), both signs, against the f64 reference of the
/// same f32 values; and that a reduction dropping whole turns wrongly (sin(x) of x mod 2^24) fails.
fn sin_cos_every_binade(dev: &Device) {
    let mut r = rng(71);
    let vals: Vec<f64> = (0..4096)
        .map(|i| {
            let e = -10.0 + (i % 138) as f64 + r.random::<f64>();
            let v = 2f64.powf(e.min(127.99)) * if i % 2 == 0 { 1.0 } else { -1.0 };
            v as f32 as f64
        })
        .collect();
    let t = tensor(&vals, &[vals.len()], DType::F32, dev);
    for op in [UnaryOp::Sin, UnaryOp::Cos] {
        check_float(op, &t, &vals, &format!("{} across binades on {}", op.name(), dev.name()));
    }
    // The budget is tight enough to tell a reduction that loses the high bits.
    let wrong: Vec<f64> = vals.iter().map(|v| (v % 16777216.0).sin()).collect();
    let big = vals.iter().zip(&wrong).filter(|(v, w)| v.abs() > 1.7e7 && (v.sin() - **w).abs() > 1e-3).count();
    assert!(big > 1000, "the check would not tell a reduction modulo 2^24: {big}");
}

fn unary_errors(dev: &Device) {
    let b = tensor(&[1.0, 0.0], &[2], DType::Bool, dev);
    for op in UnaryOp::ALL {
        if op == UnaryOp::Not || op.is_float_only() {
            continue;
        }
        assert_err(b.unary(op), &[op.name(), "bool"]);
    }
    let x = tensor(&[1.0, 2.0], &[2], DType::F32, dev);
    assert_err(x.clamp(2.0, 1.0), &["clamp", "min 2", "max 1"]);
    assert_err(x.clamp(f64::NAN, 1.0), &["clamp", "NaN"]);
    assert_err(x.clamp(0.0, f64::NAN), &["clamp", "NaN"]);
}

backend_tests!(unary_floats, unary_ints, unary_float_ops_on_ints, sin_cos_every_binade, logical_not, unary_errors);
