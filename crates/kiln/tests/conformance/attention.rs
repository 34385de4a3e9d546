//! Scaled dot-product attention against a plain f64 reference (GQA, causal with the `tk - tq` offset,
//! explicit scale, `dv != d`, tiles and query blocks of odd sizes), the fused kernel against
//! `kiln::composed::sdpa`, and the KV cache (step-by-step decode equals full attention; old views
//! stay valid).
//!
//! Tolerances: per output element a bound from the arithmetic (`ref_sdpa_bounded`): each score's dot
//! product error `(d + 2) u sum|q k| |scale|`, exp's error `(3 + 2|s - max|) u`, the normaliser's sum
//! and the online rescaling of key blocks, carried through the weighted sum of values; u of f32 (every
//! float dtype but f64 accumulates in f32), then the rounding to the output dtype.
//! `sdpa_bound_catches_wrong` shows that an all-zero output, one that dropped the last 1000 of 5000
//! keys and a shifted one fail it.

use crate::backend_tests;
use crate::bounds::*;
use crate::common::*;
use kiln::gpu_probes::sdpa_coop_tensors;
use kiln::{composed, DType, Device, KvCache, SdpaOptions, Tensor};

/// Reference attention: for each query, the softmax of the scaled scores of its visible keys, then
/// the weighted sum of values; a query with no visible key gets zeros. Flat indexing: the long cases
/// run it over a million score entries.
fn ref_sdpa(q: &RefArray, k: &RefArray, v: &RefArray, causal: bool, scale: Option<f64>) -> RefArray {
    ref_sdpa_bounded(q, k, v, causal, scale, DType::F32).0
}

/// The reference and, per output element, its error bound for a kernel computing in the compute type
/// of `dtype` and storing `dtype` (see the module docs; twice the first-order terms, for the
/// second-order ones).
pub(crate) fn ref_sdpa_bounded(
    q: &RefArray,
    k: &RefArray,
    v: &RefArray,
    causal: bool,
    scale: Option<f64>,
    dtype: DType,
) -> (RefArray, RefArray) {
    ref_sdpa_with_bounded(q, k, v, SdpaOptions { causal, scale, ..SdpaOptions::default() }, dtype)
}

/// [`ref_sdpa_bounded`] with a soft cap (each score `c tanh(s / c)`: its error is at most the
/// uncapped one, and at most `2c`, plus tanh's rounding) and a sliding window (query `i` at position
/// `p` sees keys `p - window < j <= p`).
pub(crate) fn ref_sdpa_with_bounded(
    q: &RefArray,
    k: &RefArray,
    v: &RefArray,
    opts: SdpaOptions,
    dtype: DType,
) -> (RefArray, RefArray) {
    let u = acc_roundoff(dtype);
    let (b, hq, tq, d) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
    let (hkv, tk, dv) = (k.shape[1], k.shape[2], v.shape[3]);
    let scale = opts.scale.unwrap_or(if d == 0 { 1.0 } else { 1.0 / (d as f64).sqrt() });
    let mut out = vec![0.0; b * hq * tq * dv];
    let mut bound = vec![subnormal_half_spacing(dtype); b * hq * tq * dv];
    let mut scores = vec![0.0; tk];
    let mut errs = vec![0.0; tk];
    for bi in 0..b {
        for h in 0..hq {
            let kh = h / (hq / hkv);
            for i in 0..tq {
                let visible = if opts.causal { (i + 1 + tk).saturating_sub(tq).min(tk) } else { tk };
                let first = opts.window.map_or(0, |w| (i + 1 + tk).saturating_sub(tq + w)).min(visible);
                let n = visible - first;
                if n == 0 {
                    continue;
                }
                // Keys first..visible, as 0..n from `kb`.
                let kb = (bi * hkv + kh) * tk + first;
                let qr = &q.data[((bi * hq + h) * tq + i) * d..][..d];
                for (j, s) in scores[..n].iter_mut().enumerate() {
                    let kr = &k.data[(kb + j) * d..][..d];
                    *s = qr.iter().zip(kr).map(|(a, b)| a * b).sum::<f64>() * scale;
                    let abs = qr.iter().zip(kr).map(|(a, b)| (a * b).abs()).sum::<f64>() * scale.abs();
                    errs[j] = (d as f64 + 2.0) * u * abs + flush_floor(dtype);
                    if let Some(c) = opts.softcap {
                        *s = if s.is_nan() { *s } else { c * (*s / c).tanh() };
                        errs[j] = errs[j].min(2.0 * c) + 4.0 * u * c;
                    }
                }
                let m = scores[..n].iter().fold(f64::NEG_INFINITY, |a, &s| {
                    if a.is_nan() || s.is_nan() {
                        f64::NAN
                    } else {
                        a.max(s)
                    }
                });
                let w: Vec<f64> = scores[..n].iter().map(|s| (s - m).exp()).collect();
                let sum: f64 = w.iter().sum();
                let o = &mut out[((bi * hq + h) * tq + i) * dv..][..dv];
                for (j, &wj) in w.iter().enumerate() {
                    let vr = &v.data[(kb + j) * dv..][..dv];
                    o.iter_mut().zip(vr).for_each(|(a, &x)| *a += wj * x);
                }
                o.iter_mut().for_each(|a| *a /= sum);
                // Relative error of each weight: its score's and the max's, exp's, the subtraction's;
                // the sums add one rounding per key and per block rescale (blocks of 16 keys at least).
                let dmax = errs[..n].iter().fold(0.0f64, |a, &e| a.max(e));
                let chain = (n as f64 + 4.0 * n.div_ceil(16) as f64 + 4.0) * u;
                let rel: Vec<f64> = scores[..n]
                    .iter()
                    .zip(&errs)
                    .map(|(s, e)| e + dmax + (5.0 + 2.0 * (s - m).abs()) * u + p_round(dtype))
                    .collect();
                let den: f64 = w.iter().zip(&rel).map(|(wj, r)| wj / sum * r).sum::<f64>() + chain;
                let ob = &mut bound[((bi * hq + h) * tq + i) * dv..][..dv];
                for (c, (bo, &oc)) in ob.iter_mut().zip(o.iter()).enumerate() {
                    let num: f64 =
                        (0..n).map(|j| w[j] / sum * v.data[(kb + j) * dv + c].abs() * (rel[j] + chain)).sum();
                    *bo = stored_bound(dtype, oc, 2.0 * (num + oc.abs() * den) + n as f64 * flush_floor(dtype));
                }
            }
        }
    }
    (RefArray::new(vec![b, hq, tq, dv], out), RefArray::new(vec![b, hq, tq, dv], bound))
}

