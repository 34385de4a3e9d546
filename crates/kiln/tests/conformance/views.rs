//! The core view ops (reshape, permute, transpose, narrow, slice, select, broadcast, squeeze,
//! unsqueeze, flatten, contiguous) and host read-back, against index-math references; views must share
//! storage with their source and copies must not. Property tests cover random layouts, broadcasting
//! and reshapes of arbitrary views.

use crate::backend_tests;
use crate::common::*;
use crate::index::payload;
use kiln::{DType, Device, Shape, Tensor};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

const SHAPES: [&[usize]; 7] = [&[2, 3, 4], &[5], &[3, 1, 4], &[0, 3], &[1], &[4, 6], &[]];

/// The reference of a view whose element `i` is `src` at `map(unravel(i))`.
fn ref_view(src: &RefArray, shape: &[usize], map: impl Fn(&[usize]) -> Vec<usize>) -> RefArray {
    let mut out = RefArray::new(shape.to_vec(), vec![0.0; shape.iter().product()]);
    for i in 0..out.data.len() {
        let idx = out.unravel(i);
        out.data[i] = src.get(&map(&idx));
    }
    out
}

/// Every dtype, every layout kind, every test shape: `f(tensor, reference, context)`.
fn for_inputs(dev: &Device, mut f: impl FnMut(&Tensor, &RefArray, &str)) {
    let mut seed = 0;
    for shape in SHAPES {
        for dtype in supported(dev, &DType::ALL) {
            for kind in ALL_LAYOUTS {
                seed += 1;
                let vals = payload(shape.iter().product(), dtype, seed);
                let t = tensor_in(&vals, shape, dtype, kind, dev);
                f(&t, &RefArray::new(shape.to_vec(), vals), &format!("{shape:?} {dtype} {kind:?}"));
            }
        }
    }
}

fn reshape_matches_row_major(dev: &Device) {
    for_inputs(dev, |t, r, ctx| {
        let n = r.data.len();
        let targets: Vec<Vec<usize>> =
            vec![vec![n], vec![1, n], vec![n, 1, 1], r.shape.iter().rev().copied().collect()];
        for target in targets {
            let got = t.reshape(target.clone()).unwrap();
            assert_exact(&got, &RefArray::new(target.clone(), r.data.clone()), &format!("reshape {ctx} -> {target:?}"));
            if t.is_contiguous() {
                assert!(got.shares_storage_with(t), "{ctx}: reshape of contiguous data must be a view");
            }
        }
        // reshape_infer with one hole.
        if n > 0 {
            let got = t.reshape_infer(&[-1]).unwrap();
            assert_eq!(got.dims(), &[n]);
            let got = t.reshape_infer(&[1, -1, 1]).unwrap();
            assert_exact(&got, &RefArray::new(vec![1, n, 1], r.data.clone()), &format!("reshape_infer {ctx}"));
        }
    });
}

fn reshape_copy_and_view_paths(dev: &Device) {
    let vals: Vec<f64> = (0..24).map(|i| i as f64).collect();
    // Transposed data cannot be flattened without a copy.
    let t = tensor_in(&vals, &[4, 6], DType::F32, Layouts::Transposed, dev);
    let flat = t.reshape(24).unwrap();
    assert!(!flat.shares_storage_with(&t), "flattening a transpose must copy");
    assert!(flat.is_contiguous());
    assert_exact(&flat, &RefArray::new(vec![24], vals.clone()), "flatten of transpose");
    // Splitting the rows of a narrowed (4, 8) -> (4, 6) view keeps it a view.
    let wide = tensor(&(0..32).map(|i| i as f64).collect::<Vec<_>>(), &[4, 8], DType::I64, dev);
    let narrow = wide.narrow(1, 1, 6).unwrap();
    let split = narrow.reshape((4, 2, 3)).unwrap();
    assert!(split.shares_storage_with(&wide), "splitting a dim of a row-contiguous view is a view");
    let expected: Vec<f64> = (0..4).flat_map(|r| (1..7).map(move |c| (r * 8 + c) as f64)).collect();
    assert_exact(&split, &RefArray::new(vec![4, 2, 3], expected.clone()), "split of narrow");
    // Merging its rows is a copy.
    let merged = narrow.reshape(24).unwrap();
    assert!(!merged.shares_storage_with(&wide));
    assert_exact(&merged, &RefArray::new(vec![24], expected), "merge of narrow");
    // flatten is reshape to one axis.
    let f = t.flatten().unwrap();
    assert_exact(&f, &RefArray::new(vec![24], vals), "flatten");
    let s = Tensor::scalar(3.0, DType::F32, dev).unwrap();
    assert_eq!(s.flatten().unwrap().dims(), &[1]);
}

