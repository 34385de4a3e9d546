//! Error bounds from the arithmetic, the way numerical libraries state them, instead of one tolerance
//! scaled until every result passes: an f64 reference of the same rounded inputs, and per output
//! element a bound from the accumulation (a sum of `n` terms computed in a type with unit roundoff `u`
//! is off by at most `n * u * sum|terms|`, Higham's gamma_n), plus the final rounding to the output
//! dtype. Each check here returns `Err` with the first mismatches, so tests can also show that a
//! wrong result (all zeros, a dropped block, a shifted index) fails it.
#![allow(dead_code)]

use crate::common::RefArray;
use kiln::{DType, Tensor};

/// The spacing of f32 values at `|x|` (subnormal spacing below the normal range).
pub fn ulp_f32(x: f64) -> f64 {
    let a = x.abs();
    if !a.is_finite() || a < f32::MIN_POSITIVE as f64 {
        return 2f64.powi(-149);
    }
    2f64.powi(a.log2().floor() as i32 - 23)
}

/// The spacing of `dtype` at `|x|`.
pub fn ulp_of(x: f64, dtype: DType) -> f64 {
    let (bits, min_exp) = match dtype {
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        DType::F64 => (52, -1022),
        _ => (23, -126),
    };
    let a = x.abs();
    let e = if a.is_finite() && a > 0.0 { (a.log2().floor() as i32).max(min_exp) } else { min_exp };
    2f64.powi(e - bits)
}

/// Exact integer values of a tensor.
pub fn int_vec(t: &Tensor) -> Vec<i128> {
    match t.dtype() {
        DType::I32 => t.to_vec::<i32>().unwrap().into_iter().map(i128::from).collect(),
        DType::U32 => t.to_vec::<u32>().unwrap().into_iter().map(i128::from).collect(),
        DType::I64 => t.to_vec::<i64>().unwrap().into_iter().map(i128::from).collect(),
        DType::U8 => t.to_vec::<u8>().unwrap().into_iter().map(i128::from).collect(),
        DType::I8 => t.to_vec::<i8>().unwrap().into_iter().map(i128::from).collect(),
        DType::I16 => t.to_vec::<i16>().unwrap().into_iter().map(i128::from).collect(),
        DType::U16 => t.to_vec::<u16>().unwrap().into_iter().map(i128::from).collect(),
        DType::U64 => t.to_vec::<u64>().unwrap().into_iter().map(i128::from).collect(),
        DType::Bool => t.to_vec::<bool>().unwrap().into_iter().map(i128::from).collect(),
        d => panic!("int_vec of {d}"),
    }
}

/// `v` wrapped to the width of `dtype` (two's complement, like the kernels).
pub fn wrap(v: i128, dtype: DType) -> i128 {
    match dtype {
        DType::I32 => v as i32 as i128,
        DType::U32 => v as u32 as i128,
        DType::I64 => v as i64 as i128,
        DType::U8 => v as u8 as i128,
        DType::I8 => v as i8 as i128,
        DType::I16 => v as i16 as i128,
        DType::U16 => v as u16 as i128,
        DType::U64 => v as u64 as i128,
        DType::Bool => (v != 0) as i128,
        d => panic!("wrap to {d}"),
    }
}

/// Unit roundoff (half an ulp of 1) of storing a value in `dtype`.
pub fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON / 2.0,
        DType::F32 => f32::EPSILON as f64 / 2.0,
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => 0.0,
    }
}

/// Unit roundoff of the type a kernel accumulates `dtype` in: both backends compute f16/bf16 in f32.
pub fn acc_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON / 2.0,
        d if d.is_float() => f32::EPSILON as f64 / 2.0,
        _ => 0.0,
    }
}

/// The smallest positive normal value of the compute type: below it a GPU may flush to zero, so
/// bounds add it (times the number of operations that could flush) as an absolute term.
pub fn flush_floor(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::MIN_POSITIVE,
        d if d.is_float() => f32::MIN_POSITIVE as f64,
        _ => 0.0,
    }
}

/// Half the spacing of `dtype`'s subnormals: the absolute error of rounding a tiny value to it.
pub fn subnormal_half_spacing(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 2f64.powi(-1075),
        DType::F32 => 2f64.powi(-150),
        DType::F16 => 2f64.powi(-25),
        DType::BF16 => 2f64.powi(-134),
        _ => 0.0,
    }
}

/// The bound of a result computed in the accumulation type with absolute error `acc_err`, then
/// rounded to `dtype`: `acc_err` plus the final rounding of a value up to `|want| + acc_err`.
pub fn stored_bound(dtype: DType, want: f64, acc_err: f64) -> f64 {
    acc_err + unit_roundoff(dtype) * (want.abs() + acc_err) + subnormal_half_spacing(dtype)
}