/// Relative rounding of each probability where kernels may store them in f16 before the weighted
/// sum of values (tensor-core kernels multiply f16 probabilities, as flash attention does): half an
/// f16 ulp, for 16-bit dtypes.
fn p_round(dtype: DType) -> f64 {
    match dtype {
        DType::F16 | DType::BF16 => 2f64.powi(-11),
        _ => 0.0,
    }
}

/// Checks an attention output against the reference and bound of [`ref_sdpa_bounded`].
pub(crate) fn assert_sdpa(got: &Tensor, (want, bound): &(RefArray, RefArray), ctx: &str) {
    assert_bounded(got, want, &bound.data, ctx);
}

/// (b, hq, hkv, tq, tk, d, dv, causal, scale)
pub(crate) type Case = (usize, usize, usize, usize, usize, usize, usize, bool, Option<f64>);

const CASES: [Case; 10] = [
    (1, 1, 1, 1, 1, 2, 2, false, None),
    (2, 4, 2, 5, 5, 6, 6, true, None),
    (1, 4, 1, 3, 17, 64, 64, true, None),
    (1, 2, 2, 33, 33, 64, 32, true, Some(0.3)),
    (1, 8, 2, 17, 100, 128, 128, false, None),
    (2, 4, 4, 1, 70, 64, 64, true, None),
    (1, 2, 1, 40, 130, 16, 24, true, Some(0.05)),
    (1, 2, 1, 5, 3, 8, 8, true, None),
    (1, 2, 1, 3, 0, 4, 4, false, None),
    (1, 3, 3, 20, 20, 2, 1, false, Some(2.0)),
];

pub(crate) struct Inputs {
    pub(crate) q: RefArray,
    pub(crate) k: RefArray,
    pub(crate) v: RefArray,
}

pub(crate) fn inputs(c: &Case, dtype: DType, seed: u64) -> Inputs {
    let &(b, hq, hkv, tq, tk, d, dv, _, _) = c;
    let mk = |shape: Vec<usize>, s: u64| {
        let n = shape.iter().product();
        RefArray::new(shape, round_to(&random_values(n, dtype, s), dtype))
    };
    Inputs {
        q: mk(vec![b, hq, tq, d], seed),
        k: mk(vec![b, hkv, tk, d], seed + 1),
        v: mk(vec![b, hkv, tk, dv], seed + 2),
    }
}

pub(crate) fn to_tensor(r: &RefArray, dtype: DType, kind: Layouts, dev: &Device) -> Tensor {
    tensor_in(&r.data, &r.shape, dtype, kind, dev)
}

