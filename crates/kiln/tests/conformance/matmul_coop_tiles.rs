//! The cooperative-matrix f16 matmul at both staging forms (`Stage::H1` scalar halves, `H4` 8-byte
//! vectors), with slices read one or two ahead (`deep`), and the tile shapes the sweep and the
//! automatic choice use (4, 8 or 16 subgroups, 2x2 to 4x4 accumulators each, 16- or 32-deep K
//! slices), against an f64 product: odd
//! M/N/K, K-contiguous weights (`linear`'s `w.t()`), views whose offsets or strides defeat 16-byte
//! reads (element-wise edges), batches and broadcast batches, and NaN/Inf propagation.
//! Tolerance: the dot product's accumulation bound `k u sum|a||b|` (u of f32, the accumulator) plus
//! the rounding to f16 (`bounds::sum_bound`), shown to reject a product without its last K slice.
//!
//! `coop_tiles_emulated` runs the kernels with plain WGSL in place of the cooperative ops (same index
//! math, same workgroup-memory layout) on any adapter with SHADER_F16, e.g. lavapipe;
//! `coop_tiles_on_device_*` and `coop_bf16_on_device*` run them on the adapter's cooperative matrices
//! (Vulkan). Both are `#[ignore]`d, so a run without such an adapter (CI's lavapipe) lists them as
//! ignored instead of passing them silently; the device run takes them with `--include-ignored`,
//! where `KILN_REQUIRE_COOP=1` makes a missing feature fail. The emulated tests fail under
//! `KILN_REQUIRE_GPU=1` when the adapter lacks SHADER_F16.
use crate::bounds::{assert_bounded, assert_catches_wrong, sum_bound};
use crate::common::*;
use kiln::gpu_probes::{coop_matmul_support, matmul_coop_spec, CoopSpec, CoopTile};
use kiln::{DType, Device, Tensor};

const F16: DType = DType::F16;

/// How one operand is stored.
#[derive(Debug, Clone, Copy, PartialEq)]
enum View {
    /// Row-major `(.., rows, cols)`.
    Plain,
    /// Stored as its transpose (the other dim contiguous), used through `.t()`.
    Transposed,
    /// Contiguous data `n` elements into its buffer.
    Offset(usize),
    /// Every other row of a twice-as-tall matrix.
    Stepped,
}

fn operand(values: &[f64], shape: &[usize], view: View, dev: &Device) -> Tensor {
    operand_of(values, shape, view, F16, dev)
}

fn operand_of(values: &[f64], shape: &[usize], view: View, dt: DType, dev: &Device) -> Tensor {
    let r = shape.len();
    match view {
        View::Plain => tensor(values, shape, dt, dev),
        View::Transposed => tensor_in(values, shape, dt, Layouts::Transposed, dev),
        View::Stepped => tensor_in(values, shape, dt, Layouts::Stepped, dev),
        View::Offset(n) => {
            let mut stored = vec![0.0; n];
            stored.extend_from_slice(values);
            let t = tensor(&stored, &[stored.len()], dt, dev).narrow(0, n, values.len()).unwrap();
            let t = t.reshape(shape).unwrap();
            assert_eq!(t.rank(), r);
            t
        }
    }
}

fn reference(a: &[f64], b: &[f64], batch: usize, m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; batch * m * n];
    for z in 0..batch {
        for i in 0..m {
            for j in 0..n {
                out[(z * m + i) * n + j] = (0..k).map(|p| a[(z * m + i) * k + p] * b[(z * k + p) * n + j]).sum();
            }
        }
    }
    out
}

