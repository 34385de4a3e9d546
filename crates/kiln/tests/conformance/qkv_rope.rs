//! `KvCache::qlinear_append_rope`, a decode step's quantized q/k/v product with rope and the cache
//! append (on the GPU inside the product's kernels), against the composed ops it stands for:
//! `qlinear_fused_cat`, then `append_rope`.

use crate::bounds::{check_bounded, unit_roundoff};
use crate::common::*;
use kiln::quant::{QTensor, QuantType};
use kiln::{DType, Device, KvCache, LinearInput, Tensor};

/// `|x1| |c| + |x2| |s|` and `|x2| |c| + |x1| |s|` for each rotated pair of head `h` of row `y` (its
/// values as stored, `d` a head) with its cos/sin row: what a rotation's rounding error scales with.
fn rope_mag(y: &[f64], h: usize, d: usize, cos: &[f64], sin: &[f64]) -> Vec<f64> {
    let x = &y[h * d..(h + 1) * d];
    let mut mag = vec![0.0; d];
    for i in 0..d / 2 {
        let (a, b, c, s) = (x[i].abs(), x[i + d / 2].abs(), cos[i].abs(), sin[i].abs());
        (mag[i], mag[i + d / 2]) = (a * c + b * s, b * c + a * s);
    }
    mag
}