fn sdpa_matches_reference(dev: &Device) {
    for dtype in supported(dev, &FLOATS) {
        for (ci, c) in CASES.iter().enumerate() {
            let inp = inputs(c, dtype, 700 + 10 * ci as u64);
            let expected = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, c.7, c.8, dtype);
            for kind in ALL_LAYOUTS {
                let (q, k, v) = (
                    to_tensor(&inp.q, dtype, kind, dev),
                    to_tensor(&inp.k, dtype, kind, dev),
                    to_tensor(&inp.v, dtype, kind, dev),
                );
                let got = q.sdpa(&k, &v, c.7, c.8).unwrap();
                assert_sdpa(&got, &expected, &format!("sdpa case {c:?} {kind:?}"));
            }
            // Mixed layouts: transposed queries, stepped keys, contiguous values.
            let (q, k, v) = (
                to_tensor(&inp.q, dtype, Layouts::Transposed, dev),
                to_tensor(&inp.k, dtype, Layouts::Stepped, dev),
                to_tensor(&inp.v, dtype, Layouts::Contiguous, dev),
            );
            assert_sdpa(&q.sdpa(&k, &v, c.7, c.8).unwrap(), &expected, &format!("sdpa mixed layouts {c:?}"));
        }
    }
}

fn sdpa_nan_propagation(dev: &Device) {
    // A NaN key poisons exactly the queries that can see it (causal: the later ones); a NaN query
    // poisons only its own row.
    let c: Case = (1, 2, 1, 6, 9, 4, 4, true, None);
    for dtype in supported(dev, &FLOATS) {
        let mut inp = inputs(&c, dtype, 900);
        inp.k.data[5 * 4 + 2] = f64::NAN; // key 5, feature 2
        inp.q.data[(6 + 1) * 4] = f64::NAN; // head 1, query 1
        let expected = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, true, None, dtype);
        assert!(expected.0.data.iter().any(|v| v.is_nan()) && expected.0.data.iter().any(|v| !v.is_nan()));
        let (q, k, v) = (
            to_tensor(&inp.q, dtype, Layouts::Contiguous, dev),
            to_tensor(&inp.k, dtype, Layouts::Contiguous, dev),
            to_tensor(&inp.v, dtype, Layouts::Contiguous, dev),
        );
        assert_sdpa(&q.sdpa(&k, &v, true, None).unwrap(), &expected, "sdpa nan causal");
        let expected = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, false, None, dtype);
        assert_sdpa(&q.sdpa(&k, &v, false, None).unwrap(), &expected, "sdpa nan full");
    }
}

/// Shapes that pick every GPU kernel variant: sequence lengths 1 to 5000, head sizes 64, 128 and odd
/// ones (40, 80), grouped-query attention (8 query heads over 2), query lengths different from key
/// lengths, the decode kernel (query length <= 8) with and without split keys, the prefill kernel
/// with resident and staged queries, split keys and value chunks (dv 256), and head size 0.
const SHAPES: [Case; 18] = [
    (1, 8, 2, 1, 1, 64, 64, true, None),
    (1, 8, 2, 2, 2, 128, 128, true, None),
    (1, 8, 2, 33, 33, 64, 64, true, None),
    (2, 4, 4, 65, 65, 128, 128, false, None),
    (1, 8, 2, 130, 130, 80, 80, true, None),
    (1, 2, 1, 40, 130, 40, 40, true, None),
    (1, 2, 1, 1030, 1030, 64, 64, true, None),
    (1, 8, 2, 1, 5000, 128, 128, true, None),
    (1, 4, 4, 1, 5000, 64, 64, false, None),
    (1, 8, 2, 3, 700, 64, 64, true, None),
    (1, 2, 1, 8, 300, 80, 80, true, None),
    (1, 4, 2, 2, 1100, 40, 24, false, Some(0.2)),
    (1, 2, 1, 70, 20, 64, 64, true, None),
    (1, 2, 2, 5, 3, 64, 64, true, None),
    (1, 1, 1, 65, 300, 64, 256, false, None),
    (1, 2, 1, 100, 1000, 128, 128, false, None),
    (1, 2, 1, 9, 5, 0, 4, false, None),
    (1, 2, 1, 1, 5, 0, 4, true, None),
];

