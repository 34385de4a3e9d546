//! `concat`, `stack`, `split`, `chunk`, `pad`, `flip`, `triu` and `tril` against plain-loop
//! references over every dtype (with promotion for `concat`), non-contiguous inputs, empty and size-1
//! dims, NaN/Inf payloads and bad arguments.

use crate::backend_tests;
use crate::common::*;
use crate::index::payload;
use kiln::{DType, Device, Tensor};

/// Values `v` as they read back after converting to `to`.
fn convert(v: &[f64], to: DType) -> Vec<f64> {
    round_to(v, to)
}

fn concat_matches_reference(dev: &Device) {
    // (base shape, sizes of the parts along the concat axis)
    let cases: [(&[usize], &[usize]); 5] =
        [(&[3, 4, 2], &[2, 0, 3]), (&[5], &[1, 4]), (&[2, 0, 3], &[1, 2, 1]), (&[1, 3], &[3]), (&[4, 1], &[0, 0])];
    let pairs = [
        (DType::F32, DType::F32),
        (DType::I32, DType::F16),
        (DType::U8, DType::Bool),
        (DType::U32, DType::I32),
        (DType::BF16, DType::F16),
        (DType::Bool, DType::Bool),
        (DType::F64, DType::I64),
        (DType::I64, DType::I64),
        (DType::U32, DType::U8),
    ];
    let mut seed = 1000;
    for (base, sizes) in cases {
        for axis in 0..base.len() {
            for (pa, pb) in pairs {
                if !dev.is_cpu() && (pa == DType::F64 || pb == DType::F64) {
                    continue;
                }
                for (li, kind) in ALL_LAYOUTS.into_iter().enumerate() {
                    let out_dtype = if sizes.len() > 1 { pa.promote(pb) } else { pa };
                    let mut parts = Vec::new();
                    let mut refs = Vec::new();
                    for (k, &s) in sizes.iter().enumerate() {
                        seed += 1;
                        let dtype = if k % 2 == 0 { pa } else { pb };
                        let mut shape = base.to_vec();
                        shape[axis] = s;
                        let n: usize = shape.iter().product();
                        let vals = payload(n, dtype, seed);
                        let pkind = ALL_LAYOUTS[(li + k) % 3];
                        parts.push(tensor_in(&vals, &shape, dtype, pkind, dev));
                        refs.push(RefArray::new(shape, convert(&vals, out_dtype)));
                    }
                    let mut shape = base.to_vec();
                    shape[axis] = sizes.iter().sum();
                    let mut expected = RefArray::new(shape.clone(), vec![0.0; shape.iter().product()]);
                    for i in 0..expected.data.len() {
                        let mut idx = expected.unravel(i);
                        let mut part = 0;
                        while idx[axis] >= sizes[part] {
                            idx[axis] -= sizes[part];
                            part += 1;
                        }
                        expected.data[i] = refs[part].get(&idx);
                    }
                    let views: Vec<&Tensor> = parts.iter().collect();
                    let got = Tensor::concat(&views, axis as isize - base.len() as isize).unwrap();
                    assert_eq!(got.dtype(), out_dtype, "concat {pa} {pb}");
                    let ctx = format!("concat {base:?} axis {axis} sizes {sizes:?} {pa}+{pb} {kind:?}");
                    assert_exact(&got, &expected, &ctx);
                    if sizes.len() > 1 {
                        assert!(parts.iter().all(|p| !got.shares_storage_with(p)), "{ctx}: result must be a copy");
                    }
                }
            }
        }
    }
}

fn concat_single_and_large(dev: &Device) {
    for dtype in supported(dev, &DType::ALL) {
        let vals = payload(12, dtype, 5);
        let t = tensor_in(&vals, &[3, 4], dtype, Layouts::Transposed, dev);
        let got = Tensor::concat(&[&t], 1).unwrap();
        assert_eq!(got.dtype(), dtype);
        assert_exact(&got, &RefArray::new(vec![3, 4], vals), &format!("concat of one {dtype}"));
    }
    // Large enough for the parallel copy paths.
    let (a, b) = (payload(300 * 150, DType::F32, 1), payload(300 * 170, DType::F32, 2));
    let ta = tensor_in(&a, &[300, 150], DType::F32, Layouts::Stepped, dev);
    let tb = tensor_in(&b, &[300, 170], DType::F32, Layouts::Contiguous, dev);
    let got = Tensor::concat(&[&ta, &tb], 1).unwrap();
    let mut expected = RefArray::new(vec![300, 320], vec![0.0; 300 * 320]);
    for r in 0..300 {
        for c in 0..320 {
            expected.data[r * 320 + c] = if c < 150 { a[r * 150 + c] } else { b[r * 170 + c - 150] };
        }
    }
    assert_exact(&got, &expected, "large concat");
}

