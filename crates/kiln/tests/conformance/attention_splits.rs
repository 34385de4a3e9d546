//! Decode attention (query lengths up to 8) with its keys split over many workgroups, on both GPU
//! paths: the folded one (the last split workgroup of each row chunk merges the splits; Vulkan) and
//! the two-dispatch one (the combine kernel). Contexts of thousands of keys (odd lengths), several
//! query/key head ratios, causal queries up to 8 (rows seeing different numbers of splits), NaN and
//! Inf in keys and values, and calls queued back to back: the folded path's ticket counters must be
//! back at zero after each call, or the next call's merge never runs and its output stays poisoned.
//! Tolerances: `ref_sdpa_bounded` (attention.rs).

use crate::attention::{assert_sdpa, inputs, ref_sdpa_bounded, to_tensor, Case};
use crate::backend_tests;
use crate::common::*;
use kiln::gpu_probes::{decode_attention_kernel, force_decode_fold, force_decode_kernel};
use kiln::{DType, Device, Tensor};

/// (b, hq, hkv, tq, tk, d, dv, causal, scale): many splits, head ratios 1, 3, 4 and 8, head sizes
/// 64 to 128; past 8192 keys the `tile` kernel's long-context shape (half the lanes to a key row).
const CASES: [Case; 9] = [
    (1, 8, 2, 1, 4099, 128, 128, false, None),
    (1, 8, 2, 1, 8195, 128, 128, false, None),
    (1, 4, 2, 2, 8200, 64, 64, true, None),
    (1, 12, 4, 3, 2501, 80, 80, true, None),
    (1, 4, 4, 8, 1903, 64, 64, true, None),
    (2, 16, 2, 2, 1537, 64, 32, true, Some(0.1)),
    // Causal, 8 queries over 33 keys: the first rows see one split, the last two.
    (1, 4, 1, 8, 33, 64, 64, true, None),
    (1, 32, 8, 1, 700, 64, 64, true, None),
    (1, 4, 1, 1, 300, 96, 96, false, None),
];

/// Runs `f` once per GPU path (folded or two dispatches) and kernel (`slots`, and `lanes` and
/// `tile` where they apply), then hands the choices back to the settings; once on the CPU.
fn each_path(dev: &Device, mut f: impl FnMut(&str)) {
    if dev.is_cpu() {
        return f("cpu");
    }
    for fold in [true, false] {
        for kernel in ["slots", "lanes", "tile"] {
            force_decode_fold(Some(fold));
            force_decode_kernel(Some(kernel));
            f(&format!("{}, {kernel}", if fold { "folded" } else { "two dispatches" }));
        }
    }
    force_decode_fold(None);
    force_decode_kernel(None);
}

fn sdpa_decode_many_splits(dev: &Device) {
    each_path(dev, |path| {
        for dtype in supported(dev, &[DType::F32, DType::F16, DType::BF16]) {
            for (ci, c) in CASES.iter().enumerate() {
                let inp = inputs(c, dtype, 3100 + 10 * ci as u64);
                let expected = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, c.7, c.8, dtype);
                let t = |r| to_tensor(r, dtype, Layouts::Contiguous, dev);
                let got = t(&inp.q).sdpa(&t(&inp.k), &t(&inp.v), c.7, c.8).unwrap();
                assert_sdpa(&got, &expected, &format!("sdpa splits {c:?} {dtype} {path}"));
            }
        }
    });
}

/// NaN and Inf keys and values in different splits of a long context: a NaN key or value poisons
/// the rows that see it (causal: the last query only, for the last key), an Inf value makes its
/// column Inf in the rows that see it; the other rows stay finite.
fn sdpa_decode_splits_nan_inf(dev: &Device) {
    let c: Case = (1, 8, 2, 3, 3001, 64, 64, true, None);
    let (d, dv, tk) = (c.5, c.6, c.4);
    each_path(dev, |path| {
        for dtype in supported(dev, &[DType::F32, DType::BF16]) {
            let mut inp = inputs(&c, dtype, 3300);
            // Key/value head 0: a NaN value at key 100, an Inf value at key 2000. Head 1: a NaN key
            // at the last key (seen by the last query only).
            inp.v.data[100 * dv + 5] = f64::NAN;
            inp.v.data[2000 * dv + 7] = f64::INFINITY;
            inp.k.data[(tk + tk - 1) * d + 3] = f64::NAN;
            for causal in [true, false] {
                let expected = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, causal, None, dtype);
                assert!(expected.0.data.iter().any(|v| v.is_nan()) && expected.0.data.iter().any(|v| v.is_finite()));
                let t = |r| to_tensor(r, dtype, Layouts::Contiguous, dev);
                let got = t(&inp.q).sdpa(&t(&inp.k), &t(&inp.v), causal, None).unwrap();
                assert_sdpa(&got, &expected, &format!("sdpa splits nan/inf causal {causal} {dtype} {path}"));
            }
        }
    });
}