/// Keys and values as a KV cache hands them out: the first `tk` positions of a longer buffer, viewed
/// from position 3 on (the rest holds NaN, which must stay unread).
fn cache_view(r: &RefArray, dtype: DType, dev: &Device) -> Tensor {
    let (b, h, t, e) = (r.shape[0], r.shape[1], r.shape[2], r.shape[3]);
    let total = t + 3 + 5;
    let mut stored = vec![f64::NAN; b * h * total * e];
    for bi in 0..b {
        for hi in 0..h {
            for ti in 0..t {
                for x in 0..e {
                    stored[((bi * h + hi) * total + ti + 3) * e + x] = r.data[((bi * h + hi) * t + ti) * e + x];
                }
            }
        }
    }
    let view = tensor(&stored, &[b, h, total, e], dtype, dev).narrow(2, 3, t).unwrap();
    assert!(!view.is_contiguous() || b * h == 1);
    view
}

fn sdpa_shapes(dev: &Device) {
    for dtype in supported(dev, &[DType::F32, DType::F16, DType::BF16]) {
        for (ci, c) in SHAPES.iter().enumerate() {
            let inp = inputs(c, dtype, 1500 + 10 * ci as u64);
            let expected = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, c.7, c.8, dtype);
            let ctx = |what: &str| format!("sdpa {c:?} {dtype} {what}");
            let q = to_tensor(&inp.q, dtype, Layouts::Contiguous, dev);
            let (k, v) = (
                to_tensor(&inp.k, dtype, Layouts::Contiguous, dev),
                to_tensor(&inp.v, dtype, Layouts::Contiguous, dev),
            );
            assert_sdpa(&q.sdpa(&k, &v, c.7, c.8).unwrap(), &expected, &ctx("contiguous"));
            let (k, v) = (cache_view(&inp.k, dtype, dev), cache_view(&inp.v, dtype, dev));
            assert_sdpa(&q.sdpa(&k, &v, c.7, c.8).unwrap(), &expected, &ctx("cache views"));
            if dtype == DType::F32 {
                // Element-wise loads: every other element of a wider buffer.
                let (q, k, v) = (
                    to_tensor(&inp.q, dtype, Layouts::Stepped, dev),
                    to_tensor(&inp.k, dtype, Layouts::Stepped, dev),
                    to_tensor(&inp.v, dtype, Layouts::Stepped, dev),
                );
                assert_sdpa(&q.sdpa(&k, &v, c.7, c.8).unwrap(), &expected, &ctx("stepped"));
            }
        }
    }
}

/// NaN inputs on the prefill and the split decode paths: a NaN key poisons the queries that see it,
/// a NaN value likewise (but not the queries that the causal mask hides it from, even when the tile
/// holding it is shared with queries that do see it), a NaN query only its own row.
fn sdpa_nan_rows(dev: &Device) {
    let cases: [(Case, usize, usize, usize); 3] = [
        ((1, 2, 1, 40, 45, 64, 64, true, None), 20, 30, 3),
        ((1, 2, 1, 100, 100, 40, 40, true, None), 70, 40, 90),
        ((1, 8, 2, 1, 600, 64, 64, true, None), 400, 100, 0),
    ];
    for dtype in supported(dev, &[DType::F32, DType::F16, DType::BF16]) {
        for (c, nan_key, nan_value, nan_query) in cases {
            let (d, dv, tq) = (c.5, c.6, c.3);
            let mut inp = inputs(&c, dtype, 1900);
            inp.k.data[nan_key * d + 1] = f64::NAN;
            inp.v.data[nan_value * dv + 2] = f64::NAN;
            inp.q.data[(tq + nan_query) * d] = f64::NAN; // head 1
            for causal in [true, false] {
                let expected = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, causal, None, dtype);
                assert!(expected.0.data.iter().any(|v| v.is_nan()));
                if causal && tq > 1 {
                    assert!(expected.0.data.iter().any(|v| !v.is_nan()));
                }
                let (q, k, v) = (
                    to_tensor(&inp.q, dtype, Layouts::Contiguous, dev),
                    to_tensor(&inp.k, dtype, Layouts::Contiguous, dev),
                    to_tensor(&inp.v, dtype, Layouts::Contiguous, dev),
                );
                let got = q.sdpa(&k, &v, causal, None).unwrap();
                assert_sdpa(&got, &expected, &format!("sdpa nan {c:?} causal {causal} {dtype}"));
            }
        }
    }
}

