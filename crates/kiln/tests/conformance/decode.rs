//! The fused decode ops against f64 references: `linear_fused` (RMSNorm or silu_mul before a
//! projection, the residual after it) and `KvCache::append_rope` (rope of q and k plus the cache
//! append), on the fused GPU kernels' shapes and on the ones that fall back to the composed ops.

use crate::bounds::{acc_roundoff, check_bounded, flush_floor, stored_bound, unit_roundoff};
use crate::common::*;
use kiln::quant::{QTensor, QuantType};
use kiln::{DType, Device, KvCache, LinearInput, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Pro {
    Plain,
    Norm,
    Silu,
}

/// The f64 reference of `residual + pro(x) @ w^T`, per output: the value, `sum |h w|`, the largest
/// `|h w|`, and the product without the residual.
struct Want {
    out: Vec<f64>,
    mag: Vec<f64>,
    max_term: Vec<f64>,
    product: Vec<f64>,
}

/// f64 reference of `residual + pro(x) @ w^T`. `round` stores the prologue's output `h` in that
/// dtype first (the composed path: `rms_norm` or `silu_mul` is its own op, its result rounded);
/// `drop` zeroes the columns of `h` in that range (a kernel that skipped a block of k).
#[allow(clippy::too_many_arguments)]
fn reference(
    x: &[f64],
    w: &[f64],
    g: &[f64],
    r: Option<&[f64]>,
    pro: Pro,
    (m, n, k): (usize, usize, usize),
    eps: f64,
    round: Option<DType>,
    drop: std::ops::Range<usize>,
) -> Want {
    let kin = if matches!(pro, Pro::Silu) { 2 * k } else { k };
    let mut want =
        Want { out: vec![0.0; m * n], mag: vec![0.0; m * n], max_term: vec![0.0; m * n], product: vec![0.0; m * n] };
    for i in 0..m {
        let row = &x[i * kin..(i + 1) * kin];
        let mut h: Vec<f64> = match pro {
            Pro::Plain => row.to_vec(),
            Pro::Norm => {
                let ms = row.iter().map(|v| v * v).sum::<f64>() / k as f64;
                let s = 1.0 / (ms + eps).sqrt();
                row.iter().zip(g).map(|(v, g)| v * s * g).collect()
            }
            Pro::Silu => (0..k).map(|t| row[t] / (1.0 + (-row[t]).exp()) * row[k + t]).collect(),
        };
        if let Some(dt) = round.filter(|_| pro != Pro::Plain) {
            h = round_to(&h, dt);
        }
        h[drop.clone()].iter_mut().for_each(|v| *v = 0.0);
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            let o = i * n + j;
            let res = r.map_or(0.0, |r| r[o]);
            want.product[o] = h.iter().zip(wr).map(|(a, b)| a * b).sum::<f64>();
            want.out[o] = want.product[o] + res;
            want.mag[o] = h.iter().zip(wr).map(|(a, b)| (a * b).abs()).sum::<f64>() + res.abs();
            want.max_term[o] = h.iter().zip(wr).map(|(a, b)| (a * b).abs()).fold(0.0, f64::max);
        }
    }
    want
}

/// Per-output bound of a fused decode linear in `dt` (from `bounds.rs`), around the reference whose
/// prologue output was rounded as the path that computed it rounds it:
/// - the prologue in f32: RMSNorm's mean of k squares (k u), its rsqrt (6 ulp) and two products,
///   halved through the square root: (k / 2 + 16) u of each `h`; silu_mul's exp (3 + 2|x| ulp, |x|
///   below 16 here), add, division and product: 40 u;
/// - the dot product's f32 sum of k terms: k u of `sum |h w|` (Higham's gamma_k);
/// - where the composed path rounds `h` to `dt`, f32 and f64 may round a value on a rounding boundary
///   to the two neighbours: up to 8 such values, each one ulp of `dt` times its `|h w|`;
/// - the product rounded to `dt` before the residual is added (composed path), then the output.
fn linear_bound(dt: DType, pro: Pro, k: usize, want: &Want, with_res: bool) -> Vec<f64> {
    let uc = acc_roundoff(dt);
    let pro_err = match pro {
        Pro::Plain => 0.0,
        Pro::Norm => k as f64 / 2.0 + 16.0,
        Pro::Silu => 40.0,
    };
    let flips = if pro == Pro::Plain { 0.0 } else { 8.0 * 2.0 * unit_roundoff(dt) };
    (0..want.out.len())
        .map(|o| {
            let acc = (k as f64 + pro_err) * uc * want.mag[o] + flips * want.max_term[o] + k as f64 * flush_floor(dt);
            let pre = if with_res { unit_roundoff(dt) * want.product[o].abs() } else { 0.0 };
            stored_bound(dt, want.out[o], acc + pre)
        })
        .collect()
}

