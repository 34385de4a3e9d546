//! The cooperative-matrix f16 matmul (`gpu/matmul/coop/`) against a plain f64 product: edge tiles
//! (M, N, K not multiples of 16, 32 or 64), batches (also broadcast), transposed, stepped and offset
//! views of both operands (every staging variant: K or M/N contiguous, 4-wide or element reads), both
//! tile presets. Tolerance: the dot product's accumulation bound `k u sum|a||b|` (u of f32, the
//! accumulator) plus the rounding to f16, like `matmul.rs`.
//!
//! `coop_on_device` runs the kernel on the adapter's cooperative matrices. It is `#[ignore]`d, so a
//! run without such an adapter (CI's lavapipe) lists it as ignored instead of passing it silently;
//! `bench/gpu/run_nvidia.sh` runs it with `--include-ignored`, and `KILN_REQUIRE_COOP=1` makes a
//! missing feature fail there. `coop_emulated` runs the same kernel, at every tile preset, with the
//! cooperative ops replaced by plain WGSL on any adapter with SHADER_F16 (e.g. lavapipe in CI), which
//! tests the staging, edges, strides, batches and epilogue around them; it fails under
//! `KILN_REQUIRE_GPU=1` when the adapter lacks SHADER_F16.
use crate::bounds::{assert_bounded, assert_catches_wrong, sum_bound};
use crate::common::*;
use kiln::gpu_probes::{coop_matmul_support, matmul_coop_tensors, CoopTile};
use kiln::{DType, Device, Tensor};

const F16: DType = DType::F16;

/// How an operand is laid out in memory for one case.
#[derive(Debug, Clone, Copy, PartialEq)]
enum View {
    Plain(Layouts),
    /// Contiguous data starting `n` elements into its buffer.
    Offset(usize),
    /// The leading columns of a wider matrix whose rows start at multiples of 4 elements: 4-wide
    /// reads that end past the last column.
    Padded,
}

/// `values` (row-major over `shape`) on `dev` as `view`.
fn operand(values: &[f64], shape: &[usize], view: View, dev: &Device) -> Tensor {
    match view {
        View::Plain(kind) => tensor_in(values, shape, F16, kind, dev),
        View::Offset(n) => {
            let mut stored = vec![0.0; n];
            stored.extend_from_slice(values);
            tensor(&stored, &[stored.len()], F16, dev).narrow(0, n, values.len()).unwrap().reshape(shape).unwrap()
        }
        View::Padded => {
            let (rows, cols) = (shape[..shape.len() - 1].iter().product::<usize>(), shape[shape.len() - 1]);
            let wide = cols.div_ceil(4) * 4 + 4;
            let mut stored = vec![f64::NAN; rows * wide];
            for r in 0..rows {
                stored[r * wide..r * wide + cols].copy_from_slice(&values[r * cols..(r + 1) * cols]);
            }
            let mut wshape = shape.to_vec();
            *wshape.last_mut().unwrap() = wide;
            tensor(&stored, &wshape, F16, dev).narrow(-1, 0, cols).unwrap()
        }
    }
}

/// `(batch.., m, k) @ (batch.., k, n)` in f64.
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

/// Checks an f16 product against the reference of `a`, `b` within the accumulation bound.
#[allow(clippy::too_many_arguments)]
fn assert_product(
    got: &Tensor,
    a: &[f64],
    b: &[f64],
    batch: usize,
    shape: Vec<usize>,
    (m, k, n): (usize, usize, usize),
    ctx: &str,
) {
    let want = reference(a, b, batch, m, k, n);
    let (aa, ab): (Vec<f64>, Vec<f64>) = (a.iter().map(|v| v.abs()).collect(), b.iter().map(|v| v.abs()).collect());
    let abs = reference(&aa, &ab, batch, m, k, n);
    let bounds: Vec<f64> = want.iter().zip(&abs).map(|(&w, &s)| sum_bound(F16, k, s, w)).collect();
    if batch == 1 && k > 16 && m * n >= 2 && m * n * k <= 1 << 20 {
        // The bound catches a product that skipped the last 16-deep slice of k, zeros and a shift.
        let a_short: Vec<f64> = a.iter().enumerate().map(|(i, &v)| if i % k >= k - 16 { 0.0 } else { v }).collect();
        let dropped = reference(&a_short, b, batch, m, k, n);
        assert_catches_wrong(&want, &bounds, &dropped, ctx);
    }
    assert_bounded(got, &RefArray::new(shape, want), &bounds, ctx);
}

/// How the cases are run: on the device's cooperative matrices or emulated with `s x s` tiles.
#[derive(Debug, Clone, Copy)]
struct Mode {
    tile: CoopTile,
    emulate: Option<u32>,
}