/// One product with `spec` (emulated with `emulate`), checked against the f64 reference; `bcast`
/// stores B once and broadcasts it over the batch; `specials` plants NaN and Inf in A.
#[allow(clippy::too_many_arguments)]
fn check(
    dev: &Device,
    spec: &str,
    emulate: Option<u32>,
    batch: &[usize],
    (m, k, n): (usize, usize, usize),
    (va, vb): (View, View),
    bcast: bool,
    specials: bool,
    seed: u64,
) {
    let nb: usize = batch.iter().product();
    let mut a_vals = round_to(&random_values(nb * m * k, F16, seed), F16);
    if specials {
        let at = k.min(a_vals.len() - 1);
        a_vals[0] = f64::NAN;
        a_vals[at] = f64::INFINITY;
    }
    let b_one = round_to(&random_values(if bcast { k * n } else { nb * k * n }, F16, seed + 1), F16);
    let b_vals: Vec<f64> = if bcast { (0..nb).flat_map(|_| b_one.iter().copied()).collect() } else { b_one.clone() };
    let shape = |x: usize, y: usize| -> Vec<usize> { batch.iter().copied().chain([x, y]).collect() };
    let a = operand(&a_vals, &shape(m, k), va, dev);
    let b = if bcast {
        operand(&b_one, &[k, n], vb, dev).broadcast_to(shape(k, n)).unwrap()
    } else {
        operand(&b_vals, &shape(k, n), vb, dev)
    };
    let ctx =
        format!("spec {spec} emulate {emulate:?} {batch:?} ({m}, {k}) @ ({k}, {n}) A {va:?} B {vb:?} bcast {bcast}");
    // "auto": the automatic choice.
    let parsed = (spec != "auto").then(|| CoopSpec::parse(spec).unwrap_or_else(|| panic!("bad spec {spec}")));
    let got = matmul_coop_spec(&a, &b, CoopTile::Auto, emulate, parsed)
        .unwrap_or_else(|| panic!("the cooperative path refused {ctx}"))
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(got.dtype(), F16, "{ctx}");
    assert_eq!(got.dims(), &shape(m, n)[..], "{ctx}");
    let expected = reference(&a_vals, &b_vals, nb, m, k, n);
    let abs_a: Vec<f64> = a_vals.iter().map(|x| x.abs()).collect();
    let abs_b: Vec<f64> = b_vals.iter().map(|x| x.abs()).collect();
    let bounds: Vec<f64> =
        expected.iter().zip(reference(&abs_a, &abs_b, nb, m, k, n)).map(|(&w, s)| sum_bound(F16, k, s, w)).collect();
    if !specials && nb == 1 && (va, vb) == (View::Plain, View::Plain) {
        // The bound catches a product that skipped the last 16-deep slice of k, zeros and a shift.
        let a_short: Vec<f64> =
            a_vals.iter().enumerate().map(|(i, &v)| if i % k >= k - 16 { 0.0 } else { v }).collect();
        assert_catches_wrong(&expected, &bounds, &reference(&a_short, &b_vals, nb, m, k, n), &ctx);
    }
    assert_bounded(&got, &RefArray::new(shape(m, n), expected), &bounds, &ctx);
}

/// Layout pairs: both operands 16-byte readable (row-major, or `linear`'s K-contiguous weight),
/// column-major A, and views that force element reads (odd offset, stepped rows).
const VIEWS: [(View, View); 6] = [
    (View::Plain, View::Plain),
    (View::Plain, View::Transposed),
    (View::Transposed, View::Plain),
    (View::Offset(4), View::Offset(8)),
    (View::Offset(1), View::Transposed),
    (View::Stepped, View::Stepped),
];

/// `VIEWS` without the column-major A.
const A_ROW_VIEWS: [(View, View); 5] = [VIEWS[0], VIEWS[1], VIEWS[3], VIEWS[4], VIEWS[5]];