fn sdpa_errors(dev: &Device) {
    let z = |s: [usize; 4], dt: DType| Tensor::zeros(s, dt, dev).unwrap();
    let f = DType::F32;
    assert_err(
        z([1, 3, 2, 4], f).sdpa(&z([1, 2, 2, 4], f), &z([1, 2, 2, 4], f), false, None),
        &["sdpa", "multiple", "3", "2"],
    );
    assert_err(
        z([1, 2, 2, 4], f).sdpa(&z([1, 2, 2, 8], f), &z([1, 2, 2, 4], f), false, None),
        &["sdpa", "head size", "(1, 2, 2, 8)"],
    );
    assert_err(
        z([1, 2, 2, 4], f).sdpa(&z([1, 2, 3, 4], f), &z([1, 2, 2, 4], f), false, None),
        &["sdpa", "(1, 2, 3, 4)"],
    );
    assert_err(z([2, 2, 2, 4], f).sdpa(&z([1, 2, 2, 4], f), &z([1, 2, 2, 4], f), false, None), &["sdpa", "batch"]);
    assert_err(
        z([1, 2, 2, 4], f).sdpa(&z([1, 2, 2, 4], DType::F16), &z([1, 2, 2, 4], f), false, None),
        &["sdpa", "f32", "f16"],
    );
    assert_err(
        z([1, 2, 2, 4], DType::I32).sdpa(&z([1, 2, 2, 4], DType::I32), &z([1, 2, 2, 4], DType::I32), false, None),
        &["sdpa", "i32"],
    );
    assert_err(
        z([1, 2, 2, 4], f).sdpa(&z([1, 2, 2, 4], f), &z([1, 2, 2, 4], f), false, Some(f64::NAN)),
        &["sdpa", "scale"],
    );
    let q3 = Tensor::zeros((2, 2, 4), f, dev).unwrap();
    assert_err(q3.sdpa(&q3, &q3, false, None), &["sdpa", "(2, 2, 4)"]);
}

fn fused_matches_composed_sdpa(dev: &Device) {
    for dtype in supported(dev, &FLOATS) {
        for (ci, c) in CASES.iter().enumerate() {
            let inp = inputs(c, dtype, 1100 + 10 * ci as u64);
            for kind in ALL_LAYOUTS {
                let (q, k, v) = (
                    to_tensor(&inp.q, dtype, kind, dev),
                    to_tensor(&inp.k, dtype, kind, dev),
                    to_tensor(&inp.v, dtype, kind, dev),
                );
                let fused = q.sdpa(&k, &v, c.7, c.8).unwrap();
                let comp = composed::sdpa(&q, &k, &v, c.7, c.8).unwrap();
                assert_close(&fused, &RefArray::of(&comp), 8.0, &format!("sdpa fused vs composed {c:?} {kind:?}"));
            }
        }
    }
}

/// Positions `start..start + len` of a `(b, h, t, e)` reference array.
fn ref_narrow(r: &RefArray, start: usize, len: usize) -> RefArray {
    let (b, h, e) = (r.shape[0], r.shape[1], r.shape[3]);
    let mut out = Vec::new();
    for bi in 0..b {
        for hi in 0..h {
            for t in start..start + len {
                for x in 0..e {
                    out.push(r.get(&[bi, hi, t, x]));
                }
            }
        }
    }
    RefArray::new(vec![b, h, len, e], out)
}

fn kv_cache_decode_equals_full_attention(dev: &Device) {
    let c: Case = (2, 4, 2, 11, 11, 8, 6, true, None);
    for dtype in supported(dev, &FLOATS) {
        let inp = inputs(&c, dtype, 1300);
        let (full, fb) = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, true, None, dtype);
        let part = |t, n| (ref_narrow(&full, t, n), ref_narrow(&fb, t, n));
        for kind in ALL_LAYOUTS {
            let mut cache = KvCache::new(11);
            assert!(cache.is_empty());
            // Prefill 4 positions, then decode one at a time; the appended pieces are views of
            // (possibly non-contiguous) tensors.
            let (qt, kt, vt) = (
                to_tensor(&inp.q, dtype, kind, dev),
                to_tensor(&inp.k, dtype, kind, dev),
                to_tensor(&inp.v, dtype, kind, dev),
            );
            let (k0, v0) = cache.append(&kt.narrow(2, 0, 4).unwrap(), &vt.narrow(2, 0, 4).unwrap()).unwrap();
            assert_eq!((k0.dims(), v0.dims(), cache.len()), (&[2, 2, 4, 8][..], &[2, 2, 4, 6][..], 4));
            let out = qt.narrow(2, 0, 4).unwrap().sdpa(&k0, &v0, true, None).unwrap();
            assert_sdpa(&out, &part(0, 4), &format!("kv prefill {kind:?}"));
            let mut held = vec![(k0, v0, 4)];
            for t in 4..11 {
                let (ck, cv) = cache.append(&kt.narrow(2, t, 1).unwrap(), &vt.narrow(2, t, 1).unwrap()).unwrap();
                assert_eq!(cache.len(), t + 1);
                let out = qt.narrow(2, t, 1).unwrap().sdpa(&ck, &cv, true, None).unwrap();
                assert_sdpa(&out, &part(t, 1), &format!("kv decode step {t} {kind:?}"));
                held.push((ck, cv, t + 1));
            }
            // Every view handed out still holds exactly its prefix of keys and values.
            for (k, v, len) in &held {
                assert_exact(k, &ref_narrow(&inp.k, 0, *len), "old key view");
                assert_exact(v, &ref_narrow(&inp.v, 0, *len), "old value view");
            }
            let (ck, _) = cache.current().unwrap();
            assert!(ck.shares_storage_with(&held[0].0), "appends write in place");
            // Overflow is an error and leaves the cache as it was.
            assert_err(
                cache.append(&kt.narrow(2, 0, 1).unwrap(), &vt.narrow(2, 0, 1).unwrap()),
                &["kv_cache_append", "max_len 11"],
            );
            assert_eq!(cache.len(), 11);
            // Reset releases the storage: old views keep their values, new appends may change shape.
            cache.reset();
            assert!(cache.is_empty() && cache.current().is_none());
            let z = Tensor::zeros((1, 1, 2, 3), dtype, dev).unwrap();
            let (nk, _) = cache.append(&z, &z).unwrap();
            assert_eq!(nk.dims(), &[1, 1, 2, 3]);
            assert_exact(&held[0].0, &ref_narrow(&inp.k, 0, 4), "view after reset");
        }
    }
}

