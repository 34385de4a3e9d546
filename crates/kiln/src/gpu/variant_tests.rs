//! The workgroup-memory variants of the reduction, softmax, norm, fused row and decode attention
//! kernels. The conformance suite reaches only the subgroup variants on devices that have subgroups
//! (lavapipe does), so these run the same ops with subgroups switched off on this thread, over shapes
//! that reach every path: one lane per row up to chunked rows and (value, index) second passes;
//! rows in registers (1 to 8 packs per invocation) and rows read twice; packs, words, elements.
//! They skip when no adapter exists unless `KILN_REQUIRE_GPU=1`.
//!
//! References: the same op on the CPU in f64 of the same stored inputs (the f64 CPU kernels are
//! themselves checked against plain f64 loops by the conformance suite). Bounds per output element,
//! derived from the op's error chain in f32 (the compute type; `u` = 2^-24) and the final rounding
//! to the dtype (`bound_stored`): a sum of n terms `n u sum|x|`; max/min/argmax exact; softmax,
//! log_softmax, RMSNorm and LayerNorm as their functions below state. `controls` shows that an
//! all-zero and a shifted result fail each bound. Decode attention and the quantized matvec are
//! compared with the CPU backend in their storage dtype (tolerances stated there).

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
    let w = want.to_f64_vec().unwrap();
    let bound: Vec<f64> = w.iter().map(|e| atol + rtol * e.abs()).collect();
    if let Err(e) = bounded(&got.to_f64_vec().unwrap(), &w, &bound) {
        panic!("{what}: {e}");
    }
}

/// `got` within `bound` of `want` element by element; NaN matches only NaN and an infinity only the
/// same infinity; a bound list of another length is an error.
fn bounded(got: &[f64], want: &[f64], bound: &[f64]) -> Result<(), String> {
    if got.len() != want.len() || bound.len() != want.len() {
        return Err(format!("{} values, {} expected, {} bounds", got.len(), want.len(), bound.len()));
    }
    for (i, ((&g, &w), &b)) in got.iter().zip(want).zip(bound).enumerate() {
        let ok = if g.is_nan() || w.is_nan() {
            g.is_nan() && w.is_nan()
        } else if g.is_infinite() || w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= b
        };
        if !ok {
            return Err(format!("element {i}: gpu {g}, f64 reference {w} (bound {b:.3e})"));
        }
    }
    Ok(())
}

/// Asserts the GPU result `got` is within `bound` of the f64 reference `want`, and that the bound
/// rejects an all-zero result and one shifted by an element (where those differ from `want`).
fn check_ref(got: &Tensor, want: &Tensor, bound: &[f64], what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}");
    let w = want.to_f64_vec().unwrap();
    if let Err(e) = bounded(&got.to_f64_vec().unwrap(), &w, bound) {
        panic!("{what} ({}): {e}", got.dtype());
    }
    controls(&w, bound, what);
}

/// The bound rejects zeros and a shift by one element, wherever it can: where some expected value is
/// larger than its bound (a worst-case bound of a long sum of random-sign terms, n u sum|y|, can
/// exceed the sum itself: a full sum of 140002 normals has a bound near 900 and a value near 370),
/// and where the shift moves some value by more than its bound.
fn controls(want: &[f64], bound: &[f64], what: &str) {
    if want.iter().zip(bound).any(|(w, b)| w.abs() > *b) {
        assert!(bounded(&vec![0.0; want.len()], want, bound).is_err(), "{what}: an all-zero result passes");
    }
    let mut shifted = want.to_vec();
    shifted.rotate_left(1);
    let differs = shifted.iter().zip(want).zip(bound).any(|((&a, &w), &b)| bounded(&[a], &[w], &[b]).is_err());
    if differs {
        assert!(bounded(&shifted, want, bound).is_err(), "{what}: a result shifted by one element passes");
    }
}

/// f32's unit roundoff: every float dtype computes in f32.
const U: f64 = f32::EPSILON as f64 / 2.0;

