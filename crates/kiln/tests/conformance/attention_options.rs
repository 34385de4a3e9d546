//! `Tensor::sdpa_with`: soft-capped scores (Gemma 2) and sliding windows (Mistral, Gemma 2's
//! sliding layers) in the fused kernels, against the f64 reference `ref_sdpa_with_bounded`
//! (attention.rs; its bound covers the cap's tanh). The cases take every kernel path: prefill tiles
//! that start at a block's window and mask both ends, prefill with split keys whose early splits lie
//! before every row's window (the combine must skip them), one query with a window (the decode
//! kernels on the window's keys), a few queries with a window (the prefill kernel), split decode with
//! a cap, rows that see no key, and the cooperative kernel (emulated here, on the device in
//! `coop_on_device`). Negative controls: the plain result, a window one key longer or shorter and the
//! uncapped result each fail the bound, and a NaN key or value outside a row's window leaves the row
//! finite.

use crate::attention::{assert_sdpa, inputs, ref_sdpa_with_bounded, to_tensor, Case, Inputs};
use crate::backend_tests;
use crate::bounds::*;
use crate::common::*;
use kiln::gpu_probes::sdpa_coop_tensors_with;
use kiln::{DType, Device, SdpaOptions, Tensor};

/// A case: shape (scale unused), soft cap, window; causal whenever there is a window.
type OptCase = (Case, Option<f64>, Option<usize>);

const fn case(
    (b, hq, hkv, tq, tk, d, dv): (usize, usize, usize, usize, usize, usize, usize),
    causal: bool,
    softcap: Option<f64>,
    window: Option<usize>,
) -> OptCase {
    ((b, hq, hkv, tq, tk, d, dv, causal, None), softcap, window)
}

const CASES: [OptCase; 10] = [
    // Prefill: the second query block starts at key 55; tiles masked at both ends.
    case((1, 4, 2, 100, 130, 64, 64), true, None, Some(40)),
    case((1, 2, 1, 70, 70, 40, 40), true, Some(1.0), Some(5)),
    // One query: the window's keys, split across workgroups.
    case((1, 8, 2, 1, 700, 128, 128), true, Some(2.0), Some(300)),
    // A few queries with a window: the prefill kernel with split keys, early splits unseen.
    case((1, 8, 2, 3, 1100, 64, 64), true, None, Some(500)),
    // Split decode with a cap only.
    case((1, 4, 4, 1, 5000, 64, 64), true, Some(3.0), None),
    case((2, 4, 4, 65, 65, 128, 128), false, Some(0.5), None),
    // A window no shorter than the keys; more queries than keys (rows that see no key).
    case((1, 2, 1, 5, 3, 8, 8), true, None, Some(10)),
    case((1, 2, 1, 20, 5, 16, 16), true, Some(1.0), Some(2)),
    case((1, 2, 2, 2, 9, 8, 8), true, Some(1.5), Some(1)),
    // Prefill with split keys: most splits lie before both blocks' windows.
    case((1, 1, 1, 65, 2000, 64, 64), true, None, Some(100)),
];

fn opts(&(c, softcap, window): &OptCase) -> SdpaOptions {
    SdpaOptions { causal: c.7, scale: c.8, softcap, window }
}

fn tensors(inp: &Inputs, dtype: DType, kind: Layouts, dev: &Device) -> (Tensor, Tensor, Tensor) {
    (to_tensor(&inp.q, dtype, kind, dev), to_tensor(&inp.k, dtype, kind, dev), to_tensor(&inp.v, dtype, kind, dev))
}

fn sdpa_options_match_reference(dev: &Device) {
    for dtype in supported(dev, &FLOATS) {
        for (ci, oc) in CASES.iter().enumerate() {
            let inp = inputs(&oc.0, dtype, 6000 + 10 * ci as u64);
            let expected = ref_sdpa_with_bounded(&inp.q, &inp.k, &inp.v, opts(oc), dtype);
            let kinds: &[Layouts] = if ci < 3 { &ALL_LAYOUTS } else { &[Layouts::Contiguous] };
            for &kind in kinds {
                let (q, k, v) = tensors(&inp, dtype, kind, dev);
                let got = q.sdpa_with(&k, &v, opts(oc)).unwrap();
                assert_sdpa(&got, &expected, &format!("sdpa_with {oc:?} {kind:?}"));
            }
        }
    }
}

/// The bound catches a kernel that ignores the window or the cap, or is off by one key in the
/// window; the device's result passes it.
fn sdpa_options_catch_wrong(dev: &Device) {
    for dtype in supported(dev, &[DType::F32, DType::F16, DType::BF16]) {
        for oc in [CASES[0], CASES[1], CASES[3]] {
            let inp = inputs(&oc.0, dtype, 6500);
            let o = opts(&oc);
            let (want, bound) = ref_sdpa_with_bounded(&inp.q, &inp.k, &inp.v, o, dtype);
            let ctx = format!("sdpa_with {oc:?} {dtype}");
            let w = o.window.expect("a windowed case");
            for wrong in [w + 1, w - 1].into_iter().filter(|&x| x > 0) {
                let shifted =
                    ref_sdpa_with_bounded(&inp.q, &inp.k, &inp.v, SdpaOptions { window: Some(wrong), ..o }, dtype);
                assert_catches_wrong(&want.data, &bound.data, &shifted.0.data, &format!("{ctx} window {wrong}"));
            }
            let (q, k, v) = tensors(&inp, dtype, Layouts::Contiguous, dev);
            assert_sdpa(&q.sdpa_with(&k, &v, o).unwrap(), &(want.clone(), bound.clone()), &ctx);
            let plain = q.sdpa_with(&k, &v, SdpaOptions { window: None, ..o }).unwrap().to_f64_vec().unwrap();
            assert!(check_bounded(&plain, &want.data, &bound.data).is_err(), "{ctx}: the windowless result passes");
            if o.softcap.is_some() {
                let uncapped = q.sdpa_with(&k, &v, SdpaOptions { softcap: None, ..o }).unwrap().to_f64_vec().unwrap();
                assert!(
                    check_bounded(&uncapped, &want.data, &bound.data).is_err(),
                    "{ctx}: the uncapped result passes"
                );
            }
        }
    }
}