fn reshape_errors(dev: &Device) {
    let t = rand_tensor(&[2, 3], DType::F32, 1, dev);
    assert_err(t.reshape((4, 2)), &["reshape", "(2, 3)", "6 elements", "(4, 2)", "8 elements"]);
    assert_err(t.reshape_infer(&[-1, -1]), &["reshape", "(2, 3)", "[-1, -1]"]);
    assert_err(t.reshape_infer(&[4, -1]), &["reshape", "(2, 3)", "[4, -1]"]);
    assert_err(t.reshape_infer(&[-2, 3]), &["reshape", "[-2, 3]"]);
    assert_err(t.reshape_infer(&[0, -1]), &["reshape", "[0, -1]"]);
    assert_err(t.reshape_infer(&[7]), &["reshape", "(2, 3)", "(7,)"]);
}

fn permute_transpose_t(dev: &Device) {
    for_inputs(dev, |t, r, ctx| {
        let rank = r.shape.len();
        let perms: Vec<Vec<usize>> = match rank {
            0 => vec![vec![]],
            1 => vec![vec![0]],
            2 => vec![vec![1, 0], vec![0, 1]],
            _ => vec![vec![2, 0, 1], vec![1, 2, 0], vec![0, 2, 1]],
        };
        for perm in perms {
            let got = t.permute(&perm).unwrap();
            assert!(got.shares_storage_with(t));
            let shape: Vec<usize> = perm.iter().map(|&p| r.shape[p]).collect();
            let expected = ref_view(r, &shape, |idx| {
                let mut src = vec![0; rank];
                for (i, &p) in perm.iter().enumerate() {
                    src[p] = idx[i];
                }
                src
            });
            assert_exact(&got, &expected, &format!("permute {perm:?} {ctx}"));
        }
        if rank >= 2 {
            let swap = |idx: &[usize], a: usize, b: usize| {
                let mut s = idx.to_vec();
                s.swap(a, b);
                s
            };
            let mut shape = r.shape.clone();
            shape.swap(0, rank - 1);
            let got = t.transpose(0, -1).unwrap();
            assert!(got.shares_storage_with(t));
            assert_exact(&got, &ref_view(r, &shape, |i| swap(i, 0, rank - 1)), &format!("transpose {ctx}"));
            let mut shape = r.shape.clone();
            shape.swap(rank - 2, rank - 1);
            let got = t.t().unwrap();
            assert_exact(&got, &ref_view(r, &shape, |i| swap(i, rank - 2, rank - 1)), &format!("t {ctx}"));
        } else {
            assert_exact(&t.t().unwrap(), r, &format!("t of rank {rank} {ctx}"));
        }
    });
    let t = rand_tensor(&[2, 3, 4], DType::F32, 1, dev);
    assert_err(t.permute(&[0, 1]), &["permute", "[0, 1]", "(2, 3, 4)"]);
    assert_err(t.permute(&[0, 1, 1]), &["permute", "[0, 1, 1]"]);
    assert_err(t.permute(&[0, 1, 3]), &["permute", "[0, 1, 3]"]);
    assert_err(t.transpose(0, 3), &["transpose", "axis 3", "(2, 3, 4)"]);
}

