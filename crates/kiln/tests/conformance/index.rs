//! `index_select`, `embedding` and `gather` against plain-loop references, over every dtype, every
//! index dtype, non-contiguous inputs and indices, empty tensors, NaN/Inf payloads and bad indices.

use crate::backend_tests;
use crate::common::*;
use kiln::{DType, Device, Tensor};
use rand::RngExt;

const ID_DTYPES: [DType; 4] = [DType::I64, DType::I32, DType::U32, DType::U8];

/// Random values as stored in `dtype`, with NaN and +-inf sprinkled in for floats.
pub(crate) fn payload(n: usize, dtype: DType, seed: u64) -> Vec<f64> {
    let mut v = random_values(n, dtype, seed);
    if dtype.is_float() {
        for (i, x) in v.iter_mut().enumerate() {
            match i % 11 {
                3 => *x = f64::NAN,
                7 => *x = f64::INFINITY,
                9 => *x = f64::NEG_INFINITY,
                _ => {}
            }
        }
    }
    round_to(&v, dtype)
}

/// `n` random indices in `0..size`, repeats allowed.
fn random_ids(n: usize, size: usize, seed: u64) -> Vec<usize> {
    let mut r = rng(seed);
    (0..n).map(|_| (r.random::<f64>() * size as f64) as usize % size.max(1)).collect()
}

/// An index tensor of `shape` holding `ids`, in `dtype` and memory layout `kind`.
fn ids_tensor(ids: &[usize], shape: &[usize], dtype: DType, kind: Layouts, dev: &Device) -> Tensor {
    let v: Vec<f64> = ids.iter().map(|&i| i as f64).collect();
    let t = tensor_in(&v, shape, dtype, kind, dev);
    assert_eq!(t.dtype(), dtype);
    t
}

fn ref_index_select(x: &RefArray, ids: &[usize], axis: usize) -> RefArray {
    let mut shape = x.shape.clone();
    shape[axis] = ids.len();
    let mut out = RefArray::new(shape.clone(), vec![0.0; shape.iter().product()]);
    for i in 0..out.data.len() {
        let mut idx = out.unravel(i);
        idx[axis] = ids[idx[axis]];
        out.data[i] = x.get(&idx);
    }
    out
}

fn index_select_matches_reference(dev: &Device) {
    let shapes: [&[usize]; 7] = [&[7], &[4, 5], &[3, 1, 6], &[2, 3, 4, 5], &[0, 3], &[3, 0], &[1]];
    let mut seed = 0;
    for shape in shapes {
        for axis in 0..shape.len() {
            for dtype in supported(dev, &DType::ALL) {
                for (li, kind) in ALL_LAYOUTS.into_iter().enumerate() {
                    seed += 1;
                    let n: usize = shape.iter().product();
                    let vals = payload(n, dtype, seed);
                    let x = tensor_in(&vals, shape, dtype, kind, dev);
                    let xr = RefArray::new(shape.to_vec(), vals);
                    let size = shape[axis];
                    let counts: &[usize] = if size == 0 { &[0] } else { &[0, 1, 6] };
                    for &count in counts {
                        let ids = random_ids(count, size, seed * 7 + count as u64);
                        let id_dtype = ID_DTYPES[(seed as usize + count) % 4];
                        // Stepped 1-D ids are a non-contiguous view.
                        let id_kind = if li % 2 == 0 { Layouts::Stepped } else { Layouts::Contiguous };
                        let it = ids_tensor(&ids, &[count], id_dtype, id_kind, dev);
                        for a in [axis as isize, axis as isize - shape.len() as isize] {
                            let got = x.index_select(&it, a).unwrap();
                            assert_eq!(got.dtype(), dtype);
                            let ctx = format!("index_select {shape:?} axis {a} {kind:?} ids {ids:?} ({id_dtype})");
                            assert_exact(&got, &ref_index_select(&xr, &ids, axis), &ctx);
                        }
                    }
                }
            }
        }
    }
}

fn index_select_large_parallel(dev: &Device) {
    // Outputs above the CPU backend's parallel chunk size, with contiguous and strided inner blocks
    // and the one-element-per-row path.
    let shape = [70, 1000];
    let vals = payload(70_000, DType::F32, 11);
    let xr = RefArray::new(shape.to_vec(), vals.clone());
    for kind in ALL_LAYOUTS {
        let x = tensor_in(&vals, &shape, DType::F32, kind, dev);
        for (axis, count) in [(0, 100), (1, 600)] {
            let ids = random_ids(count, shape[axis], 5 + axis as u64);
            let it = ids_tensor(&ids, &[count], DType::I64, Layouts::Contiguous, dev);
            let got = x.index_select(&it, axis as isize).unwrap();
            assert_exact(&got, &ref_index_select(&xr, &ids, axis), &format!("large {kind:?} axis {axis}"));
        }
    }
}

