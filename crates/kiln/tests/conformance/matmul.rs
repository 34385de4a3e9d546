//! Matrix products against a plain f64 triple loop of the same rounded inputs. Floats: per output
//! element the dot product's accumulation bound `k u sum|a||b|` (u of f32, the type every float but
//! f64 accumulates in; `bounds::sum_bound`) plus the rounding to the output dtype;
//! `matmul_bound_catches_wrong` shows an all-zero, dropped-block or shifted result fails it.
//! Integers are exact.
use crate::backend_tests;
use crate::bounds::*;
use crate::common::*;
use kiln::{DType, Device, Tensor};

/// Reference `matmul` of two arrays with NumPy rules (1-D promotion, batch broadcasting).
fn ref_matmul(a: &RefArray, b: &RefArray) -> RefArray {
    let a2 = if a.shape.len() == 1 { RefArray::new(vec![1, a.shape[0]], a.data.clone()) } else { a.clone() };
    let b2 = if b.shape.len() == 1 { RefArray::new(vec![b.shape[0], 1], b.data.clone()) } else { b.clone() };
    let (ra, rb) = (a2.shape.len(), b2.shape.len());
    let (m, k, n) = (a2.shape[ra - 2], a2.shape[ra - 1], b2.shape[rb - 1]);
    assert_eq!(k, b2.shape[rb - 2]);
    let batch = broadcast_shape(&a2.shape[..ra - 2], &b2.shape[..rb - 2]);
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    let mut out = RefArray::new(out_shape.clone(), vec![0.0; out_shape.iter().product()]);
    for i in 0..out.data.len() {
        let idx = out.unravel(i);
        let (bi, r, c) = (&idx[..batch.len()], idx[batch.len()], idx[batch.len() + 1]);
        let mut acc = 0.0;
        for p in 0..k {
            let mut ia = bi.to_vec();
            ia.extend([r, p]);
            let mut ib = bi.to_vec();
            ib.extend([p, c]);
            acc += a2.get_broadcast(&ia) * b2.get_broadcast(&ib);
        }
        out.data[i] = acc;
    }
    let mut final_shape = batch;
    if a.shape.len() > 1 {
        final_shape.push(m);
    }
    if b.shape.len() > 1 {
        final_shape.push(n);
    }
    RefArray::new(final_shape, out.data)
}

fn numeric_dtypes() -> Vec<DType> {
    let mut v = FLOATS.to_vec();
    v.extend(INTS);
    v
}

/// 0/1 for u8 (sums of products would wrap in u8 otherwise), the usual ones for the rest.
fn mm_values(n: usize, dtype: DType, seed: u64) -> Vec<f64> {
    let v = random_values(n, dtype, seed);
    if dtype == DType::U8 {
        v.iter().map(|x| (x / 5.0).floor()).collect()
    } else {
        v
    }
}

/// Per-element bounds of a product with reference `want`, `abs` = the product of |a| and |b| (the
/// sums of |a_ip b_pj|) and contracted length `k`.
fn dot_bounds(dtype: DType, k: usize, want: &RefArray, abs: &RefArray) -> Vec<f64> {
    want.data.iter().zip(&abs.data).map(|(&w, &a)| sum_bound(dtype, k, a, w)).collect()
}

/// Checks a product against its reference (exact for integers, within [`dot_bounds`] for floats).
fn assert_product(got: &Tensor, want: &RefArray, abs: &RefArray, k: usize, ctx: &str) {
    if got.dtype().is_float() {
        assert_bounded(got, want, &dot_bounds(got.dtype(), k, want, abs), ctx);
    } else {
        assert_exact(got, want, ctx);
    }
}

fn check(a: &Tensor, b: &Tensor, ra: &RefArray, rb: &RefArray, ctx: &str) {
    let got = a.matmul(b).unwrap();
    let expected = ref_matmul(ra, rb);
    let abs = ref_matmul(&ra.map(f64::abs), &rb.map(f64::abs));
    let k = *ra.shape.last().unwrap();
    assert_eq!(got.dtype(), a.dtype().promote(b.dtype()), "{ctx}");
    assert_product(&got, &expected, &abs, k, ctx);
}

