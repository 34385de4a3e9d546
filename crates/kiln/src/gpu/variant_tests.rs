//! The workgroup-memory variants of the reduction, softmax, norm, fused row and decode attention kernels. The conformance suite
//! reaches only the subgroup variants on devices that have subgroups (lavapipe does), so these run
//! the same ops with subgroups switched off on this thread, against the CPU backend, over shapes
//! that reach every path: one lane per row up to chunked rows and (value, index) second passes;
//! rows in registers (1 to 8 packs per invocation) and rows read twice; packs, words, elements.
//! They skip when no adapter exists unless `KILN_REQUIRE_GPU=1`.

use super::runtime::subgroups::without_subgroups;
use crate::{DType, Device, Tensor};
use rand::{RngExt, SeedableRng};

fn gpu() -> Option<Device> {
    match Device::gpu() {
        Ok(d) => {
            d.set_poison(true);
            Some(d)
        }
        Err(e) => {
            assert!(!crate::settings::REQUIRE_GPU.is_one(), "KILN_REQUIRE_GPU=1 but: {e}");
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// `n` normal values (rounded to integers when `ties`), a few NaN/inf when `special`.
fn values(n: usize, seed: u64, ties: bool, special: bool) -> Vec<f32> {
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut v: Vec<f32> = (0..n)
        .map(|_| {
            let (u1, u2) = (r.random::<f64>().max(1e-12), r.random::<f64>());
            let x = ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos() * 2.0) as f32;
            if ties {
                x.round()
            } else {
                x
            }
        })
        .collect();
    if special && n > 10 {
        v[n / 2] = f32::NAN;
        v[n / 3] = f32::INFINITY;
        v[n - 1] = f32::NEG_INFINITY;
    }
    v
}

/// `x` on the GPU and on the CPU, as `dtype`.
fn pair(v: &[f32], shape: &[usize], dtype: DType, dev: &Device) -> (Tensor, Tensor) {
    let c = Tensor::from_vec(v.to_vec(), shape.to_vec(), &Device::cpu()).unwrap().to_dtype(dtype).unwrap();
    (c.to_device(dev).unwrap(), c)
}

/// Asserts `got` (GPU) matches `want` (CPU) within `atol + rtol * |want|`, NaN matching NaN.
fn check(got: &Tensor, want: &Tensor, atol: f64, rtol: f64, what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}");
    assert_eq!(got.dtype(), want.dtype(), "{what}");
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    for (i, (a, e)) in g.iter().zip(&w).enumerate() {
        let ok = if a.is_nan() || e.is_nan() {
            a.is_nan() && e.is_nan()
        } else if a.is_infinite() || e.is_infinite() {
            a == e
        } else {
            (a - e).abs() <= atol + rtol * e.abs()
        };
        assert!(ok, "{what}: element {i}: gpu {a}, cpu {e}");
    }
}

/// (atol, rtol) of a result of `dtype` after `n` accumulated f32 terms.
fn tol(dtype: DType, n: usize) -> (f64, f64) {
    let f = (n as f64).sqrt();
    match dtype {
        DType::F16 => (2e-3 * f, 4e-3),
        DType::BF16 => (2e-2 * f, 3e-2),
        _ => (1e-5 * f, 1e-4),
    }
}

#[test]
fn reductions_without_subgroups() {
    let Some(dev) = gpu() else { return };
    let shapes: [&[usize]; 8] =
        [&[300, 3], &[40, 33], &[7, 257], &[3, 4097], &[2, 70001], &[70001, 2], &[33, 40], &[257]];
    without_subgroups(|| {
        for dtype in [DType::F32, DType::F16, DType::I32] {
            for (si, shape) in shapes.iter().enumerate() {
                let n: usize = shape.iter().product();
                let v = values(n, si as u64, si % 2 == 0, dtype == DType::F32 && si % 3 == 0);
                let (g, c) = pair(&v, shape, dtype, &dev);
                let axes: Vec<Vec<isize>> =
                    if shape.len() == 2 { vec![vec![1], vec![0], vec![0, 1]] } else { vec![vec![0]] };
                for ax in axes {
                    let what = format!("{dtype} {shape:?} axes {ax:?}");
                    let n_red: usize = ax.iter().map(|&a| shape[a as usize]).product();
                    let (atol, rtol) = tol(dtype, n_red);
                    check(&g.sum(&ax, false).unwrap(), &c.sum(&ax, false).unwrap(), atol, rtol, &format!("sum {what}"));
                    check(&g.max(&ax, false).unwrap(), &c.max(&ax, false).unwrap(), 0.0, 0.0, &format!("max {what}"));
                    check(&g.min(&ax, true).unwrap(), &c.min(&ax, true).unwrap(), 0.0, 0.0, &format!("min {what}"));
                    if let [a] = ax[..] {
                        check(
                            &g.argmax(a, false).unwrap(),
                            &c.argmax(a, false).unwrap(),
                            0.0,
                            0.0,
                            &format!("argmax {what}"),
                        );
                        check(
                            &g.argmin(a, false).unwrap(),
                            &c.argmin(a, false).unwrap(),
                            0.0,
                            0.0,
                            &format!("argmin {what}"),
                        );
                    }
                }
            }
        }
    });
}

#[test]
fn softmax_and_norms_without_subgroups() {
    let Some(dev) = gpu() else { return };
    // Row lengths reaching 1, 2, 4 and 8 packs per invocation, rows read twice, and the word and
    // element modes (f16/bf16 rows of 8n + 2 and odd rows).
    let rows: [(usize, usize); 10] =
        [(5, 7), (3, 500), (2, 1002), (2, 4096), (2, 4098), (1, 16385), (1, 32768), (1, 33000), (2, 33001), (3, 257)];
    without_subgroups(|| {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for (i, &(r, k)) in rows.iter().enumerate() {
                let v = values(r * k, 100 + i as u64, false, false);
                let (g, c) = pair(&v, &[r, k], dtype, &dev);
                let wv = values(k, 200 + i as u64, false, false);
                let bv = values(k, 300 + i as u64, false, false);
                let (gw, cw) = pair(&wv, &[k], dtype, &dev);
                let (gb, cb) = pair(&bv, &[k], dtype, &dev);
                let what = format!("{dtype} ({r}, {k})");
                let (atol, rtol) = tol(dtype, 16);
                check(&g.softmax(-1).unwrap(), &c.softmax(-1).unwrap(), atol, rtol, &format!("softmax {what}"));
                let (la, lr) = tol(dtype, k);
                check(&g.log_softmax(-1).unwrap(), &c.log_softmax(-1).unwrap(), la, lr, &format!("log_softmax {what}"));
                check(
                    &g.rms_norm(&gw, 1e-5).unwrap(),
                    &c.rms_norm(&cw, 1e-5).unwrap(),
                    atol,
                    rtol,
                    &format!("rms {what}"),
                );
                let got = g.layer_norm(&gw, Some(&gb), 1e-5).unwrap();
                check(&got, &c.layer_norm(&cw, Some(&cb), 1e-5).unwrap(), atol, rtol, &format!("layer {what}"));
            }
        }
    });
}