fn kv_cache_errors(dev: &Device) {
    let z = |s: [usize; 4], dt: DType| Tensor::zeros(s, dt, dev).unwrap();
    let f = DType::F32;
    let mut cache = KvCache::new(4);
    assert_err(cache.append(&z([1, 2, 5, 4], f), &z([1, 2, 5, 4], f)), &["kv_cache_append", "max_len 4"]);
    assert!(cache.is_empty());
    assert_err(
        cache.append(&z([1, 2, 1, 4], f), &z([1, 2, 2, 4], f)),
        &["kv_cache_append", "(1, 2, 1, 4)", "(1, 2, 2, 4)"],
    );
    assert_err(cache.append(&z([1, 2, 1, 4], f), &z([1, 2, 1, 4], DType::F16)), &["kv_cache_append", "f32", "f16"]);
    let r3 = Tensor::zeros((2, 1, 4), f, dev).unwrap();
    assert_err(cache.append(&r3, &r3), &["kv_cache_append", "(2, 1, 4)"]);
    cache.append(&z([1, 2, 1, 4], f), &z([1, 2, 1, 3], f)).unwrap();
    assert_err(cache.append(&z([1, 2, 1, 8], f), &z([1, 2, 1, 3], f)), &["kv_cache_append", "(1, 2, 1, 8)"]);
    assert_err(cache.append(&z([1, 3, 1, 4], f), &z([1, 3, 1, 3], f)), &["kv_cache_append", "(1, 3, 1, 4)"]);
    assert_err(
        cache.append(&z([1, 2, 1, 4], DType::F16), &z([1, 2, 1, 3], DType::F16)),
        &["kv_cache_append", "f16", "f32"],
    );
    assert_eq!(cache.len(), 1);
    // An empty append is fine and changes nothing; a view of the cache itself can be appended.
    let (k, v) = cache.append(&z([1, 2, 0, 4], f), &z([1, 2, 0, 3], f)).unwrap();
    assert_eq!(k.dims(), &[1, 2, 1, 4]);
    let (k2, v2) = cache.append(&k, &v).unwrap();
    assert_eq!(k2.dims(), &[1, 2, 2, 4]);
    assert_eq!(v2.dims(), &[1, 2, 2, 3]);
}

/// The bound is tight enough to catch broken kernels where the old tolerance (the dtype's times 16)
/// was not: for bf16 and f32 decode over 5000 keys an all-zero output, one that dropped the last
/// 1000 keys (a lost split) and one shifted by an element fail, while the device's result passes.
fn sdpa_bound_catches_wrong(dev: &Device) {
    for dtype in supported(dev, &[DType::BF16, DType::F16, DType::F32]) {
        for c in [(1, 8, 2, 1, 5000, 128, 128, true, None), (1, 2, 1, 3, 1030, 64, 64, false, None)] {
            let inp = inputs(&c, dtype, 2100);
            let expected = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, c.7, c.8, dtype);
            let keep = c.4 - c.4 / 5;
            let dropped = ref_sdpa(&inp.q, &ref_narrow(&inp.k, 0, keep), &ref_narrow(&inp.v, 0, keep), false, c.8);
            let ctx = format!("sdpa {c:?} {dtype}");
            assert_catches_wrong(&expected.0.data, &expected.1.data, &dropped.data, &ctx);
            let t = |r: &RefArray| to_tensor(r, dtype, Layouts::Contiguous, dev);
            assert_sdpa(&t(&inp.q).sdpa(&t(&inp.k), &t(&inp.v), c.7, c.8).unwrap(), &expected, &ctx);
        }
    }
}