/// The bound of a value `want` computed in f32 with absolute error `acc`, flushed subnormals
/// included, then stored in `dtype`.
fn bound_stored(dtype: DType, want: f64, acc: f64) -> f64 {
    let u_s = match dtype {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        DType::F32 => U,
        _ => return 0.0,
    };
    let sub = if dtype == DType::F16 { 2f64.powi(-25) } else { 2f64.powi(-134) };
    acc + f32::MIN_POSITIVE as f64 + u_s * (want.abs() + acc) + sub
}

/// The tensor's values in f64 on the CPU (the reference's inputs).
fn f64_of(t: &Tensor) -> Tensor {
    t.to_device(&Device::cpu()).unwrap().to_dtype(DType::F64).unwrap()
}

/// Rows of `k` of a tensor's values (row-major).
fn rows_of(t: &Tensor, k: usize) -> Vec<Vec<f64>> {
    t.to_f64_vec().unwrap().chunks(k.max(1)).map(|r| r.to_vec()).collect()
}

/// The range (max - min) of the finite values of a row.
fn range(row: &[f64]) -> f64 {
    let f = row.iter().filter(|v| v.is_finite());
    f.clone().fold(f64::NEG_INFINITY, |a, &b| a.max(b)) - f.fold(f64::INFINITY, |a, &b| a.min(b))
}

/// Softmax of rows of `k`: with R the row's range, x - max is off by u R (so exp's result by u R
/// relative), exp by 3 + 2R ulp (2u each), the sum by k u more, the division by 3 ulp; `u_s` adds
/// the rounding of every intermediate where the ops are separate (fused primitives in f16).
fn softmax_bounds(x: &[Vec<f64>], want: &[f64], dtype: DType, u_s: f64) -> Vec<f64> {
    let k = x[0].len();
    let mut out = Vec::with_capacity(want.len());
    for (row, wants) in x.iter().zip(want.chunks(k)) {
        let r = range(row);
        let rel = u_s * (2.0 * r + 4.0) + U * (18.0 + 10.0 * r + k as f64);
        out.extend(wants.iter().map(|y| bound_stored(dtype, *y, rel * y.abs())));
    }
    out
}

/// log_softmax of rows of `k`: y = (x - max) - log(sum): the first term off by u R, the log by the
/// sum's relative error ((6 + 5R) u + k u), its own 3 ulp and 2^-21, the subtractions by one
/// rounding each of |max| + |log sum| + |y|.
fn log_softmax_bounds(x: &[Vec<f64>], want: &[f64], dtype: DType) -> Vec<f64> {
    let k = x[0].len();
    let mut out = Vec::with_capacity(want.len());
    for (row, wants) in x.iter().zip(want.chunks(k)) {
        let r = range(row);
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = (row.iter().map(|v| (v - max).exp()).sum::<f64>()).ln();
        let acc = U * r + U * (6.0 + 5.0 * r + k as f64) + 6.0 * U * lse.abs() + 2f64.powi(-21);
        out.extend(wants.iter().map(|y| bound_stored(dtype, *y, acc + 2.0 * U * (max.abs() + lse.abs() + y.abs()))));
    }
    out
}

/// RMSNorm of rows of `k`: the mean of k squares off by k u relative, halved through the rsqrt,
/// which adds 6 ulp, and two products: (k / 2 + 16) u of |y|; `u_s` per separately stored
/// intermediate (six for the fused primitives).
fn rms_bounds(k: usize, want: &[f64], dtype: DType, u_s: f64) -> Vec<f64> {
    let rel = (k as f64 / 2.0 + 16.0) * U + 6.0 * u_s;
    want.iter().map(|y| bound_stored(dtype, *y, rel * y.abs())).collect()
}

