//! Every binary op (add sub mul div pow maximum minimum logical_and logical_or), their `*_scalar`
//! forms and mixed-dtype promotion, on every dtype each accepts, against an f64 reference of the same
//! rounded inputs (integers: exact, wrapping computed in i128), with broadcasting, odd sizes, views
//! (transposed, stepped, broadcast), empty and 0-d tensors, NaN, +-inf, +-0 and division by zero.
//!
//! Tolerances: add, sub, mul, maximum and minimum are exact after rounding to the output dtype (IEEE
//! arithmetic is correctly rounded, and f32 holds an f16/bf16 sum or product exactly enough that
//! rounding it again to the half type is innocuous); a GPU may flush a subnormal f32 result to zero.
//! div: 3 ulp of f32 (WGSL's division is within 2.5 ulp; the CPU is exact). pow: exp2(y log2 x), so
//! 8 + 4 |y log2 x| ulp plus 3 |y| ulp for log2's absolute error near 1. f16/bf16 add one ulp of the
//! output for a rounding boundary crossed by that error. An exactly-zero reference from add, sub, mul,
//! div must also have the right sign.
use crate::backend_tests;
use crate::bounds::{int_vec, ulp_f32, ulp_of, wrap};
use crate::common::*;
use kiln::op::BinaryOp;
use kiln::{DType, Device, Tensor};

/// Float specials spread over random normals (times 3). Issue 21 (pow with a base of -inf, and
/// (-1)^+-inf) is left out of the pow inputs, see `pow_safe`.
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
        -2.0,
        3.0,
        1e-3,
        -7.25,
        60000.0,
        -60000.0,
        1e30,
        -1e30,
        3e38,
    ];
    let mut v: Vec<f64> = random_values(n, DType::F32, seed).iter().map(|x| 3.0 * x).collect();
    for (i, x) in v.iter_mut().enumerate() {
        if i % 3 == 1 {
            *x = sp[(i / 3 + seed as usize) % sp.len()];
        }
    }
    v
}

/// Integer values with the type's extremes spread over small ones (all exact in f64).
fn int_values(n: usize, dtype: DType, seed: u64) -> Vec<f64> {
    let sp: &[f64] = match dtype {
        DType::I32 => &[i32::MIN as f64, i32::MAX as f64, -1.0, 0.0, 65536.0, -46341.0],
        DType::I64 => &[i64::MIN as f64, -(2f64.powi(53)), 2f64.powi(53), 4294967296.0, -1.0, 0.0],
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

fn values(n: usize, dtype: DType, seed: u64) -> Vec<f64> {
    let v = if dtype.is_float() { float_values(n, seed) } else { int_values(n, dtype, seed) };
    round_to(&v, dtype)
}

/// The pow inputs of issue 21 (GPU NaN for a base of -inf, and for (-1)^+-inf), fixed there by
/// helper-21 with tests in regressions.rs: replaced here by 2.
fn pow_safe(a: f64, b: f64) -> (f64, f64) {
    if a == f64::NEG_INFINITY || (a == -1.0 && b.is_infinite()) {
        (2.0, b)
    } else {
        (a, b)
    }
}

/// The f64 reference of a float op on values already rounded to the compute dtype.
fn float_ref(op: BinaryOp, a: f64, b: f64) -> f64 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow => a.powf(b),
        BinaryOp::Maximum => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.max(b)
            }
        }
        BinaryOp::Minimum => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.min(b)
            }
        }
        BinaryOp::And | BinaryOp::Or | BinaryOp::FloorDiv | BinaryOp::Remainder => unreachable!(),
    }
}