backend_tests!(
    sdpa_bound_catches_wrong,
    sdpa_matches_reference,
    sdpa_shapes,
    sdpa_nan_propagation,
    sdpa_nan_rows,
    sdpa_errors,
    fused_matches_composed_sdpa,
    kv_cache_decode_equals_full_attention,
    kv_cache_errors,
);

/// bf16 inputs spanning 1e-3..1e3 with outliers of 1e5 (past f16's range, which the cooperative
/// kernel's per-line scaling must keep), signs random.
fn wide(r: &RefArray, seed: u64) -> RefArray {
    let u = random_values(r.data.len(), DType::F32, seed);
    let data = r
        .data
        .iter()
        .zip(&u)
        .enumerate()
        .map(|(i, (x, w))| {
            let mag = if i % 97 == 5 { 1e5 } else { 10f64.powf(3.0 * (w / 3.0).tanh()) };
            x.signum() * mag
        })
        .collect::<Vec<_>>();
    RefArray::new(r.shape.clone(), round_to(&data, DType::BF16))
}

/// The cooperative prefill kernel (emulated: plain WGSL in place of the cooperative ops, the same
/// workgroup-memory layouts and passes) against the f64 reference: f16 and bf16, GQA, causal with
/// the `tk - tq` offset, query blocks and key tiles cut short, head sizes padded to 16, an odd `dv`
/// (f32 result), views, NaN in q/k/v (rows that cannot see a NaN value stay finite), wide bf16.
fn coop_cases(dev: &Device, emulate: Option<u32>, max_head: usize, dtypes: &[DType]) {
    let cases: [Case; 7] = [
        (1, 4, 2, 70, 70, 64, 64, true, None),
        (2, 2, 1, 33, 90, 40, 24, true, Some(0.2)),
        (1, 2, 2, 65, 31, 64, 23, false, None),
        (1, 6, 3, 100, 100, 16, 16, true, None),
        (1, 2, 1, 20, 5, 64, 64, true, None),
        (1, 1, 1, 130, 200, 128, 128, true, None),
        (1, 8, 2, 64, 64, 128, 64, false, None),
    ];
    for &dtype in dtypes {
        for (ci, c) in cases.iter().enumerate() {
            if c.5 > max_head || c.6 > max_head {
                continue;
            }
            let inp = inputs(c, dtype, 3000 + 10 * ci as u64);
            let expected = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, c.7, c.8, dtype);
            for kind in [Layouts::Contiguous, Layouts::Transposed, Layouts::Stepped] {
                let t = |r: &RefArray| to_tensor(r, dtype, kind, dev);
                let got = sdpa_coop_tensors(&t(&inp.q), &t(&inp.k), &t(&inp.v), c.7, c.8, emulate)
                    .unwrap_or_else(|| panic!("coop sdpa declined {c:?} {dtype}"))
                    .unwrap();
                assert_eq!(got.dtype(), dtype);
                assert_sdpa(&got, &expected, &format!("coop sdpa {c:?} {kind:?} {dtype} emulate {emulate:?}"));
            }
        }
    }
    // NaN in a key, a value and a query (as sdpa_nan_rows).
    for &dtype in dtypes {
        let c: Case = (1, 2, 1, 100, 100, 40, 40, true, None);
        let mut inp = inputs(&c, dtype, 1900);
        inp.k.data[70 * 40 + 1] = f64::NAN;
        inp.v.data[40 * 40 + 2] = f64::NAN;
        inp.v.data[50 * 40 + 3] = f64::INFINITY;
        inp.q.data[(100 + 90) * 40] = f64::NAN;
        for causal in [true, false] {
            let expected = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, causal, None, dtype);
            let t = |r: &RefArray| to_tensor(r, dtype, Layouts::Contiguous, dev);
            let got = sdpa_coop_tensors(&t(&inp.q), &t(&inp.k), &t(&inp.v), causal, None, emulate).unwrap().unwrap();
            assert_sdpa(&got, &expected, &format!("coop sdpa nan causal {causal} {dtype}"));
        }
    }
    // Scores that rise along the keys (by about 140 in log2 over 200 keys): the row's lazily kept
    // maximum moves on every tile, so every tile rescales the accumulators (the only case here that
    // fails when the rescaling is left out: 18852 of 25600 values out of bounds).
    for &dtype in dtypes {
        let c: Case = (1, 2, 1, 200, 200, 64, 64, true, None);
        let mut inp = inputs(&c, dtype, 5100);
        inp.q.data = round_to(&inp.q.data.iter().map(|x| 1.0 + 0.1 * x).collect::<Vec<_>>(), dtype);
        let rise: Vec<f64> =
            inp.k.data.iter().enumerate().map(|(i, x)| 12.0 * (i / 64) as f64 / 200.0 + 0.5 * x).collect();
        inp.k.data = round_to(&rise, dtype);
        for causal in [true, false] {
            let expected = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, causal, None, dtype);
            let t = |r: &RefArray| to_tensor(r, dtype, Layouts::Contiguous, dev);
            let got = sdpa_coop_tensors(&t(&inp.q), &t(&inp.k), &t(&inp.v), causal, None, emulate).unwrap().unwrap();
            assert_sdpa(&got, &expected, &format!("coop sdpa rising scores causal {causal} {dtype}"));
        }
    }
    // bf16 beyond f16's range.
    if !dtypes.contains(&DType::BF16) {
        return;
    }
    let c: Case = (1, 2, 1, 40, 50, 64, 64, true, None);
    let inp = inputs(&c, DType::BF16, 4100);
    let (q, k, v) = (wide(&inp.q, 1), wide(&inp.k, 2), wide(&inp.v, 3));
    let expected = ref_sdpa_bounded(&q, &k, &v, true, Some(1e-4), DType::BF16);
    let t = |r: &RefArray| to_tensor(r, DType::BF16, Layouts::Contiguous, dev);
    let got = sdpa_coop_tensors(&t(&q), &t(&k), &t(&v), true, Some(1e-4), emulate).unwrap().unwrap();
    assert_sdpa(&got, &expected, "coop sdpa wide bf16");
}