/// LayerNorm with bias of rows of `k` (as `tests/conformance/nn.rs` derives it): the mean off by
/// k u mean|x|, each centred value by that plus u|c|, the variance by 2 mean|c| e_c + k u (var +
/// mean x^2), the rsqrt by that over 2 (var + eps) plus 6 ulp, y = c s w + b by |w| (e_c s + |c| s
/// e_s) and two roundings.
fn layer_bounds(x: &[Vec<f64>], w: &[f64], b: &[f64], eps: f64, want: &[f64], dtype: DType) -> Vec<f64> {
    let k = w.len();
    let kf = k as f64;
    let mut out = Vec::with_capacity(want.len());
    for (row, wants) in x.iter().zip(want.chunks(k)) {
        let mean = row.iter().sum::<f64>() / kf;
        let abs_mean = row.iter().map(|v| v.abs()).sum::<f64>() / kf;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / kf;
        let sq_mean = row.iter().map(|v| v * v).sum::<f64>() / kf;
        let c_abs = row.iter().map(|v| (v - mean).abs()).sum::<f64>() / kf;
        let e_m = kf * U * abs_mean;
        let e_var = 2.0 * c_abs * (e_m + U * c_abs) + kf * U * (var + sq_mean);
        let s = 1.0 / (var + eps).sqrt();
        let e_s = e_var / (2.0 * (var + eps)) + 12.0 * U;
        for (i, (&v, &y)) in row.iter().zip(wants).enumerate() {
            let c = v - mean;
            let e_c = e_m + U * c.abs();
            let acc = w[i].abs() * (e_c * s + c.abs() * s * e_s) + 2.0 * U * (y.abs() + b[i].abs());
            out.push(bound_stored(dtype, y, acc));
        }
    }
    out
}

/// The bound of a sum of n terms whose absolute values add up to each of `abs` (`n u sum|x|` plus
/// a flushed subnormal per term), stored in `dtype`; exact for integers.
fn sum_bounds(dtype: DType, n: usize, abs: &[f64], want: &[f64]) -> Vec<f64> {
    if !dtype.is_float() {
        return vec![0.0; want.len()];
    }
    let n = n as f64;
    abs.iter().zip(want).map(|(a, w)| bound_stored(dtype, *w, n * U * a + n * f32::MIN_POSITIVE as f64)).collect()
}