/// Kiln's integer pow (wrapping; a negative exponent gives 0 except for bases 1 and -1).
fn int_pow(a: i128, b: i128, dtype: DType) -> i128 {
    if b < 0 {
        return match a {
            1 => 1,
            -1 => {
                if b % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let (mut acc, mut base, mut e) = (1i128, a, b);
    while e > 0 {
        if e & 1 == 1 {
            acc = wrap(acc * base, dtype);
        }
        base = wrap(base * base, dtype);
        e >>= 1;
    }
    acc
}

fn int_ref(op: BinaryOp, a: i128, b: i128, dtype: DType) -> i128 {
    let w = |v| wrap(v, dtype);
    match op {
        BinaryOp::Add => w(a + b),
        BinaryOp::Sub => w(a - b),
        BinaryOp::Mul => w(a * b),
        BinaryOp::Pow => int_pow(a, b, dtype),
        BinaryOp::Maximum => a.max(b),
        BinaryOp::Minimum => a.min(b),
        BinaryOp::And => (a != 0 && b != 0) as i128,
        BinaryOp::Or => (a != 0 || b != 0) as i128,
        BinaryOp::Div => unreachable!("integer division computes in f32"),
        BinaryOp::FloorDiv | BinaryOp::Remainder => unreachable!("left out by ops_for"),
    }
}

/// Per-element bound of a float result (see the module docs); `None` for exact ops.
fn float_bound(op: BinaryOp, a: f64, b: f64, want: f64, dtype: DType) -> Option<f64> {
    let ulps = match op {
        BinaryOp::Div => 3.0,
        BinaryOp::Pow => 8.0 + 4.0 * (b * a.abs().log2()).abs() + 3.0 * b.abs(),
        _ => return None,
    };
    // The special cases (x^0, 1^y, 0^y, inf^y, x^+-inf) are exact: no budget.
    let ulps = if ulps.is_finite() { ulps } else { 0.0 };
    Some(match dtype {
        DType::F64 => ulps * ulp_of(want, DType::F64),
        DType::F32 => ulps * ulp_f32(want) + f32::MIN_POSITIVE as f64,
        _ => ulps * ulp_f32(want) + ulp_of(want, dtype) + f32::MIN_POSITIVE as f64,
    })
}

/// Compares a float result with the reference over the broadcast of `ra` and `rb` (values in the
/// compute dtype). Returns the mismatches.
fn float_mismatches(op: BinaryOp, got: &Tensor, ra: &RefArray, rb: &RefArray) -> Vec<String> {
    let dtype = got.dtype();
    let shape = got.dims().to_vec();
    let out = RefArray::new(shape.clone(), vec![0.0; shape.iter().product()]);
    let g = got.to_f64_vec().unwrap();
    let operands: Vec<(f64, f64)> = (0..g.len())
        .map(|i| {
            let idx = out.unravel(i);
            (ra.get_broadcast(&idx), rb.get_broadcast(&idx))
        })
        .collect();
    let wants: Vec<f64> = operands.iter().map(|&(a, b)| float_ref(op, a, b)).collect();
    let stored_all = round_to(&wants, dtype);
    let mut bad = Vec::new();
    for (i, &gv) in g.iter().enumerate() {
        let ((a, b), want, stored) = (operands[i], wants[i], stored_all[i]);
        let ok = if want.is_nan() || gv.is_nan() {
            want.is_nan() && gv.is_nan()
        } else {
            match float_bound(op, a, b, want, dtype) {
                None => {
                    let flushed = dtype == DType::F32 && stored.abs() < f32::MIN_POSITIVE as f64 && gv == 0.0;
                    let sign_matters = matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul);
                    let same_zero =
                        stored != 0.0 || !sign_matters || gv.is_sign_negative() == stored.is_sign_negative();
                    (gv == stored && same_zero) || flushed
                }
                Some(bd) => {
                    if stored.is_infinite() || gv.is_infinite() {
                        gv == stored || (gv.is_finite() && (gv - want).abs() <= bd)
                    } else {
                        let zero_sign =
                            want != 0.0 || op != BinaryOp::Div || gv.is_sign_negative() == want.is_sign_negative();
                        (gv - want).abs() <= bd && zero_sign
                    }
                }
            }
        };
        if !ok && bad.len() < 6 {
            bad.push(format!("{a:e} {} {b:e}: got {gv:e}, expected {want:e} (stored {stored:e})", op.name()));
        }
    }
    bad
}

fn int_mismatches(op: BinaryOp, got: &Tensor, ra: &RefArray, rb: &RefArray) -> Vec<String> {
    let dtype = got.dtype();
    let shape = got.dims().to_vec();
    let out = RefArray::new(shape.clone(), vec![0.0; shape.iter().product()]);
    let g = int_vec(got);
    let mut bad = Vec::new();
    for (i, &gv) in g.iter().enumerate() {
        let idx = out.unravel(i);
        let (a, b) = (ra.get_broadcast(&idx) as i128, rb.get_broadcast(&idx) as i128);
        let want = int_ref(op, a, b, dtype);
        if gv != want && bad.len() < 6 {
            bad.push(format!("{a} {} {b}: got {gv}, expected {want}", op.name()));
        }
    }
    bad
}

/// Runs `op` on `a`, `b` and checks it against the reference of the values `ra`, `rb` (in the
/// dtype the op computes in, `compute`); `out` is the expected output dtype.
fn check(op: BinaryOp, a: &Tensor, b: &Tensor, ra: &RefArray, rb: &RefArray, out: DType, ctx: &str) {
    let got = a.binary(b, op).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(got.dtype(), out, "{ctx}: dtype");
    assert_eq!(got.dims(), broadcast_shape(&ra.shape, &rb.shape).as_slice(), "{ctx}: shape");
    let bad = if out.is_float() { float_mismatches(op, &got, ra, rb) } else { int_mismatches(op, &got, ra, rb) };
    assert!(bad.is_empty(), "{} {ctx}: {}", op.name(), bad.join("; "));
}

/// The ops a dtype accepts, with the dtype each computes in. Floor division and remainder are left
/// out: their reference is NumPy's divmod (exact integers; floats from an exact fmod, rounded once),
/// which regressions.rs checks on every backend and dtype (`int_divmod_ref`, `float_divmod_ref`).
fn ops_for(dtype: DType) -> Vec<(BinaryOp, DType)> {
    BinaryOp::ALL
        .iter()
        .filter(|op| !matches!(op, BinaryOp::FloorDiv | BinaryOp::Remainder))
        .filter_map(|&op| op.compute_dtype(dtype).map(|c| (op, c)))
        .collect()
}

/// Operand shape pairs: same shape, broadcasting both ways, 0-d, empty.
const PAIRS: &[(&[usize], &[usize])] = &[
    (&[1031], &[1031]),
    (&[3, 5, 7], &[3, 5, 7]),
    (&[3, 1, 7], &[5, 1]),
    (&[], &[3, 5, 7]),
    (&[2, 9], &[]),
    (&[7], &[3, 5, 7]),
    (&[2, 0, 3], &[3]),
    (&[4, 1], &[0]),
    (&[], &[]),
];

/// `op` of `dtype` over every shape pair and layout pair (and broadcast views), with its values
/// for pow adjusted for issue 21.
fn run_dtype(dev: &Device, dtype: DType, seed: u64) {
    use Layouts::{Contiguous as C, Stepped as S, Transposed as T};
    for (oi, (op, compute)) in ops_for(dtype).into_iter().enumerate() {
        for (pi, &(sa, sb)) in PAIRS.iter().enumerate() {
            let s = seed + 100 * oi as u64 + 10 * pi as u64;
            let mut va = values(sa.iter().product(), dtype, s);
            let mut vb = values(sb.iter().product(), dtype, s + 1);
            if op == BinaryOp::Pow {
                pow_inputs(dtype, &mut va, &mut vb, sa, sb);
            }
            for (ka, kb) in [(C, C), (T, S), (S, T)] {
                if (ka != C || kb != C) && sa.len() < 2 && sb.len() < 2 && (ka == T || kb == T) {
                    continue;
                }
                let a = tensor_in(&va, sa, dtype, ka, dev);
                let b = tensor_in(&vb, sb, dtype, kb, dev);
                let (ra, rb) = (
                    RefArray::new(sa.to_vec(), round_to(&va, compute)),
                    RefArray::new(sb.to_vec(), round_to(&vb, compute)),
                );
                let ctx = format!("{dtype} {sa:?} {ka:?} with {sb:?} {kb:?}");
                check(op, &a, &b, &ra, &rb, compute, &ctx);
            }
        }
        // Operands that are broadcast views (zero strides) inside a larger shape.
        let vc = values(6, dtype, seed + 7);
        let vr = values(5, dtype, seed + 8);
        let col = tensor(&vc, &[6, 1], dtype, dev).broadcast_to((6, 5)).unwrap();
        let row = tensor(&vr, &[1, 5], dtype, dev).broadcast_to((6, 5)).unwrap();
        let rc = RefArray::new(vec![6, 5], round_to(&(0..30).map(|i| vc[i / 5]).collect::<Vec<_>>(), compute));
        let rr = RefArray::new(vec![6, 5], round_to(&(0..30).map(|i| vr[i % 5]).collect::<Vec<_>>(), compute));
        if op != BinaryOp::Pow {
            check(op, &col, &row, &rc, &rr, compute, &format!("{dtype} broadcast views"));
        }
    }
}

/// Pow inputs: bases as generated (issue 21 cases replaced), exponents small integers and halves
/// (integers: 0..7 and negatives for signed types, with some 31/33 to wrap).
fn pow_inputs(dtype: DType, va: &mut [f64], vb: &mut [f64], sa: &[usize], sb: &[usize]) {
    let shape = broadcast_shape(sa, sb);
    let ra = RefArray::new(sa.to_vec(), vec![0.0; va.len()]);
    let rb = RefArray::new(sb.to_vec(), vec![0.0; vb.len()]);
    let exps: &[f64] = if dtype.is_float() {
        &[2.0, 3.0, -1.0, 0.5, -2.5, 0.0, 1.0, 1.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -3.0, 4.0]
    } else if dtype.is_signed() {
        &[0.0, 1.0, 2.0, 3.0, 5.0, 7.0, -1.0, -2.0, 31.0, 33.0]
    } else {
        &[0.0, 1.0, 2.0, 3.0, 5.0, 7.0, 9.0, 31.0, 33.0]
    };
    for (i, e) in vb.iter_mut().enumerate() {
        *e = exps[i % exps.len()];
    }
    if dtype.is_float() {
        for x in va.iter_mut() {
            // Keep |base| moderate so results stay inside the half types' range more often.
            if x.is_finite() && x.abs() > 100.0 {
                *x = (*x / 1e4).clamp(-50.0, 50.0);
            }
        }
        let va2 = round_to(va, dtype);
        va.copy_from_slice(&va2);
        let vb2 = round_to(vb, dtype);
        vb.copy_from_slice(&vb2);
    }
    // Replace the issue 21 pairs wherever they meet under broadcasting.
    let out = RefArray::new(shape.clone(), vec![0.0; shape.iter().product()]);
    for i in 0..out.data.len() {
        let idx = out.unravel(i);
        let lead_a = idx.len() - sa.len();
        let ia: Vec<usize> = sa.iter().enumerate().map(|(k, &d)| if d == 1 { 0 } else { idx[lead_a + k] }).collect();
        let lead_b = idx.len() - sb.len();
        let ib: Vec<usize> = sb.iter().enumerate().map(|(k, &d)| if d == 1 { 0 } else { idx[lead_b + k] }).collect();
        let (pa, pb) = (ra.ravel(&ia), rb.ravel(&ib));
        if pa < va.len() && pb < vb.len() {
            let (x, y) = pow_safe(va[pa], vb[pb]);
            va[pa] = x;
            vb[pb] = y;
        }
    }
}

fn binary_f32(dev: &Device) {
    run_dtype(dev, DType::F32, 1000);
}

fn binary_f16_bf16(dev: &Device) {
    run_dtype(dev, DType::F16, 2000);
    run_dtype(dev, DType::BF16, 3000);
}

fn binary_f64(dev: &Device) {
    for dtype in supported(dev, &[DType::F64]) {
        run_dtype(dev, dtype, 4000);
    }
}

fn binary_ints(dev: &Device) {
    for (i, dtype) in INTS.into_iter().enumerate() {
        run_dtype(dev, dtype, 5000 + 1000 * i as u64);
    }
}

fn binary_bool(dev: &Device) {
    run_dtype(dev, DType::Bool, 9000);
}

/// Divisors above 2^126 (f32 and bf16): a GPU divides as a * (1 / b), and that reciprocal flushes to
/// zero (NVIDIA gave -1e30 / 3e38 = -0 and an i64 -5 / bf16 3.004e38 = -0). Every quotient here is a
/// normal number, so the answer is div's 3 ulp of f32 (then the dtype's rounding), and floor_divide
/// and remainder are exact: 3e38 // 2e38 = 1 (its (a - fmod) / b once gave 0), 2e38 % 3e38 = 2e38.
fn huge_divisors(dev: &Device) {
    let a = [-1e30, 1e30, 3e38, -3e38, 2e38, 1e10, -12345.0, 7e37, f64::INFINITY];
    let b = [3e38, -3e38, 2e38, 2e38, 3e38, 1.7e38, 9e37, -1e38, 3e38];
    for dtype in [DType::F32, DType::BF16] {
        let (a, b) = (round_to(&a, dtype), round_to(&b, dtype));
        let (ta, tb) = (tensor(&a, &[a.len()], dtype, dev), tensor(&b, &[b.len()], dtype, dev));
        let q = ta.div(&tb).unwrap().to_f64_vec().unwrap();
        let fd = ta.floor_div(&tb).unwrap().to_f64_vec().unwrap();
        let rem = ta.remainder(&tb).unwrap().to_f64_vec().unwrap();
        for i in 0..a.len() {
            let want = a[i] / b[i];
            let tol = 3.0 * ulp_f32(want) + if dtype == DType::F32 { 0.0 } else { ulp_of(want, dtype) };
            let ok = if want.is_finite() { (q[i] - want).abs() <= tol } else { q[i] == want };
            assert!(ok, "{dtype} {} / {} = {} (want {want})", a[i], b[i], q[i]);
            if want.is_finite() {
                let f = (a[i] / b[i]).floor();
                let r = round_to(&[a[i] - f * b[i]], dtype)[0];
                assert_eq!(fd[i], f, "{dtype} {} // {}", a[i], b[i]);
                assert_eq!(rem[i], r, "{dtype} {} % {}", a[i], b[i]);
            }
        }
    }
    // Mixed: an i64 dividend promotes with a bf16 divisor (the NVIDIA case).
    let i = Tensor::from_vec(vec![-5i64, 7], 2, dev).unwrap();
    let d = tensor(&[3.004e38, -3.004e38], &[2], DType::BF16, dev);
    let got = i.div(&d).unwrap().to_f64_vec().unwrap();
    let dv = round_to(&[3.004e38], DType::BF16)[0];
    for (g, w) in got.iter().zip([-5.0 / dv, -7.0 / dv]) {
        assert!((g - w).abs() <= 4.0 * ulp_of(w, DType::BF16) && *g != 0.0, "i64 / bf16: {g} (want {w})");
    }
}

/// Division by zero (all signs), 0/0, inf/inf, and integer division by zero (through f32).
fn division_by_zero(dev: &Device) {
    for dtype in supported(dev, &FLOATS) {
        let a = [1.0, -1.0, 1.0, -1.0, 0.0, -0.0, 0.0, f64::INFINITY, f64::INFINITY, f64::NAN, 3.0];
        let b = [0.0, 0.0, -0.0, -0.0, 0.0, 0.0, -0.0, f64::INFINITY, 0.0, 0.0, f64::INFINITY];
        let want = [
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NAN,
            f64::NAN,
            f64::NAN,
            f64::NAN,
            f64::INFINITY,
            f64::NAN,
            0.0,
        ];
        let got = tensor(&a, &[11], dtype, dev).div(&tensor(&b, &[11], dtype, dev)).unwrap();
        assert_close_tol(&got, &RefArray::new(vec![11], want.to_vec()), 0.0, 0.0, &format!("{dtype} x / 0"));
        let neg0 = tensor(&[3.0], &[1], dtype, dev).div(&tensor(&[f64::NEG_INFINITY], &[1], dtype, dev)).unwrap();
        assert!(neg0.to_f64_vec().unwrap()[0].is_sign_negative(), "{dtype} 3 / -inf is -0");
        let s = tensor(&[2.0, -2.0, 0.0], &[3], dtype, dev).div_scalar(0.0).unwrap();
        assert_close_tol(
            &s,
            &RefArray::new(vec![3], vec![f64::INFINITY, f64::NEG_INFINITY, f64::NAN]),
            0.0,
            0.0,
            "div_scalar(0)",
        );
    }
    for dtype in INTS {
        let a = round_to(&[5.0, 0.0, 7.0, 1.0], dtype);
        let b = [0.0, 0.0, 2.0, 3.0];
        let got = tensor(&a, &[4], dtype, dev).div(&tensor(&b, &[4], dtype, dev)).unwrap();
        assert_eq!(got.dtype(), DType::F32);
        let want = vec![f64::INFINITY, f64::NAN, 3.5, round_to(&[1.0 / 3.0], DType::F32)[0]];
        assert_close_tol(&got, &RefArray::new(vec![4], want), 0.0, 2e-7, &format!("{dtype} integer / 0"));
    }
}

/// Mixed dtypes: both sides are promoted (see `DType::promote`), then the op runs in the promoted
/// compute dtype.
fn binary_mixed_dtypes(dev: &Device) {
    use DType::*;
    let pairs =
        [(I32, F16), (U8, I32), (U32, I32), (F16, BF16), (Bool, F32), (U8, U32), (I64, BF16), (Bool, I32), (F32, F64)];
    for (pi, (da, db)) in pairs.into_iter().enumerate() {
        if !dev.is_cpu() && (da == F64 || db == F64) {
            continue;
        }
        let promoted = da.promote(db);
        for op in [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Maximum, BinaryOp::Sub, BinaryOp::Div] {
            let compute = op.compute_dtype(promoted).unwrap();
            let va = values(35, da, 50 + pi as u64);
            let vb = values(7, db, 60 + pi as u64);
            let a = tensor(&va, &[5, 7], da, dev);
            let b = tensor(&vb, &[7], db, dev);
            let ra = RefArray::new(vec![5, 7], round_to(&va, compute));
            let rb = RefArray::new(vec![7], round_to(&vb, compute));
            check(op, &a, &b, &ra, &rb, compute, &format!("{da} with {db}"));
            check(op, &b, &a, &rb, &ra, compute, &format!("{db} with {da}"));
        }
    }
}

/// The `*_scalar` forms: the scalar takes the tensor's dtype (rounded to it); a fractional scalar
/// with an integer tensor computes in f32; bool keeps bool for 0/1 and goes to i64 otherwise; an
/// integral scalar out of the integer dtype's range is an error.
fn binary_scalars(dev: &Device) {
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
    ];
    let all: Vec<DType> = supported(dev, &[FLOATS.as_slice(), INTS.as_slice(), &[DType::Bool]].concat());
    for dtype in all {
        let scalars: &[f64] = if dtype.is_float() {
            &[2.5, -0.0, 0.0, f64::INFINITY, f64::NAN, 1e-3, -3.0]
        } else if dtype == DType::Bool {
            &[0.0, 1.0, 2.0, 0.5]
        } else if dtype.is_signed() {
            &[3.0, -2.0, 0.0, 2.5]
        } else {
            &[3.0, 0.0, 2.5]
        };
        for (si, &s) in scalars.iter().enumerate() {
            let sdtype = if dtype.is_float() {
                dtype
            } else if s.fract() != 0.0 {
                DType::F32
            } else if dtype == DType::Bool && s > 1.0 {
                DType::I64
            } else {
                dtype
            };
            let vals = values(257, dtype, 70 + si as u64);
            for kind in [Layouts::Contiguous, Layouts::Stepped] {
                let x = tensor_in(&vals, &[257], dtype, kind, dev);
                for op in ops {
                    let promoted = dtype.promote(sdtype);
                    let compute = op.compute_dtype(promoted).unwrap();
                    let (mut va, mut vs) = (vals.clone(), vec![s]);
                    if op == BinaryOp::Pow {
                        if !dtype.is_float() && s < 0.0 && !dtype.is_signed() {
                            continue;
                        }
                        for x in va.iter_mut() {
                            let (p, q) = pow_safe(*x, s);
                            *x = p;
                            vs[0] = q;
                        }
                    }
                    let xt = if va == vals { x.clone() } else { tensor_in(&va, &[257], dtype, kind, dev) };
                    let got = xt.binary_scalar(vs[0], op).unwrap_or_else(|e| panic!("{dtype} {} {s}: {e}", op.name()));
                    let ctx = format!("{dtype} {kind:?} {} scalar {s}", op.name());
                    assert_eq!(got.dtype(), compute, "{ctx}: dtype");
                    let ra = RefArray::new(vec![257], round_to(&round_to(&va, promoted), compute));
                    let rb = RefArray::new(vec![], round_to(&round_to(&vs, sdtype), compute));
                    let bad = if compute.is_float() {
                        float_mismatches(op, &got, &ra, &rb)
                    } else {
                        int_mismatches(op, &got, &ra, &rb)
                    };
                    assert!(bad.is_empty(), "{ctx}: {}", bad.join("; "));
                }
            }
        }
    }
    // Out-of-range integral scalars are errors naming the op, the scalar and the dtype.
    let u = tensor(&[1.0, 2.0], &[2], DType::U8, dev);
    assert_err(u.add_scalar(256.0), &["add", "256", "u8"]);
    assert_err(u.mul_scalar(-1.0), &["mul", "-1", "u8"]);
    let i = tensor(&[1.0], &[1], DType::I32, dev);
    assert_err(i.sub_scalar(3e9), &["sub", "3000000000", "i32"]);
}

/// logical_and / logical_or take bool only (every other dtype is an error naming the op).
fn logical_ops(dev: &Device) {
    for op in [BinaryOp::And, BinaryOp::Or] {
        for dtype in supported(dev, &[DType::F32, DType::I32, DType::U8, DType::F64, DType::F16]) {
            let t = tensor(&[1.0, 0.0], &[2], dtype, dev);
            assert_err(t.binary(&t, op), &[op.name(), "bool"]);
            let b = tensor(&[1.0, 0.0], &[2], DType::Bool, dev);
            assert_err(b.binary(&t, op), &[op.name(), "bool"]);
        }
    }
    // The full truth table, broadcast both ways.
    let a = tensor(&[0.0, 0.0, 1.0, 1.0], &[4, 1], DType::Bool, dev);
    let b = tensor(&[0.0, 1.0], &[1, 2], DType::Bool, dev);
    assert_eq!(int_vec(&a.logical_and(&b).unwrap()), vec![0, 0, 0, 0, 0, 1, 0, 1]);
    assert_eq!(int_vec(&a.logical_or(&b).unwrap()), vec![0, 1, 0, 1, 1, 1, 1, 1]);
}

fn binary_errors(dev: &Device) {
    let a = tensor(&[1.0, 2.0, 3.0], &[3], DType::F32, dev);
    let b = tensor(&[1.0, 2.0], &[2], DType::F32, dev);
    for op in BinaryOp::ALL {
        if op == BinaryOp::And || op == BinaryOp::Or {
            continue;
        }
        assert_err(a.binary(&b, op), &[op.name(), "(3,)", "(2,)"]);
    }
}

backend_tests!(
    binary_f32,
    binary_f16_bf16,
    binary_f64,
    binary_ints,
    binary_bool,
    division_by_zero,
    huge_divisors,
    binary_mixed_dtypes,
    binary_scalars,
    logical_ops,
    binary_errors
);