#[test]
fn sdpa_coop_emulated() {
    let Some(dev) = gpu_device() else { return };
    let probe = rand_tensor(&[1, 1, 4, 16], DType::F16, 1, &dev);
    if sdpa_coop_tensors(&probe, &probe, &probe, false, None, Some(16)).is_none() {
        skip_emulation(&dev, "cooperative attention");
        return;
    }
    // Head size 128 needs 48 KiB of workgroup memory with 4 subgroups and 32-key tiles; adapters with
    // 32 KiB (lavapipe) take 2 subgroups and 16-key tiles (the same fragments and loops over the head).
    let probe = rand_tensor(&[1, 1, 4, 128], DType::F16, 1, &dev);
    let max_head = if sdpa_coop_tensors(&probe, &probe, &probe, false, None, Some(16)).is_some() { 128 } else { 64 };
    coop_cases(&dev, Some(16), max_head, &[DType::F16, DType::BF16]);
}

/// The cooperative kernel on the adapter's cooperative matrices, for `dtypes` (one test per dtype, so
/// that the device run, one process per test, takes them side by side).
fn coop_on_device(dtypes: &[DType]) {
    let required = std::env::var("KILN_REQUIRE_COOP").is_ok_and(|v| v == "1");
    let Some(dev) = gpu_device() else {
        assert!(!required, "KILN_REQUIRE_COOP=1 but there is no GPU");
        return;
    };
    let probe = rand_tensor(&[1, 1, 4, 16], DType::F16, 1, &dev);
    if sdpa_coop_tensors(&probe, &probe, &probe, false, None, None).is_none() {
        assert!(!required, "KILN_REQUIRE_COOP=1 but {} has no f16 cooperative matrices", dev.name());
        eprintln!("cooperative attention skipped on {}", dev.name());
        return;
    }
    coop_cases(&dev, None, 128, dtypes);
    crate::attention_options::coop_option_cases(&dev, None, dtypes);
}

#[test]
#[ignore = "needs f16 cooperative matrices (NVIDIA, AMD): run with --include-ignored, KILN_REQUIRE_COOP=1"]
fn sdpa_coop_on_device_f16() {
    coop_on_device(&[DType::F16]);
}

#[test]
#[ignore = "needs f16 cooperative matrices (NVIDIA, AMD): run with --include-ignored, KILN_REQUIRE_COOP=1"]
fn sdpa_coop_on_device_bf16() {
    coop_on_device(&[DType::BF16]);
}