/// (atol, rtol) of a result of `dtype` after `n` accumulated f32 terms, for the comparisons with the
/// CPU backend (decode attention: n = 64; the quantized matvec states its own).
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
                let x64 = f64_of(&c);
                let axes: Vec<Vec<isize>> =
                    if shape.len() == 2 { vec![vec![1], vec![0], vec![0, 1]] } else { vec![vec![0]] };
                for ax in axes {
                    let what = format!("{dtype} {shape:?} axes {ax:?}");
                    let n_red: usize = ax.iter().map(|&a| shape[a as usize]).product();
                    let want = x64.sum(&ax, false).unwrap();
                    let abs = x64.abs().unwrap().sum(&ax, false).unwrap().to_f64_vec().unwrap();
                    let bound = sum_bounds(dtype, n_red, &abs, &want.to_f64_vec().unwrap());
                    check_ref(&g.sum(&ax, false).unwrap(), &want, &bound, &format!("sum {what}"));
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
                let (x64, w64, b64) = (f64_of(&c), f64_of(&cw), f64_of(&cb));
                let xr = rows_of(&x64, k);
                let (wr, br) = (w64.to_f64_vec().unwrap(), b64.to_f64_vec().unwrap());
                let want = x64.softmax(-1).unwrap();
                let bound = softmax_bounds(&xr, &want.to_f64_vec().unwrap(), dtype, 0.0);
                check_ref(&g.softmax(-1).unwrap(), &want, &bound, &format!("softmax {what}"));
                let want = x64.log_softmax(-1).unwrap();
                let bound = log_softmax_bounds(&xr, &want.to_f64_vec().unwrap(), dtype);
                check_ref(&g.log_softmax(-1).unwrap(), &want, &bound, &format!("log_softmax {what}"));
                let want = x64.rms_norm(&w64, 1e-5).unwrap();
                let bound = rms_bounds(k, &want.to_f64_vec().unwrap(), dtype, 0.0);
                check_ref(&g.rms_norm(&gw, 1e-5).unwrap(), &want, &bound, &format!("rms {what}"));
                let want = x64.layer_norm(&w64, Some(&b64), 1e-5).unwrap();
                let bound = layer_bounds(&xr, &wr, &br, 1e-5, &want.to_f64_vec().unwrap(), dtype);
                check_ref(&g.layer_norm(&gw, Some(&gb), 1e-5).unwrap(), &want, &bound, &format!("layer {what}"));
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
                    // The f64 reference of the primitives: the same function on f64 values; the
                    // bounds add a rounding to `dtype` per stored intermediate (the fused kernel
                    // rounds them as the eager ops do).
                    let want = f.call(&[f64_of(&cx), f64_of(&cw)]).unwrap();
                    let u_s = if dtype == DType::F16 { 2f64.powi(-11) } else { U };
                    let xr = rows_of(&f64_of(&cx.contiguous().unwrap()), k);
                    let ctx = |j: usize| format!("fused rows {dtype} ({r}, {k}) {what} output {j}");
                    let w0 = want[0].to_f64_vec().unwrap();
                    check_ref(&got[0], &want[0], &rms_bounds(k, &w0, dtype, u_s), &ctx(0));
                    let w1 = want[1].to_f64_vec().unwrap();
                    check_ref(&got[1], &want[1], &softmax_bounds(&xr, &w1, dtype, u_s), &ctx(1));
                    for j in [2, 3] {
                        check_ref(&got[j], &want[j], &vec![0.0; want[j].elem_count()], &ctx(j));
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
/// and bf16 input, one and several rows, with lane sets of 32 to 128 lanes (k of 1024 to 8192); and
/// the f32 kernel of the formats whose default is the integer-dot one.
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
            let wg = w.to_device(&dev).unwrap();
            let got = without_subgroups(|| xg.qlinear(&wg, None)).unwrap();
            // The f32 kernel of the formats that take integer dots by default, with subgroups.
            let f32_kernel = crate::gpu::matvec::quant_i8::has_units(qt)
                .then(|| crate::gpu::matvec::quant_i8::with_f32_kernel(|| xg.qlinear(&wg, None)).unwrap());
            // As `qlinear`'s conformance test: 1e-5 of sum |x w| (f32 sums in another order, and x
            // in 16-bit fixed point for the integer-dot formats), then bf16 output rounding.
            let wabs = w.dequantize(DType::F32).unwrap().abs().unwrap();
            let mag = x.to_dtype(DType::F32).unwrap().abs().unwrap().matmul(&wabs.t().unwrap()).unwrap();
            let rtol = if dt == DType::BF16 { 8e-3 } else { 1e-6 };
            let wv = want.to_f64_vec().unwrap();
            let bound: Vec<f64> =
                mag.to_f64_vec().unwrap().iter().zip(&wv).map(|(g, e)| 1e-5 * g + rtol * e.abs() + 1e-6).collect();
            for (got, what) in [(Some(got), ""), (f32_kernel, ", the f32 kernel")] {
                if let Err(e) = bounded(&got.map_or(wv.clone(), |g| g.to_f64_vec().unwrap()), &wv, &bound) {
                    panic!("qlinear {qt} ({n}, {k}) m={m} {dt}{what}: {e}");
                }
            }
        }
    }
}

