//! The fused decode ops against f64 references: `linear_fused` (RMSNorm or silu_mul before a
//! projection, the residual after it) and `KvCache::append_rope` (rope of q and k plus the cache
//! append), on the fused GPU kernels' shapes and on the ones that fall back to the composed ops.

use crate::common::*;
use kiln::quant::{QTensor, QuantType};
use kiln::{DType, Device, KvCache, LinearInput, Tensor};

/// Rounding unit of the dtype's storage (the error of one rounding, relative).
fn unit(dt: DType) -> f64 {
    match dt {
        DType::BF16 => 1.0 / 256.0,
        DType::F16 => 1.0 / 2048.0,
        _ => 1e-6,
    }
}

#[derive(Clone, Copy, Debug)]
enum Pro {
    Plain,
    Norm,
    Silu,
}

/// f64 reference of `residual + pro(x) @ w^T` and the magnitude `sum |h w|` of each output.
#[allow(clippy::too_many_arguments)]
fn reference(
    x: &[f64],
    w: &[f64],
    g: &[f64],
    r: Option<&[f64]>,
    pro: Pro,
    (m, n, k): (usize, usize, usize),
    eps: f64,
) -> (Vec<f64>, Vec<f64>) {
    let kin = if matches!(pro, Pro::Silu) { 2 * k } else { k };
    let (mut out, mut mag) = (vec![0.0; m * n], vec![0.0; m * n]);
    for i in 0..m {
        let row = &x[i * kin..(i + 1) * kin];
        let h: Vec<f64> = match pro {
            Pro::Plain => row.to_vec(),
            Pro::Norm => {
                let ms = row.iter().map(|v| v * v).sum::<f64>() / k as f64;
                let s = 1.0 / (ms + eps).sqrt();
                row.iter().zip(g).map(|(v, g)| v * s * g).collect()
            }
            Pro::Silu => (0..k).map(|t| row[t] / (1.0 + (-row[t]).exp()) * row[k + t]).collect(),
        };
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            out[i * n + j] = h.iter().zip(wr).map(|(a, b)| a * b).sum::<f64>() + r.map_or(0.0, |r| r[i * n + j]);
            mag[i * n + j] =
                h.iter().zip(wr).map(|(a, b)| (a * b).abs()).sum::<f64>() + r.map_or(0.0, |r| r[i * n + j].abs());
        }
    }
    (out, mag)
}

/// Every prologue, with and without residual, for each float dtype, on fused shapes (k a multiple
/// of the 16-byte unit, even n, up to 8 rows) and fallback ones (odd k or n, 9 rows), contiguous
/// and at unaligned offsets.
fn linear_fused_matches_reference(dev: &Device) {
    let shapes = [(1, 64, 256), (3, 34, 72), (8, 130, 1032), (2, 6, 4096), (1, 7, 24), (2, 5, 13), (9, 16, 64)];
    let eps = 1e-5;
    for dt in supported(dev, &[DType::F32, DType::F16, DType::BF16]) {
        for (si, &(m, n, k)) in shapes.iter().enumerate() {
            for pro in [Pro::Plain, Pro::Norm, Pro::Silu] {
                for with_res in [false, true] {
                    for offset in [0, 3] {
                        let seed = (si * 100 + with_res as usize * 10 + offset) as u64;
                        let kin = if matches!(pro, Pro::Silu) { 2 * k } else { k };
                        // x at `offset` elements into a larger buffer (3: not a 16-byte unit).
                        let xv = round_to(&random_values(m * kin + offset, dt, seed), dt);
                        let xall = tensor(&xv, &[m * kin + offset], dt, dev);
                        let x = xall.narrow(0, offset, m * kin).unwrap().reshape((m, kin)).unwrap();
                        let wv: Vec<f64> = round_to(&random_values(n * k, dt, seed + 1), dt)
                            .iter()
                            .map(|v| v / (k as f64).sqrt())
                            .collect();
                        let wv = round_to(&wv, dt);
                        let w = tensor(&wv, &[n, k], dt, dev);
                        let gv: Vec<f64> = round_to(&random_values(k, dt, seed + 2), dt);
                        let g = tensor(&gv, &[k], dt, dev);
                        let rv = round_to(&random_values(m * n, dt, seed + 3), dt);
                        let r = tensor(&rv, &[m, n], dt, dev);
                        let input = match pro {
                            Pro::Plain => LinearInput::Plain,
                            Pro::Norm => LinearInput::RmsNorm { weight: &g, eps },
                            Pro::Silu => LinearInput::SiluMul,
                        };
                        let y = x.linear_fused(&w, input, with_res.then_some(&r)).unwrap();
                        let ctx = format!("{dt} {pro:?} m={m} n={n} k={k} residual={with_res} offset={offset}");
                        assert_eq!((y.dims(), y.dtype()), (&[m, n][..], dt), "{ctx}");
                        let xs: Vec<f64> = xv[offset..].to_vec();
                        let (want, mag) = reference(&xs, &wv, &gv, with_res.then_some(&rv[..]), pro, (m, n, k), eps);
                        let got = y.to_f64_vec().unwrap();
                        let u = unit(dt);
                        for (i, ((&gt, &e), &mg)) in got.iter().zip(&want).zip(&mag).enumerate() {
                            // The input rounded once (composed path) or not (fused), the sum in
                            // f32, the output rounded once.
                            let bound = 2.0 * u * mg + u * e.abs() + 1e-5 * mg + 1e-6;
                            assert!((gt - e).abs() <= bound, "{ctx} [{i}]: {gt} vs {e} (bound {bound})");
                        }
                    }
                }
            }
        }
    }
}