/// Runs the cases for one spec: each view pair on an odd shape crossing several tiles and K slices,
/// one exact-tile shape, a batched and a broadcast product, and NaN/Inf propagation.
fn run_spec(dev: &Device, spec: &str, emulate: Option<u32>, views: &[(View, View)], seed: &mut u64) {
    let p = CoopSpec::parse(spec).unwrap();
    let (bm, bn) = ((p.wm * p.tm * 16) as usize, (p.wn * p.tn * 16) as usize);
    for &v in views {
        *seed += 2;
        check(dev, spec, emulate, &[], (bm + 37, 3 * p.bk as usize + 13, bn + 29), v, false, false, *seed);
    }
    *seed += 2;
    check(dev, spec, emulate, &[], (bm, 2 * p.bk as usize, bn), views[0], false, false, *seed);
    // K a whole number of slices (an odd count: the unrolled loop's tail), whole and edge tiles:
    // the `fast` reads of interior tiles beside the checked ones, batched too.
    // Row-major operands, `linear`'s K-contiguous B and a column-major A (each its own fast reads).
    for &v in &views[..3.min(views.len())] {
        *seed += 2;
        check(dev, spec, emulate, &[], (2 * bm + 5, 5 * p.bk as usize, bn + 3), v, false, false, *seed);
    }
    check(dev, spec, emulate, &[2], (bm, 3 * p.bk as usize, 2 * bn), views[0], false, true, *seed + 1);
    check(dev, spec, emulate, &[3], (45, 41, 19), views[0], false, false, *seed);
    check(dev, spec, emulate, &[2, 2], (20, 40, 44), views[1 % views.len()], true, false, *seed + 1);
    check(dev, spec, emulate, &[], (33, 50, 35), views[0], false, true, *seed + 1);
}

/// The device for an emulated test with `dtype` operands, or `None` (the skip reported) where the
/// emulated cooperative kernel does not run there.
fn emulation_device(dtype: DType, what: &str) -> Option<Device> {
    let dev = gpu_device()?;
    let probe = (rand_tensor(&[2, 2], dtype, 1, &dev), rand_tensor(&[2, 2], dtype, 2, &dev));
    if matmul_coop_spec(&probe.0, &probe.1, CoopTile::Small, Some(16), None).is_none() {
        skip_emulation(&dev, what);
        return None;
    }
    Some(dev)
}

#[test]
fn coop_tiles_emulated() {
    let Some(dev) = emulation_device(F16, "cooperative matmul") else { return };
    // Software adapters run the emulated products slowly: small tiles with every view here, the
    // production shapes on the fast layouts only (`coop_tiles_emulated_large`).
    let mut seed = 500;
    for spec in [
        "2x2:2x2:32:h1",
        "2x2:2x2:32:h4",
        "2x2:2x2:32:h4:deep",
        "2x2:2x2:16:h1:deep",
        "2x2:2x2:32:h4:fast",
        "2x2:2x2:16:h4:a3:fast:w",
        "2x2:2x2:16:h4:a4:fast",
        "2x2:2x2:16:h1:a3:w",
    ] {
        run_spec(&dev, spec, Some(16), &VIEWS, &mut seed);
    }
}

/// The production tile shapes, emulated where the adapter has the workgroup memory for them.
#[test]
fn coop_tiles_emulated_large() {
    let Some(dev) = emulation_device(F16, "cooperative matmul") else { return };
    let probe = (rand_tensor(&[2, 2], F16, 1, &dev), rand_tensor(&[2, 2], F16, 2, &dev));
    let mut seed = 700;
    // The production tiles over 32-deep K slices need about 45 KiB of workgroup memory, and those of
    // 8 subgroups (256 rows or columns) about 40 KiB even over 16-deep slices: adapters with less
    // (lavapipe: 32 KiB) decline them (the path answers None), and `coop_tiles_on_device_*` run them
    // on the real hardware. The 128x128 production tiles (4 subgroups of 4x4 accumulators, the same
    // fragments and loops) also run over 16-deep slices, which fit in 32 KiB: so CI covers them.
    let specs = ["2x2:4x4:32:h4", "2x4:4x2:32:h4:deep", "4x2:4x4:16:h4:deep", "2x4:4x4:16:h4"];
    for spec in specs.into_iter().chain(["2x2:4x4:16:h4", "2x4:4x2:16:h4:deep"]) {
        if matmul_coop_spec(&probe.0, &probe.1, CoopTile::Auto, Some(16), CoopSpec::parse(spec)).is_none() {
            eprintln!("spec {spec} skipped: its workgroup memory exceeds {}'s limit", dev.name());
            continue;
        }
        run_spec(&dev, spec, Some(16), &VIEWS[..2], &mut seed);
    }
}