/// Checks `got` against the references with the prologue output unrounded (fused kernels) and
/// rounded to `dt` (composed ops): within the bound of either. `Err` names the first misses.
fn check_linear(got: &[f64], refs: &[(Want, Vec<f64>)]) -> Result<(), String> {
    let mut errs = Vec::new();
    for (want, bound) in refs {
        match check_bounded(got, &want.out, bound) {
            Ok(()) => return Ok(()),
            Err(e) => errs.push(e),
        }
    }
    Err(errs.join(" / "))
}

/// Negative controls for `check_linear`: an all-zero result, one that dropped the last 64 columns
/// of k (or half of a shorter k), and one shifted by an element each fail it.
#[allow(clippy::too_many_arguments)]
fn assert_linear_catches_wrong(
    refs: &[(Want, Vec<f64>)],
    x: &[f64],
    w: &[f64],
    g: &[f64],
    r: Option<&[f64]>,
    pro: Pro,
    dims: (usize, usize, usize),
    eps: f64,
    ctx: &str,
) {
    let (m, n, k) = dims;
    let want = &refs[0].0.out;
    check_linear(want, refs).unwrap_or_else(|e| panic!("{ctx}: the reference fails its own bound: {e}"));
    assert!(check_linear(&vec![0.0; m * n], refs).is_err(), "{ctx}: an all-zero result passes");
    let drop = k.saturating_sub(64).max(k / 2)..k;
    let dropped = reference(x, w, g, r, pro, dims, eps, None, drop);
    assert!(check_linear(&dropped.out, refs).is_err(), "{ctx}: a result without the last columns of k passes");
    if m * n > 1 {
        let mut shifted = want.clone();
        shifted.rotate_left(1);
        assert!(check_linear(&shifted, refs).is_err(), "{ctx}: a result shifted by one element passes");
    }
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
                        let xs = &xv[offset..];
                        let res = with_res.then_some(&rv[..]);
                        let refs = [None, Some(dt)].map(|round| {
                            let want = reference(xs, &wv, &gv, res, pro, (m, n, k), eps, round, 0..0);
                            let bound = linear_bound(dt, pro, k, &want, with_res);
                            (want, bound)
                        });
                        if offset == 0 {
                            assert_linear_catches_wrong(&refs, xs, &wv, &gv, res, pro, (m, n, k), eps, &ctx);
                        }
                        if let Err(e) = check_linear(&y.to_f64_vec().unwrap(), &refs) {
                            panic!("{ctx}: {e}");
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
        let wv_dt = [round_to(&wv, DType::F32), round_to(&wv, DType::BF16)];
        for (di, dt) in [DType::F32, DType::BF16].into_iter().enumerate() {
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
                        let (xs, res) = (&xv[offset..], with_res.then_some(&rv[..]));
                        // More than 8 rows take the composed ops, whose `linear` multiplies by the
                        // weight dequantised to `dt`: a third reference with that weight.
                        let refs = [(None, &wv), (Some(dt), &wv), (Some(dt), &wv_dt[di])].map(|(round, wv)| {
                            let want = reference(xs, wv, &gv, res, pro, (m, n, k), eps, round, 0..0);
                            let bound = linear_bound(dt, pro, k, &want, with_res);
                            (want, bound)
                        });
                        if offset == 0 && m == 1 {
                            assert_linear_catches_wrong(&refs, xs, &wv, &gv, res, pro, (m, n, k), eps, &ctx);
                        }
                        if let Err(e) = check_linear(&y.to_f64_vec().unwrap(), &refs) {
                            panic!("{ctx}: {e}");
                        }
                    }
                }
            }
        }
        let x = Tensor::zeros((1, k), DType::F32, dev).unwrap();
        assert_err(x.qlinear_fused(&w, LinearInput::SiluMul, None), &["[qlinear_fused]", "features"]);
    }
}

