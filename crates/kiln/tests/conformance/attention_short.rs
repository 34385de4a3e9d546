//! The `short` decode attention kernel (one query row over at most 1024 keys, one workgroup a query
//! head, `decode_short.wgsl`), forced on this test's thread, against the f64 reference: head ratios
//! 1 to 4, head sizes 8 to 256 (96 and 80: value words that do not divide the workgroup; 256: key
//! rows read in two chunks), one key and the most keys, keys and values as the first rows of a longer
//! cache (a KV cache's view), a soft cap, NaN and Inf in keys and values; and which sizes take it.
//! Tolerances: `ref_sdpa_with_bounded` (attention.rs; its negative controls are there).

use crate::attention::{assert_sdpa, inputs, ref_sdpa_with_bounded, to_tensor, Case, Inputs};
use crate::backend_tests;
use crate::common::*;
use kiln::gpu_probes::{decode_attention_kernel, force_decode_kernel};
use kiln::{DType, Device, SdpaOptions, Tensor};

/// (b, hq, hkv, tq, tk, d, dv, causal, scale), tq = 1.
const CASES: [Case; 7] = [
    (1, 32, 8, 1, 512, 128, 128, true, None),
    (2, 4, 4, 1, 1, 64, 64, false, None),
    (1, 8, 2, 1, 1024, 64, 64, true, None),
    (1, 4, 1, 1, 777, 256, 256, false, Some(0.05)),
    (1, 6, 2, 1, 333, 96, 96, true, None),
    (1, 3, 1, 1, 130, 80, 80, false, None),
    (1, 2, 2, 1, 300, 8, 8, false, Some(0.5)),
];

/// Runs `f` with the `short` kernel forced on this thread (the GPU), then hands the choice back.
fn forced<R>(dev: &Device, f: impl FnOnce() -> R) -> R {
    if !dev.is_cpu() {
        force_decode_kernel(Some("short"));
    }
    let r = f();
    force_decode_kernel(None);
    r
}

/// The first `tk` key and value rows of `inp` (whose keys and values hold more), as the reference's
/// inputs.
fn first_rows(inp: &Inputs, tk: usize) -> Inputs {
    let cut = |r: &RefArray| {
        let (b, h, t, d) = (r.shape[0], r.shape[1], r.shape[2], r.shape[3]);
        let mut data = Vec::with_capacity(b * h * tk * d);
        for bh in 0..b * h {
            data.extend_from_slice(&r.data[bh * t * d..(bh * t + tk) * d]);
        }
        RefArray::new(vec![b, h, tk, d], data)
    };
    Inputs { q: RefArray::new(inp.q.shape.clone(), inp.q.data.clone()), k: cut(&inp.k), v: cut(&inp.v) }
}

fn sdpa_short_matches_reference(dev: &Device) {
    forced(dev, || {
        for dtype in supported(dev, &[DType::F16, DType::BF16]) {
            for (ci, c) in CASES.iter().enumerate() {
                let o = SdpaOptions { causal: c.7, scale: c.8, ..SdpaOptions::default() };
                let t = |r| to_tensor(r, dtype, Layouts::Contiguous, dev);
                // Contiguous keys and values.
                let inp = inputs(c, dtype, 8100 + 10 * ci as u64);
                let expected = ref_sdpa_with_bounded(&inp.q, &inp.k, &inp.v, o, dtype);
                let got = t(&inp.q).sdpa_with(&t(&inp.k), &t(&inp.v), o).unwrap();
                assert_sdpa(&got, &expected, &format!("sdpa short {c:?} {dtype}"));
                // The first tk rows of a cache of tk + 37.
                let long = inputs(&(c.0, c.1, c.2, 1, c.4 + 37, c.5, c.6, c.7, c.8), dtype, 8500 + 10 * ci as u64);
                let seen = first_rows(&long, c.4);
                let expected = ref_sdpa_with_bounded(&seen.q, &seen.k, &seen.v, o, dtype);
                let (k, v) = (t(&long.k).narrow(2, 0, c.4).unwrap(), t(&long.v).narrow(2, 0, c.4).unwrap());
                let got = t(&long.q).sdpa_with(&k, &v, o).unwrap();
                assert_sdpa(&got, &expected, &format!("sdpa short, cache view {c:?} {dtype}"));
            }
        }
    });
}

