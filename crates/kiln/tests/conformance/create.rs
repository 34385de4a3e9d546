//! Constructors (`from_vec`, `zeros`, `ones`, `full`, `*_like`, `arange`, `linspace`, `eye`, `rand`,
//! `randn`, `scalar`) over every dtype against plain references, and NumPy-like `Display`.

use crate::backend_tests;
use crate::common::*;
use crate::views::reference_cast;
use kiln::{bf16, f16, DType, Device, Tensor};

/// Compares with the dtype's tolerance for floats (values are rounded on storing) and exactly for the
/// rest, after applying the documented f64 -> dtype conversion to the expected values.
fn assert_converted(got: &Tensor, shape: &[usize], values: &[f64], ctx: &str) {
    let dtype = got.dtype();
    let expected: Vec<f64> = values.iter().map(|&v| reference_cast(v, dtype)).collect();
    let factor = if dtype.is_float() { 1.0 } else { 0.0 };
    assert_close(got, &RefArray::new(shape.to_vec(), expected), factor, ctx);
}

fn from_vec_roundtrip(dev: &Device) {
    fn check<T: kiln::WithDType>(dev: &Device, data: Vec<T>) {
        // Equal, NaN matching NaN.
        let same = |a: Vec<T>, b: &[T]| {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| x == y || (x.partial_cmp(x).is_none() && y.partial_cmp(y).is_none()))
        };
        if !dev.is_cpu() && T::DTYPE == DType::F64 {
            return;
        }
        let n = data.len();
        let t = Tensor::from_vec(data.clone(), (2, n / 2), dev).unwrap();
        assert_eq!(t.dtype(), T::DTYPE);
        assert_eq!(t.dims(), &[2, n / 2]);
        assert!(t.is_contiguous());
        assert!(same(t.to_vec::<T>().unwrap(), &data), "from_vec {:?}", T::DTYPE);
        let s = Tensor::from_slice(&data, n, dev).unwrap();
        assert!(same(s.to_vec::<T>().unwrap(), &data), "from_slice {:?}", T::DTYPE);
        let e = Tensor::from_vec(Vec::<T>::new(), (0, 3), dev).unwrap();
        assert_eq!(e.dims(), &[0, 3]);
        assert_err(
            Tensor::from_vec(data.clone(), (3, n), dev),
            &["from_vec", &format!("{n} elements"), &format!("(3, {n})")],
        );
        assert_err(Tensor::from_slice(&data, (), dev), &["from_vec", "()", "holds 1"]);
    }
    check(dev, vec![1.5f32, -2.0, f32::NAN, f32::INFINITY]);
    check(dev, vec![1.5f64, -2.0, 1e300, -0.0]);
    check(dev, vec![f16::from_f32(0.1), f16::MAX, f16::NEG_INFINITY, f16::ZERO]);
    check(dev, vec![bf16::from_f32(0.1), bf16::MIN_POSITIVE, bf16::NAN, bf16::ONE]);
    check(dev, vec![i32::MIN, -1, 0, i32::MAX]);
    check(dev, vec![u32::MAX, 0, 7, 1]);
    check(dev, vec![i64::MIN, i64::MAX, -3, 9]);
    check(dev, vec![0u8, 255, 17, 1]);
    check(dev, vec![true, false, false, true]);
    let scalar = Tensor::from_vec(vec![3i64], (), dev).unwrap();
    assert_eq!(scalar.rank(), 0);
    assert_eq!(scalar.to_scalar::<i64>().unwrap(), 3);
    assert_err(Tensor::from_f64_values(&[1.0, 2.0], (3,), DType::F32, dev), &["from_f64_values", "(3,)", "2 elements"]);
}