/// The tile specs on the adapter's cooperative matrices (Vulkan, 16x16), each from its own seed. The
/// specs are split over three tests so that the device run, one process per test, takes them side by
/// side.
fn tiles_on_device(specs: &[&str], views: &[(View, View)], mut seed: u64) {
    let required = std::env::var("KILN_REQUIRE_COOP").is_ok_and(|v| v == "1");
    let Some(dev) = gpu_device() else {
        assert!(!required, "KILN_REQUIRE_COOP=1 but there is no GPU");
        return;
    };
    let (_, size) = coop_matmul_support(&dev);
    // Vector staging runs on Vulkan only: elsewhere the path declines these specs.
    let probe = (rand_tensor(&[32, 32], F16, 1, &dev), rand_tensor(&[32, 32], F16, 2, &dev));
    let spec = CoopSpec::parse("2x2:2x2:32:h4");
    if size != Some(16) || matmul_coop_spec(&probe.0, &probe.1, CoopTile::Auto, None, spec).is_none() {
        assert!(!required, "KILN_REQUIRE_COOP=1 but {} has no 16x16 cooperative matrices on Vulkan", dev.name());
        eprintln!("cooperative tile tests skipped on {}", dev.name());
        return;
    }
    for spec in specs {
        run_spec(&dev, spec, None, views, &mut seed);
    }
}

#[test]
#[ignore = "needs 16x16 f16 cooperative matrices on Vulkan (NVIDIA): run with --include-ignored, KILN_REQUIRE_COOP=1"]
fn coop_tiles_on_device_bk32() {
    let specs = ["2x2:4x4:32:h1", "2x2:4x4:32:h4", "2x2:4x4:32:h4:deep", "2x4:4x2:32:h4:deep", "2x2:2x2:32:h1:deep"];
    tiles_on_device(&specs, &VIEWS, 900);
}

#[test]
#[ignore = "needs 16x16 f16 cooperative matrices on Vulkan (NVIDIA): run with --include-ignored, KILN_REQUIRE_COOP=1"]
fn coop_tiles_on_device_bk16() {
    tiles_on_device(&["4x2:4x4:16:h4", "4x2:4x4:16:h4:deep", "2x4:4x4:16:h4:deep", "4x4:2x2:16:h4:deep"], &VIEWS, 1300);
}

#[test]
#[ignore = "needs 16x16 f16 cooperative matrices on Vulkan (NVIDIA): run with --include-ignored, KILN_REQUIRE_COOP=1"]
fn coop_tiles_on_device_fast() {
    let specs = [
        "4x2:4x4:16:h4:deep:fast",
        "2x4:4x4:16:h4:a3:fast",
        "2x4:4x4:16:h4:a4:fast",
        "2x2:4x4:32:h4:deep:fast",
        "2x4:4x2:32:h4:a4:fast",
        "2x2:4x4:32:h4:deep:fast:k2",
        "2x4:4x4:16:h4:a4:fast:w",
    ];
    tiles_on_device(&specs, &VIEWS, 1600);
}

/// The few-row tiles (one row of 4 subgroups), split K, and f16 read as words (`w`): the automatic
/// choice's few-row configs among them.
#[test]
#[ignore = "needs 16x16 f16 cooperative matrices on Vulkan (NVIDIA): run with --include-ignored, KILN_REQUIRE_COOP=1"]
fn coop_tiles_on_device_few() {
    let specs = [
        "1x4:2x2:32:h4:deep:fast:k4",
        "1x4:4x2:32:h4:deep:fast:k3",
        "1x4:4x1:64:h4:a4:fast",
        "1x4:2x1:64:h4:a4:fast:w",
        "1x4:4x1:64:h4:a4:fast:w",
    ];
    tiles_on_device(&specs, &VIEWS, 1800);
    // The automatic choice on few-row f16 shapes (words, the 96-row tiles of a wide product, split K).
    if let Some(dev) = gpu_device().filter(|d| coop_matmul_support(d).1 == Some(16)) {
        for (i, (m, k, n)) in
            [(16, 1024, 300), (40, 2048, 1000), (96, 640, 8200), (77, 8192, 130)].into_iter().enumerate()
        {
            check(&dev, "auto", None, &[], (m, k, n), VIEWS[1], false, i == 0, 1900 + i as u64);
        }
    }
    // 96-row tiles do not divide a column-major A's staging among 128 invocations (the path declines
    // them there, and the automatic choice takes its next candidate): the other layouts.
    // So do the automatic choice's tiles of 8 subgroups (64 x 64, and 96 x 128 in one row).
    let specs =
        ["1x4:6x2:32:h4:a4:fast", "1x4:6x2:32:h4:a4:fast:w", "2x4:2x1:64:h4:a4:fast:w", "1x8:6x1:32:h4:a4:fast:w"];
    tiles_on_device(&specs, &A_ROW_VIEWS, 1700);
}

