//! Every matmul plan forced on lavapipe (or any adapter): each tile configuration with each pair
//! of operand load modes, each skinny variant, K splits, transposed plans, batches, and autotune
//! with its cache file. Values are small integers, so f32 sums are exact and the half types differ
//! from the f64 reference only by the final rounding. Skipped without an adapter unless
//! `KILN_REQUIRE_GPU=1`.

use super::plan::{Kernel, Plan};
use super::problem::{Mode, Problem};
use super::skinny::Skinny;
use super::tiled::TILES;
use super::{matmul_with, Choice};
use crate::backend::BackendStorage;
use crate::cpu::CpuStorage;
use crate::gpu::runtime::{autotune, GpuContext, GpuStorage};
use crate::{DType, Device, Layout};
use std::sync::Arc;

fn ctx() -> Option<Arc<GpuContext>> {
    match Device::gpu() {
        Ok(d) => {
            let c = d.gpu_context().cloned()?;
            c.poison.store(true, std::sync::atomic::Ordering::Relaxed);
            Some(c)
        }
        Err(e) => {
            assert!(!crate::settings::REQUIRE_GPU.is_one(), "KILN_REQUIRE_GPU=1 but: {e}");
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// How a test matrix (rows x cols, per batch) lies in memory. The names say what an A operand
/// (rows = M, cols = K) loads as; for B (rows = K, cols = N) k and outer swap.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Lay {
    /// Row-major, rows padded to a multiple of 4: vector loads along the columns.
    Rows,
    /// Column-major, columns padded to a multiple of 4: vector loads along the rows.
    Cols,
    /// Row-major from element 1: scalar loads, columns fast.
    RowsOdd,
    /// Column-major from element 1: scalar loads, rows fast.
    ColsOdd,
}
const LAYS: [Lay; 4] = [Lay::Rows, Lay::Cols, Lay::RowsOdd, Lay::ColsOdd];

/// A (batch, rows, cols) operand: its storage on the GPU, its layout, and the f64 value of each
/// logical element. `bcast` makes the batch stride 0 (one matrix broadcast over the batch).
struct Mat {
    gpu: GpuStorage,
    layout: Layout,
    vals: Vec<f64>,
}

fn mat(
    c: &Arc<GpuContext>,
    dt: DType,
    (batch, rows, cols): (usize, usize, usize),
    lay: Lay,
    bcast: bool,
    seed: u64,
) -> Mat {
    let pad = |x: usize| x.div_ceil(4) * 4;
    let (off, rs, cs, per) = match lay {
        Lay::Rows => (0, pad(cols), 1, pad(cols) * rows),
        Lay::Cols => (0, 1, pad(rows), pad(rows) * cols),
        Lay::RowsOdd => (1, cols, 1, rows * cols + 1),
        Lay::ColsOdd => (1, 1, rows, rows * cols + 1),
    };
    let per = pad(per);
    let stored_batches = if bcast { 1 } else { batch };
    let total = per * stored_batches + 4;
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut store = vec![f64::NAN; total];
    let mut vals = Vec::with_capacity(batch * rows * cols);
    for b in 0..batch {
        for r in 0..rows {
            for col in 0..cols {
                let i = (if bcast { 0 } else { b * per }) + off + r * rs + col * cs;
                if store[i].is_nan() {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    store[i] = ((state >> 33) % 7) as f64 - 3.0;
                }
                vals.push(store[i]);
            }
        }
    }
    // Gaps hold values no product should see: NaN for floats.
    let host = CpuStorage::F32(store.iter().map(|&v| v as f32).collect());
    let host = host.cast(&Layout::contiguous(total), dt).unwrap();
    let gpu = GpuStorage::from_cpu(c, &host).unwrap();
    let bs = if bcast { 0 } else { per };
    let layout = Layout::new(vec![batch, rows, cols].into(), vec![bs, rs, cs], off);
    Mat { gpu, layout, vals }
}

/// Runs `a @ b` with `choice` and compares with the f64 product of the logical values.
fn check(a: &Mat, b: &Mat, dt: DType, choice: Choice, what: &str) {
    let (batch, m, k) = (a.layout.dims()[0], a.layout.dims()[1], a.layout.dims()[2]);
    let n = b.layout.dims()[2];
    let got = matmul_with(&a.gpu, &a.layout, &b.gpu, &b.layout, choice).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got.dtype, dt, "{what}");
    let got = got.to_cpu(&Layout::contiguous(batch * m * n)).unwrap();
    let got = got.cast(&Layout::contiguous(batch * m * n), DType::F32).unwrap();
    let CpuStorage::F32(got) = got else { unreachable!() };
    let eps = match dt {
        DType::F16 => 1.0 / 1024.0,
        DType::BF16 => 1.0 / 128.0,
        _ => 0.0,
    };
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|p| a.vals[(bi * m + i) * k + p] * b.vals[(bi * k + p) * n + j]).sum();
                let g = got[(bi * m + i) * n + j] as f64;
                assert!((g - want).abs() <= eps * want.abs(), "{what}: [{bi}, {i}, {j}] = {g}, expected {want}");
            }
        }
    }
}