fn filled_constructors(dev: &Device) {
    let shapes: [&[usize]; 5] = [&[2, 3], &[], &[0, 4], &[1], &[3, 1, 5]];
    for shape in shapes {
        let n: usize = shape.iter().product();
        for dtype in supported(dev, &DType::ALL) {
            let ctx = format!("{shape:?} {dtype}");
            let z = Tensor::zeros(shape.to_vec(), dtype, dev).unwrap();
            assert_eq!((z.dims(), z.dtype()), (shape, dtype), "{ctx}");
            assert!(z.is_contiguous());
            assert_converted(&z, shape, &vec![0.0; n], &format!("zeros {ctx}"));
            let o = Tensor::ones(shape.to_vec(), dtype, dev).unwrap();
            assert_converted(&o, shape, &vec![1.0; n], &format!("ones {ctx}"));
            for value in [2.7, -2.7, 300.0, -1.0, 1e10, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0] {
                let f = Tensor::full(value, shape.to_vec(), dtype, dev).unwrap();
                assert_converted(&f, shape, &vec![value; n], &format!("full {value} {ctx}"));
                let fl = z.full_like(value).unwrap();
                assert_eq!((fl.dims(), fl.dtype()), (shape, dtype));
                assert_converted(&fl, shape, &vec![value; n], &format!("full_like {value} {ctx}"));
            }
            let zl = o.zeros_like().unwrap();
            assert_eq!((zl.dims(), zl.dtype()), (shape, dtype));
            assert_converted(&zl, shape, &vec![0.0; n], &format!("zeros_like {ctx}"));
            let ol = z.ones_like().unwrap();
            assert_converted(&ol, shape, &vec![1.0; n], &format!("ones_like {ctx}"));
            assert!(!ol.shares_storage_with(&z));
            // A like-constructor of a view gets the view's shape, contiguous.
            if shape.len() == 2 {
                let v = o.t().unwrap().zeros_like().unwrap();
                assert_eq!(v.dims(), &[shape[1], shape[0]]);
                assert!(v.is_contiguous());
            }
            for value in [0.0, -3.5, 1.0] {
                let s = Tensor::scalar(value, dtype, dev).unwrap();
                assert_eq!((s.rank(), s.dtype()), (0, dtype));
                assert_converted(&s, &[], &[value], &format!("scalar {value} {dtype}"));
            }
        }
    }
}

fn arange_like_numpy(dev: &Device) {
    // (start, end, step); the reference is NumPy's: ceil((end - start) / step) values start + i * step.
    let cases: [(f64, f64, f64); 9] = [
        (0.0, 5.0, 1.0),
        (0.5, 3.2, 1.0),
        (5.0, 0.0, -1.5),
        (3.0, 3.0, 1.0),
        (5.0, 0.0, 1.0),
        (0.0, 5.0, -1.0),
        (-2.0, 2.0, 0.5),
        (0.0, 1.0, 0.3),
        (10.0, -10.0, -3.0),
    ];
    for (start, end, step) in cases {
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        let values: Vec<f64> = (0..n).map(|i| start + i as f64 * step).collect();
        for dtype in supported(dev, &DType::ALL) {
            let ctx = format!("arange_step({start}, {end}, {step}) {dtype}");
            let t = Tensor::arange_step(start, end, step, dtype, dev).unwrap();
            assert_eq!(t.dtype(), dtype);
            assert_eq!(t.dims(), &[n], "{ctx}");
            assert_converted(&t, &[n], &values, &ctx);
            if step == 1.0 {
                let a = Tensor::arange(start, end, dtype, dev).unwrap();
                assert_converted(&a, &[n], &values, &format!("arange {ctx}"));
            }
        }
    }
    assert_err(Tensor::arange_step(0.0, 1.0, 0.0, DType::F32, dev), &["arange", "step"]);
    assert_err(Tensor::arange_step(0.0, f64::NAN, 1.0, DType::F32, dev), &["arange", "NaN"]);
    assert_err(Tensor::arange_step(0.0, f64::INFINITY, 1.0, DType::I32, dev), &["arange", "inf"]);
    assert_err(Tensor::arange_step(0.0, 1.0, f64::NAN, DType::I32, dev), &["arange", "NaN"]);
}

fn arange_refuses_absurd_lengths(dev: &Device) {
    // 1e30 elements cannot be allocated: this must be an error, not a panic or an abort.
    let r = std::panic::catch_unwind(|| Tensor::arange(0.0, 1e30, DType::F32, dev).map(|t| t.elem_count()));
    assert!(r.is_ok(), "arange(0, 1e30) panicked instead of returning an error");
    assert_err(r.unwrap(), &["arange"]);
}