/// `qlinear_fused` against the f64 product with the dequantised weight, for each prologue, with
/// and without residual, for Q8_0 and Q4_K weights and f32/bf16 input (1 and 3 rows; 9 rows and an
/// unaligned input take the composed ops).
fn qlinear_fused_matches_reference(dev: &Device) {
    let eps = 1e-6;
    for qt in [QuantType::Q8_0, QuantType::Q4K] {
        let (n, k) = (34, 512);
        let wf = rand_tensor(&[n, k], DType::F32, 21, dev);
        let w = QTensor::quantize(&wf, qt).unwrap();
        let wv = w.dequantize(DType::F32).unwrap().to_f64_vec().unwrap();
        for dt in [DType::F32, DType::BF16] {
            for (m, offset) in [(1, 0), (3, 0), (9, 0), (2, 3)] {
                for pro in [Pro::Plain, Pro::Norm, Pro::Silu] {
                    for with_res in [false, true] {
                        let kin = if matches!(pro, Pro::Silu) { 2 * k } else { k };
                        let xv = round_to(&random_values(m * kin + offset, dt, (m + offset) as u64), dt);
                        let xall = tensor(&xv, &[m * kin + offset], dt, dev);
                        let x = xall.narrow(0, offset, m * kin).unwrap().reshape((m, kin)).unwrap();
                        let gv = round_to(&random_values(k, dt, 22), dt);
                        let g = tensor(&gv, &[k], dt, dev);
                        let rv = round_to(&random_values(m * n, dt, 23), dt);
                        let r = tensor(&rv, &[m, n], dt, dev);
                        let input = match pro {
                            Pro::Plain => LinearInput::Plain,
                            Pro::Norm => LinearInput::RmsNorm { weight: &g, eps },
                            Pro::Silu => LinearInput::SiluMul,
                        };
                        let y = x.qlinear_fused(&w, input, with_res.then_some(&r)).unwrap();
                        let ctx = format!("{qt} {dt} {pro:?} m={m} offset={offset} residual={with_res}");
                        assert_eq!((y.dims(), y.dtype()), (&[m, n][..], dt), "{ctx}");
                        let (want, mag) =
                            reference(&xv[offset..], &wv, &gv, with_res.then_some(&rv[..]), pro, (m, n, k), eps);
                        let u = unit(dt);
                        for (i, ((&gt, &e), &mg)) in y.to_f64_vec().unwrap().iter().zip(&want).zip(&mag).enumerate() {
                            let bound = 2.0 * u * mg + u * e.abs() + 1e-5 * mg + 1e-6;
                            assert!((gt - e).abs() <= bound, "{ctx} [{i}]: {gt} vs {e} (bound {bound})");
                        }
                    }
                }
            }
        }
        let x = Tensor::zeros((1, k), DType::F32, dev).unwrap();
        assert_err(x.qlinear_fused(&w, LinearInput::SiluMul, None), &["[qlinear_fused]", "features"]);
    }
}

/// A NaN or infinity in the input row reaches the outputs it feeds (never zeroed by the kernel's
/// handling of units past the row end).
fn linear_fused_propagates_nan(dev: &Device) {
    for dt in supported(dev, &[DType::F32, DType::BF16]) {
        let (n, k) = (8, 64);
        let mut xv = random_values(k, dt, 5);
        xv[k - 1] = f64::NAN;
        let x = tensor(&xv, &[1, k], dt, dev);
        let w = rand_tensor(&[n, k], dt, 6, dev);
        let g = rand_tensor(&[k], dt, 7, dev);
        for input in [LinearInput::Plain, LinearInput::RmsNorm { weight: &g, eps: 1e-6 }] {
            let y = x.linear_fused(&w, input, None).unwrap().to_f64_vec().unwrap();
            assert!(y.iter().all(|v| v.is_nan()), "{dt} {input:?}: {y:?}");
        }
    }
}