fn modes(a: &Mat, b: &Mat, dt: DType) -> (Mode, Mode) {
    let p = Problem::new(dt, &a.layout, &b.layout).unwrap();
    (p.a.mode(), p.b.mode())
}

#[test]
fn every_tile_with_every_load_mode() {
    let Some(c) = ctx() else { return };
    let (m, k, n) = (65, 37, 70);
    for t in TILES.iter().filter(|t| t.fits(&c.limits)) {
        let mut seen = Vec::new();
        for la in LAYS {
            for lb in LAYS {
                let a = mat(&c, DType::F32, (1, m, k), la, false, 1);
                let b = mat(&c, DType::F32, (1, k, n), lb, false, 2);
                seen.push(modes(&a, &b, DType::F32));
                check(&a, &b, DType::F32, Choice::Force(Plan::tiled(*t, 1)), &format!("{} {la:?} {lb:?}", t.name));
            }
        }
        for am in Mode::ALL {
            for bm in Mode::ALL {
                assert!(seen.contains(&(am, bm)), "{}: modes {am:?} {bm:?} not covered", t.name);
            }
        }
    }
}

#[test]
fn tiles_on_odd_shapes_splits_batches_and_half_types() {
    let Some(c) = ctx() else { return };
    let shapes = [(1, 1, 1), (7, 13, 5), (65, 129, 67), (130, 257, 70)];
    for t in TILES.iter().filter(|t| t.fits(&c.limits)) {
        for (i, &(m, k, n)) in shapes.iter().enumerate() {
            let a = mat(&c, DType::F32, (1, m, k), LAYS[i % 4], false, 3);
            let b = mat(&c, DType::F32, (1, k, n), LAYS[(i + 1) % 4], false, 4);
            for splits in [1, 3] {
                let plan = Plan::tiled(*t, splits);
                check(&a, &b, DType::F32, Choice::Force(plan), &format!("{} {m}x{k}x{n} s{splits}", t.name));
            }
        }
        // Batched, with B broadcast over the batch, and transposed (C^T = B^T A^T).
        let a = mat(&c, DType::F32, (3, 33, 20), Lay::Rows, false, 5);
        let b = mat(&c, DType::F32, (3, 20, 41), Lay::ColsOdd, true, 6);
        for swap in [false, true] {
            let plan = Plan { kernel: Kernel::Tiled(*t), swap, splits: 2 };
            check(&a, &b, DType::F32, Choice::Force(plan), &format!("{} batched swap={swap}", t.name));
        }
        for dt in [DType::F16, DType::BF16] {
            for (la, lb) in [(Lay::Rows, Lay::Rows), (Lay::Cols, Lay::Cols), (Lay::RowsOdd, Lay::ColsOdd)] {
                let a = mat(&c, dt, (2, 37, 45), la, false, 7);
                let b = mat(&c, dt, (2, 45, 19), lb, false, 8);
                check(&a, &b, dt, Choice::Force(Plan::tiled(*t, 1)), &format!("{} {dt} {la:?} {lb:?}", t.name));
            }
        }
    }
}

