//! Numerics at the edges, on every backend: softmax of all `-inf` rows, all-NaN rows and huge values,
//! layer_norm of constant rows, rms_norm of zeros, long f32 sums against an exact sum, f16 overflow, and
//! NaN propagation in max/min/argmax (the same on the CPU and the GPU; docs/RELIABILITY.md records the
//! rules).

mod support;

use kiln::{DType, Device, Tensor};
use std::time::Duration;

fn devices() -> Vec<Device> {
    std::iter::once(Device::cpu()).chain(support::gpu()).collect()
}

fn vals(t: kiln::Result<Tensor>) -> Vec<f32> {
    t.unwrap().to_vec::<f32>().unwrap()
}

fn row(dev: &Device, v: &[f32]) -> Tensor {
    Tensor::from_vec(v.to_vec(), (1, v.len()), dev).unwrap()
}

/// Bitwise-ish equality: NaN equals NaN, otherwise within `tol`.
fn close(a: &[f32], b: &[f32], tol: f32) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= tol)
}

#[test]
fn softmax_at_the_edges() {
    let _dog = support::Watchdog::new("softmax edges", Duration::from_secs(120));
    let inf = f32::INFINITY;
    for dev in devices() {
        // A row of -inf has no largest element: NaN, as in PyTorch (0/0).
        let r = vals(row(&dev, &[-inf; 5]).softmax(-1));
        assert!(r.iter().all(|x| x.is_nan()), "{dev} softmax(-inf row) = {r:?}");
        // All NaN: NaN.
        let r = vals(row(&dev, &[f32::NAN; 5]).softmax(-1));
        assert!(r.iter().all(|x| x.is_nan()), "{dev} softmax(NaN row) = {r:?}");
        // Huge values: the max is subtracted first, so nothing overflows.
        let r = vals(row(&dev, &[1e38, 1e38, -1e38, 0.0]).softmax(-1));
        assert!(close(&r, &[0.5, 0.5, 0.0, 0.0], 1e-6), "{dev} softmax(1e38) = {r:?}");
        let r = vals(row(&dev, &[3e38, -3e38]).log_softmax(-1));
        // Exact: [0, -6e38], which is -inf in f32.
        assert!(r[0] == 0.0 && r[1] == -inf, "{dev} log_softmax(3e38) = {r:?}");
        // Some -inf: those get exactly 0.
        let r = vals(row(&dev, &[-inf, 0.0, -inf, 0.0]).softmax(-1));
        assert!(close(&r, &[0.0, 0.5, 0.0, 0.5], 1e-7), "{dev} {r:?}");
    }
}

#[test]
fn norms_of_constant_and_zero_rows() {
    let _dog = support::Watchdog::new("norm edges", Duration::from_secs(120));
    for dev in devices() {
        let w = Tensor::ones(64, DType::F32, &dev).unwrap();
        let b = Tensor::full(0.5, 64, DType::F32, &dev).unwrap();
        // Constant rows: variance 0, so the normalised row is 0 and the output is the bias.
        for c in [0.0, 3.0, -1e6, 1e30] {
            let x = Tensor::full(c, (3, 64), DType::F32, &dev).unwrap();
            let r = vals(x.layer_norm(&w, Some(&b), 1e-5));
            assert!(r.iter().all(|&v| (v - 0.5).abs() < 1e-3), "{dev} layer_norm(const {c}) = {:?}", &r[..4]);
        }
        // rms_norm of zeros: 0 / sqrt(0 + eps) = 0.
        let z = Tensor::zeros((2, 64), DType::F32, &dev).unwrap();
        assert_eq!(vals(z.rms_norm(&w, 1e-6)), vec![0.0; 128], "{dev}");
        // With eps 0 it is 0/0: NaN, reported, not hidden.
        let r = vals(z.rms_norm(&w, 0.0));
        assert!(r.iter().all(|v| v.is_nan()), "{dev} rms_norm(zeros, eps 0) = {:?}", &r[..4]);
    }
}

#[test]
fn long_f32_sums_match_an_exact_sum() {
    let _dog = support::Watchdog::new("long sums", Duration::from_secs(300));
    // CI: 2^22 elements; `KILN_LONG_SUM=100000000` for the hand run of docs/RELIABILITY.md.
    let n = support::env_count("KILN_LONG_SUM", 1 << 22);
    // Values k/1024 for k in 0..1024 repeated: every partial sum is exact in f64.
    let host: Vec<f32> = (0..n).map(|i| (i % 1024) as f32 / 1024.0).collect();
    let exact: f64 = host.iter().map(|&v| v as f64).sum();
    for dev in devices() {
        if dev.is_gpu() && n * 4 > dev.gpu_info().unwrap().max_storage_binding as usize {
            continue;
        }
        let t = Tensor::from_slice(&host, n, &dev).unwrap();
        let got = t.sum_all().unwrap().to_scalar::<f32>().unwrap() as f64;
        let rel = (got - exact).abs() / exact;
        eprintln!("{dev}: sum of {n} f32 = {got} (exact {exact}, relative error {rel:.2e})");
        // A pairwise or blocked sum stays within a few ulps per level; a naive running sum would be
        // off by ~n * eps.
        assert!(rel < 1e-5, "{dev}: {got} vs {exact}");
        let mean = t.mean_all().unwrap().to_scalar::<f32>().unwrap() as f64;
        assert!((mean - exact / n as f64).abs() < 1e-5, "{dev}: mean {mean}");
    }
}

#[test]
fn f16_overflow_gives_inf_and_nan_propagates_in_max_min_argmax() {
    let _dog = support::Watchdog::new("f16 and NaN", Duration::from_secs(120));
    let mut results = Vec::new();
    for dev in devices() {
        let big = Tensor::from_f64_values(&[60000.0, -60000.0, 1.0], 3, DType::F16, &dev).unwrap();
        let r = big.mul_scalar(2.0).unwrap().to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(r, vec![f32::INFINITY, f32::NEG_INFINITY, 2.0], "{dev}");
        let r = big.sum_all().unwrap().to_dtype(DType::F32).unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(r, 1.0, "{dev}: f16 sums accumulate in f32");
        let cast = Tensor::from_vec(vec![70000f32, -1e10, 65504.0], 3, &dev).unwrap().to_dtype(DType::F16).unwrap();
        assert_eq!(
            cast.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
            vec![f32::INFINITY, f32::NEG_INFINITY, 65504.0]
        );

        // NaN propagates: max/min of a row holding NaN is NaN; argmax/argmin point at the first NaN.
        let x = Tensor::from_vec(vec![1f32, f32::NAN, 3.0, 0.0, 5.0, 2.0], (2, 3), &dev).unwrap();
        let r = (
            vals(x.max(&[1], false)),
            vals(x.min(&[1], false)),
            x.argmax(1, false).unwrap().to_f64_vec().unwrap(),
            x.argmin(1, false).unwrap().to_f64_vec().unwrap(),
            vals(x.max_all()),
        );
        results.push((dev.to_string(), format!("{r:?}")));
        assert!(r.0[0].is_nan() && r.0[1] == 5.0, "{dev} max {:?}", r.0);
        assert!(r.1[0].is_nan() && r.1[1] == 0.0, "{dev} min {:?}", r.1);
        assert_eq!(r.2, vec![1.0, 1.0], "{dev} argmax");
        assert_eq!(r.3, vec![1.0, 0.0], "{dev} argmin");
        assert!(r.4[0].is_nan(), "{dev} max_all");
    }
    eprintln!("{results:?}");
}