fn narrow_slice_select(dev: &Device) {
    for_inputs(dev, |t, r, ctx| {
        for axis in 0..r.shape.len() {
            let d = r.shape[axis];
            // narrow: every (start, len) that fits.
            for start in 0..=d {
                for len in 0..=d - start {
                    let got = t.narrow(axis as isize, start, len).unwrap();
                    assert!(got.shares_storage_with(t));
                    let mut shape = r.shape.clone();
                    shape[axis] = len;
                    let expected = ref_view(r, &shape, |i| {
                        let mut s = i.to_vec();
                        s[axis] += start;
                        s
                    });
                    assert_exact(&got, &expected, &format!("narrow {axis} {start} {len} {ctx}"));
                }
            }
            assert_err(t.narrow(axis as isize, d, 1), &["narrow", "out of bounds", &format!("size {d}")]);
            // slice with step, start/stop clamped like Python.
            for (start, stop, step) in [(0, d, 1), (1, d, 2), (0, d + 5, 3), (d + 2, d + 9, 1), (2, 1, 1), (1, 100, 1)]
            {
                let got = t.slice(axis as isize, start, stop, step).unwrap();
                assert!(got.shares_storage_with(t));
                let picked: Vec<usize> =
                    (0..d).filter(|&j| j >= start && j < stop && (j - start) % step == 0).collect();
                let mut shape = r.shape.clone();
                shape[axis] = picked.len();
                let expected = ref_view(r, &shape, |i| {
                    let mut s = i.to_vec();
                    s[axis] = picked[i[axis]];
                    s
                });
                assert_exact(&got, &expected, &format!("slice {axis} {start}:{stop}:{step} {ctx}"));
            }
            assert_err(t.slice(axis as isize, 0, d, 0), &["slice", "step"]);
            // select removes the axis.
            for index in 0..d {
                let got = t.select(axis as isize - r.shape.len() as isize, index).unwrap();
                assert!(got.shares_storage_with(t));
                let mut shape = r.shape.clone();
                shape.remove(axis);
                let expected = ref_view(r, &shape, |i| {
                    let mut s = i.to_vec();
                    s.insert(axis, index);
                    s
                });
                assert_exact(&got, &expected, &format!("select {axis} {index} {ctx}"));
            }
            assert_err(t.select(axis as isize, d), &["select", &format!("index {d}"), &format!("{}", t.shape())]);
        }
        let rank = r.shape.len() as isize;
        assert_err(t.narrow(rank, 0, 0), &["narrow", &format!("axis {rank}")]);
        assert_err(t.slice(-rank - 1, 0, 1, 1), &["slice", &format!("axis {}", -rank - 1)]);
        assert_err(t.select(rank, 0), &["select", &format!("axis {rank}")]);
    });
}

fn broadcast_and_expand(dev: &Device) {
    let cases: [(&[usize], &[usize]); 7] = [
        (&[3, 1], &[3, 4]),
        (&[1], &[2, 5]),
        (&[], &[2, 3]),
        (&[4], &[2, 3, 4]),
        (&[2, 1, 3], &[2, 5, 3]),
        (&[1, 3], &[0, 3]),
        (&[2, 3], &[2, 3]),
    ];
    let mut seed = 50;
    for (from, to) in cases {
        for dtype in supported(dev, &DType::ALL) {
            for kind in ALL_LAYOUTS {
                seed += 1;
                let vals = payload(from.iter().product(), dtype, seed);
                let t = tensor_in(&vals, from, dtype, kind, dev);
                let r = RefArray::new(from.to_vec(), vals);
                let expected = ref_view(&r, to, |i| {
                    let lead = i.len() - from.len();
                    from.iter().enumerate().map(|(k, &d)| if d == 1 { 0 } else { i[lead + k] }).collect()
                });
                let ctx = format!("{from:?} -> {to:?} {dtype} {kind:?}");
                let b = t.broadcast_to(to.to_vec()).unwrap();
                assert!(b.shares_storage_with(&t));
                assert_exact(&b, &expected, &format!("broadcast_to {ctx}"));
                let e = t.expand(to.to_vec()).unwrap();
                assert_exact(&e, &expected, &format!("expand {ctx}"));
                // A broadcast view can be copied and reshaped like any other.
                let c = b.contiguous().unwrap();
                assert_exact(&c, &expected, &format!("contiguous of broadcast {ctx}"));
            }
        }
    }
    let t = rand_tensor(&[2, 3], DType::F32, 1, dev);
    assert_err(t.broadcast_to((2, 4)), &["broadcast_to", "(2, 3)", "(2, 4)"]);
    assert_err(t.broadcast_to(3), &["broadcast_to", "(2, 3)", "(3,)"]);
    assert_err(t.expand((3, 3)), &["broadcast_to", "(3, 3)"]);
}