/// An out-of-range id: an error naming it on the CPU; on the GPU (where the ids are never read back)
/// zeros in its place and the other ids selected as usual (the output is poisoned first, so an
/// unwritten element would show).
fn assert_oob(dev: &Device, r: kiln::Result<Tensor>, parts: &[&str], gpu_expected: &[f64]) {
    if dev.is_cpu() {
        assert_err(r, parts)
    } else {
        let got = r.expect("out-of-range ids select zeros on the GPU").to_f64_vec().unwrap();
        assert_eq!(got, gpu_expected, "{parts:?}");
    }
}

fn index_select_errors(dev: &Device) {
    let x = rand_tensor(&[3, 4], DType::F32, 1, dev);
    let ids = |v: Vec<i64>| Tensor::from_vec(v.clone(), v.len(), dev).unwrap();
    let xv = x.to_f64_vec().unwrap();
    let row0: Vec<f64> = xv[..4].iter().copied().chain([0.0; 4]).collect();
    assert_oob(dev, x.index_select(&ids(vec![0, -1]), 0), &["index_select", "index -1", "axis 0", "size 3"], &row0);
    let col1: Vec<f64> = (0..3).flat_map(|r| [xv[r * 4 + 1], 0.0]).collect();
    assert_oob(dev, x.index_select(&ids(vec![1, 4]), 1), &["index_select", "index 4", "axis 1", "size 4"], &col1);
    assert_oob(dev, x.index_select(&ids(vec![3]), -2), &["index_select", "index 3", "axis 0", "size 3"], &[0.0; 4]);
    let big = Tensor::from_vec(vec![i64::MAX], 1, dev).unwrap();
    assert_oob(dev, x.index_select(&big, 0), &["index_select", &i64::MAX.to_string(), "size 3"], &[0.0; 4]);
    // Low word in range, high word not: still out of range.
    let high = Tensor::from_vec(vec![(1i64 << 32) + 1], 1, dev).unwrap();
    assert_oob(dev, x.index_select(&high, 0), &["index_select", "4294967297", "size 3"], &[0.0; 4]);
    let u8ids = Tensor::from_vec(vec![200u8], 1, dev).unwrap();
    assert_oob(dev, x.index_select(&u8ids, 1), &["index_select", "index 200", "size 4"], &[0.0; 3]);
    let fids = Tensor::from_vec(vec![0.0f32], 1, dev).unwrap();
    assert_err(x.index_select(&fids, 0), &["index_select", "f32"]);
    let bids = Tensor::from_vec(vec![true], 1, dev).unwrap();
    assert_err(x.index_select(&bids, 0), &["index_select", "bool"]);
    let ids2 = Tensor::from_vec(vec![0i64; 4], (2, 2), dev).unwrap();
    assert_err(x.index_select(&ids2, 0), &["index_select", "(2, 2)"]);
    assert_err(x.index_select(&ids(vec![0]), 2), &["index_select", "axis 2", "(3, 4)"]);
    assert_err(x.index_select(&ids(vec![0]), -3), &["index_select", "axis -3"]);
    let empty = Tensor::zeros((0, 4), DType::F32, dev).unwrap();
    assert_oob(dev, empty.index_select(&ids(vec![0]), 0), &["index_select", "index 0", "size 0"], &[0.0; 4]);
    let s = Tensor::scalar(1.0, DType::F32, dev).unwrap();
    assert_err(s.index_select(&ids(vec![0]), 0), &["index_select", "axis 0", "rank 0"]);
}

fn embedding_matches_reference(dev: &Device) {
    let (vocab, d) = (6, 5);
    let mut seed = 100;
    for dtype in supported(dev, &DType::ALL) {
        for kind in ALL_LAYOUTS {
            seed += 1;
            let vals = payload(vocab * d, dtype, seed);
            let table = tensor_in(&vals, &[vocab, d], dtype, kind, dev);
            let tr = RefArray::new(vec![vocab, d], vals);
            let id_shapes: [&[usize]; 5] = [&[2, 3], &[], &[0], &[4], &[2, 0, 3]];
            for (k, ids_shape) in id_shapes.into_iter().enumerate() {
                let n: usize = ids_shape.iter().product();
                let ids = random_ids(n, vocab, seed + k as u64);
                let id_dtype = ID_DTYPES[k % 4];
                let it = ids_tensor(&ids, ids_shape, id_dtype, kind, dev);
                let got = table.embedding(&it).unwrap();
                let mut shape = ids_shape.to_vec();
                shape.push(d);
                let mut expected = RefArray::new(shape, vec![0.0; n * d]);
                for (r, &id) in ids.iter().enumerate() {
                    for c in 0..d {
                        expected.data[r * d + c] = tr.get(&[id, c]);
                    }
                }
                assert_exact(&got, &expected, &format!("embedding {dtype} {kind:?} ids {ids_shape:?}"));
            }
        }
    }
}