#[test]
fn every_skinny_variant() {
    let Some(c) = ctx() else { return };
    let mut seen = Vec::new();
    for (i, m) in [1, 2, 3, 5, 8, 13, 64].into_iter().enumerate() {
        for la in [Lay::Rows, Lay::RowsOdd] {
            for lb in LAYS {
                let (k, n) = if i % 2 == 0 { (301, 37) } else { (37, 301) };
                // Up to 8 rows, also enough columns (3075) for the wide-k shape.
                let wide = (m <= 8).then_some((k + 300, 3075));
                for (k, n) in [(k, n)].into_iter().chain(wide) {
                    let a = mat(&c, DType::F32, (1, m, k), la, false, 9 + i as u64);
                    let b = mat(&c, DType::F32, (1, k, n), lb, false, 10);
                    let p = Problem::new(DType::F32, &a.layout, &b.layout).unwrap();
                    seen.push(Skinny::for_problem(&p));
                    for splits in [0, 1, 5] {
                        let plan = Plan::skinny(false, splits);
                        let what = format!("skinny m{m} k{k} n{n} {la:?} {lb:?} s{splits}");
                        check(&a, &b, DType::F32, Choice::Force(plan), &what);
                    }
                }
            }
        }
    }
    for s in Skinny::all(DType::F32) {
        assert!(seen.contains(&s), "{} not covered", s.key());
    }
    for dt in [DType::F16, DType::BF16] {
        for (la, lb) in [(Lay::Rows, Lay::Rows), (Lay::Rows, Lay::Cols), (Lay::RowsOdd, Lay::ColsOdd)] {
            let a = mat(&c, dt, (3, 3, 130), la, false, 11);
            let b = mat(&c, dt, (3, 130, 9), lb, true, 12);
            check(&a, &b, dt, Choice::Force(Plan::skinny(false, 0)), &format!("skinny {dt} {la:?} {lb:?}"));
        }
    }
    // Many K splits (the split sum's lanes and its unrolled and remainder loops), outputs not a
    // multiple of its column block.
    for (m, n) in [(1, 37), (3, 300)] {
        let a = mat(&c, DType::F32, (1, m, 2053), Lay::Rows, false, 15);
        let b = mat(&c, DType::F32, (1, 2053, n), Lay::Rows, false, 16);
        for splits in [9, 37, 64] {
            check(
                &a,
                &b,
                DType::F32,
                Choice::Force(Plan::skinny(false, splits)),
                &format!("skinny m{m} n{n} s{splits}"),
            );
        }
    }
    // Few columns, many rows: the transposed problem.
    let a = mat(&c, DType::F32, (2, 150, 70), Lay::Rows, false, 13);
    let b = mat(&c, DType::F32, (2, 70, 3), Lay::Cols, false, 14);
    for splits in [0, 1, 2] {
        check(&a, &b, DType::F32, Choice::Force(Plan::skinny(true, splits)), &format!("skinny transposed s{splits}"));
    }
}

#[test]
fn naive_and_the_heuristic() {
    let Some(c) = ctx() else { return };
    let a = mat(&c, DType::F32, (2, 21, 34), Lay::ColsOdd, false, 15);
    let b = mat(&c, DType::F32, (2, 34, 17), Lay::Rows, false, 16);
    for swap in [false, true] {
        let plan = Plan { swap, ..Plan::NAIVE };
        check(&a, &b, DType::F32, Choice::Force(plan), &format!("naive swap={swap}"));
    }
    check(&a, &b, DType::F32, Choice::Heuristic, "heuristic");
    // Integers take the naive kernel whatever the plan says.
    let a = mat(&c, DType::I32, (1, 9, 70), Lay::Rows, false, 17);
    let b = mat(&c, DType::I32, (1, 70, 5), Lay::Cols, false, 18);
    check(&a, &b, DType::I32, Choice::Force(Plan::tiled(TILES[4], 2)), "i32 forced tiled");
}

#[test]
fn autotune_picks_a_correct_plan_and_writes_its_cache() {
    let Some(c) = ctx() else { return };
    let dir = std::env::temp_dir().join(format!("kiln-matmul-autotune-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("autotune-v1.json");
    let a = mat(&c, DType::F32, (1, 70, 50), Lay::Rows, false, 19);
    let b = mat(&c, DType::F32, (1, 50, 90), Lay::Rows, false, 20);
    check(&a, &b, DType::F32, Choice::Tune(Some(path.clone())), "autotuned");
    let cache = autotune::TuneCache::load(&path);
    let p = Problem::new(DType::F32, &a.layout, &b.layout).unwrap();
    let key = format!("{}|{}", autotune::device_key(&c), super::plan::tune_key(&p));
    let plan = cache.get(&key).unwrap_or_else(|| panic!("no entry {key} in {cache:?}"));
    assert!(Plan::decode(plan).is_some(), "{plan}");
    // The second call takes the cached plan.
    check(&a, &b, DType::F32, Choice::Tune(Some(path.clone())), "cached");
    std::fs::remove_dir_all(&dir).unwrap();
}