fn linspace_like_numpy(dev: &Device) {
    for (start, end) in [(0.0, 1.0), (-3.0, 7.5), (2.0, -2.0), (1.0, 1.0)] {
        for n in [0usize, 1, 2, 5, 11] {
            // NumPy: start + i * (end - start) / (n - 1), with the last value exactly `end`.
            let values: Vec<f64> =
                (0..n)
                    .map(|i| {
                        if n > 1 && i == n - 1 {
                            end
                        } else {
                            start + i as f64 * (end - start) / (n.max(2) - 1) as f64
                        }
                    })
                    .collect();
            for dtype in supported(dev, &DType::ALL) {
                let t = Tensor::linspace(start, end, n, dtype, dev).unwrap();
                assert_eq!((t.dims(), t.dtype()), (&[n][..], dtype));
                assert_converted(&t, &[n], &values, &format!("linspace({start}, {end}, {n}) {dtype}"));
                if n >= 2 && dtype == DType::F64 {
                    let v = t.to_vec::<f64>().unwrap();
                    assert_eq!((v[0], v[n - 1]), (start, end), "endpoints are exact");
                }
            }
        }
    }
}

fn eye_is_identity(dev: &Device) {
    for n in [0usize, 1, 4, 7] {
        for dtype in supported(dev, &DType::ALL) {
            let t = Tensor::eye(n, dtype, dev).unwrap();
            assert_eq!((t.dims(), t.dtype()), (&[n, n][..], dtype));
            let values: Vec<f64> = (0..n * n).map(|i| ((i / n.max(1)) == (i % n.max(1))) as u8 as f64).collect();
            assert_exact(&t, &RefArray::new(vec![n, n], values), &format!("eye({n}) {dtype}"));
        }
    }
}

fn rand_range_and_seed(dev: &Device) {
    for dtype in supported(dev, &[DType::F32, DType::F64, DType::F16, DType::BF16]) {
        for (lo, hi) in [(0.0, 1.0), (-3.0, 5.0), (10.0, 10.5)] {
            let t = Tensor::rand(lo, hi, (50, 40), dtype, 7, dev).unwrap();
            assert_eq!((t.dims(), t.dtype()), (&[50, 40][..], dtype));
            let v = t.to_f64_vec().unwrap();
            // Rounding to a narrow float (f16, bf16, and f32 near `hi`) may land exactly on `hi`.
            let narrow = dtype != DType::F64;
            assert!(v.iter().all(|&x| x >= lo && (x < hi || (narrow && x == hi))), "rand {dtype} [{lo}, {hi})");
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let sd = (hi - lo) / 12f64.sqrt();
            assert!(
                (mean - (lo + hi) / 2.0).abs() < 5.0 * sd / (v.len() as f64).sqrt() + 1e-2 * (hi - lo),
                "rand mean {mean}"
            );
            let same = Tensor::rand(lo, hi, (50, 40), dtype, 7, dev).unwrap().to_f64_vec().unwrap();
            assert_eq!(v, same, "same seed, same values");
            let other = Tensor::rand(lo, hi, (50, 40), dtype, 8, dev).unwrap().to_f64_vec().unwrap();
            assert_ne!(v, other, "another seed, other values");
        }
    }
    for dtype in supported(dev, &[DType::I32, DType::I64, DType::U8, DType::U32]) {
        let t = Tensor::rand(0.0, 10.0, 1000, dtype, 1, dev).unwrap();
        let v = t.to_f64_vec().unwrap();
        assert!(v.iter().all(|&x| (0.0..10.0).contains(&x) && x.fract() == 0.0), "rand {dtype}");
        for k in 0..10 {
            assert!(v.contains(&(k as f64)), "rand {dtype} never gave {k}");
        }
    }
    assert_eq!(Tensor::rand(0.0, 1.0, (0, 3), DType::F32, 1, dev).unwrap().dims(), &[0, 3]);
}

fn randn_moments(dev: &Device) {
    for dtype in supported(dev, &[DType::F32, DType::F64, DType::F16, DType::BF16]) {
        for (mean, std) in [(0.0, 1.0), (3.0, 0.5), (-10.0, 4.0)] {
            let n = 20_000;
            let t = Tensor::randn(mean, std, n, dtype, 42, dev).unwrap();
            let v = t.to_f64_vec().unwrap();
            let m = v.iter().sum::<f64>() / n as f64;
            let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64;
            // 5 standard errors, plus the rounding of bf16.
            let round = if dtype == DType::BF16 { 1e-2 * mean.abs() } else { 0.0 };
            assert!((m - mean).abs() < 5.0 * std / (n as f64).sqrt() + round, "randn {dtype} mean {m} vs {mean}");
            assert!((var.sqrt() / std - 1.0).abs() < 0.04, "randn {dtype} std {} vs {std}", var.sqrt());
            let same = Tensor::randn(mean, std, n, dtype, 42, dev).unwrap().to_f64_vec().unwrap();
            assert_eq!(v, same);
            let other = Tensor::randn(mean, std, n, dtype, 43, dev).unwrap().to_f64_vec().unwrap();
            assert_ne!(v, other);
        }
    }
}