/// The triple loop for larger shapes (`ref_matmul` is too slow there): (a b, |a| |b|).
fn direct_matmul(va: &[f64], vb: &[f64], m: usize, k: usize, n: usize) -> (RefArray, RefArray) {
    let (mut want, mut abs) = (vec![0.0; m * n], vec![0.0; m * n]);
    for r in 0..m {
        for p in 0..k {
            let x = va[r * k + p];
            for c in 0..n {
                want[r * n + c] += x * vb[p * n + c];
                abs[r * n + c] += (x * vb[p * n + c]).abs();
            }
        }
    }
    (RefArray::new(vec![m, n], want), RefArray::new(vec![m, n], abs))
}

fn matmul_2d(dev: &Device) {
    let mut seed = 0;
    let sizes = [(1, 1, 1), (7, 1, 7), (1, 33, 1), (7, 33, 5), (33, 65, 17), (65, 7, 129), (129, 129, 33)];
    for dtype in supported(dev, &numeric_dtypes()) {
        for &(m, k, n) in &sizes {
            for ka in ALL_LAYOUTS {
                for kb in ALL_LAYOUTS {
                    seed += 1;
                    let va = round_to(&mm_values(m * k, dtype, seed), dtype);
                    let vb = round_to(&mm_values(k * n, dtype, seed + 1000), dtype);
                    let a = tensor_in(&va, &[m, k], dtype, ka, dev);
                    let b = tensor_in(&vb, &[k, n], dtype, kb, dev);
                    let ctx = format!("{dtype} ({m}, {k}) @ ({k}, {n}) {ka:?} {kb:?}");
                    check(&a, &b, &RefArray::new(vec![m, k], va), &RefArray::new(vec![k, n], vb), &ctx);
                }
            }
        }
    }
}

/// Above the threshold where one product is split over threads, with transposed operands.
fn matmul_large(dev: &Device) {
    for dtype in supported(dev, &[DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32]) {
        let (m, k, n) = (200, 301, 150);
        let va = round_to(&mm_values(m * k, dtype, 1), dtype);
        let vb = round_to(&mm_values(k * n, dtype, 2), dtype);
        for ka in [Layouts::Contiguous, Layouts::Transposed] {
            let a = tensor_in(&va, &[m, k], dtype, ka, dev);
            let b = tensor_in(&vb, &[k, n], dtype, Layouts::Transposed, dev);
            let ctx = format!("{dtype} large {ka:?}");
            check(&a, &b, &RefArray::new(vec![m, k], va.clone()), &RefArray::new(vec![k, n], vb.clone()), &ctx);
        }
    }
}