fn embedding_errors(dev: &Device) {
    let table = rand_tensor(&[4, 3], DType::F32, 2, dev);
    let ids = Tensor::from_vec(vec![1i64, 4, 0, 2], (2, 2), dev).unwrap();
    let tv = table.to_f64_vec().unwrap();
    let tv = &tv;
    let rows: Vec<f64> =
        [1usize, 4, 0, 2].iter().flat_map(|&r| (0..3).map(move |c| if r < 4 { tv[r * 3 + c] } else { 0.0 })).collect();
    assert_oob(dev, table.embedding(&ids), &["embedding", "index 4", "axis 0", "size 4"], &rows);
    let neg = Tensor::from_vec(vec![-2i32], 1, dev).unwrap();
    assert_oob(dev, table.embedding(&neg), &["embedding", "index -2"], &[0.0; 3]);
    let f = Tensor::from_vec(vec![1.0f32], 1, dev).unwrap();
    assert_err(table.embedding(&f), &["embedding", "f32"]);
    let s = Tensor::scalar(1.0, DType::F32, dev).unwrap();
    assert_err(s.embedding(&neg), &["embedding", "()"]);
}

fn ref_gather(x: &RefArray, ids: &RefArray, axis: usize) -> RefArray {
    let mut out = RefArray::new(ids.shape.clone(), vec![0.0; ids.data.len()]);
    for i in 0..out.data.len() {
        let mut idx = ids.unravel(i);
        idx[axis] = ids.data[i] as usize;
        out.data[i] = x.get(&idx);
    }
    out
}

fn gather_matches_reference(dev: &Device) {
    // (input shape, index shape) pairs; index dims may be smaller except along the gather axis.
    let cases: [(&[usize], &[usize]); 6] = [
        (&[6], &[9]),
        (&[4, 5], &[4, 5]),
        (&[4, 5], &[3, 7]),
        (&[3, 4, 2], &[2, 4, 2]),
        (&[3, 4, 2], &[3, 1, 1]),
        (&[2, 3], &[0, 3]),
    ];
    let mut seed = 300;
    for (shape, ishape) in cases {
        for axis in 0..shape.len() {
            let mut ishape = ishape.to_vec();
            // Keep non-axis index dims within the input's.
            for (d, v) in ishape.iter_mut().enumerate() {
                if d != axis {
                    *v = (*v).min(shape[d]);
                }
            }
            for dtype in supported(dev, &DType::ALL) {
                for kind in ALL_LAYOUTS {
                    seed += 1;
                    let n: usize = shape.iter().product();
                    let vals = payload(n, dtype, seed);
                    let x = tensor_in(&vals, shape, dtype, kind, dev);
                    let xr = RefArray::new(shape.to_vec(), vals);
                    let m: usize = ishape.iter().product();
                    let ids = random_ids(m, shape[axis], seed);
                    let id_dtype = ID_DTYPES[seed as usize % 4];
                    let id_kind = ALL_LAYOUTS[(seed as usize / 4) % 3];
                    let it = ids_tensor(&ids, &ishape, id_dtype, id_kind, dev);
                    let ir = RefArray::new(ishape.clone(), ids.iter().map(|&i| i as f64).collect());
                    let got = x.gather(axis as isize, &it).unwrap();
                    assert_eq!(got.dtype(), dtype);
                    let ctx = format!("gather {shape:?} axis {axis} ids {ishape:?} {kind:?}/{id_kind:?} {id_dtype}");
                    assert_exact(&got, &ref_gather(&xr, &ir, axis), &ctx);
                }
            }
        }
    }
}

fn gather_large_parallel(dev: &Device) {
    let shape = [200, 300];
    let dt = if dev.is_cpu() { DType::F64 } else { DType::I32 };
    let vals = payload(60_000, dt, 9);
    let xr = RefArray::new(shape.to_vec(), vals.clone());
    for kind in ALL_LAYOUTS {
        let x = tensor_in(&vals, &shape, dt, kind, dev);
        for axis in 0..2 {
            let ids = random_ids(60_000, shape[axis], 3);
            let it = ids_tensor(&ids, &shape, DType::I32, kind, dev);
            let ir = RefArray::new(shape.to_vec(), ids.iter().map(|&i| i as f64).collect());
            let got = x.gather(axis as isize, &it).unwrap();
            assert_exact(&got, &ref_gather(&xr, &ir, axis), &format!("gather large {kind:?} axis {axis}"));
        }
    }
}