/// Concat and contiguous copies move whole words or 16-byte units where rows and offsets allow, and
/// merge sub-word elements with atomics where they do not; parts of both kinds in one output (the
/// GPU output is poisoned, not zeroed, so an unwritten element shows).
fn concat_and_copies_by_unit(dev: &Device) {
    let mut seed = 4000;
    // (dtype, row lengths of the parts along axis 1)
    let cases: [(DType, &[usize]); 8] = [
        (DType::F16, &[8, 8]),
        (DType::BF16, &[2, 6, 8]),
        (DType::F16, &[8, 3, 5]),
        (DType::U8, &[16, 4, 3]),
        (DType::Bool, &[5, 16]),
        (DType::F32, &[4, 1, 7]),
        (DType::I64, &[2, 3]),
        (DType::I32, &[8, 8]),
    ];
    for (dtype, lens) in cases {
        for axis in [0usize, 1] {
            let rows = 3;
            let parts: Vec<Vec<f64>> = lens
                .iter()
                .map(|&l| {
                    seed += 1;
                    payload(rows * l.max(1) * 2, dtype, seed)
                })
                .collect();
            // Along axis 1 the parts are (rows, len); along axis 0 (len, 4) each.
            let shapes: Vec<Vec<usize>> =
                lens.iter().map(|&l| if axis == 1 { vec![rows, l] } else { vec![l, 4] }).collect();
            let ts: Vec<Tensor> =
                parts.iter().zip(&shapes).map(|(v, sh)| tensor(&v[..sh.iter().product()], sh, dtype, dev)).collect();
            let views: Vec<&Tensor> = ts.iter().collect();
            let got = Tensor::concat(&views, axis as isize).unwrap();
            let total: usize = lens.iter().sum();
            let oshape = if axis == 1 { vec![rows, total] } else { vec![total, 4] };
            let mut expected = RefArray::new(oshape.clone(), vec![0.0; oshape.iter().product()]);
            for i in 0..expected.data.len() {
                let mut idx = expected.unravel(i);
                let mut part = 0;
                while idx[axis] >= lens[part] {
                    idx[axis] -= lens[part];
                    part += 1;
                }
                let r = RefArray::new(shapes[part].clone(), parts[part][..shapes[part].iter().product()].to_vec());
                expected.data[i] = r.get(&idx);
            }
            assert_exact(&got, &expected, &format!("concat {dtype} {lens:?} axis {axis}"));
        }
        // Contiguous copies of a KV-cache-like slice (b, h, t of T, d) and of a column range.
        seed += 1;
        let d = lens[0];
        let vals = payload(2 * 3 * 6 * d, dtype, seed);
        let full = tensor(&vals, &[2, 3, 6, d], dtype, dev);
        let r = RefArray::new(vec![2, 3, 6, d], vals);
        for (start, len) in [(0usize, 4usize), (1, 3), (2, 4)] {
            let got = full.narrow(2, start, len).unwrap().contiguous().unwrap();
            let mut expected = RefArray::new(vec![2, 3, len, d], vec![0.0; 2 * 3 * len * d]);
            for i in 0..expected.data.len() {
                let mut idx = expected.unravel(i);
                idx[2] += start;
                expected.data[i] = r.get(&idx);
            }
            assert_exact(&got, &expected, &format!("slice copy {dtype} d {d} from {start}"));
        }
        if d >= 3 {
            let got = full.narrow(3, 1, d - 2).unwrap().contiguous().unwrap();
            let mut expected = RefArray::new(vec![2, 3, 6, d - 2], vec![0.0; 36 * (d - 2)]);
            for i in 0..expected.data.len() {
                let mut idx = expected.unravel(i);
                idx[3] += 1;
                expected.data[i] = r.get(&idx);
            }
            assert_exact(&got, &expected, &format!("column copy {dtype} d {d}"));
        }
    }
}