/// bf16 values over 1e-6..1e4 in magnitude, both signs, and in every 7th line (row of a row-major
/// matrix) outliers of 1e5: far outside f16's range (6e-5..65504 as normals), so the kernel's
/// per-line power-of-two scaling into f16 is what keeps them.
fn wide_values(rows: usize, cols: usize, seed: u64) -> Vec<f64> {
    let u = random_values(2 * rows * cols, DType::F32, seed);
    let v: Vec<f64> = (0..rows * cols)
        .map(|i| {
            let mag = 10f64.powf(-6.0 + 10.0 * (0.5 + 0.5 * (u[2 * i] / 3.0).tanh()));
            let mag = if (i / cols) % 7 == 3 && i % 5 == 0 { 1e5 } else { mag };
            if u[2 * i + 1] < 0.0 {
                -mag
            } else {
                mag
            }
        })
        .collect();
    round_to(&v, DType::BF16)
}

/// One bf16 product through `spec` against the f64 reference. Bound per element: bf16's rounding of
/// the result (2^-8 relative) plus 2^-16 of sum |a||b| (f32 sums; the f16 staging of values more than
/// 2^28 below their line's maximum). NaN and Inf must land where the reference has them.
#[allow(clippy::too_many_arguments)]
fn check_bf16(
    dev: &Device,
    spec: Option<&str>,
    emulate: Option<u32>,
    batch: &[usize],
    (m, k, n): (usize, usize, usize),
    (va, vb): (View, View),
    bcast: bool,
    specials: bool,
    seed: u64,
) {
    let bf = DType::BF16;
    let nb: usize = batch.iter().product();
    let mut a_vals = wide_values(nb * m, k, seed);
    if specials {
        let at = k.min(a_vals.len() - 1);
        a_vals[0] = f64::NAN;
        a_vals[at] = f64::INFINITY;
    }
    // B's outliers by column: generated as (n, k) rows, stored transposed.
    let b_t = wide_values(if bcast { n } else { nb * n }, k, seed + 1);
    let b_one: Vec<f64> = (0..b_t.len() / (n * k))
        .flat_map(|z| {
            let b_t = &b_t;
            (0..k).flat_map(move |p| (0..n).map(move |j| b_t[(z * n + j) * k + p]))
        })
        .collect();
    let b_vals: Vec<f64> = if bcast { (0..nb).flat_map(|_| b_one.iter().copied()).collect() } else { b_one.clone() };
    let shape = |x: usize, y: usize| -> Vec<usize> { batch.iter().copied().chain([x, y]).collect() };
    let a = operand_of(&a_vals, &shape(m, k), va, bf, dev);
    let b = if bcast {
        operand_of(&b_one, &[k, n], vb, bf, dev).broadcast_to(shape(k, n)).unwrap()
    } else {
        operand_of(&b_vals, &shape(k, n), vb, bf, dev)
    };
    let ctx = format!("bf16 spec {spec:?} emulate {emulate:?} {batch:?} ({m}, {k}) @ ({k}, {n}) A {va:?} B {vb:?}");
    let got = match spec {
        Some(sp) => {
            let parsed = CoopSpec::parse(sp).unwrap_or_else(|| panic!("bad spec {sp}"));
            matmul_coop_spec(&a, &b, CoopTile::Auto, emulate, Some(parsed))
                .unwrap_or_else(|| panic!("the cooperative path refused {ctx}"))
                .unwrap_or_else(|e| panic!("{ctx}: {e}"))
        }
        None => a.matmul(&b).unwrap_or_else(|e| panic!("{ctx}: {e}")),
    };
    assert_eq!(got.dtype(), bf, "{ctx}");
    assert_eq!(got.dims(), &shape(m, n)[..], "{ctx}");
    let expected = reference(&a_vals, &b_vals, nb, m, k, n);
    let abs_a: Vec<f64> = a_vals.iter().map(|x| x.abs()).collect();
    let abs_b: Vec<f64> = b_vals.iter().map(|x| x.abs()).collect();
    let mass = reference(&abs_a, &abs_b, nb, m, k, n);
    let got = got.to_f64_vec().unwrap();
    let bad: Vec<String> = (0..got.len())
        .filter(|&i| {
            let (g, e) = (got[i], expected[i]);
            if !e.is_finite() {
                return !(e.is_nan() && g.is_nan() || e == g);
            }
            let err = (g - e).abs();
            err.is_nan() || err > e.abs() / 256.0 + mass[i] / 65536.0
        })
        .take(5)
        .map(|i| format!("at {i}: got {}, expected {}", got[i], expected[i]))
        .collect();
    assert!(bad.is_empty(), "{ctx}: {}", bad.join("; "));
}