fn squeeze_unsqueeze(dev: &Device) {
    for_inputs(dev, |t, r, ctx| {
        let rank = r.shape.len();
        for axis in 0..=rank {
            for a in [axis as isize, axis as isize - rank as isize - 1] {
                let u = t.unsqueeze(a).unwrap();
                assert!(u.shares_storage_with(t));
                let mut shape = r.shape.clone();
                shape.insert(axis, 1);
                assert_exact(&u, &RefArray::new(shape, r.data.clone()), &format!("unsqueeze {a} {ctx}"));
                let back = u.squeeze(axis as isize).unwrap();
                assert!(back.shares_storage_with(t));
                assert_exact(&back, r, &format!("squeeze after unsqueeze {a} {ctx}"));
                // A transposed unsqueezed view still reads correctly.
                let ut = u.t().unwrap().contiguous().unwrap();
                let mut shape = u.dims().to_vec();
                if shape.len() >= 2 {
                    let n = shape.len();
                    shape.swap(n - 2, n - 1);
                    let ur = RefArray::new(u.dims().to_vec(), r.data.clone());
                    let expected = ref_view(&ur, &shape, |i| {
                        let mut s = i.to_vec();
                        s.swap(n - 2, n - 1);
                        s
                    });
                    assert_exact(&ut, &expected, &format!("t of unsqueeze {a} {ctx}"));
                }
            }
        }
        let all = t.squeeze_all().unwrap();
        assert!(all.shares_storage_with(t));
        let shape: Vec<usize> = r.shape.iter().copied().filter(|&d| d != 1).collect();
        assert_exact(&all, &RefArray::new(shape, r.data.clone()), &format!("squeeze_all {ctx}"));
        for axis in 0..rank {
            if r.shape[axis] != 1 {
                assert_err(t.squeeze(axis as isize), &["squeeze", &format!("axis {axis}"), "not 1"]);
            }
        }
        assert_err(t.unsqueeze(rank as isize + 1), &["unsqueeze", &format!("axis {}", rank + 1)]);
        assert_err(t.squeeze(rank as isize), &["squeeze", &format!("axis {rank}")]);
    });
}

fn contiguous_copies_only_when_needed(dev: &Device) {
    for_inputs(dev, |t, r, ctx| {
        let c = t.contiguous().unwrap();
        assert!(c.is_contiguous());
        assert_eq!(c.shares_storage_with(t), t.is_contiguous(), "{ctx}");
        assert_exact(&c, r, &format!("contiguous {ctx}"));
        assert_eq!(c.dtype(), t.dtype());
        // Clones and same-dtype/same-device conversions are cheap views.
        assert!(t.clone().shares_storage_with(t));
        assert!(t.to_dtype(t.dtype()).unwrap().shares_storage_with(t));
        assert!(t.to_device(dev).unwrap().shares_storage_with(t));
    });
}

fn host_readback(dev: &Device) {
    let vals = payload(12, DType::F32, 3);
    let t = tensor_in(&vals, &[3, 4], DType::F32, Layouts::Stepped, dev);
    let v = t.to_vec::<f32>().unwrap();
    let expected: Vec<f32> = vals.iter().map(|&x| x as f32).collect();
    assert_eq!(v.len(), 12);
    assert!(v.iter().zip(&expected).all(|(a, b)| a == b || (a.is_nan() && b.is_nan())));
    let rows = t.to_vec2::<f32>().unwrap();
    assert_eq!(rows.len(), 3);
    for (r, row) in rows.iter().enumerate() {
        for (c, &x) in row.iter().enumerate() {
            let e = expected[r * 4 + c];
            assert!(x == e || (x.is_nan() && e.is_nan()));
        }
    }
    let b = tensor(&[1.0, 0.0, 1.0], &[3], DType::Bool, dev);
    assert_eq!(b.to_vec::<bool>().unwrap(), vec![true, false, true]);
    let one = tensor(&[7.0], &[1, 1, 1], DType::I64, dev);
    assert_eq!(one.to_scalar::<i64>().unwrap(), 7);
    let s = Tensor::scalar(-2.5, DType::F32, dev).unwrap();
    assert_eq!(s.to_scalar::<f32>().unwrap(), -2.5);
    assert_eq!(Tensor::zeros((2, 0), DType::U8, dev).unwrap().to_vec2::<u8>().unwrap(), vec![Vec::<u8>::new(); 2]);
    assert!(Tensor::zeros(0, DType::F32, dev).unwrap().to_vec::<f32>().unwrap().is_empty());
    assert_eq!(t.dim(-1).unwrap(), 4);
    assert_eq!(t.dim(0).unwrap(), 3);
    // Errors.
    assert_err(t.to_vec::<f64>(), &["to_vec", "f32", "f64"]);
    assert_err(t.to_vec::<bool>(), &["to_vec", "f32", "bool"]);
    assert_err(t.to_scalar::<f32>(), &["to_scalar", "(3, 4)", "12 elements"]);
    assert_err(Tensor::zeros(0, DType::F32, dev).unwrap().to_scalar::<f32>(), &["to_scalar", "(0,)"]);
    assert_err(one.to_scalar::<i32>(), &["to_vec", "i64", "i32"]);
    assert_err(t.reshape((3, 2, 2)).unwrap().to_vec2::<f32>(), &["to_vec2", "rank 2", "(3, 2, 2)"]);
    assert_err(s.to_vec2::<f64>(), &["to_vec2", "()"]);
    assert_err(t.to_vec2::<i32>(), &["to_vec", "f32", "i32"]);
    assert_err(t.dim(2), &["dim", "axis 2", "(3, 4)"]);
}