/// One product through the cooperative kernel, checked against the reference. `b_batch_broadcast`
/// stores B once and broadcasts it over the batch (zero batch stride).
#[allow(clippy::too_many_arguments)]
fn check(
    dev: &Device,
    mode: Mode,
    batch: &[usize],
    (m, k, n): (usize, usize, usize),
    va: View,
    vb: View,
    bcast: bool,
    seed: u64,
) {
    let nb: usize = batch.iter().product();
    let a_vals = round_to(&random_values(nb * m * k, F16, seed), F16);
    let b_one = round_to(&random_values(if bcast { k * n } else { nb * k * n }, F16, seed + 1), F16);
    let b_vals: Vec<f64> = if bcast { (0..nb).flat_map(|_| b_one.iter().copied()).collect() } else { b_one.clone() };
    let shape = |x: usize, y: usize| -> Vec<usize> { batch.iter().copied().chain([x, y]).collect() };
    let a = operand(&a_vals, &shape(m, k), va, dev);
    let b = if bcast {
        operand(&b_one, &[k, n], vb, dev).broadcast_to(shape(k, n)).unwrap()
    } else {
        operand(&b_vals, &shape(k, n), vb, dev)
    };
    let ctx = format!("{mode:?} {batch:?} ({m}, {k}) @ ({k}, {n}) A {va:?} B {vb:?} broadcast {bcast}");
    let got = matmul_coop_tensors(&a, &b, mode.tile, mode.emulate)
        .unwrap_or_else(|| panic!("the cooperative path refused {ctx}"))
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(got.dtype(), F16, "{ctx}");
    assert_product(&got, &a_vals, &b_vals, nb, shape(m, n), (m, k, n), &ctx);
}

/// Operand views covering every staging variant: K or M/N contiguous, 4-wide reads (aligned) or
/// element reads (stepped, odd offsets).
const VIEWS: [(View, View); 8] = [
    (View::Plain(Layouts::Contiguous), View::Plain(Layouts::Contiguous)),
    (View::Plain(Layouts::Contiguous), View::Plain(Layouts::Transposed)),
    (View::Plain(Layouts::Transposed), View::Plain(Layouts::Contiguous)),
    (View::Plain(Layouts::Transposed), View::Plain(Layouts::Transposed)),
    (View::Plain(Layouts::Stepped), View::Plain(Layouts::Stepped)),
    (View::Offset(1), View::Offset(3)),
    (View::Offset(4), View::Offset(8)),
    (View::Padded, View::Padded),
];

/// Edge-heavy (m, k, n): single elements, sizes under one matrix, exactly one, odd sizes over
/// several tiles and K slices.
const SHAPES: [(usize, usize, usize); 5] = [(1, 1, 1), (5, 7, 3), (16, 16, 16), (33, 47, 65), (70, 100, 129)];
/// Several tiles and K slices in every direction, an exact large tile, ragged edges, and more than
/// 8 tiles along M (tiles are ordered in groups of 8 rows).
const BIG: [(usize, usize, usize); 3] = [(128, 256, 128), (257, 300, 131), (600, 72, 100)];

/// Each of `shapes` with each of `views`, then (with `batches`) batched and broadcast products.
fn run_cases(dev: &Device, mode: Mode, views: &[(View, View)], shapes: &[(usize, usize, usize)], batches: bool) {
    let mut seed = 0;
    for &(m, k, n) in shapes {
        for &(va, vb) in views {
            seed += 2;
            check(dev, mode, &[], (m, k, n), va, vb, false, seed);
        }
    }
    if batches {
        for &(va, vb) in &views[..views.len().min(4)] {
            seed += 2;
            check(dev, mode, &[3], (37, 41, 19), va, vb, false, seed);
            check(dev, mode, &[2, 2], (20, 36, 44), va, vb, true, seed + 1);
        }
    }
}

/// The GPU device and the cooperative matrix size its f16 matmul runs with; `None` (with a printed
/// line) when there is none, a panic instead when `KILN_REQUIRE_COOP=1`.
fn coop_device() -> Option<(Device, u32)> {
    let required = std::env::var("KILN_REQUIRE_COOP").is_ok_and(|v| v == "1");
    let Some(dev) = gpu_device() else {
        assert!(!required, "KILN_REQUIRE_COOP=1 but there is no GPU");
        return None;
    };
    let (configs, size) = coop_matmul_support(&dev);
    eprintln!("cooperative matrix configurations of {}: {configs:?}", dev.name());
    match size {
        Some(s) => Some((dev, s)),
        None => {
            assert!(!required, "KILN_REQUIRE_COOP=1 but {} cannot run the cooperative f16 matmul", dev.name());
            eprintln!("cooperative matmul skipped: {} has no usable f16 cooperative matrix", dev.name());
            None
        }
    }
}