/// The bf16 cases for one spec: every view pair, odd and even N (the f32 result and the bf16 pairs),
/// exact tiles, batches, a broadcast batch, NaN/Inf.
fn run_bf16(dev: &Device, spec: &str, emulate: Option<u32>, views: &[(View, View)], seed: &mut u64) {
    let p = CoopSpec::parse(spec).unwrap();
    let (bm, bn) = ((p.wm * p.tm * 16) as usize, (p.wn * p.tn * 16) as usize);
    for &v in views {
        *seed += 2;
        check_bf16(dev, Some(spec), emulate, &[], (bm + 37, 3 * p.bk as usize + 13, bn + 29), v, false, false, *seed);
        check_bf16(dev, Some(spec), emulate, &[], (bm - 5, 2 * p.bk as usize + 7, bn + 30), v, false, false, *seed);
    }
    *seed += 2;
    check_bf16(dev, Some(spec), emulate, &[], (bm, 2 * p.bk as usize, bn), views[0], false, false, *seed);
    check_bf16(dev, Some(spec), emulate, &[3], (45, 41, 19), views[0], false, false, *seed);
    check_bf16(dev, Some(spec), emulate, &[2, 2], (20, 40, 44), views[1 % views.len()], true, false, *seed + 1);
    check_bf16(dev, Some(spec), emulate, &[], (33, 50, 35), views[0], false, true, *seed + 1);
    check_bf16(dev, Some(spec), emulate, &[], (33, 50, 36), views[1 % views.len()], false, true, *seed + 1);
}

#[test]
fn coop_bf16_emulated() {
    let Some(dev) = emulation_device(DType::BF16, "cooperative bf16 matmul") else { return };
    let mut seed = 700;
    for spec in ["2x2:2x2:32:h4", "2x2:2x2:16:h1:deep", "2x2:2x2:16:h4:a3:fast"] {
        run_bf16(&dev, spec, Some(16), &VIEWS, &mut seed);
    }
}