/// Shapes around the GPU kernels' tiles and vector widths: few rows (matrix-vector and LLM-like,
/// the skinny kernels) and few columns, tiled shapes that are not multiples of the tiles, K and N
/// not multiples of 4, in transposed and strided layouts, f32 and the half types.
fn matmul_tile_edges(dev: &Device) {
    use Layouts::{Contiguous as C, Stepped as S, Transposed as T};
    let sizes = [
        (1, 301, 37),
        (2, 37, 301),
        (13, 130, 67),
        (64, 67, 130),
        (65, 129, 67),
        (130, 70, 257),
        (300, 33, 5),
        (1, 4099, 40),
    ];
    let mut seed = 700;
    // (f16 runs on both backends: the CPU multiplies f16 in f32 since gemm's own f16 product of few
    // rows accumulated in f16, (1, 301) @ (301, 37) off by 0.08.)
    for dtype in supported(dev, &FLOATS) {
        let pairs = [(C, C), (C, T), (T, C), (T, T), (S, C), (C, S)];
        for (i, &(m, k, n)) in sizes.iter().enumerate() {
            // Two layout pairs per shape, all six over the shapes (the reference is slow).
            for (ka, kb) in [pairs[i % 6], pairs[(i + 3) % 6]] {
                seed += 1;
                let va = round_to(&mm_values(m * k, dtype, seed), dtype);
                let vb = round_to(&mm_values(k * n, dtype, seed + 1000), dtype);
                let a = tensor_in(&va, &[m, k], dtype, ka, dev);
                let b = tensor_in(&vb, &[k, n], dtype, kb, dev);
                let ctx = format!("{dtype} ({m}, {k}) @ ({k}, {n}) {ka:?} {kb:?}");
                let (want, abs) = direct_matmul(&va, &vb, m, k, n);
                assert_product(&a.matmul(&b).unwrap(), &want, &abs, k, &ctx);
            }
        }
    }
    // Batches (broadcast ones too) through the skinny and tiled kernels; `linear` reads its weight
    // transposed.
    let cases: &[(&[usize], &[usize])] = &[
        (&[3, 1, 70, 9], &[1, 4, 9, 90]),
        (&[2, 1, 37], &[2, 37, 300]),
        (&[6, 65, 40], &[40, 3]),
        (&[4, 5, 2, 9], &[4, 5, 9, 66]),
    ];
    for dtype in supported(dev, &[DType::F32, DType::F16, DType::BF16]) {
        for &(sa, sb) in cases {
            for kind in [C, T] {
                seed += 1;
                let va = round_to(&mm_values(sa.iter().product(), dtype, seed), dtype);
                let vb = round_to(&mm_values(sb.iter().product(), dtype, seed + 1), dtype);
                let a = tensor_in(&va, sa, dtype, kind, dev);
                let b = tensor_in(&vb, sb, dtype, kind, dev);
                let ctx = format!("{dtype} {sa:?} @ {sb:?} {kind:?}");
                check(&a, &b, &RefArray::new(sa.to_vec(), va), &RefArray::new(sb.to_vec(), vb), &ctx);
            }
        }
        let vx = round_to(&random_values(3 * 300, dtype, 90), dtype);
        let vw = round_to(&random_values(130 * 300, dtype, 91), dtype);
        let x = tensor(&vx, &[3, 300], dtype, dev);
        let w = tensor(&vw, &[130, 300], dtype, dev);
        let wt = RefArray::new(vec![300, 130], (0..300 * 130).map(|i| vw[(i % 130) * 300 + i / 130]).collect());
        let rx = RefArray::new(vec![3, 300], vx);
        let want = ref_matmul(&rx, &wt);
        let abs = ref_matmul(&rx.map(f64::abs), &wt.map(f64::abs));
        assert_product(&x.linear(&w, None).unwrap(), &want, &abs, 300, &format!("{dtype} linear 3x300 @ 130x300^T"));
    }
    // Empty products and K = 0 on the float paths.
    for dtype in supported(dev, &[DType::F16, DType::F32]) {
        let z = |s: &[usize]| Tensor::zeros(s.to_vec(), dtype, dev).unwrap();
        assert_eq!(z(&[1, 0]).matmul(&z(&[0, 300])).unwrap().to_f64_vec().unwrap(), vec![0.0; 300]);
        assert_eq!(z(&[130, 0]).matmul(&z(&[0, 70])).unwrap().to_f64_vec().unwrap(), vec![0.0; 130 * 70]);
        assert_eq!(z(&[2, 0, 300]).matmul(&z(&[300, 5])).unwrap().dims(), &[2, 0, 5]);
        assert_eq!(z(&[130, 300]).matmul(&z(&[300, 0])).unwrap().dims(), &[130, 0]);
    }
}

fn matmul_batched(dev: &Device) {
    let cases: &[(&[usize], &[usize])] = &[
        (&[3, 4, 5], &[3, 5, 2]),
        (&[2, 1, 3, 4], &[5, 4, 6]),
        (&[4, 7], &[2, 3, 7, 3]),
        (&[1, 6, 33], &[4, 33, 1]),
        (&[5], &[2, 5, 3]),
        (&[2, 3, 5], &[5]),
        (&[9], &[9]),
        (&[3, 9], &[9]),
        (&[9], &[9, 2]),
    ];
    let mut seed = 50;
    for dtype in supported(dev, &numeric_dtypes()) {
        for &(sa, sb) in cases {
            for kind in ALL_LAYOUTS {
                seed += 1;
                let va = round_to(&mm_values(sa.iter().product(), dtype, seed), dtype);
                let vb = round_to(&mm_values(sb.iter().product(), dtype, seed + 1), dtype);
                let a = tensor_in(&va, sa, dtype, kind, dev);
                let b = tensor_in(&vb, sb, dtype, Layouts::Contiguous, dev);
                let ctx = format!("{dtype} {sa:?} @ {sb:?} {kind:?}");
                check(&a, &b, &RefArray::new(sa.to_vec(), va), &RefArray::new(sb.to_vec(), vb), &ctx);
            }
        }
    }
    // Operands broadcast with zero strides (batch and inside the matrix).
    for dtype in supported(dev, &[DType::F32, DType::BF16, DType::I64]) {
        let vw = round_to(&mm_values(12, dtype, 5), dtype);
        let w = tensor(&vw, &[4, 3], dtype, dev).broadcast_to((6, 4, 3)).unwrap();
        let vx = round_to(&mm_values(6 * 2 * 4, dtype, 6), dtype);
        let x = tensor(&vx, &[6, 2, 4], dtype, dev);
        let rw = RefArray::new(vec![4, 3], vw.clone());
        check(&x, &w, &RefArray::new(vec![6, 2, 4], vx), &rw, &format!("{dtype} broadcast rhs"));
        let col = round_to(&mm_values(5, dtype, 8), dtype);
        let c = tensor(&col, &[5, 1], dtype, dev).broadcast_to((5, 4)).unwrap();
        let rc = RefArray::new(vec![5, 4], (0..20).map(|i| col[i / 4]).collect());
        check(&c, &tensor(&vw, &[4, 3], dtype, dev), &rc, &rw, &format!("{dtype} broadcast inside matrix"));
    }
}