fn gather_errors(dev: &Device) {
    let x = rand_tensor(&[3, 4], DType::F32, 3, dev);
    let ids = |v: Vec<i64>, s: &[usize]| Tensor::from_vec(v, s.to_vec(), dev).unwrap();
    assert_err(x.gather(1, &ids(vec![0, 1], &[2])), &["gather", "(2,)", "(3, 4)", "rank"]);
    assert_err(x.gather(1, &ids(vec![0; 8], &[4, 2])), &["gather", "(4, 2)", "(3, 4)", "axis 0"]);
    let x0 = x.to_f64_vec().unwrap()[0];
    assert_oob(dev, x.gather(1, &ids(vec![0, 4], &[1, 2])), &["gather", "index 4", "axis 1", "size 4"], &[x0, 0.0]);
    assert_oob(dev, x.gather(0, &ids(vec![0, -1], &[1, 2])), &["gather", "index -1", "axis 0", "size 3"], &[x0, 0.0]);
    assert_err(x.gather(2, &ids(vec![0], &[1, 1])), &["gather", "axis 2"]);
    let f = Tensor::from_vec(vec![0.0f32; 2], (1, 2), dev).unwrap();
    assert_err(x.gather(0, &f), &["gather", "f32"]);
    let f0 = Tensor::zeros((0, 2), DType::F16, dev).unwrap();
    assert_err(x.gather(0, &f0), &["gather", "f16"]);
}

/// The GPU moves raw bits in units of 4, 8 or 16 bytes where rows (and their offset) allow, and
/// falls back to per-element reads where they do not: every unit on tables whose rows and view
/// offsets hit each case, i64 values beyond 32 bits, NaN/Inf payloads, ids views with an offset.
fn index_ops_move_exact_values(dev: &Device) {
    let mut seed = 900;
    // (dtype, row length): row bytes 6 (sub-word fallback for 16-bit types), 4, 8, 16, 12.
    let cases = [
        (DType::F16, 3),
        (DType::BF16, 2),
        (DType::F16, 4),
        (DType::BF16, 8),
        (DType::U8, 5),
        (DType::U8, 16),
        (DType::F32, 3),
        (DType::F32, 4),
        (DType::I32, 1),
        (DType::I64, 3),
        (DType::I64, 2),
    ];
    for (dtype, d) in cases {
        for first in [0usize, 1] {
            seed += 1;
            let rows = 7;
            let mut vals = payload(rows * d, dtype, seed);
            if dtype == DType::I64 {
                for (i, v) in vals.iter_mut().enumerate() {
                    *v = ((1i64 << 40) + i as i64 * 977 - (1i64 << 41) * (i % 2) as i64) as f64;
                }
            }
            // Rows first.. of the table: a contiguous view with an offset of `first` rows.
            let full = tensor(&vals, &[rows, d], dtype, dev);
            let table = full.narrow(0, first, rows - first).unwrap();
            let tr = RefArray::new(vec![rows - first, d], vals[first * d..].to_vec());
            let ids = random_ids(9, rows - first, seed);
            for id_dtype in ID_DTYPES {
                // Ids stored after one leading element: a contiguous view with an offset.
                let mut stored = vec![0.0];
                stored.extend(ids.iter().map(|&i| i as f64));
                let it = tensor(&stored, &[ids.len() + 1], id_dtype, dev).narrow(0, 1, ids.len()).unwrap();
                let ctx = format!("{dtype} rows of {d} from row {first}, {id_dtype} ids");
                let got = table.index_select(&it, 0).unwrap();
                assert_exact(&got, &ref_index_select(&tr, &ids, 0), &format!("index_select {ctx}"));
                let got = table.embedding(&it).unwrap();
                assert_exact(&got, &ref_index_select(&tr, &ids, 0), &format!("embedding {ctx}"));
                let cols = random_ids(2 * d, d, seed + 1);
                let ct = tensor(&cols.iter().map(|&i| i as f64).collect::<Vec<_>>(), &[1, 2 * d], id_dtype, dev);
                let cr = RefArray::new(vec![1, 2 * d], cols.iter().map(|&i| i as f64).collect());
                let got = table.gather(1, &ct).unwrap();
                assert_exact(&got, &ref_gather(&tr, &cr, 1), &format!("gather {ctx}"));
            }
        }
    }
}

backend_tests!(
    index_ops_move_exact_values,
    index_select_matches_reference,
    index_select_large_parallel,
    index_select_errors,
    embedding_matches_reference,
    embedding_errors,
    gather_matches_reference,
    gather_large_parallel,
    gather_errors,
);