/// K split over workgroups (`kN`), f16 and bf16: splits of whole slices with a shorter last one,
/// two and three splits, batches, the fast interior reads, the pair sums (even outputs) and the f32
/// sum and cast (odd ones); `check`'s negative control drops the last 16 of K.
#[test]
fn coop_split_emulated() {
    let Some(dev) = emulation_device(F16, "cooperative split-K matmul") else { return };
    let mut seed = 800;
    run_spec(&dev, "2x2:2x2:32:h4:deep:fast:k3", Some(16), &VIEWS[..4], &mut seed);
    run_spec(&dev, "1x4:2x2:16:h1:k2", Some(16), &VIEWS[..2], &mut seed);
    run_bf16(&dev, "2x2:2x2:16:h4:a3:fast:k3", Some(16), &VIEWS[..3], &mut seed);
    // The automatic choice splits K where the tiles make few workgroups: few rows, deep K.
    for (m, k, n) in [(24, 1100, 70), (40, 1024, 33)] {
        seed += 2;
        check(&dev, "auto", Some(16), &[], (m, k, n), VIEWS[1], false, false, seed);
    }
}

/// bf16 on the adapter's cooperative matrices, through specs and through `matmul`/`linear` (the
/// automatic choice), where the adapter has them.
/// The bf16 device runs: the device, or `None` where the test is skipped.
fn bf16_device() -> Option<Device> {
    let required = std::env::var("KILN_REQUIRE_COOP").is_ok_and(|v| v == "1");
    let Some(dev) = gpu_device() else {
        assert!(!required, "KILN_REQUIRE_COOP=1 but there is no GPU");
        return None;
    };
    let (_, size) = coop_matmul_support(&dev);
    if size != Some(16) {
        assert!(!required, "KILN_REQUIRE_COOP=1 but {} has no 16x16 cooperative matrices", dev.name());
        eprintln!("cooperative bf16 tests skipped on {}", dev.name());
        return None;
    }
    Some(dev)
}

#[test]
#[ignore = "needs 16x16 cooperative matrices (NVIDIA): run with --include-ignored, KILN_REQUIRE_COOP=1"]
fn coop_bf16_on_device() {
    let Some(dev) = bf16_device() else { return };
    let mut seed = 1900;
    for spec in ["2x2:4x4:32:h4", "4x2:4x4:16:h4:deep", "2x4:4x4:16:h4:a4:fast", "2x4:4x2:32:h4:a4:fast"] {
        run_bf16(&dev, spec, None, &VIEWS, &mut seed);
    }
}

/// bf16 on the few-row tiles and split K (apart from `coop_bf16_on_device`: each test runs in its
/// own process on the device, side by side).
#[test]
#[ignore = "needs 16x16 cooperative matrices (NVIDIA): run with --include-ignored, KILN_REQUIRE_COOP=1"]
fn coop_bf16_on_device_few() {
    let Some(dev) = bf16_device() else { return };
    let mut seed = 2100;
    for spec in ["1x4:2x2:32:h4:deep:fast:k4", "1x4:2x1:64:h4:a4:fast", "1x4:4x1:64:h4:a4:fast:k2"] {
        run_bf16(&dev, spec, None, &VIEWS, &mut seed);
    }
    run_bf16(&dev, "1x4:6x2:32:h4:a4:fast", None, &A_ROW_VIEWS, &mut seed);
    run_bf16(&dev, "2x4:2x1:64:h4:a4:fast:w", None, &A_ROW_VIEWS, &mut seed);
    run_bf16(&dev, "1x8:6x1:32:h4:a4:fast:w", None, &A_ROW_VIEWS, &mut seed);
}

/// The automatic choice on bf16 shapes of every size class (the specs are `coop_bf16_on_device`).
#[test]
#[ignore = "needs 16x16 cooperative matrices (NVIDIA): run with --include-ignored, KILN_REQUIRE_COOP=1"]
fn coop_bf16_on_device_auto() {
    let Some(dev) = bf16_device() else { return };
    let mut seed = 1950;
    for (m, k, n) in [
        (300, 257, 514),
        (513, 96, 1000),
        (64, 4096, 129),
        (40, 2048, 1000),
        (96, 4096, 515),
        (77, 512, 8200),
        (16, 1024, 300),
    ] {
        seed += 2;
        check_bf16(&dev, None, None, &[], (m, k, n), (View::Plain, View::Transposed), false, false, seed);
        check_bf16(&dev, None, None, &[2], (m, k, n), (View::Plain, View::Plain), false, true, seed);
    }
}