fn concat_errors(dev: &Device) {
    let a = rand_tensor(&[2, 3], DType::F32, 1, dev);
    let b = rand_tensor(&[2, 4], DType::F32, 2, dev);
    let c = rand_tensor(&[3], DType::F32, 3, dev);
    assert_err(Tensor::concat(&[], 0), &["concat", "empty"]);
    assert_err(Tensor::concat(&[&a, &b], 0), &["concat", "(2, 4)", "(2, 3)", "axis 0"]);
    assert_err(Tensor::concat(&[&a, &c], 1), &["concat", "(3,)", "(2, 3)"]);
    assert_err(Tensor::concat(&[&a, &a], 2), &["concat", "axis 2", "(2, 3)"]);
    assert!(Tensor::concat(&[&a, &b], 1).is_ok());
    let s = Tensor::scalar(1.0, DType::F32, dev).unwrap();
    assert_err(Tensor::concat(&[&s, &s], 0), &["concat", "axis 0", "rank 0"]);
}

fn stack_matches_reference(dev: &Device) {
    let shapes: [&[usize]; 5] = [&[3, 4], &[], &[0, 2], &[5], &[2, 1, 3]];
    let mut seed = 2000;
    for shape in shapes {
        for axis in 0..=shape.len() {
            for dtype in supported(dev, &DType::ALL) {
                let n: usize = shape.iter().product();
                let mut parts = Vec::new();
                let mut refs = Vec::new();
                for kind in ALL_LAYOUTS {
                    seed += 1;
                    let vals = payload(n, dtype, seed);
                    parts.push(tensor_in(&vals, shape, dtype, kind, dev));
                    refs.push(RefArray::new(shape.to_vec(), vals));
                }
                let mut oshape = shape.to_vec();
                oshape.insert(axis, 3);
                let mut expected = RefArray::new(oshape.clone(), vec![0.0; 3 * n]);
                for i in 0..expected.data.len() {
                    let mut idx = expected.unravel(i);
                    let k = idx.remove(axis);
                    expected.data[i] = refs[k].get(&idx);
                }
                let views: Vec<&Tensor> = parts.iter().collect();
                for a in [axis as isize, axis as isize - shape.len() as isize - 1] {
                    let got = Tensor::stack(&views, a).unwrap();
                    assert_exact(&got, &expected, &format!("stack {shape:?} axis {a} {dtype}"));
                }
            }
        }
    }
}

fn stack_errors(dev: &Device) {
    let a = rand_tensor(&[2, 3], DType::F32, 1, dev);
    let b = rand_tensor(&[3, 2], DType::F32, 2, dev);
    assert_err(Tensor::stack(&[], 0), &["stack", "empty"]);
    assert_err(Tensor::stack(&[&a, &b], 0), &["stack", "(3, 2)", "(2, 3)"]);
    assert_err(Tensor::stack(&[&a, &a], 3), &["stack", "axis 3"]);
    assert_err(Tensor::stack(&[&a, &a], -4), &["stack", "axis -4"]);
}

fn split_and_chunk_are_views(dev: &Device) {
    let shape = [4, 7, 3];
    for dtype in supported(dev, &DType::ALL) {
        for kind in ALL_LAYOUTS {
            let vals = payload(84, dtype, 7);
            let x = tensor_in(&vals, &shape, dtype, kind, dev);
            let xr = RefArray::new(shape.to_vec(), vals);
            for axis in 0..3 {
                let dim = shape[axis];
                let sizes = [1, 0, dim - 1];
                let check = |pieces: Vec<Tensor>, sizes: &[usize], what: &str| {
                    assert_eq!(pieces.len(), sizes.len(), "{what}");
                    let mut start = 0;
                    for (p, &s) in pieces.iter().zip(sizes) {
                        assert!(p.shares_storage_with(&x), "{what}: pieces must be views");
                        let mut pshape = shape.to_vec();
                        pshape[axis] = s;
                        let mut expected = RefArray::new(pshape.clone(), vec![0.0; pshape.iter().product()]);
                        for i in 0..expected.data.len() {
                            let mut idx = expected.unravel(i);
                            idx[axis] += start;
                            expected.data[i] = xr.get(&idx);
                        }
                        assert_exact(p, &expected, &format!("{what} piece at {start}"));
                        start += s;
                    }
                };
                check(x.split(&sizes, axis as isize).unwrap(), &sizes, &format!("split {dtype} {kind:?} {axis}"));
                for n in 1..=dim + 1 {
                    // PyTorch's chunk sizes: ceil(dim / n) each, the last one smaller.
                    let size = dim.div_ceil(n);
                    let mut csizes = vec![];
                    let mut left = dim;
                    while left > 0 {
                        csizes.push(size.min(left));
                        left -= size.min(left);
                    }
                    check(x.chunk(n, axis as isize).unwrap(), &csizes, &format!("chunk {n} {dtype} {kind:?} {axis}"));
                }
            }
        }
    }
}

