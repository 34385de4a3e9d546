//! The cooperative-matrix f16 matmul at both staging forms (`Stage::H1` scalar halves, `H4` 8-byte
//! vectors), with slices read one or two ahead (`deep`), and the tile shapes the sweep and the
//! automatic choice use (4, 8 or 16 subgroups, 2x2 to 4x4 accumulators each, 16- or 32-deep K
//! slices), against an f64 product: odd
//! M/N/K, K-contiguous weights (`linear`'s `w.t()`), views whose offsets or strides defeat 16-byte
//! reads (element-wise edges), batches and broadcast batches, and NaN/Inf propagation.
//! Tolerance: f16's times sqrt(k) (f32 sums rounded once to f16).
//!
//! `coop_tiles_emulated` runs the kernels with plain WGSL in place of the cooperative ops (same index
//! math, same workgroup-memory layout) on any adapter with SHADER_F16, e.g. lavapipe;
//! `coop_tiles_on_device` runs them on the adapter's cooperative matrices (Vulkan; skipped without,
//! a failure instead with `KILN_REQUIRE_COOP=1`).
use crate::common::*;
use kiln::gpu::matmul_coop::{coop_matmul_support, matmul_coop_spec, CoopSpec, CoopTile};
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
    let r = shape.len();
    match view {
        View::Plain => tensor(values, shape, F16, dev),
        View::Transposed => tensor_in(values, shape, F16, Layouts::Transposed, dev),
        View::Stepped => tensor_in(values, shape, F16, Layouts::Stepped, dev),
        View::Offset(n) => {
            let mut stored = vec![0.0; n];
            stored.extend_from_slice(values);
            let t = tensor(&stored, &[stored.len()], F16, dev).narrow(0, n, values.len()).unwrap();
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
    let parsed = CoopSpec::parse(spec).unwrap_or_else(|| panic!("bad spec {spec}"));
    let got = matmul_coop_spec(&a, &b, CoopTile::Auto, emulate, Some(parsed))
        .unwrap_or_else(|| panic!("the cooperative path refused {ctx}"))
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(got.dtype(), F16, "{ctx}");
    assert_eq!(got.dims(), &shape(m, n)[..], "{ctx}");
    let expected = RefArray::new(shape(m, n), reference(&a_vals, &b_vals, nb, m, k, n));
    assert_close(&got, &expected, (k as f64).sqrt(), &ctx);
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
    check(dev, spec, emulate, &[3], (45, 41, 19), views[0], false, false, *seed);
    check(dev, spec, emulate, &[2, 2], (20, 40, 44), views[1 % views.len()], true, false, *seed + 1);
    check(dev, spec, emulate, &[], (33, 50, 35), views[0], false, true, *seed + 1);
}

#[test]
fn coop_tiles_emulated() {
    let Some(dev) = gpu_device() else { return };
    let probe = (rand_tensor(&[2, 2], F16, 1, &dev), rand_tensor(&[2, 2], F16, 2, &dev));
    if matmul_coop_spec(&probe.0, &probe.1, CoopTile::Small, Some(16), None).is_none() {
        eprintln!("emulated cooperative matmul skipped: {} has no SHADER_F16", dev.name());
        return;
    }
    // Software adapters run the emulated products slowly: small tiles with every view, the large
    // shapes of the sweep on the fast layouts only.
    let mut seed = 500;
    for spec in ["2x2:2x2:32:h1", "2x2:2x2:32:h4", "2x2:2x2:32:h4:deep", "2x2:2x2:16:h1:deep"] {
        run_spec(&dev, spec, Some(16), &VIEWS, &mut seed);
    }
    // The large tiles need about 45 KiB of workgroup memory: adapters with less (lavapipe: 32 KiB)
    // decline them (the path answers None); `coop_tiles_on_device` runs them on the real hardware.
    for spec in ["2x2:4x4:32:h4", "2x4:4x2:32:h4:deep", "4x2:4x4:16:h4:deep", "2x4:4x4:16:h4"] {
        if matmul_coop_spec(&probe.0, &probe.1, CoopTile::Auto, Some(16), CoopSpec::parse(spec)).is_none() {
            eprintln!("spec {spec} skipped: its workgroup memory exceeds {}'s limit", dev.name());
            continue;
        }
        run_spec(&dev, spec, Some(16), &VIEWS[..2], &mut seed);
    }
}

#[test]
fn coop_tiles_on_device() {
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
    let mut seed = 900;
    for spec in [
        "2x2:4x4:32:h1",
        "2x2:4x4:32:h4",
        "2x2:4x4:32:h4:deep",
        "2x4:4x2:32:h4:deep",
        "4x2:4x4:16:h4",
        "4x2:4x4:16:h4:deep",
        "2x4:4x4:16:h4:deep",
        "4x4:2x2:16:h4:deep",
        "2x2:2x2:32:h1:deep",
    ] {
        run_spec(&dev, spec, None, &VIEWS, &mut seed);
    }
}