fn matmul_empty_and_special(dev: &Device) {
    for dtype in supported(dev, &[DType::F32, DType::BF16, DType::I32]) {
        let z = |s: &[usize]| Tensor::zeros(s.to_vec(), dtype, dev).unwrap();
        let r = z(&[0, 3]).matmul(&z(&[3, 4])).unwrap();
        assert_eq!(r.dims(), &[0, 4]);
        let a = rand_tensor(&[2, 0], dtype, 1, dev);
        let r = a.matmul(&z(&[0, 3])).unwrap();
        assert_exact(&r, &RefArray::new(vec![2, 3], vec![0.0; 6]), "k = 0 gives zeros");
        assert_eq!(z(&[0, 2, 3]).matmul(&z(&[3, 4])).unwrap().dims(), &[0, 2, 4]);
        assert_eq!(z(&[0]).matmul(&z(&[0])).unwrap().dims(), &[] as &[usize]);
        assert_eq!(z(&[2, 3]).matmul(&z(&[3, 0])).unwrap().dims(), &[2, 0]);
    }
    // NaN and inf propagate like in any sum of products.
    for dtype in supported(dev, &FLOATS) {
        let mut va = round_to(&random_values(12, dtype, 3), dtype);
        va[5] = f64::NAN;
        va[0] = f64::INFINITY;
        let vb = round_to(&random_values(12, dtype, 4), dtype);
        let a = tensor(&va, &[3, 4], dtype, dev);
        let b = tensor(&vb, &[4, 3], dtype, dev);
        check(&a, &b, &RefArray::new(vec![3, 4], va), &RefArray::new(vec![4, 3], vb), &format!("{dtype} nan"));
    }
    // `dot`.
    for dtype in supported(dev, &numeric_dtypes()) {
        let va = round_to(&mm_values(65, dtype, 9), dtype);
        let vb = round_to(&mm_values(65, dtype, 10), dtype);
        let d = tensor(&va, &[65], dtype, dev).dot(&tensor(&vb, &[65], dtype, dev)).unwrap();
        let expected: f64 = va.iter().zip(&vb).map(|(x, y)| x * y).sum();
        let abs: f64 = va.iter().zip(&vb).map(|(x, y)| (x * y).abs()).sum();
        let (want, abs) = (RefArray::new(vec![], vec![expected]), RefArray::new(vec![], vec![abs]));
        assert_product(&d, &want, &abs, 65, &format!("{dtype} dot"));
    }
}

fn matmul_mixed_dtypes(dev: &Device) {
    for (da, db) in
        [(DType::F32, DType::F64), (DType::I32, DType::F32), (DType::F16, DType::BF16), (DType::U8, DType::I64)]
    {
        if !dev.is_cpu() && (da == DType::F64 || db == DType::F64) {
            continue;
        }
        let va = round_to(&mm_values(12, da, 1), da);
        let vb = round_to(&mm_values(8, db, 2), db);
        let a = tensor(&va, &[3, 4], da, dev);
        let b = tensor(&vb, &[4, 2], db, dev);
        check(&a, &b, &RefArray::new(vec![3, 4], va), &RefArray::new(vec![4, 2], vb), &format!("{da} @ {db}"));
    }
}