/// The streamed integer-dot matvec with grids so small that each lane set walks several groups of
/// weight rows, loading a step ahead or not (and the one-pass kernel, grid 0): every integer-dot
/// format, one and several rows of x, f32 and bf16, with an addend, and through the RMSNorm
/// prologue with a residual, against the CPU. (A step-ahead load of the wrong unit fails it.)
#[test]
fn quant_matvec_streamed_grids() {
    use crate::gpu::matvec::quant_i8::{has_units, with_grid};
    use crate::quant::{QTensor, QuantType};
    let Some(dev) = gpu() else { return };
    let cpu = Device::cpu();
    for qt in QuantType::ALL.into_iter().filter(|&q| has_units(q)) {
        // Short rows take 2 weight rows a set (`stream_rows`), the long one 4.
        for (n, k, m, dt) in [(200, 512, 1, DType::BF16), (133, 2304, 3, DType::F32), (68, 4608, 1, DType::BF16)] {
            let wv = values(n * k, 7, false, false);
            let w = QTensor::quantize(&Tensor::from_vec(wv, (n, k), &cpu).unwrap(), qt).unwrap();
            let wg = w.to_device(&dev).unwrap();
            let (xg, x) = pair(&values(m * k, 8, false, false), &[m, k], dt, &dev);
            let (rg, r) = pair(&values(m * n, 9, false, false), &[m, n], dt, &dev);
            let (gg, g) = pair(&values(k, 10, false, false), &[k], dt, &dev);
            let want = x.qlinear_add(&w, &r).unwrap().to_f64_vec().unwrap();
            // The norm in f32 (the kernel does not round the normed row to x's dtype).
            let f32 = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
            let normed = f32(&x).rms_norm(&f32(&g), 1e-5).unwrap();
            let want_norm = normed.qlinear_add(&w, &f32(&r)).unwrap().to_f64_vec().unwrap();
            let bound = |x: &Tensor, want: &[f64]| -> Vec<f64> {
                let wabs = w.dequantize(DType::F32).unwrap().abs().unwrap();
                let mag = x.to_dtype(DType::F32).unwrap().abs().unwrap().matmul(&wabs.t().unwrap()).unwrap();
                let rtol = if dt == DType::BF16 { 1.6e-2 } else { 1e-6 };
                mag.to_f64_vec().unwrap().iter().zip(want).map(|(g, e)| 1e-5 * g + rtol * e.abs() + 1e-6).collect()
            };
            let (b, bn) = (bound(&x, &want), bound(&normed, &want_norm));
            for (grid, prefetch) in [(1, true), (3, true), (1, false), (0, true)] {
                let got = with_grid(grid, prefetch, || xg.qlinear_add(&wg, &rg)).unwrap().to_f64_vec().unwrap();
                if let Err(e) = bounded(&got, &want, &b) {
                    panic!("qlinear_add {qt} ({n}, {k}) m={m} {dt}, grid {grid}, prefetch {prefetch}: {e}");
                }
                let norm = crate::LinearInput::RmsNorm { weight: &gg, eps: 1e-5 };
                let fused = with_grid(grid, prefetch, || xg.qlinear_fused(&wg, norm, Some(&rg))).unwrap();
                if let Err(e) = bounded(&fused.to_f64_vec().unwrap(), &want_norm, &bn) {
                    panic!("qlinear_fused rms_norm {qt} ({n}, {k}) m={m} {dt}, grid {grid}, prefetch {prefetch}: {e}");
                }
            }
        }
    }
}