/// Bound of a sum of `n` terms whose absolute values add up to `abs_sum`, accumulated in the
/// compute type of `dtype` in any order and stored as `dtype`.
pub fn sum_bound(dtype: DType, n: usize, abs_sum: f64, want: f64) -> f64 {
    let acc = n as f64 * acc_roundoff(dtype) * abs_sum + n as f64 * flush_floor(dtype);
    stored_bound(dtype, want, acc)
}

/// Compares values with a per-element absolute bound. NaN matches only NaN, infinities only the same
/// infinity (class and sign). `Err` lists the first mismatches (index, got, expected, bound); a bound
/// list of another length than the values is an error too (a short one would leave the tail
/// unchecked).
pub fn check_bounded(got: &[f64], want: &[f64], bound: &[f64]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} values, expected {}", got.len(), want.len()));
    }
    if bound.len() != want.len() {
        return Err(format!("{} bounds for {} values", bound.len(), want.len()));
    }
    let mut bad = Vec::new();
    let mut count = 0;
    for (i, ((&g, &w), &b)) in got.iter().zip(want).zip(bound).enumerate() {
        let ok = if w.is_nan() || g.is_nan() {
            w.is_nan() && g.is_nan()
        } else if w.is_infinite() || g.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= b
        };
        if !ok {
            count += 1;
            if bad.len() < 5 {
                bad.push(format!("[{i}] got {g}, expected {w} (bound {b:.3e})"));
            }
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("{count} of {} out of bounds: {}", got.len(), bad.join("; ")))
    }
}

/// [`check_bounded`] on a tensor (shape checked too), panicking with `ctx`.
pub fn assert_bounded(t: &Tensor, want: &RefArray, bound: &[f64], ctx: &str) {
    assert_eq!(t.dims(), want.shape.as_slice(), "shape mismatch: {ctx}");
    if let Err(e) = check_bounded(&t.to_f64_vec().unwrap(), &want.data, bound) {
        panic!("{ctx} ({}): {e}", t.dtype());
    }
}

/// Shows that the bound is tight enough to catch a broken kernel: all zeros, `dropped` (the result
/// of a kernel that skipped part of the work, computed by the caller) and the result shifted by one
/// element must each fail `bound`, and `want` itself must pass.
pub fn assert_catches_wrong(want: &[f64], bound: &[f64], dropped: &[f64], ctx: &str) {
    assert!(want.len() >= 2, "{ctx}: need two elements to shift");
    check_bounded(want, want, bound).unwrap_or_else(|e| panic!("{ctx}: the reference fails its own bound: {e}"));
    let zeros = vec![0.0; want.len()];
    assert!(check_bounded(&zeros, want, bound).is_err(), "{ctx}: an all-zero result passes the bound");
    assert!(check_bounded(dropped, want, bound).is_err(), "{ctx}: a result with a dropped block passes the bound");
    let mut shifted = want.to_vec();
    shifted.rotate_left(1);
    assert!(check_bounded(&shifted, want, bound).is_err(), "{ctx}: a result shifted by one element passes the bound");
}

/// The check itself: a short bound, a wrong value past the end of a short bound, an infinity of the
/// other sign, a finite value for an infinity and a number for a NaN are all rejected.
#[test]
fn check_bounded_rejects() {
    let want = [1.0, 2.0, f64::INFINITY, f64::NAN];
    let bound = [0.1; 4];
    assert!(check_bounded(&want, &want, &bound).is_ok());
    assert!(check_bounded(&want, &want, &bound[..3]).is_err(), "a short bound must fail");
    assert!(check_bounded(&[1.0, 2.0], &[1.0, 2.0], &[]).is_err(), "an empty bound must fail");
    assert!(check_bounded(&[1.0, 2.05, f64::INFINITY, f64::NAN], &want, &bound).is_ok());
    assert!(check_bounded(&[1.0, 2.2, f64::INFINITY, f64::NAN], &want, &bound).is_err());
    assert!(check_bounded(&[1.0, 2.0, f64::NEG_INFINITY, f64::NAN], &want, &bound).is_err());
    assert!(check_bounded(&[1.0, 2.0, f64::MAX, f64::NAN], &want, &bound).is_err());
    assert!(check_bounded(&[1.0, 2.0, f64::INFINITY, 0.0], &want, &bound).is_err());
    assert!(check_bounded(&[f64::INFINITY, 2.0, f64::INFINITY, f64::NAN], &want, &[f64::INFINITY; 4]).is_err());
}