fn chunk_sizes_like_pytorch(dev: &Device) {
    // Sizes PyTorch gives for torch.arange(d).chunk(n).
    let cases: [(usize, usize, &[usize]); 7] = [
        (5, 4, &[2, 2, 1]),
        (6, 4, &[2, 2, 2]),
        (10, 3, &[4, 4, 2]),
        (3, 5, &[1, 1, 1]),
        (0, 3, &[0, 0, 0]),
        (1, 1, &[1]),
        (7, 1, &[7]),
    ];
    for (d, n, expected) in cases {
        let x = Tensor::arange(0.0, d as f64, DType::I64, dev).unwrap();
        let sizes: Vec<usize> = x.chunk(n, 0).unwrap().iter().map(|p| p.dims()[0]).collect();
        assert_eq!(sizes, expected, "chunk({d}, {n})");
    }
}

fn split_chunk_errors(dev: &Device) {
    let x = rand_tensor(&[4, 6], DType::F32, 1, dev);
    assert_err(x.split(&[2, 3], 1), &["split", "[2, 3]", "sum to 5", "(4, 6)", "size 6"]);
    assert_err(x.split(&[4], 2), &["split", "axis 2"]);
    assert_err(x.chunk(0, 0), &["chunk", "0", "(4, 6)"]);
    assert_err(x.chunk(2, -3), &["chunk", "axis -3"]);
}

fn pad_matches_reference(dev: &Device) {
    type PadCase<'a> = (&'a [usize], &'a [(usize, usize)]);
    let cases: [PadCase; 7] = [
        (&[3, 4], &[(1, 2), (0, 3)]),
        (&[2, 3, 2], &[(1, 1)]),
        (&[5], &[(0, 0)]),
        (&[5], &[(2, 1)]),
        (&[0, 3], &[(1, 0), (1, 1)]),
        (&[], &[]),
        (&[1, 1, 2], &[(0, 1), (2, 0), (1, 1)]),
    ];
    let mut seed = 3000;
    for (shape, pads) in cases {
        for dtype in supported(dev, &DType::ALL) {
            for kind in ALL_LAYOUTS {
                for value in [0.0, 1.5, -2.0, f64::NAN, f64::INFINITY] {
                    seed += 1;
                    let n: usize = shape.iter().product();
                    let vals = payload(n, dtype, seed);
                    let x = tensor_in(&vals, shape, dtype, kind, dev);
                    let xr = RefArray::new(shape.to_vec(), vals);
                    let fill = round_to(&[value], dtype)[0];
                    let oshape: Vec<usize> =
                        shape.iter().enumerate().map(|(i, &d)| d + pads.get(i).map_or(0, |&(b, a)| b + a)).collect();
                    let mut expected = RefArray::new(oshape.clone(), vec![fill; oshape.iter().product()]);
                    for i in 0..expected.data.len() {
                        let idx = expected.unravel(i);
                        let src: Option<Vec<usize>> = idx
                            .iter()
                            .enumerate()
                            .map(|(d, &j)| {
                                let before = pads.get(d).map_or(0, |p| p.0);
                                (j >= before && j - before < shape[d]).then(|| j - before)
                            })
                            .collect();
                        if let Some(src) = src {
                            expected.data[i] = xr.get(&src);
                        }
                    }
                    let got = x.pad(pads, value).unwrap();
                    assert_eq!(got.dtype(), dtype);
                    assert!(!got.shares_storage_with(&x));
                    assert_exact(&got, &expected, &format!("pad {shape:?} {pads:?} value {value} {dtype} {kind:?}"));
                }
            }
        }
    }
}

fn pad_errors(dev: &Device) {
    let x = rand_tensor(&[2, 3], DType::F32, 1, dev);
    assert_err(x.pad(&[(1, 1), (1, 1), (0, 1)], 0.0), &["pad", "3", "rank 2", "(2, 3)"]);
    let s = Tensor::scalar(1.0, DType::F32, dev).unwrap();
    assert_err(s.pad(&[(1, 1)], 0.0), &["pad", "rank 0"]);
}