fn linear(dev: &Device) {
    for dtype in supported(dev, &FLOATS) {
        let vx = round_to(&random_values(2 * 3 * 5, dtype, 1), dtype);
        let vw = round_to(&random_values(4 * 5, dtype, 2), dtype);
        let vb = round_to(&random_values(4, dtype, 3), dtype);
        let x = tensor(&vx, &[2, 3, 5], dtype, dev);
        let w = tensor(&vw, &[4, 5], dtype, dev);
        let b = tensor(&vb, &[4], dtype, dev);
        let wt = RefArray::new(vec![5, 4], (0..20).map(|i| vw[(i % 4) * 5 + i / 4]).collect());
        let rx = RefArray::new(vec![2, 3, 5], vx);
        let xw = ref_matmul(&rx, &wt);
        let abs = ref_matmul(&rx.map(f64::abs), &wt.map(f64::abs));
        assert_product(&x.linear(&w, None).unwrap(), &xw, &abs, 5, &format!("{dtype} linear"));
        // The bias is one more term of the sum (k + 1 terms), possibly after a rounding of x w to
        // the dtype (one more stored rounding of |x w|).
        let mut xwb = xw.clone();
        let mut absb = abs.clone();
        for (i, (v, a)) in xwb.data.iter_mut().zip(absb.data.iter_mut()).enumerate() {
            *v += vb[i % 4];
            *a += vb[i % 4].abs() + abs.data[i] * unit_roundoff(dtype) / acc_roundoff(dtype) / 6.0;
        }
        assert_product(&x.linear(&w, Some(&b)).unwrap(), &xwb, &absb, 6, &format!("{dtype} linear + bias"));
    }
}

fn matmul_errors(dev: &Device) {
    let t = |s: &[usize], d: DType| Tensor::zeros(s.to_vec(), d, dev).unwrap();
    let f = DType::F32;
    let e = t(&[2, 3], f).matmul(&t(&[4, 5], f)).unwrap_err().to_string();
    assert_eq!(e, "[matmul] shapes (2, 3) and (4, 5) are not aligned: 3 != 4");
    assert_err(t(&[3], f).matmul(&t(&[4], f)), &["matmul", "(3,)", "(4,)", "3 != 4"]);
    assert_err(t(&[2, 2, 3], f).matmul(&t(&[3, 3, 4], f)), &["matmul", "(2, 2, 3)", "(3, 3, 4)"]);
    assert_err(t(&[], f).matmul(&t(&[3], f)), &["matmul", "()", "(3,)"]);
    assert_err(t(&[2, 2], DType::Bool).matmul(&t(&[2, 2], DType::Bool)), &["matmul", "bool"]);
    assert_err(t(&[2, 2], f).matmul(&t(&[2, 2], DType::Bool)), &["matmul", "bool"]);
    assert_err(t(&[3], f).dot(&t(&[4], f)), &["dot", "(3,)", "(4,)", "3 != 4"]);
    assert_err(t(&[2, 3], f).dot(&t(&[3], f)), &["dot", "(2, 3)", "(3,)"]);
    assert_err(t(&[2, 3], f).linear(&t(&[4, 5], f), None), &["linear", "(2, 3)", "(4, 5)"]);
    assert_err(t(&[2, 5], f).linear(&t(&[5], f), None), &["linear", "(5,)"]);
    assert_err(t(&[2, 5], f).linear(&t(&[4, 5], f), Some(&t(&[5], f))), &["linear", "(5,)", "(4, 5)"]);
}

/// The bound is tight enough to catch broken kernels where the old `sqrt(k)`-scaled tolerance was
/// not (bf16 at k = 4099 had rtol 1.02, so zeros passed): an all-zero product, one missing the last
/// 64 terms of k (a dropped tile) and one shifted by a column fail, while the device's result passes.
fn matmul_bound_catches_wrong(dev: &Device) {
    for dtype in supported(dev, &[DType::BF16, DType::F16, DType::F32]) {
        for &(m, k, n) in &[(1usize, 4099usize, 40usize), (65, 129, 67), (13, 1030, 9)] {
            let va = round_to(&random_values(m * k, dtype, 31), dtype);
            let vb = round_to(&random_values(k * n, dtype, 32), dtype);
            let (want, abs) = direct_matmul(&va, &vb, m, k, n);
            let bounds = dot_bounds(dtype, k, &want, &abs);
            let drop = 64.min(k / 2);
            let ka: Vec<f64> = (0..m * (k - drop)).map(|i| va[(i / (k - drop)) * k + i % (k - drop)]).collect();
            let (dropped, _) = direct_matmul(&ka, &vb[..(k - drop) * n], m, k - drop, n);
            let ctx = format!("{dtype} ({m}, {k}) @ ({k}, {n})");
            assert_catches_wrong(&want.data, &bounds, &dropped.data, &ctx);
            let got = tensor(&va, &[m, k], dtype, dev).matmul(&tensor(&vb, &[k, n], dtype, dev)).unwrap();
            assert_bounded(&got, &want, &bounds, &ctx);
        }
    }
}