#[test]
#[ignore = "needs f16 cooperative matrices (NVIDIA, AMD): bench/gpu/run_nvidia.sh runs it with --include-ignored"]
fn coop_on_device() {
    let Some((dev, s)) = coop_device() else { return };
    eprintln!("cooperative matmul runs with {s}x{s} matrices");
    let shapes: Vec<_> = SHAPES.iter().chain(&BIG).copied().collect();
    for tile in [CoopTile::Large, CoopTile::Wide, CoopTile::Small] {
        run_cases(&dev, Mode { tile, emulate: None }, &VIEWS, &shapes, true);
    }
    // Through the public op as well, on a size the automatic choice sends to the cooperative path
    // once `matmul` calls it (the generic kernel otherwise: the answer is the same).
    let (m, k, n) = (300, 520, 260);
    let va = round_to(&random_values(m * k, F16, 90), F16);
    let vb = round_to(&random_values(k * n, F16, 91), F16);
    let got = tensor(&va, &[m, k], F16, &dev).matmul(&tensor(&vb, &[k, n], F16, &dev)).unwrap();
    assert_product(&got, &va, &vb, 1, vec![m, n], (m, k, n), "f16 matmul 300x520x260");
}

#[test]
fn coop_emulated() {
    let Some(dev) = gpu_device() else { return };
    let probe = (rand_tensor(&[2, 2], F16, 1, &dev), rand_tensor(&[2, 2], F16, 2, &dev));
    if matmul_coop_tensors(&probe.0, &probe.1, CoopTile::Small, Some(16)).is_none() {
        skip_emulation(&dev, "cooperative matmul");
        return;
    }
    // Software adapters compile the unrolled kernels slowly: everything on the small 16x16 preset,
    // a sample on the others (each operand variant is its own kernel).
    let all: Vec<_> = SHAPES.iter().chain(&BIG).copied().collect();
    run_cases(&dev, Mode { tile: CoopTile::Small, emulate: Some(16) }, &VIEWS, &all, true);
    // The large and wide presets (what `coop_on_device` runs on real tensor cores) on the K-major and
    // M/N-major staging variants, over several tiles with ragged edges.
    run_cases(&dev, Mode { tile: CoopTile::Large, emulate: Some(16) }, &VIEWS[..4], &[BIG[1]], false);
    run_cases(&dev, Mode { tile: CoopTile::Wide, emulate: Some(16) }, &VIEWS[..4], &[BIG[1]], false);
    run_cases(&dev, Mode { tile: CoopTile::Small, emulate: Some(8) }, &VIEWS[2..3], &[SHAPES[1], (300, 40, 70)], false);
    run_cases(&dev, Mode { tile: CoopTile::Large, emulate: Some(8) }, &VIEWS[4..5], &[BIG[1]], false);
}

/// Without the feature the path declines (the generic matmul answers instead), and other dtypes
/// and mismatched operands are declined everywhere.
#[test]
fn coop_declines() {
    let Some(dev) = gpu_device() else { return };
    let (_, size) = coop_matmul_support(&dev);
    let a = rand_tensor(&[64, 64], F16, 1, &dev);
    let b = rand_tensor(&[64, 64], F16, 2, &dev);
    let r = matmul_coop_tensors(&a, &b, CoopTile::Auto, None);
    assert_eq!(r.is_some(), size.is_some(), "the path should run exactly where it is supported");
    let f = rand_tensor(&[64, 64], DType::F32, 3, &dev);
    assert!(matmul_coop_tensors(&f, &f, CoopTile::Auto, None).is_none(), "f32 is not for this path");
    assert!(matmul_coop_tensors(&f, &f, CoopTile::Auto, Some(16)).is_none(), "f32 is not for this path");
    let c = rand_tensor(&[64], F16, 4, &dev);
    assert!(matmul_coop_tensors(&a, &c, CoopTile::Auto, Some(16)).is_some_and(|r| r.is_err()), "rank mismatch");
    let cpu = rand_tensor(&[64, 64], F16, 5, &Device::cpu());
    assert!(matmul_coop_tensors(&cpu, &cpu, CoopTile::Auto, Some(16)).is_none(), "CPU tensors");
    // The ordinary f16 matmul is right whichever path it takes.
    let got = a.matmul(&b).unwrap();
    let (va, vb) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    assert_product(&got, &va, &vb, 1, vec![64, 64], (64, 64, 64), "f16 matmul 64^3");
}