fn to_dtype_converts(dev: &Device) {
    // Conversions follow Rust `as` semantics: truncation toward zero, saturation, NaN -> 0, nonzero
    // -> true. The reference applies those rules to f64 directly.
    let vals = [0.0, 1.0, -1.0, 2.7, -2.7, 300.0, -300.0, 1e10, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.5];
    for from in supported(dev, &[DType::F64, DType::F32]) {
        for kind in ALL_LAYOUTS {
            let t = tensor_in(&vals, &[3, 4], from, kind, dev);
            for to in supported(dev, &DType::ALL) {
                let got = t.to_dtype(to).unwrap();
                assert_eq!(got.dtype(), to);
                assert!(!got.shares_storage_with(&t) || to == from);
                // The reference starts from the values as the source dtype stores them.
                let expected: Vec<f64> = round_to(&vals, from).iter().map(|&v| reference_cast(v, to)).collect();
                let factor = if to.is_float() { 1.0 } else { 0.0 };
                assert_close(&got, &RefArray::new(vec![3, 4], expected), factor, &format!("{from} -> {to} {kind:?}"));
            }
        }
    }
}

/// What an f64 becomes in `to` (floats are compared with tolerance, so rounding is not modelled;
/// values beyond the float's range become infinite).
pub(crate) fn reference_cast(v: f64, to: DType) -> f64 {
    let int = |lo: f64, hi: f64| if v.is_nan() { 0.0 } else { v.trunc().clamp(lo, hi) };
    match to {
        DType::Bool => (v != 0.0) as u8 as f64,
        DType::U8 => int(0.0, 255.0),
        DType::I32 => int(i32::MIN as f64, i32::MAX as f64),
        DType::U32 => int(0.0, u32::MAX as f64),
        DType::I64 => int(i64::MIN as f64, i64::MAX as f64),
        DType::I8 => int(i8::MIN as f64, i8::MAX as f64),
        DType::I16 => int(i16::MIN as f64, i16::MAX as f64),
        DType::U16 => int(0.0, u16::MAX as f64),
        DType::U64 => int(0.0, u64::MAX as f64),
        DType::F16 if v.abs() > 65504.0 => v.signum() * f64::INFINITY,
        DType::F32 if v.abs() > f32::MAX as f64 => v.signum() * f64::INFINITY,
        _ => v,
    }
}

// ---------------------------------------------------------------------------------------------------
// Property tests.

/// The runner of a property test and its seed: `KILN_PROPTEST_SEED` if set, else a fixed seed in CI
/// (`CI=true`: every run draws the same cases, so a red run reproduces and a green one is not luck),
/// else a fresh one. A failure names the seed (see `prop_check`).
fn prop_runner(cases: u32) -> (TestRunner, u64) {
    let seed = match std::env::var("KILN_PROPTEST_SEED") {
        Ok(s) => s.parse().expect("KILN_PROPTEST_SEED must be a u64"),
        Err(_) if std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1") => 0x6b69_6c6e,
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64,
    };
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    (TestRunner::new_with_rng(Config::with_cases(cases), rng), seed)
}

/// Panics with the failure and the seed that replays it.
fn prop_check<T: std::fmt::Debug>(seed: u64, r: std::result::Result<(), proptest::test_runner::TestError<T>>) {
    if let Err(e) = r {
        panic!("{e}\nproptest seed {seed}: KILN_PROPTEST_SEED={seed} replays this run");
    }
}