/// Fused row kernels (`kiln::compile`) with workgroup-memory reductions: RMSNorm, softmax and
/// max/min rows from primitives, rows in registers and rows read per pass, a strided view.
#[test]
fn fused_rows_without_subgroups() {
    let Some(dev) = gpu() else { return };
    let f = crate::compile(|x: &[Tensor]| {
        let ms = x[0].mul(&x[0])?.mean(&[-1], true)?;
        let norm = x[0].mul(&ms.add_scalar(1e-5)?.rsqrt()?)?.mul(&x[1])?;
        let m = x[0].max(&[-1], true)?;
        let e = x[0].sub(&m)?.exp()?;
        Ok(vec![norm, e.div(&e.sum(&[-1], true)?)?, x[0].min(&[-1], false)?, m])
    });
    without_subgroups(|| {
        for dtype in [DType::F32, DType::F16] {
            for (i, &(r, k)) in [(5, 7), (3, 500), (2, 4096), (2, 4098), (1, 40001)].iter().enumerate() {
                let (g, c) = pair(&values(r * k, 500 + i as u64, false, false), &[r, k], dtype, &dev);
                let (gw, cw) = pair(&values(k, 600 + i as u64, false, false), &[k], dtype, &dev);
                // The transposed copy is a strided view along the row.
                let (gt, ct) = pair(&values(r * k, 700 + i as u64, false, false), &[k, r], dtype, &dev);
                for (x, cx, what) in [(g, c, "contiguous"), (gt.t().unwrap(), ct.t().unwrap(), "strided")] {
                    let got = f.call(&[x, gw.clone()]).unwrap();
                    let want = f.call(&[cx, cw.clone()]).unwrap();
                    let (atol, rtol) = tol(dtype, k);
                    for (j, (a, b)) in got.iter().zip(&want).enumerate() {
                        check(a, b, atol, rtol, &format!("fused rows {dtype} ({r}, {k}) {what} output {j}"));
                    }
                }
            }
        }
    });
}