/// `x` rounded to the float `dtype` (to nearest, ties to even).
fn round1(x: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F16 => half::f16::from_f64(x).to_f64(),
        DType::BF16 => half::bf16::from_f64(x).to_f64(),
        DType::F32 => x as f32 as f64,
        _ => x,
    }
}

/// A sum of `vals` accumulated in order in `acc` (a kernel with a lower-precision accumulator).
fn sum_in(vals: impl Iterator<Item = f64>, acc: DType) -> f64 {
    vals.fold(0.0, |s, v| round1(s + v, acc))
}

/// Precision, where the bound of `matmul_bound_catches_wrong` is loosest (k = 4099): operands whose
/// low bits a narrower type drops, all products positive so the lost bits add up. f32: a = 1 +
/// 2^-11 (f16 and bf16, and TF32's 10-bit mantissa, round it to 1), b = 1 + 2^-13 on one column:
/// a product from operands rounded to bf16 or f16 is off by about k 2^-11 = 2.0, twice the bound,
/// and one accumulated in f16 (stuck at 2048) or bf16 is off by far more; the device passes. f16
/// and bf16 operands: their products summed in f32, as kiln promises; an f16 or bf16 accumulator
/// (stuck at 2048 and 256 for sums of ones) fails the bound.
fn matmul_precision(dev: &Device) {
    let (m, k, n) = (2, 4099, 3);
    for dtype in supported(dev, &[DType::F32, DType::F16, DType::BF16]) {
        let a_val = if dtype == DType::F32 { 1.0 + 2f64.powi(-11) } else { 1.0 };
        let va = vec![a_val; m * k];
        let vb: Vec<f64> =
            (0..k * n).map(|i| if dtype == DType::F32 && i % n == 0 { 1.0 + 2f64.powi(-13) } else { 1.0 }).collect();
        let (want, abs) = direct_matmul(&va, &vb, m, k, n);
        let bounds = dot_bounds(dtype, k, &want, &abs);
        let ctx = format!("{dtype} precision ({m}, {k}) @ ({k}, {n})");
        let product = |a: &[f64], b: &[f64], acc: DType| -> Vec<f64> {
            let mut out = Vec::new();
            for r in 0..m {
                for c in 0..n {
                    let terms = (0..k).map(|p| a[r * k + p] * b[p * n + c]);
                    out.push(round1(sum_in(terms, acc), dtype));
                }
            }
            out
        };
        let mut wrong = vec![("an f16 accumulator", product(&va, &vb, DType::F16))];
        wrong.push(("a bf16 accumulator", product(&va, &vb, DType::BF16)));
        if dtype == DType::F32 {
            for low in [DType::F16, DType::BF16] {
                let (ra, rb) = (round_to(&va, low), round_to(&vb, low));
                wrong
                    .push((if low == DType::F16 { "f16 operands" } else { "bf16 operands" }, product(&ra, &rb, dtype)));
            }
        }
        // The f32-accumulated product itself passes: the controls fail for their precision alone.
        check_bounded(&product(&va, &vb, DType::F32), &want.data, &bounds).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        for (what, got) in wrong {
            assert!(check_bounded(&got, &want.data, &bounds).is_err(), "{ctx}: a product with {what} passes");
        }
        let got = tensor(&va, &[m, k], dtype, dev).matmul(&tensor(&vb, &[k, n], dtype, dev)).unwrap();
        assert_bounded(&got, &want, &bounds, &ctx);
    }
}

backend_tests!(
    matmul_precision,
    matmul_bound_catches_wrong,
    matmul_2d,
    matmul_large,
    matmul_tile_edges,
    matmul_batched,
    matmul_empty_and_special,
    matmul_mixed_dtypes,
    linear,
    matmul_errors
);