/// The q/k/v product with rope and the cache append (`KvCache::qlinear_append_rope`) on the
/// streamed kernel with grids so small that each lane set walks several quads of head rows, loading
/// a step ahead or not, and on the one-pass kernel (grid 0): every integer-dot format, one stacked
/// weight, and q/k beside v (stored as it is) in a shape of 16 heads. Against the f64 rotation of the
/// f32 product within 1e-5 of
/// sum |h w| (rotated) and f32 rounding; zeros or rows rotated with their neighbours' partners fail
/// the bound. The device compiled kernels with rope, so the fused path ran.
#[test]
fn quant_qkv_rope_streamed_grids() {
    use crate::gpu::matvec::quant_i8::{has_units, with_grid};
    use crate::quant::{QTensor, QuantType};
    use crate::KvCache;
    let Some(dev) = gpu() else { return };
    let cpu = Device::cpu();
    let (d, k) = (64, 512);
    let f64t = |t: &Tensor| Tensor::from_vec(t.to_f64_vec().unwrap(), t.dims().to_vec(), &cpu).unwrap();
    let tab = |f: fn(f32) -> f32| {
        let v: Vec<f32> = (0..d / 2).map(|i| f(5.0 * 10000f32.powf(-2.0 * i as f32 / d as f32))).collect();
        Tensor::from_vec(v, (1, d / 2), &cpu).unwrap()
    };
    let (cos, sin) = (tab(f32::cos), tab(f32::sin));
    let (cos_g, sin_g) = (cos.to_device(&dev).unwrap(), sin.to_device(&dev).unwrap());
    for qt in QuantType::ALL.into_iter().filter(|&q| has_units(q)) {
        for (nh, nkv, split) in [(3, 1, false), (16, 4, true)] {
            let n = (nh + 2 * nkv) * d;
            let wv = values(n * k, 11, false, false);
            let w = QTensor::quantize(&Tensor::from_vec(wv.clone(), (n, k), &cpu).unwrap(), qt).unwrap();
            let parts: Vec<QTensor> = if split {
                let at = (nh + nkv) * d * k;
                [(&wv[..at], (nh + nkv) * d), (&wv[at..], nkv * d)]
                    .map(|(v, rows)| {
                        let t = Tensor::from_vec(v.to_vec(), (rows, k), &cpu).unwrap();
                        QTensor::quantize(&t, qt).unwrap().to_device(&dev).unwrap()
                    })
                    .into()
            } else {
                vec![w.to_device(&dev).unwrap()]
            };
            let parts: Vec<&QTensor> = parts.iter().collect();
            let (xg, x) = pair(&values(k, 12, false, false), &[1, k], DType::F32, &dev);
            let (gg, g) = pair(&values(k, 13, false, false), &[k], DType::F32, &dev);
            let h = x.rms_norm(&g, 1e-5).unwrap();
            let y = h.qlinear(&w, None).unwrap();
            let mag = h.abs().unwrap().matmul(&w.dequantize(DType::F32).unwrap().abs().unwrap().t().unwrap()).unwrap();
            // The reference and its bound in the layout of q (1, nh, 1, d) then k and v (1, nkv, 1, d).
            let rotate = |t: &Tensor, c: &Tensor, s: &Tensor| {
                let (q, k, v) = KvCache::new(1).append_rope(&f64t(t), nh, nkv, &f64t(c), &f64t(s)).unwrap();
                [q, k, v].iter().flat_map(|t| t.to_f64_vec().unwrap()).collect::<Vec<f64>>()
            };
            let want = rotate(&y, &cos, &sin);
            // |x1| |c| + |x2| |s| (first halves) and |x2| |c| + |x1| |s| (second halves): the larger of
            // the rotations of the magnitudes with -|sin| and with |sin|.
            let (ca, sa) = (cos.abs().unwrap(), sin.abs().unwrap());
            let (lo, hi) = (rotate(&mag, &ca, &sa.neg().unwrap()), rotate(&mag, &ca, &sa));
            let bound: Vec<f64> = lo
                .iter()
                .zip(&hi)
                .zip(&want)
                .map(|((a, b), e)| 1e-5 * a.abs().max(b.abs()) + 1e-6 * e.abs() + 1e-6)
                .collect();
            assert!(bounded(&vec![0.0; want.len()], &want, &bound).is_err(), "{qt}: zeros pass");
            let mut swapped = want.clone();
            swapped.chunks_mut(2).for_each(|p| p.swap(0, 1));
            assert!(bounded(&swapped, &want, &bound).is_err(), "{qt}: swapped neighbours pass");
            for (grid, prefetch) in [(1, true), (3, true), (1, false), (0, true)] {
                let norm = crate::LinearInput::RmsNorm { weight: &gg, eps: 1e-5 };
                let mut cache = KvCache::new(1);
                let (q, kc, vc) =
                    with_grid(grid, prefetch, || cache.qlinear_append_rope(&xg, &parts, norm, nh, nkv, &cos_g, &sin_g))
                        .unwrap();
                let got: Vec<f64> = [q, kc, vc].iter().flat_map(|t| t.to_f64_vec().unwrap()).collect();
                if let Err(e) = bounded(&got, &want, &bound) {
                    panic!("qlinear_append_rope {qt} nh {nh} split {split}, grid {grid}, prefetch {prefetch}: {e}");
                }
                // The fused kernels ran (the composed ops compile none with rope; no other test of
                // this process does either).
                let ctx = dev.gpu_context().expect("a GPU");
                let fused = |k: &str| k.starts_with(&format!("quant_i8:{qt}:")) && k.contains(":rope");
                assert!(ctx.pipelines.any_key(fused), "{qt}: no kernel with rope was compiled");
            }
        }
    }
}