fn display_like_numpy(dev: &Device) {
    let show = |v: &[f64], shape: &[usize], dtype: DType| tensor(v, shape, dtype, dev).to_string();
    assert_eq!(show(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::F32), "[[1. 2.]\n [3. 4.]]");
    assert_eq!(show(&[-1.0, 20.0, 3.0], &[3], DType::I64), "[-1 20  3]");
    assert_eq!(show(&[1.0, 200.0, 30.0, 4.0], &[2, 2], DType::U8), "[[  1 200]\n [ 30   4]]");
    assert_eq!(show(&[1.0, 0.0], &[2], DType::Bool), "[ True False]");
    assert_eq!(show(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.0], &[4], DType::F32), "[ nan  inf -inf   1.]");
    assert_eq!(show(&[0.1], &[1], DType::F16), "[0.1]");
    assert_eq!(show(&[2.5], &[], DType::F32), "2.5");
    assert_eq!(show(&[7.0], &[], DType::I32), "7");
    assert_eq!(show(&[1.0], &[], DType::Bool), "True");
    assert_eq!(show(&[], &[0], DType::F32), "[]");
    assert_eq!(show(&[1.0, 2.0, 3.0, 4.0], &[1, 2, 2], DType::I32), "[[[1 2]\n  [3 4]]]");
    // Summarised: the first and last three entries of each long axis.
    let v: Vec<f64> = (0..2000).map(|i| i as f64).collect();
    let rows: Vec<String> = (0..1000).map(|r| format!("[{:>4} {:>4}]", 2 * r, 2 * r + 1)).collect();
    let expected = format!("[{}\n ...\n {}]", rows[..3].join("\n "), rows[997..].join("\n "));
    assert_eq!(show(&v, &[1000, 2], DType::I32), expected);
    let block = |b: usize| {
        let row = |r: usize| {
            let base = b * 600 + r * 300;
            let e = |i: usize| format!("{:>4}", base + i);
            format!("[{} {} {} ... {} {} {}]", e(0), e(1), e(2), e(297), e(298), e(299))
        };
        format!("[{}\n  {}]", row(0), row(1))
    };
    let expected = format!("[{}\n\n {}]", block(0), block(1));
    assert_eq!(show(&v[..1200], &[2, 2, 300], DType::I64), expected);
    // Debug adds shape, dtype and device.
    let d = format!("{:?}", tensor(&[1.0, 2.0], &[2], DType::U32, dev));
    assert!(d.contains("(2,)") && d.contains("u32") && d.contains(&dev.name()) && d.ends_with("[1 2]"), "{d}");
}

fn display_scientific_like_numpy(dev: &Device) {
    // What NumPy 2 prints for the same arrays (default print options): the fewest digits that
    // identify each value in its dtype, padded to the most any element needs; the exponent with a
    // sign and at least two digits, all as wide as the widest.
    let show = |v: &[f64], dt: DType| tensor(v, &[v.len()], dt, dev).to_string();
    assert_eq!(show(&[1e8, 1.0], DType::F32), "[1.e+08 1.e+00]");
    assert_eq!(show(&[1e-5, -2.5e-7], DType::F32), "[ 1.0e-05 -2.5e-07]");
    assert_eq!(show(&[1.5e8, 1.0, 0.0], DType::F32), "[1.5e+08 1.0e+00 0.0e+00]");
    // 0.1 is one digit in f32 (NumPy float32 prints 1.e-01), not 1.00000001e-01.
    assert_eq!(show(&[0.1, 1e-5], DType::F32), "[1.e-01 1.e-05]");
    assert_eq!(show(&[f64::NAN, 1e8, f64::NEG_INFINITY], DType::F32), "[   nan 1.e+08   -inf]");
    if dev.is_cpu() {
        assert_eq!(show(&[1.23456789e9, -1.0], DType::F64), "[ 1.23456789e+09 -1.00000000e+00]");
        assert_eq!(show(&[1e-100, 1.0], DType::F64), "[1.e-100 1.e+000]");
    }
}

backend_tests!(
    from_vec_roundtrip,
    filled_constructors,
    arange_like_numpy,
    arange_refuses_absurd_lengths,
    linspace_like_numpy,
    eye_is_identity,
    rand_range_and_seed,
    randn_moments,
    display_like_numpy,
    display_scientific_like_numpy,
);