fn flip_matches_reference(dev: &Device) {
    let shapes: [&[usize]; 6] = [&[5], &[3, 4], &[2, 3, 4], &[0, 3], &[1, 1], &[]];
    let mut seed = 4000;
    for shape in shapes {
        let rank = shape.len() as isize;
        let axis_sets: Vec<Vec<isize>> = match rank {
            0 => vec![vec![]],
            1 => vec![vec![], vec![0], vec![-1]],
            2 => vec![vec![0], vec![-1], vec![1, 0]],
            _ => vec![vec![0], vec![1], vec![-1], vec![0, 2], vec![2, 1, 0]],
        };
        for axes in axis_sets {
            for dtype in supported(dev, &DType::ALL) {
                for kind in ALL_LAYOUTS {
                    seed += 1;
                    let n: usize = shape.iter().product();
                    let vals = payload(n, dtype, seed);
                    let x = tensor_in(&vals, shape, dtype, kind, dev);
                    let xr = RefArray::new(shape.to_vec(), vals);
                    let flipped: Vec<usize> = axes.iter().map(|&a| ((a + rank) % rank.max(1)) as usize).collect();
                    let mut expected = xr.clone();
                    for i in 0..expected.data.len() {
                        let mut idx = xr.unravel(i);
                        for &a in &flipped {
                            idx[a] = shape[a] - 1 - idx[a];
                        }
                        expected.data[i] = xr.get(&idx);
                    }
                    let got = x.flip(&axes).unwrap();
                    assert!(!got.shares_storage_with(&x), "flip must copy");
                    assert_exact(&got, &expected, &format!("flip {shape:?} {axes:?} {dtype} {kind:?}"));
                }
            }
        }
    }
}

fn flip_errors(dev: &Device) {
    let x = rand_tensor(&[2, 3], DType::F32, 1, dev);
    assert_err(x.flip(&[0, -2]), &["flip", "axis 0", "more than once"]);
    assert_err(x.flip(&[2]), &["flip", "axis 2", "(2, 3)"]);
}

fn triangles_match_reference(dev: &Device) {
    let shapes: [&[usize]; 8] = [&[4, 4], &[3, 5], &[5, 3], &[2, 3, 4], &[2, 1, 3, 3], &[0, 3], &[3, 0], &[1, 1]];
    let mut seed = 5000;
    for shape in shapes {
        let (m, n) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        for dtype in supported(dev, &DType::ALL) {
            for kind in ALL_LAYOUTS {
                seed += 1;
                let len: usize = shape.iter().product();
                let vals = payload(len, dtype, seed);
                let x = tensor_in(&vals, shape, dtype, kind, dev);
                let xr = RefArray::new(shape.to_vec(), vals);
                let ks = (-(m as i64) - 2..=n as i64 + 2).chain([i64::MIN, i64::MAX]);
                for k in ks {
                    for upper in [true, false] {
                        let mut expected = xr.clone();
                        for i in 0..len {
                            let idx = xr.unravel(i);
                            let (r, c) = (idx[idx.len() - 2] as i128, idx[idx.len() - 1] as i128);
                            let keep = if upper { c - r >= k as i128 } else { c - r <= k as i128 };
                            if !keep {
                                expected.data[i] = 0.0;
                            }
                        }
                        let got = if upper { x.triu(k) } else { x.tril(k) }.unwrap();
                        assert_eq!(got.dtype(), dtype);
                        let name = if upper { "triu" } else { "tril" };
                        assert_exact(&got, &expected, &format!("{name}({k}) {shape:?} {dtype} {kind:?}"));
                    }
                }
            }
        }
    }
}

fn triangle_errors(dev: &Device) {
    let v = rand_tensor(&[4], DType::F32, 1, dev);
    assert_err(v.triu(0), &["triu", "rank", "(4,)"]);
    assert_err(v.tril(0), &["tril", "rank", "(4,)"]);
    let s = Tensor::scalar(1.0, DType::I32, dev).unwrap();
    assert_err(s.tril(1), &["tril", "()"]);
}

backend_tests!(
    concat_and_copies_by_unit,
    concat_matches_reference,
    concat_single_and_large,
    concat_errors,
    stack_matches_reference,
    stack_errors,
    split_and_chunk_are_views,
    chunk_sizes_like_pytorch,
    split_chunk_errors,
    pad_matches_reference,
    pad_errors,
    flip_matches_reference,
    flip_errors,
    triangles_match_reference,
    triangle_errors,
);