/// The same seed gives the same cases (what makes the CI runs repeatable).
#[test]
fn prop_runner_is_seeded() {
    use proptest::strategy::ValueTree;
    let draw = |seed: u64| {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        let mut runner = TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
        (0..8).map(|_| view_strategy().new_tree(&mut runner).unwrap().current()).collect::<Vec<_>>()
    };
    assert_eq!(draw(7), draw(7));
    assert_ne!(draw(7), draw(8));
}

const PROP_DTYPES: [DType; 6] = [DType::U8, DType::F32, DType::F16, DType::I32, DType::I64, DType::U32];

/// A random strided view: (base shape, permutation, per-axis (start, stop, step) slices, dtype index,
/// layout-kind index).
type ViewCase = (Vec<usize>, Vec<usize>, Vec<(usize, usize, usize)>, usize, usize);

fn view_strategy() -> impl Strategy<Value = ViewCase> {
    prop::collection::vec(0usize..6, 0..=4).prop_flat_map(|shape| {
        let r = shape.len();
        let perm = Just((0..r).collect::<Vec<usize>>()).prop_shuffle();
        let slices = prop::collection::vec((0usize..7, 0usize..8, 1usize..4), r);
        (Just(shape), perm, slices, 0..PROP_DTYPES.len(), 0..ALL_LAYOUTS.len())
    })
}

/// Builds the view and its reference (values are the distinct row-major positions of the base).
fn build_view(
    dev: &Device,
    shape: &[usize],
    perm: &[usize],
    slices: &[(usize, usize, usize)],
    dtype: DType,
    kind: Layouts,
) -> (Tensor, RefArray) {
    let n: usize = shape.iter().product();
    // Values the dtype holds exactly (u8 tops out at 255: a shape of more elements wraps them).
    let wrap = if dtype == DType::U8 { 256 } else { usize::MAX };
    let vals: Vec<f64> = (0..n).map(|i| (i % wrap) as f64).collect();
    let base = RefArray::new(shape.to_vec(), vals.clone());
    let mut t = tensor_in(&vals, shape, dtype, kind, dev).permute(perm).unwrap();
    // Per output axis i: the base axis perm[i], and the positions the slice keeps.
    let mut picks: Vec<Vec<usize>> = Vec::new();
    for (i, &(start, stop, step)) in slices.iter().enumerate() {
        let d = shape[perm[i]];
        t = t.slice(i as isize, start, stop, step).unwrap();
        picks.push((0..d).filter(|&j| j >= start && j < stop && (j - start) % step == 0).collect());
    }
    let vshape: Vec<usize> = picks.iter().map(|p| p.len()).collect();
    let expected = ref_view(&base, &vshape, |idx| {
        let mut src = vec![0; shape.len()];
        for (i, &p) in perm.iter().enumerate() {
            src[p] = picks[i][idx[i]];
        }
        src
    });
    (t, expected)
}

fn prop_random_views_read_correctly(dev: &Device) {
    let (mut runner, seed) = prop_runner(300);
    let result = runner.run(&view_strategy(), |(shape, perm, slices, di, ki)| {
        let (view, expected) = build_view(dev, &shape, &perm, &slices, PROP_DTYPES[di], ALL_LAYOUTS[ki]);
        prop_assert_eq!(view.dims(), expected.shape.as_slice());
        prop_assert_eq!(view.to_f64_vec().unwrap(), expected.data.clone());
        // A contiguous copy reads the same and owns its storage.
        let c = view.contiguous().unwrap();
        prop_assert_eq!(c.to_f64_vec().unwrap(), expected.data);
        prop_assert!(c.is_contiguous());
        Ok(())
    });
    prop_check(seed, result);
}

fn prop_reshape_of_views_keeps_row_major_order(dev: &Device) {
    let (mut runner, seed) = prop_runner(300);
    let result = runner.run(&view_strategy(), |(shape, perm, slices, di, ki)| {
        let (view, expected) = build_view(dev, &shape, &perm, &slices, PROP_DTYPES[di], ALL_LAYOUTS[ki]);
        let dims = view.dims().to_vec();
        let n = view.elem_count();
        let mut targets = vec![vec![n], dims.iter().rev().copied().collect::<Vec<_>>(), vec![1, n, 1]];
        if dims.len() >= 2 {
            let mut merged = vec![dims[0] * dims[1]];
            merged.extend(&dims[2..]);
            targets.push(merged);
            let mut split = dims.clone();
            split.insert(1, 1);
            targets.push(split);
        }
        for target in targets {
            let got = view.reshape(target.clone()).unwrap();
            prop_assert_eq!(got.dims(), target.as_slice());
            prop_assert_eq!(got.to_f64_vec().unwrap(), expected.data.clone());
            let viewable = view.layout().reshape(&Shape::new(target.clone())).is_some();
            prop_assert_eq!(got.shares_storage_with(&view), viewable, "target {:?}", target);
            if view.is_contiguous() {
                prop_assert!(viewable);
            }
        }
        Ok(())
    });
    prop_check(seed, result);
}