/// NaN in a key and a value that only early rows see: rows whose window has passed them stay
/// finite. An infinite score is capped to a finite one (a query element of +inf).
fn sdpa_options_nan_inf(dev: &Device) {
    let oc = case((1, 2, 1, 100, 100, 40, 40), true, Some(2.0), Some(30));
    let (d, dv) = (40, 40);
    for dtype in supported(dev, &[DType::F32, DType::F16, DType::BF16]) {
        let mut inp = inputs(&oc.0, dtype, 6700);
        inp.k.data[20 * d + 1] = f64::NAN;
        inp.v.data[35 * dv + 2] = f64::NAN;
        inp.q.data[(100 + 90) * d + 3] = f64::INFINITY; // head 1, query 90
        let expected = ref_sdpa_with_bounded(&inp.q, &inp.k, &inp.v, opts(&oc), dtype);
        let row = |h: usize, i: usize| &expected.0.data[(h * 100 + i) * dv..][..dv];
        assert!(row(0, 30).iter().all(|x| x.is_nan()), "query 30 sees key 20");
        assert!(row(0, 70).iter().all(|x| x.is_finite()), "query 70 sees neither NaN");
        assert!(row(1, 90).iter().all(|x| x.is_finite()), "an infinite score capped");
        let (q, k, v) = tensors(&inp, dtype, Layouts::Contiguous, dev);
        assert_sdpa(&q.sdpa_with(&k, &v, opts(&oc)).unwrap(), &expected, &format!("sdpa_with nan/inf {dtype}"));
    }
}

fn sdpa_options_errors(dev: &Device) {
    let z = Tensor::zeros([1, 2, 3, 4], DType::F32, dev).unwrap();
    let run = |o: SdpaOptions| z.sdpa_with(&z, &z, o);
    let causal = SdpaOptions::causal();
    assert_err(run(SdpaOptions { window: Some(2), ..SdpaOptions::default() }), &["sdpa", "window", "causal"]);
    assert_err(run(SdpaOptions { window: Some(0), ..causal }), &["sdpa", "window", "at least 1"]);
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300] {
        assert_err(run(SdpaOptions { softcap: Some(bad), ..causal }), &["sdpa", "softcap"]);
    }
    assert!(run(SdpaOptions { softcap: Some(50.0), window: Some(1), ..causal }).is_ok());
}

backend_tests!(sdpa_options_match_reference, sdpa_options_catch_wrong, sdpa_options_nan_inf, sdpa_options_errors);

/// The cooperative prefill kernel with a soft cap and a window (`emulate: Some(16)` on any adapter
/// with f16; `None` on the adapter's cooperative matrices).
pub(crate) fn coop_option_cases(dev: &Device, emulate: Option<u32>, dtypes: &[DType]) {
    let cases = [
        case((1, 4, 2, 100, 130, 64, 64), true, Some(1.0), Some(40)),
        case((1, 2, 1, 200, 200, 64, 64), true, None, Some(70)),
        case((1, 2, 2, 65, 65, 64, 64), false, Some(0.7), None),
    ];
    for &dtype in dtypes {
        for (ci, oc) in cases.iter().enumerate() {
            let inp = inputs(&oc.0, dtype, 6900 + 10 * ci as u64);
            let expected = ref_sdpa_with_bounded(&inp.q, &inp.k, &inp.v, opts(oc), dtype);
            let (q, k, v) = tensors(&inp, dtype, Layouts::Contiguous, dev);
            let got = sdpa_coop_tensors_with(&q, &k, &v, opts(oc), emulate)
                .unwrap_or_else(|| panic!("coop sdpa declined {oc:?} {dtype}"))
                .unwrap();
            let ctx = format!("coop sdpa_with {oc:?} {dtype} emulate {emulate:?}");
            assert_sdpa(&got, &expected, &ctx);
            let plain = SdpaOptions { window: None, softcap: None, ..opts(oc) };
            let wrong = sdpa_coop_tensors_with(&q, &k, &v, plain, emulate).unwrap().unwrap().to_f64_vec().unwrap();
            assert!(
                check_bounded(&wrong, &expected.0.data, &expected.1.data).is_err(),
                "{ctx}: the plain result passes"
            );
        }
    }
}

#[test]
fn sdpa_coop_options_emulated() {
    let Some(dev) = gpu_device() else { return };
    let probe = rand_tensor(&[1, 1, 4, 16], DType::F16, 1, &dev);
    if sdpa_coop_tensors_with(&probe, &probe, &probe, SdpaOptions::default(), Some(16)).is_none() {
        skip_emulation(&dev, "cooperative attention");
        return;
    }
    coop_option_cases(&dev, Some(16), &[DType::F16, DType::BF16]);
}