/// Bad operands are errors naming the op.
fn linear_fused_errors(dev: &Device) {
    let x = Tensor::zeros((1, 64), DType::F32, dev).unwrap();
    let w = Tensor::zeros((8, 64), DType::F32, dev).unwrap();
    let g = Tensor::zeros(64, DType::F32, dev).unwrap();
    let bad_w = Tensor::zeros(64, DType::F32, dev).unwrap();
    assert_err(x.linear_fused(&bad_w, LinearInput::Plain, None), &["[linear_fused]", "weight must be (out, in)"]);
    assert_err(x.linear_fused(&w, LinearInput::SiluMul, None), &["[linear_fused]", "128 features"]);
    let g7 = Tensor::zeros(7, DType::F32, dev).unwrap();
    assert_err(
        x.linear_fused(&w, LinearInput::RmsNorm { weight: &g7, eps: 1e-6 }, None),
        &["[linear_fused]", "norm weight of shape"],
    );
    let r = Tensor::zeros((1, 7), DType::F32, dev).unwrap();
    assert_err(x.linear_fused(&w, LinearInput::Plain, Some(&r)), &["[linear_fused]", "residual of shape"]);
    let wh = Tensor::zeros((8, 64), DType::BF16, dev).unwrap();
    assert_err(x.linear_fused(&wh, LinearInput::Plain, None), &["[linear_fused]"]);
    let xi = Tensor::zeros((1, 64), DType::I32, dev).unwrap();
    let wi = Tensor::zeros((8, 64), DType::I32, dev).unwrap();
    assert_err(xi.linear_fused(&wi, LinearInput::Plain, None), &["[linear_fused]", "i32"]);
    let ok = x.linear_fused(&w, LinearInput::RmsNorm { weight: &g, eps: 1e-6 }, None).unwrap();
    assert_eq!(ok.dims(), [1, 8]);
}

/// Rope + append of q/k/v rows against the f64 composed ops on the CPU, over several appends
/// (a prompt of 3 positions, then single steps), with the cache views checked after each.
fn append_rope_matches_reference(dev: &Device) {
    for dt in supported(dev, &[DType::F32, DType::F16, DType::BF16]) {
        for (nh, nkv, d) in [(4, 2, 8), (2, 2, 16), (3, 1, 6)] {
            let max = 9;
            let tab_vals: Vec<f64> = (0..max * d / 2).map(|i| ((i as f64) * 0.37).sin()).collect();
            let cos_all = tensor(&round_to(&tab_vals, dt), &[max, d / 2], dt, dev);
            let sin_vals: Vec<f64> = (0..max * d / 2).map(|i| ((i as f64) * 0.37).cos()).collect();
            let sin_all = tensor(&round_to(&sin_vals, dt), &[max, d / 2], dt, dev);
            let cpu = Device::cpu();
            let f64t = |t: &Tensor| {
                let v = t.to_f64_vec().unwrap();
                tensor(&v, t.dims(), DType::F64, &cpu)
            };
            let (mut got_cache, mut ref_cache) = (KvCache::new(max), KvCache::new(max));
            let mut pos = 0;
            for (step, t) in [3, 1, 1, 2].into_iter().enumerate() {
                let w = (nh + 2 * nkv) * d;
                let qkv = rand_tensor(&[t, w], dt, (step * 7 + d) as u64, dev);
                let (cos, sin) = (cos_all.narrow(0, pos, t).unwrap(), sin_all.narrow(0, pos, t).unwrap());
                let (q, k, v) = got_cache.append_rope(&qkv, nh, nkv, &cos, &sin).unwrap();
                let (qr, kr, vr) = ref_cache.append_rope(&f64t(&qkv), nh, nkv, &f64t(&cos), &f64t(&sin)).unwrap();
                pos += t;
                let ctx = format!("{dt} nh={nh} nkv={nkv} d={d} step={step}");
                assert_eq!(q.dims(), [1, nh, t, d], "{ctx}");
                assert_eq!(k.dims(), [1, nkv, pos, d], "{ctx}");
                assert_eq!(got_cache.len(), pos, "{ctx}");
                assert_close(&q, &RefArray::of(&qr), 2.0, &format!("{ctx} q"));
                assert_close(&k, &RefArray::of(&kr), 2.0, &format!("{ctx} k"));
                assert_exact(&v, &RefArray::of(&vr), &format!("{ctx} v"));
            }
            // Past the end: an error, the cache unchanged.
            let qkv = rand_tensor(&[3, (nh + 2 * nkv) * d], dt, 99, dev);
            let (c, s) = (cos_all.narrow(0, 0, 3).unwrap(), sin_all.narrow(0, 0, 3).unwrap());
            assert_err(got_cache.append_rope(&qkv, nh, nkv, &c, &s), &["kv_cache_append", "max_len"]);
            assert_eq!(got_cache.len(), 7);
        }
    }
    let mut cache = KvCache::new(4);
    let bad = Tensor::zeros((1, 10), DType::F32, dev).unwrap();
    let tab = Tensor::zeros((1, 1), DType::F32, dev).unwrap();
    assert_err(cache.append_rope(&bad, 2, 1, &tab, &tab), &["kv_cache_append", "qkv of shape"]);
}

crate::backend_tests!(
    linear_fused_matches_reference,
    linear_fused_propagates_nan,
    linear_fused_errors,
    qlinear_fused_matches_reference,
    append_rope_matches_reference,
);