/// NumPy's broadcast of two shapes, or `None`.
fn ref_broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let pad = |s: &[usize]| -> Vec<usize> { std::iter::repeat_n(1, rank - s.len()).chain(s.iter().copied()).collect() };
    let (a, b) = (pad(a), pad(b));
    a.iter()
        .zip(&b)
        .map(|(&x, &y)| match (x, y) {
            _ if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

fn prop_broadcast_shapes(dev: &Device) {
    let shape = || prop::collection::vec(0usize..4, 0..=4);
    let (mut runner, seed) = prop_runner(500);
    let result = runner.run(&(shape(), shape(), 0..PROP_DTYPES.len()), |(a, b, di)| {
        let (sa, sb) = (Shape::new(a.clone()), Shape::new(b.clone()));
        let ab = Shape::broadcast("prop", &sa, &sb);
        let ba = Shape::broadcast("prop", &sb, &sa);
        match ref_broadcast(&a, &b) {
            Some(expected) => {
                prop_assert_eq!(ab.clone().unwrap().dims().to_vec(), expected.clone());
                prop_assert_eq!(ba.unwrap().dims().to_vec(), expected.clone());
                // Both operands broadcast to it as views that read like the reference.
                for s in [&a, &b] {
                    let n: usize = s.iter().product();
                    let vals: Vec<f64> = (0..n).map(|i| i as f64).collect();
                    let t = tensor(&vals, s, PROP_DTYPES[di], dev);
                    let v = t.broadcast_to(expected.clone()).unwrap();
                    prop_assert!(v.shares_storage_with(&t));
                    let r = RefArray::new(s.clone(), vals);
                    let want = ref_view(&r, &expected, |i| {
                        let lead = i.len() - s.len();
                        s.iter().enumerate().map(|(k, &d)| if d == 1 { 0 } else { i[lead + k] }).collect()
                    });
                    prop_assert_eq!(v.to_f64_vec().unwrap(), want.data);
                }
            }
            None => {
                prop_assert!(ab.is_err() && ba.is_err());
                let msg = ab.unwrap_err().to_string();
                prop_assert!(msg.contains("prop") && msg.contains(&sa.to_string()) && msg.contains(&sb.to_string()));
            }
        }
        Ok(())
    });
    prop_check(seed, result);
}

fn prop_squeeze_unsqueeze_roundtrip(dev: &Device) {
    let (mut runner, seed) = prop_runner(200);
    let result = runner.run(&(view_strategy(), 0usize..5), |((shape, perm, slices, di, ki), pos)| {
        let (view, expected) = build_view(dev, &shape, &perm, &slices, PROP_DTYPES[di], ALL_LAYOUTS[ki]);
        let pos = pos.min(view.rank());
        let u = view.unsqueeze(pos as isize).unwrap();
        prop_assert_eq!(u.to_f64_vec().unwrap(), expected.data.clone());
        prop_assert_eq!(u.squeeze(pos as isize).unwrap().dims().to_vec(), view.dims().to_vec());
        let sq = u.squeeze_all().unwrap();
        let kept: Vec<usize> = view.dims().iter().copied().filter(|&d| d != 1).collect();
        prop_assert_eq!(sq.dims(), kept.as_slice());
        prop_assert_eq!(sq.to_f64_vec().unwrap(), expected.data);
        Ok(())
    });
    prop_check(seed, result);
}

backend_tests!(
    reshape_matches_row_major,
    reshape_copy_and_view_paths,
    reshape_errors,
    permute_transpose_t,
    narrow_slice_select,
    broadcast_and_expand,
    squeeze_unsqueeze,
    contiguous_copies_only_when_needed,
    host_readback,
    to_dtype_converts,
    prop_random_views_read_correctly,
    prop_reshape_of_views_keeps_row_major_order,
    prop_broadcast_shapes,
    prop_squeeze_unsqueeze_roundtrip,
);