/// `qlinear_fused_cat` of weights in several formats (a Q4_K_M layer's Q4_K q/k and Q6_K v, and
/// Q8_0) equals the concatenation of each weight's `qlinear_fused`, bit for bit: the GPU writes each
/// product into its columns of one output with the kernel the product takes alone. A Q5_K weight
/// or an odd output size takes the composed path, which must agree too. Mismatched input sizes are
/// an error naming the op.
fn qlinear_fused_cat_matches_parts(dev: &Device) {
    let k = 512;
    let weight = |qt, n, seed| QTensor::quantize(&rand_tensor(&[n, k], DType::F32, seed, dev), qt).unwrap();
    let sets = [
        vec![weight(QuantType::Q4K, 32, 31), weight(QuantType::Q4K, 16, 32), weight(QuantType::Q6K, 16, 33)],
        vec![weight(QuantType::Q8_0, 10, 34), weight(QuantType::Q5K, 6, 35), weight(QuantType::Q6K, 7, 36)],
    ];
    for ws in &sets {
        let refs: Vec<&QTensor> = ws.iter().collect();
        for dt in [DType::F32, DType::BF16] {
            for (m, pro) in [(1, Pro::Plain), (1, Pro::Norm), (1, Pro::Silu), (3, Pro::Norm)] {
                let kin = if matches!(pro, Pro::Silu) { 2 * k } else { k };
                let x = rand_tensor(&[m, kin], dt, 40 + m as u64, dev);
                let g = rand_tensor(&[k], dt, 41, dev);
                let input = match pro {
                    Pro::Plain => LinearInput::Plain,
                    Pro::Norm => LinearInput::RmsNorm { weight: &g, eps: 1e-6 },
                    Pro::Silu => LinearInput::SiluMul,
                };
                let got = x.qlinear_fused_cat(&refs, input).unwrap();
                let parts: Vec<Tensor> = refs.iter().map(|w| x.qlinear_fused(w, input, None).unwrap()).collect();
                let want = Tensor::concat(&parts.iter().collect::<Vec<_>>(), -1).unwrap();
                let ctx = format!("{:?} {dt} {pro:?} m={m}", refs.iter().map(|w| w.qtype()).collect::<Vec<_>>());
                assert_eq!((got.dims(), got.dtype()), (want.dims(), dt), "{ctx}");
                assert_eq!(got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap(), "{ctx}");
            }
        }
    }
    let x = rand_tensor(&[1, k], DType::F32, 42, dev);
    let other = QTensor::quantize(&rand_tensor(&[4, 2 * k], DType::F32, 43, dev), QuantType::Q8_0).unwrap();
    assert_err(x.qlinear_fused_cat(&[&sets[0][0], &other], LinearInput::Plain), &["[qlinear_fused_cat]", "input size"]);
    assert_err(x.qlinear_fused_cat(&[], LinearInput::Plain), &["[qlinear_fused_cat]", "no weights"]);
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

/// `KvCache::truncate` forgets the positions the next append writes over, and a read started by
/// `Tensor::read_later` before that append returns what it was started on: it is queued behind the
/// work recorded before it, not behind what follows (a decode step recorded ahead of reading the
/// last token relies on both).
fn truncate_and_read_later(dev: &Device) {
    let (k1, k2) = (rand_tensor(&[1, 2, 3, 4], DType::F32, 1, dev), rand_tensor(&[1, 2, 1, 4], DType::F32, 2, dev));
    let mut cache = KvCache::new(8);
    // A strided view of the cache storage (its copy out is recorded too).
    let (k, _) = cache.append(&k1, &k1).unwrap();
    let pending = k.read_later::<f32>().unwrap();
    cache.truncate(2);
    assert_eq!(cache.len(), 2);
    // Position 2 written over, after the read was started.
    let (k, _) = cache.append(&k2, &k2).unwrap();
    let want = k1.to_vec::<f32>().unwrap();
    assert_eq!(pending.wait().unwrap(), want, "read_later gives the values it was started on");
    let kept = k1.narrow(2, 0, 2).unwrap();
    let now = Tensor::concat(&[&kept, &k2], 2).unwrap().to_vec::<f32>().unwrap();
    assert_ne!(now, want, "the two contents differ (else the check above proves nothing)");
    assert_eq!(k.to_vec::<f32>().unwrap(), now, "the append after truncate(2) wrote position 2");
    cache.truncate(9);
    assert_eq!(cache.len(), 3, "truncating past the end keeps every position");
    assert_err(k.read_later::<i64>(), &["read_later", "f32", "i64"]);
    let empty = Tensor::zeros((2, 0), DType::F16, dev).unwrap();
    assert_eq!(empty.read_later::<kiln::f16>().unwrap().wait().unwrap(), vec![], "an empty tensor reads as nothing");
}

crate::backend_tests!(
    truncate_and_read_later,
    linear_fused_matches_reference,
    linear_fused_propagates_nan,
    linear_fused_errors,
    qlinear_fused_matches_reference,
    qlinear_fused_cat_matches_parts,
    append_rope_matches_reference,
);