#[test]
fn decode_attention_without_subgroups() {
    let Some(dev) = gpu() else { return };
    // (hq, hkv, tq, tk, d): GQA rows per workgroup 1, 2 and 4, split and unsplit keys, a split tail,
    // causal offsets with several queries, an odd head size.
    let shapes =
        [(8, 2, 1, 700, 64), (4, 4, 1, 37, 128), (8, 4, 2, 1100, 64), (2, 1, 3, 300, 40), (4, 1, 1, 2049, 128)];
    without_subgroups(|| {
        for dtype in [DType::F32, DType::F16] {
            for (i, &(hq, hkv, tq, tk, d)) in shapes.iter().enumerate() {
                let seed = 400 + 3 * i as u64;
                let (gq, cq) = pair(&values(hq * tq * d, seed, false, false), &[1, hq, tq, d], dtype, &dev);
                let (gk, ck) = pair(&values(hkv * tk * d, seed + 1, false, false), &[1, hkv, tk, d], dtype, &dev);
                let (gv, cv) = pair(&values(hkv * tk * d, seed + 2, false, false), &[1, hkv, tk, d], dtype, &dev);
                for causal in [false, true] {
                    let got = gq.sdpa(&gk, &gv, causal, None).unwrap();
                    let want = cq.sdpa(&ck, &cv, causal, None).unwrap();
                    let (atol, rtol) = tol(dtype, 64);
                    check(
                        &got,
                        &want,
                        atol,
                        rtol,
                        &format!("sdpa {dtype} hq{hq} hkv{hkv} tq{tq} tk{tk} d{d} causal {causal}"),
                    );
                }
            }
        }
    });
}

/// The quantized matrix-vector kernel summing its lanes in workgroup memory only, every format, f32
/// and bf16 input, one and several rows, with lane sets of 32 to 128 lanes (k of 1024 to 8192).
#[test]
fn quant_matvec_without_subgroups() {
    use crate::quant::{QTensor, QuantType};
    let Some(dev) = gpu() else { return };
    let cpu = Device::cpu();
    for qt in QuantType::ALL {
        for (n, k, m, dt) in [(38, 1024, 1, DType::F32), (22, 8192, 3, DType::BF16), (14, 2048, 2, DType::F32)] {
            let wv = values(n * k, 7, false, false);
            let w = QTensor::quantize(&Tensor::from_vec(wv, (n, k), &cpu).unwrap(), qt).unwrap();
            let (xg, x) = pair(&values(m * k, 8, false, false), &[m, k], dt, &dev);
            let want = x.qlinear(&w, None).unwrap();
            let got = without_subgroups(|| xg.qlinear(&w.to_device(&dev).unwrap(), None)).unwrap();
            // f32 sums of k products in another order; bf16 output rounding.
            let rtol = if dt == DType::BF16 { 8e-3 } else { 1e-4 };
            check(&got, &want, 1e-3, rtol, &format!("qlinear {qt} ({n}, {k}) m={m} {dt}"));
        }
    }
}