/// Over a prompt of 3 rows (composed) and single steps (fused on the GPU), for a Q4_K_M layer's
/// Q4_K q/k beside a Q6_K v, one stacked Q4_K q/k/v, and Q8_0 q beside Q4_0 k/v: q, the cached keys
/// and the cached values match the f64 rotation of the f32 product (`qlinear_fused_cat` of x in
/// f32) within the dtype's bound, doubled, on the magnitudes of each rotation's terms (`rope_mag`:
/// the composed path rounds the product before it rotates), plus the product's own tolerance (1e-5
/// of sum |h w|, docs/GGUF.md) and, on the CPU, whose product is composed, the rounding of the
/// normalised row h to the dtype (a unit roundoff of sum |h w|). The bound fails zeros, the unrotated q
/// and q rotated for the next position. (That the GPU's single steps take the fused kernels is
/// checked by `gpu::variant_tests::quant_qkv_rope_streamed_grids`, in a process of its own: the
/// dispatch counters are the device's, shared with the tests running beside this one.)
fn qlinear_append_rope_matches_composed(dev: &Device) {
    let (nh, nkv, d, k, max) = (4, 2, 32, 256, 8);
    let cpu = Device::cpu();
    let weight = |qt, n, seed| QTensor::quantize(&rand_tensor(&[n, k], DType::F32, seed, dev), qt).unwrap();
    let sets = [
        vec![weight(QuantType::Q4K, (nh + nkv) * d, 51), weight(QuantType::Q6K, nkv * d, 52)],
        vec![weight(QuantType::Q4K, (nh + 2 * nkv) * d, 53)],
        vec![weight(QuantType::Q8_0, nh * d, 54), weight(QuantType::Q4_0, 2 * nkv * d, 55)],
    ];
    let f64_cpu = |t: &Tensor| tensor(&t.to_f64_vec().unwrap(), t.dims(), DType::F64, &cpu);
    for dt in supported(dev, &[DType::F32, DType::F16, DType::BF16]) {
        let (atol, rtol) = tol(dt);
        // The magnitudes of the terms and of the product's error.
        let bound = |(mag, err): &(Vec<f64>, Vec<f64>)| {
            mag.iter().zip(err).map(|(m, e)| 2.0 * (atol + rtol * m + e)).collect::<Vec<_>>()
        };
        // Rope's own tables: angle p * 10000^(-2i/d) at position p.
        let angles: Vec<f64> = (0..max * d / 2)
            .map(|e| (e / (d / 2)) as f64 * 10000f64.powf(-2.0 * (e % (d / 2)) as f64 / d as f64))
            .collect();
        let table = |f: fn(f64) -> f64| {
            let v: Vec<f64> = angles.iter().map(|&a| f(a)).collect();
            tensor(&round_to(&v, dt), &[max, d / 2], dt, dev)
        };
        let (cos_all, sin_all) = (table(f64::cos), table(f64::sin));
        let (cos_v, sin_v) = (cos_all.to_f64_vec().unwrap(), sin_all.to_f64_vec().unwrap());
        let g = rand_tensor(&[k], dt, 56, dev);
        let g32 = g.to_dtype(DType::F32).unwrap();
        let norm = LinearInput::RmsNorm { weight: &g, eps: 1e-6 };
        let norm32 = LinearInput::RmsNorm { weight: &g32, eps: 1e-6 };
        for ws in &sets {
            let refs: Vec<&QTensor> = ws.iter().collect();
            let wabs: Vec<f64> = refs
                .iter()
                .flat_map(|w| w.dequantize(DType::F32).unwrap().to_f64_vec().unwrap())
                .map(f64::abs)
                .collect();
            let (mut got_cache, mut want_cache) = (KvCache::new(max), KvCache::new(max));
            // Per kv head, the magnitudes of each cached position's k and v.
            let (mut kmag, mut vmag) = (vec![vec![]; nkv], vec![vec![]; nkv]);
            let mut pos = 0;
            for (step, t) in [3, 1, 1, 1].into_iter().enumerate() {
                let ctx = format!("{dt} {:?} step {step}", refs.iter().map(|w| w.qtype()).collect::<Vec<_>>());
                let x = rand_tensor(&[t, k], dt, 60 + step as u64, dev);
                let rows = |c: &Tensor, at: usize| c.narrow(0, at, t).unwrap();
                let (cos, sin) = (rows(&cos_all, pos), rows(&sin_all, pos));
                let (q, kc, vc) = got_cache.qlinear_append_rope(&x, &refs, norm, nh, nkv, &cos, &sin).unwrap();
                let y = f64_cpu(&x.to_dtype(DType::F32).unwrap().qlinear_fused_cat(&refs, norm32).unwrap());
                let (qw, kw, vw) = want_cache.append_rope(&y, nh, nkv, &f64_cpu(&cos), &f64_cpu(&sin)).unwrap();
                // The magnitudes, in the layouts of q (1, nh, t, d) and the caches (1, nkv, pos, d).
                let yv = round_to(&y.to_f64_vec().unwrap(), dt);
                let w = (nh + 2 * nkv) * d;
                let h = x.to_dtype(DType::F32).unwrap().rms_norm(&g32, 1e-6).unwrap().to_f64_vec().unwrap();
                let rel = 1e-5 + if dev.is_gpu() { 0.0 } else { unit_roundoff(dt) };
                let err: Vec<f64> = (0..t * w)
                    .map(|e| rel * (0..k).map(|i| h[e / w * k + i].abs() * wabs[e % w * k + i]).sum::<f64>())
                    .collect();
                let mut qmag = (vec![], vec![]);
                for head in 0..nh {
                    for r in 0..t {
                        let tab = (pos + r) * d / 2..(pos + r + 1) * d / 2;
                        let (c, sn) = (&cos_v[tab.clone()], &sin_v[tab]);
                        qmag.0.extend(rope_mag(&yv[r * w..(r + 1) * w], head, d, c, sn));
                        qmag.1.extend(rope_mag(&err[r * w..(r + 1) * w], head, d, c, sn));
                    }
                }
                for head in 0..nkv {
                    for r in 0..t {
                        let tab = (pos + r) * d / 2..(pos + r + 1) * d / 2;
                        let (c, sn) = (&cos_v[tab.clone()], &sin_v[tab]);
                        let (row, erow) = (&yv[r * w..(r + 1) * w], &err[r * w..(r + 1) * w]);
                        kmag[head].extend(rope_mag(row, nh + head, d, c, sn).into_iter().zip(rope_mag(
                            erow,
                            nh + head,
                            d,
                            c,
                            sn,
                        )));
                        let vs = (nh + nkv + head) * d..(nh + nkv + head + 1) * d;
                        vmag[head].extend(row[vs.clone()].iter().map(|v| v.abs()).zip(erow[vs].iter().copied()));
                    }
                }
                pos += t;
                assert_eq!((q.dims(), kc.dims(), vc.dims()), (qw.dims(), kw.dims(), vw.dims()), "{ctx}");
                assert_eq!(got_cache.len(), pos, "{ctx}");
                let (kmag_all, vmag_all): ((Vec<_>, Vec<_>), (Vec<_>, Vec<_>)) =
                    (kmag.concat().into_iter().unzip(), vmag.concat().into_iter().unzip());
                for (name, got, want, mag) in
                    [("q", &q, &qw, &qmag), ("k", &kc, &kw, &kmag_all), ("v", &vc, &vw, &vmag_all)]
                {
                    let want = want.to_f64_vec().unwrap();
                    let bound = bound(mag);
                    check_bounded(&got.to_f64_vec().unwrap(), &want, &bound)
                        .unwrap_or_else(|e| panic!("{ctx} {name}: {e}"));
                    assert!(check_bounded(&vec![0.0; want.len()], &want, &bound).is_err(), "{ctx} {name}: zeros pass");
                }
                if t == 1 {
                    let (want, bound) = (qw.to_f64_vec().unwrap(), bound(&qmag));
                    let unrotated = y.narrow(1, 0, nh * d).unwrap().to_f64_vec().unwrap();
                    assert!(check_bounded(&unrotated, &want, &bound).is_err(), "{ctx}: the unrotated q passes");
                    let (cn, sn) = (f64_cpu(&rows(&cos_all, pos)), f64_cpu(&rows(&sin_all, pos)));
                    let next = KvCache::new(max).append_rope(&y, nh, nkv, &cn, &sn).unwrap().0.to_f64_vec().unwrap();
                    assert!(check_bounded(&next, &want, &bound).is_err(), "{ctx}: q of the next position passes");
                }
            }
        }
    }
}

crate::backend_tests!(qlinear_append_rope_matches_composed);