/// Calls queued back to back on one device (no readback in between) with different split counts and
/// row chunks, each of them three times: every output must equal the reference, and the repeats
/// must be bit-identical. A counter left raised by one call would keep the next call of the same
/// chunks from merging (its output stays poisoned), so this fails without the reset.
fn sdpa_decode_back_to_back(dev: &Device) {
    let cases: [Case; 3] = [
        (1, 8, 2, 1, 2053, 64, 64, false, None),
        (1, 8, 2, 4, 333, 64, 64, true, None),
        (1, 8, 2, 1, 1100, 64, 64, true, None),
    ];
    each_path(dev, |path| {
        let dtype = DType::F32;
        let data: Vec<_> = cases.iter().enumerate().map(|(i, c)| inputs(c, dtype, 3500 + i as u64)).collect();
        let t = |r| to_tensor(r, dtype, Layouts::Contiguous, dev);
        let mut outs: Vec<Vec<Tensor>> = vec![Vec::new(); cases.len()];
        for _ in 0..3 {
            for (i, (c, inp)) in cases.iter().zip(&data).enumerate() {
                outs[i].push(t(&inp.q).sdpa(&t(&inp.k), &t(&inp.v), c.7, c.8).unwrap());
            }
        }
        for ((c, inp), got) in cases.iter().zip(&data).zip(&outs) {
            let expected = ref_sdpa_bounded(&inp.q, &inp.k, &inp.v, c.7, c.8, dtype);
            let first = got[0].to_f64_vec().unwrap();
            for (n, g) in got.iter().enumerate() {
                assert_sdpa(g, &expected, &format!("sdpa back to back {c:?} call {n} {path}"));
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&g.to_f64_vec().unwrap()), bits(&first), "{c:?} call {n} {path}: repeats differ");
            }
        }
    });
}

/// Where the adapter has subgroups (lavapipe has), the cases above with head sizes of 128 (and 64 on
/// subgroups under 32 lanes, as lavapipe's) take the `lanes` decode kernel when it is forced (as
/// `each_path` does), and those of 64 and 128 the `tile` one when it is (bf16 here), so these tests
/// cover both; an odd head size (80) keeps to `slots`, and so does every case when `slots` is forced.
/// From 8192 keys on, `tile` takes half the lanes to a 128-wide key row (at most 8 of them).
fn sdpa_decode_kernel_choice(dev: &Device) {
    let Some(info) = dev.gpu_info() else { return };
    if !info.features.contains(&"SUBGROUP") || info.subgroup_size.0 < 4 {
        return;
    }
    let w = info.subgroup_size.0.min(32) as usize;
    let on = Tensor::zeros(&[4usize][..], DType::BF16, dev).unwrap();
    let cases = [
        [1, 8, 2, 1, 4099, 128, 128],
        [1, 8, 2, 1, 8195, 128, 128],
        [1, 32, 8, 1, 700, 64, 64],
        [1, 12, 4, 3, 2501, 80, 80],
    ];
    for forced in ["lanes", "tile", "slots"] {
        force_decode_kernel(Some(forced));
        for sizes in cases {
            let key = decode_attention_kernel(&on, sizes).unwrap();
            eprintln!("decode kernel for {sizes:?} (subgroups {:?}, {forced} forced): {key}", info.subgroup_size);
            let lanes = forced == "lanes" && sizes[6] % (4 * w) == 0;
            let tile = forced == "tile" && sizes[5] != 80;
            assert_eq!(key.contains(":lanes:"), lanes, "{sizes:?}: {key}");
            assert_eq!(key.contains(":tile:"), tile, "{sizes:?}: {key}");
            if tile && sizes[5] == 128 {
                let lpk = if sizes[4] >= 8192 { w.min(8) } else { w.min(16) };
                assert!(key.contains(&format!(":l{lpk}:")), "{sizes:?}: {key} should take {lpk} lanes a key row");
            }
        }
    }
    force_decode_kernel(None);
}

backend_tests!(
    sdpa_decode_many_splits,
    sdpa_decode_splits_nan_inf,
    sdpa_decode_back_to_back,
    sdpa_decode_kernel_choice
);