/// A soft cap that bites (scores of about +-1 capped at 0.3), and NaN and Inf: a NaN value poisons
/// its head's rows, an Inf value makes its column Inf (or NaN), a NaN key poisons its head's rows,
/// the other heads stay finite.
fn sdpa_short_softcap_nan_inf(dev: &Device) {
    let c: Case = (1, 8, 4, 1, 300, 64, 64, true, Some(1.0));
    let (d, dv, tk) = (c.5, c.6, c.4);
    forced(dev, || {
        for dtype in supported(dev, &[DType::F16, DType::BF16]) {
            let t = |r: &RefArray| to_tensor(r, dtype, Layouts::Contiguous, dev);
            let mut inp = inputs(&c, dtype, 8700);
            let capped = SdpaOptions { causal: true, scale: c.8, softcap: Some(0.3), window: None };
            let expected = ref_sdpa_with_bounded(&inp.q, &inp.k, &inp.v, capped, dtype);
            let got = t(&inp.q).sdpa_with(&t(&inp.k), &t(&inp.v), capped).unwrap();
            assert_sdpa(&got, &expected, &format!("sdpa short, soft cap {dtype}"));
            // Key/value head 0: a NaN value at key 5; head 1: an Inf value at key 100; head 2: a NaN
            // key at the last key.
            inp.v.data[5 * dv + 3] = f64::NAN;
            inp.v.data[(tk + 100) * dv + 7] = f64::INFINITY;
            inp.k.data[(2 * tk + tk - 1) * d + 2] = f64::NAN;
            let o = SdpaOptions { causal: true, scale: c.8, ..SdpaOptions::default() };
            let expected = ref_sdpa_with_bounded(&inp.q, &inp.k, &inp.v, o, dtype);
            assert!(expected.0.data.iter().any(|v| v.is_nan()) && expected.0.data.iter().any(|v| v.is_finite()));
            let got = t(&inp.q).sdpa_with(&t(&inp.k), &t(&inp.v), o).unwrap();
            assert_sdpa(&got, &expected, &format!("sdpa short nan/inf {dtype}"));
        }
    });
}

/// Where the adapter has subgroups, the cases above take the `short` kernel when it is forced, and
/// more keys than 1024, two query rows or f32 keys take another one.
fn sdpa_short_kernel_choice(dev: &Device) {
    let Some(info) = dev.gpu_info() else { return };
    if !info.features.contains(&"SUBGROUP") || info.subgroup_size.0 < 4 {
        return;
    }
    let on = |dt| Tensor::zeros(&[4usize][..], dt, dev).unwrap();
    forced(dev, || {
        for c in CASES {
            let key = decode_attention_kernel(&on(DType::BF16), [c.0, c.1, c.2, c.3, c.4, c.5, c.6]).unwrap();
            assert!(key.contains(":short:"), "{c:?}: {key}");
        }
        for (sizes, dt) in [
            ([1, 32, 8, 1, 1025, 128, 128], DType::BF16),
            ([1, 32, 8, 2, 512, 128, 128], DType::F16),
            ([1, 32, 8, 1, 512, 128, 64], DType::BF16),
            ([1, 32, 8, 1, 512, 128, 128], DType::F32),
        ] {
            let key = decode_attention_kernel(&on(dt), sizes).unwrap();
            assert!(!key.contains(":short:"), "{sizes:?} {dt}: {key}");
        }
    });
}

backend_tests!(sdpa_short_matches_reference, sdpa_short_softcap_nan_inf, sdpa_short_kernel_choice);
