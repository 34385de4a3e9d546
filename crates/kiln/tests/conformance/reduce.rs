//! Reductions against plain f64 loops. Float sums, means, products, var and std are checked against
//! bounds from their accumulation (`bounds.rs`: n u sum|x| for a sum of n terms accumulated in f32
//! or f64, (n - 1) u |p| for a product, the two-pass variance's error from its mean and its sum of
//! squares), plus the rounding to the output dtype; `sum_bounds_catch_wrong` shows that all-zero,
//! dropped-block and shifted results fail them. Integer sums and products, max/min/argmax/argmin are
//! exact.
use crate::backend_tests;
use crate::bounds::*;
use crate::common::*;
use kiln::{DType, Device, Tensor};

const SHAPES: &[&[usize]] = &[&[7], &[3, 5], &[2, 33, 4], &[4, 1, 65], &[1, 129]];

/// Axis sets to try for a rank (as the user passes them, negatives included).
fn axis_sets(rank: usize) -> Vec<Vec<isize>> {
    let r = rank as isize;
    let mut v = vec![vec![], vec![0], vec![-1], (0..r).collect()];
    if rank >= 2 {
        v.push(vec![-2]);
    }
    if rank >= 3 {
        v.push(vec![2, 0]);
        v.push(vec![1]);
    }
    v
}

/// Normalises (sorts) the axes of a test case.
fn norm_axes(axes: &[isize], rank: usize) -> Vec<usize> {
    let mut a: Vec<usize> =
        axes.iter().map(|&x| if x < 0 { (x + rank as isize) as usize } else { x as usize }).collect();
    a.sort();
    a
}

/// The reference reduction: `f` over the groups of elements that share an output position.
fn ref_reduce(x: &RefArray, axes: &[usize], keepdim: bool, f: &dyn Fn(&[f64]) -> f64) -> RefArray {
    let kshape: Vec<usize> = x.shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    let kref = RefArray::new(kshape.clone(), vec![0.0; kshape.iter().product()]);
    let mut groups = vec![Vec::new(); kref.data.len()];
    for (i, &v) in x.data.iter().enumerate() {
        let mut idx = x.unravel(i);
        for &a in axes {
            idx[a] = 0;
        }
        groups[kref.ravel(&idx)].push(v);
    }
    let data = groups.iter().map(|g| f(g)).collect();
    let shape = if keepdim {
        kshape
    } else {
        x.shape.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect()
    };
    RefArray::new(shape, data)
}

fn r_sum(g: &[f64]) -> f64 {
    g.iter().sum()
}
fn r_prod(g: &[f64]) -> f64 {
    g.iter().product()
}
fn r_max(g: &[f64]) -> f64 {
    g.iter().fold(f64::NEG_INFINITY, |m, &v| if v.is_nan() || m.is_nan() { f64::NAN } else { m.max(v) })
}
fn r_min(g: &[f64]) -> f64 {
    g.iter().fold(f64::INFINITY, |m, &v| if v.is_nan() || m.is_nan() { f64::NAN } else { m.min(v) })
}
fn r_mean(g: &[f64]) -> f64 {
    r_sum(g) / g.len() as f64
}
fn r_var(g: &[f64], correction: usize) -> f64 {
    let m = r_mean(g);
    g.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / g.len().saturating_sub(correction) as f64
}
/// First index of the max (`max = true`) or min, NaN counting as the extreme.
fn r_arg(g: &[f64], max: bool) -> f64 {
    if let Some(i) = g.iter().position(|v| v.is_nan()) {
        return i as f64;
    }
    let mut best = 0;
    for (i, &v) in g.iter().enumerate() {
        if (max && v > g[best]) || (!max && v < g[best]) {
            best = i;
        }
    }
    best as f64
}

/// Checks a sum of `rx` over `axes`: exact for integers, within the accumulation bound for floats.
fn assert_sum(got: &Tensor, rx: &RefArray, axes: &[usize], keepdim: bool, ctx: &str) {
    let want = ref_reduce(rx, axes, keepdim, &r_sum);
    if !got.dtype().is_float() {
        return assert_exact(got, &want, ctx);
    }
    let abs = ref_reduce(rx, axes, keepdim, &|g| g.iter().map(|v| v.abs()).sum());
    let n: usize = axes.iter().map(|&a| rx.shape[a]).product();
    let b: Vec<f64> = want.data.iter().zip(&abs.data).map(|(&w, &a)| sum_bound(got.dtype(), n, a, w)).collect();
    assert_bounded(got, &want, &b, ctx);
}

/// Bound of a product of `n` factors: each multiply rounds once in the compute type.
fn prod_bound(dtype: DType, n: usize, want: f64) -> f64 {
    stored_bound(dtype, want, n as f64 * (acc_roundoff(dtype) * want.abs() + flush_floor(dtype)))
}

/// Checks a product of `rx` over `axes`: exact for integers, within [`prod_bound`] for floats.
fn assert_prod(got: &Tensor, rx: &RefArray, axes: &[usize], keepdim: bool, ctx: &str) {
    let want = ref_reduce(rx, axes, keepdim, &r_prod);
    if !got.dtype().is_float() {
        return assert_exact(got, &want, ctx);
    }
    let n: usize = axes.iter().map(|&a| rx.shape[a]).product();
    let b: Vec<f64> = want.data.iter().map(|&w| prod_bound(got.dtype(), n, w)).collect();
    assert_bounded(got, &want, &b, ctx);
}

/// Error bound of the mean of `g` computed in the compute type of `dtype` (the output dtype): the
/// sum's bound divided by n, one rounding of the division, then the stored rounding.
fn mean_bound(g: &[f64], dtype: DType) -> f64 {
    let n = g.len() as f64;
    let abs: f64 = g.iter().map(|v| v.abs()).sum();
    let m = r_mean(g);
    let acc = n * acc_roundoff(dtype) * abs / n + acc_roundoff(dtype) * m.abs() + n * flush_floor(dtype);
    stored_bound(dtype, m, acc)
}

/// Error bound of the two-pass variance (divisor n - c): the mean's error dm shifts every deviation
/// (2 dm sum|d| + n dm^2), and the sum of n squares accumulates (n + 2) u sum d^2; then the
/// division's rounding and the stored rounding.
fn var_bound(g: &[f64], c: usize, dtype: DType) -> f64 {
    let n = g.len();
    let div = n.saturating_sub(c) as f64;
    let m = r_mean(g);
    let dm = n as f64 * acc_roundoff(dtype) * g.iter().map(|v| v.abs()).sum::<f64>() / n as f64
        + acc_roundoff(dtype) * m.abs();
    let s1: f64 = g.iter().map(|v| (v - m).abs()).sum();
    let s2: f64 = g.iter().map(|v| (v - m) * (v - m)).sum();
    let u = acc_roundoff(dtype);
    let acc = (2.0 * dm * s1 + n as f64 * dm * dm + (n as f64 + 2.0) * u * s2) / div
        + u * s2 / div
        + n as f64 * flush_floor(dtype);
    stored_bound(dtype, s2 / div, acc)
}

/// Error bound of the standard deviation from the variance's: |sqrt(a) - sqrt(b)| <= |a - b| / sqrt(b)
/// and <= sqrt(|a - b|), then the square root's rounding and the stored rounding.
fn std_bound(g: &[f64], c: usize, dtype: DType) -> f64 {
    let v = r_var(g, c);
    let dv = var_bound(g, c, dtype);
    let s = v.sqrt();
    let acc = if s > 0.0 { (dv / s).min(dv.sqrt()) } else { dv.sqrt() };
    stored_bound(dtype, s, acc + 2.0 * acc_roundoff(dtype) * s)
}

fn all_dtypes() -> Vec<DType> {
    let mut v = FLOATS.to_vec();
    v.extend(INTS);
    v.push(DType::Bool);
    v
}

/// Values for prod tests: small magnitudes so products neither overflow nor vanish (ints in
/// [-3, 3], exact in f64 for up to 33 factors; floats 1 - 2^-7, 1 or 1 + 2^-7 (exact in every float
/// dtype, their logs nearly symmetric) with a random sign, so that products of 70,001 factors stay
/// within about e^+-6 of 1 and an all-zero result cannot pass).
fn prod_values(n: usize, dtype: DType, seed: u64) -> Vec<f64> {
    let v = random_values(n, dtype, seed);
    match dtype {
        DType::Bool => v,
        DType::U8 | DType::U32 | DType::U16 | DType::U64 => v.iter().map(|x| x.rem_euclid(4.0)).collect(),
        DType::I32 | DType::I64 | DType::I8 | DType::I16 => v.iter().map(|x| x.rem_euclid(7.0) - 3.0).collect(),
        _ => v
            .iter()
            .map(|x| [1.0 - 1.0 / 128.0, 1.0, 1.0 + 1.0 / 128.0][(x.abs() * 1e3) as usize % 3] * x.signum())
            .collect(),
    }
}

fn sum_prod_max_min(dev: &Device) {
    let mut seed = 0;
    for dtype in supported(dev, &all_dtypes()) {
        for &shape in SHAPES {
            for kind in ALL_LAYOUTS {
                seed += 1;
                let n: usize = shape.iter().product();
                let vals = round_to(&random_values(n, dtype, seed), dtype);
                let pvals = round_to(&prod_values(n, dtype, seed), dtype);
                let x = tensor_in(&vals, shape, dtype, kind, dev);
                let px = tensor_in(&pvals, shape, dtype, kind, dev);
                let (rx, rp) = (RefArray::new(shape.to_vec(), vals), RefArray::new(shape.to_vec(), pvals));
                for axes in axis_sets(shape.len()) {
                    let na = norm_axes(&axes, shape.len());
                    let n_red: usize = na.iter().map(|&a| shape[a]).product();
                    for keepdim in [false, true] {
                        let ctx = format!("{dtype} {shape:?} {kind:?} axes {axes:?} keepdim {keepdim}");
                        let s = x.sum(&axes, keepdim).unwrap();
                        let sum_dtype = if dtype.is_float() { dtype } else { DType::I64 };
                        assert_eq!(s.dtype(), sum_dtype, "sum {ctx}");
                        assert_sum(&s, &rx, &na, keepdim, &format!("sum {ctx}"));
                        let mx = x.max(&axes, keepdim).unwrap();
                        assert_eq!(mx.dtype(), dtype);
                        assert_exact(&mx, &ref_reduce(&rx, &na, keepdim, &r_max), &format!("max {ctx}"));
                        let mn = x.min(&axes, keepdim).unwrap();
                        assert_exact(&mn, &ref_reduce(&rx, &na, keepdim, &r_min), &format!("min {ctx}"));
                        if dtype.is_float() || n_red <= 33 {
                            let p = px.prod(&axes, keepdim).unwrap();
                            assert_eq!(p.dtype(), sum_dtype, "prod {ctx}");
                            assert_prod(&p, &rp, &na, keepdim, &format!("prod {ctx}"));
                        }
                    }
                }
                // The `_all` forms give rank 0.
                let s = x.sum_all().unwrap();
                assert_eq!(s.rank(), 0);
                let all: Vec<usize> = (0..shape.len()).collect();
                assert_sum(&s, &rx, &all, false, "sum_all");
                assert_exact(&x.max_all().unwrap(), &ref_reduce(&rx, &all, false, &r_max), "max_all");
                assert_exact(&x.min_all().unwrap(), &ref_reduce(&rx, &all, false, &r_min), "min_all");
                if dtype.is_float() || n <= 33 {
                    assert_prod(&px.prod_all().unwrap(), &rp, &all, false, "prod_all");
                }
            }
        }
    }
}

/// Larger reductions that cross the parallel and blocked paths: rows, columns and gathered views.
fn large_reductions(dev: &Device) {
    for (shape, axes) in [
        (vec![300, 1001], vec![1isize]),
        (vec![300, 1001], vec![0]),
        (vec![20, 3, 2050], vec![0, 2]),
        (vec![5000, 3], vec![0]),
        (vec![64, 64, 33], vec![0, 1]),
    ] {
        for dtype in supported(dev, &[DType::F32, DType::F16, DType::I32]) {
            for kind in ALL_LAYOUTS {
                let n: usize = shape.iter().product();
                let vals = round_to(&random_values(n, dtype, 7), dtype);
                let x = tensor_in(&vals, &shape, dtype, kind, dev);
                let rx = RefArray::new(shape.clone(), vals);
                let na = norm_axes(&axes, shape.len());
                let ctx = format!("{dtype} {shape:?} {kind:?} {axes:?}");
                let s = x.sum(&axes, false).unwrap();
                assert_sum(&s, &rx, &na, false, &ctx);
                assert_exact(&x.max(&axes, true).unwrap(), &ref_reduce(&rx, &na, true, &r_max), &ctx);
                assert_exact(&x.min(&axes, false).unwrap(), &ref_reduce(&rx, &na, false, &r_min), &ctx);
                if na.len() == 1 {
                    let am = x.argmax(axes[0], false).unwrap();
                    assert_exact(&am, &ref_reduce(&rx, &na, false, &|g| r_arg(g, true)), &ctx);
                }
            }
        }
    }
}

/// f32 sums of 16M elements stay accurate (naive sequential f32 summation is off by ~1e-2 here).
fn sum_accuracy_16m(dev: &Device) {
    let n = 1 << 24;
    let mut r = rng(11);
    use rand::RngExt;
    let vals: Vec<f32> = (0..n).map(|_| r.random::<f32>()).collect();
    let x = Tensor::from_vec(vals.clone(), n, dev).unwrap();
    let exact: f64 = vals.iter().map(|&v| v as f64).sum();
    let expected = RefArray::new(vec![], vec![exact]);
    assert_close_tol(&x.sum_all().unwrap(), &expected, 0.0, 1e-6, "sum_all of 16M f32");
    // Columns: axis 0 of a (1M, 16) matrix.
    let m = x.reshape((n / 16, 16)).unwrap();
    let cols: Vec<f64> = (0..16).map(|j| (0..n / 16).map(|i| vals[i * 16 + j] as f64).sum()).collect();
    assert_close_tol(&m.sum(&[0], false).unwrap(), &RefArray::new(vec![16], cols), 0.0, 1e-6, "axis 0 of (1M, 16)");
    // Rows of 4M: axis 1 of a (4, 4M) matrix.
    let m = x.reshape((4, n / 4)).unwrap();
    let rows: Vec<f64> = (0..4).map(|i| vals[i * n / 4..(i + 1) * n / 4].iter().map(|&v| v as f64).sum()).collect();
    assert_close_tol(&m.sum(&[1], false).unwrap(), &RefArray::new(vec![4], rows), 0.0, 1e-6, "axis 1 of (4, 4M)");
}

fn nan_and_inf(dev: &Device) {
    for dtype in supported(dev, &FLOATS) {
        for kind in ALL_LAYOUTS {
            // (3, 40): NaN in row 0, +inf in row 1, +inf and -inf in row 2.
            let mut vals = round_to(&random_values(120, dtype, 3), dtype);
            vals[17] = f64::NAN;
            vals[40 + 5] = f64::INFINITY;
            vals[80 + 1] = f64::INFINITY;
            vals[80 + 30] = f64::NEG_INFINITY;
            let x = tensor_in(&vals, &[3, 40], dtype, kind, dev);
            let rx = RefArray::new(vec![3, 40], vals);
            for axes in [vec![1], vec![0], vec![0, 1]] {
                let na = norm_axes(&axes, 2);
                let ctx = format!("{dtype} {kind:?} {axes:?}");
                assert_sum(&x.sum(&axes, false).unwrap(), &rx, &na, false, &ctx);
                assert_exact(&x.max(&axes, false).unwrap(), &ref_reduce(&rx, &na, false, &r_max), &ctx);
                assert_exact(&x.min(&axes, false).unwrap(), &ref_reduce(&rx, &na, false, &r_min), &ctx);
                assert_prod(&x.prod(&axes, false).unwrap(), &rx, &na, false, &ctx);
                if na.len() == 1 {
                    for max in [true, false] {
                        let a = if max { x.argmax(axes[0], false) } else { x.argmin(axes[0], false) }.unwrap();
                        assert_exact(&a, &ref_reduce(&rx, &na, false, &|g| r_arg(g, max)), &ctx);
                    }
                }
            }
        }
    }
}

/// Sum, max and min (argmax and argmin for one axis) of `x` over `axes` against the reference.
fn check_reductions(x: &Tensor, rx: &RefArray, axes: &[usize], ctx: &str) {
    let ia: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    let s = x.sum(&ia, false).unwrap();
    assert_sum(&s, rx, axes, false, &format!("sum {ctx}"));
    assert_exact(&x.max(&ia, false).unwrap(), &ref_reduce(rx, axes, false, &r_max), &format!("max {ctx}"));
    assert_exact(&x.min(&ia, true).unwrap(), &ref_reduce(rx, axes, true, &r_min), &format!("min {ctx}"));
    if let [a] = axes {
        let am = x.argmax(*a as isize, false).unwrap();
        assert_exact(&am, &ref_reduce(rx, axes, false, &|g| r_arg(g, true)), &format!("argmax {ctx}"));
        let am = x.argmin(*a as isize, true).unwrap();
        assert_exact(&am, &ref_reduce(rx, axes, true, &|g| r_arg(g, false)), &format!("argmin {ctx}"));
    }
}

/// Values for the boundary tests: normals plus 0.2, rounded on odd seeds so ties are common (argmax
/// and argmin must keep the first index across lanes, chunks and passes). The mean of 0.2 keeps a
/// sum of 70,001 terms far from zero next to its accumulation bound (n u sum|x|), so a kernel that
/// drops a block or returns zeros fails, and sums of 263,425 terms inside f16's range (65504).
fn boundary_values(n: usize, dtype: DType, seed: u64) -> Vec<f64> {
    let v: Vec<f64> = random_values(n, dtype, seed).iter().map(|x| x + 0.2).collect();
    let v = if seed % 2 == 1 { v.iter().map(|x| x.round()).collect() } else { v };
    round_to(&v, dtype)
}

/// Lengths around workgroup (256), pack and chunk boundaries through every path: all elements (with
/// an offset that breaks 16-byte alignment), rows from one lane per row to rows split in chunks,
/// and columns (tall and wide, the rows split across workgroups), in every memory layout.
fn reduce_boundary_sizes(dev: &Device) {
    let mut seed = 500;
    let dtypes = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8];
    for dtype in supported(dev, &dtypes) {
        for n in [1usize, 255, 256, 257, 4095, 4097, 70001] {
            seed += 1;
            let vals = boundary_values(n + 1, dtype, seed);
            let full = tensor(&vals, &[n + 1], dtype, dev);
            for (start, x) in [(0, full.narrow(0, 0, n).unwrap()), (1, full.narrow(0, 1, n).unwrap())] {
                let rx = RefArray::new(vec![n], vals[start..start + n].to_vec());
                check_reductions(&x, &rx, &[0], &format!("{dtype} all of {n} from {start}"));
            }
        }
        for k in [1usize, 3, 4, 5, 8, 31, 33, 255, 256, 257, 1023, 1025, 4095, 4096, 4097, 70001] {
            let rows = (60000 / k).clamp(2, 300);
            seed += 1;
            let n = rows * k;
            let vals = boundary_values(n + 1, dtype, seed);
            let rx = RefArray::new(vec![rows, k], vals[1..].to_vec());
            // A contiguous view at offset 1 (no 16-byte packs) and the usual layouts.
            let shifted = tensor(&vals, &[n + 1], dtype, dev).narrow(0, 1, n).unwrap().reshape((rows, k)).unwrap();
            let mut views = vec![("offset 1".to_string(), shifted)];
            for kind in ALL_LAYOUTS {
                views.push((format!("{kind:?}"), tensor_in(&rx.data, &[rows, k], dtype, kind, dev)));
            }
            for (name, x) in &views {
                for axes in [[1usize], [0]] {
                    check_reductions(x, &rx, &axes, &format!("{dtype} ({rows}, {k}) {name} axis {}", axes[0]));
                }
            }
        }
    }
    // Tall and wide column reductions (axis 0), several passes over the row ranges.
    for dtype in supported(dev, &[DType::F32, DType::F16, DType::BF16, DType::I32]) {
        for shape in [[70001usize, 3], [3, 70001], [1025, 257], [257, 1025], [4097, 64], [3000, 72]] {
            seed += 1;
            let n = shape[0] * shape[1];
            let vals = boundary_values(n, dtype, seed);
            let rx = RefArray::new(shape.to_vec(), vals.clone());
            let x = tensor(&vals, &shape, dtype, dev);
            check_reductions(&x, &rx, &[0], &format!("{dtype} {shape:?} axis 0"));
            check_reductions(&x, &rx, &[0, 1], &format!("{dtype} {shape:?} all"));
        }
    }
}

/// Float products around the same boundaries (values near 1 in magnitude).
fn prod_boundary_sizes(dev: &Device) {
    for dtype in supported(dev, &[DType::F32, DType::F16]) {
        for (seed, shape) in [[2usize, 255], [2, 257], [3, 4097], [2, 70001], [4097, 8], [257, 5]].iter().enumerate() {
            let n = shape[0] * shape[1];
            let vals = round_to(&prod_values(n, dtype, seed as u64), dtype);
            let rx = RefArray::new(shape.to_vec(), vals.clone());
            let x = tensor(&vals, shape, dtype, dev);
            for axes in [vec![1usize], vec![0], vec![0, 1]] {
                let ia: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
                let ctx = format!("prod {dtype} {shape:?} {axes:?}");
                assert_prod(&x.prod(&ia, false).unwrap(), &rx, &axes, false, &ctx);
            }
        }
    }
}

/// Reductions over several axes that are not adjacent in memory (one pass per group of axes), in
/// every layout.
fn reduce_axis_groups(dev: &Device) {
    let shape = [6usize, 5, 7, 9];
    for dtype in supported(dev, &[DType::F32, DType::BF16, DType::I32]) {
        let n: usize = shape.iter().product();
        let vals = boundary_values(n, dtype, 41);
        let rx = RefArray::new(shape.to_vec(), vals.clone());
        for kind in ALL_LAYOUTS {
            let x = tensor_in(&vals, &shape, dtype, kind, dev);
            for axes in [vec![0usize, 2], vec![1, 3], vec![0, 3], vec![0, 1, 3], vec![1, 2]] {
                check_reductions(&x, &rx, &axes, &format!("{dtype} {kind:?} {axes:?}"));
            }
        }
    }
}

/// NaN and infinities in long rows and columns: in a later chunk or row range than the first,
/// with ties for argmax/argmin.
fn nan_and_inf_long(dev: &Device) {
    for dtype in supported(dev, &FLOATS) {
        let (rows, k) = (4, 20000);
        let mut vals = boundary_values(rows * k, dtype, 3);
        vals[15000] = f64::NAN;
        vals[k + 19999] = f64::INFINITY;
        vals[2 * k + 7] = f64::NEG_INFINITY;
        vals[2 * k + 12000] = f64::NAN;
        vals[3 * k + 100] = f64::INFINITY;
        vals[3 * k + 17000] = f64::INFINITY;
        let rx = RefArray::new(vec![rows, k], vals.clone());
        for kind in ALL_LAYOUTS {
            let x = tensor_in(&vals, &[rows, k], dtype, kind, dev);
            for axes in [vec![1usize], vec![0], vec![0, 1]] {
                check_reductions(&x, &rx, &axes, &format!("{dtype} {kind:?} {axes:?}"));
            }
            // Columns: the transpose reduced over its first axis.
            let xt = x.t().unwrap();
            let rt = RefArray::new(vec![k, rows], (0..rows * k).map(|i| vals[(i % rows) * k + i / rows]).collect());
            check_reductions(&xt, &rt, &[0], &format!("{dtype} {kind:?} transposed axis 0"));
        }
    }
}

fn argmax_argmin(dev: &Device) {
    let mut seed = 100;
    for dtype in supported(dev, &all_dtypes()) {
        for &shape in SHAPES {
            for kind in ALL_LAYOUTS {
                seed += 1;
                let n: usize = shape.iter().product();
                // Few distinct values so ties (first occurrence wins) are common.
                let vals =
                    round_to(&random_values(n, dtype, seed).iter().map(|v| v.round()).collect::<Vec<_>>(), dtype);
                let x = tensor_in(&vals, shape, dtype, kind, dev);
                let rx = RefArray::new(shape.to_vec(), vals);
                for axis in [0isize, -1, (shape.len() as isize) / 2] {
                    let na = norm_axes(&[axis], shape.len());
                    for keepdim in [false, true] {
                        let ctx = format!("{dtype} {shape:?} {kind:?} axis {axis} keepdim {keepdim}");
                        let a = x.argmax(axis, keepdim).unwrap();
                        assert_eq!(a.dtype(), DType::I64);
                        assert_exact(&a, &ref_reduce(&rx, &na, keepdim, &|g| r_arg(g, true)), &format!("argmax {ctx}"));
                        let a = x.argmin(axis, keepdim).unwrap();
                        assert_exact(
                            &a,
                            &ref_reduce(&rx, &na, keepdim, &|g| r_arg(g, false)),
                            &format!("argmin {ctx}"),
                        );
                    }
                }
            }
        }
    }
}

fn mean_var_std(dev: &Device) {
    let mut seed = 200;
    for dtype in supported(dev, &all_dtypes()) {
        for &shape in SHAPES {
            for kind in ALL_LAYOUTS {
                seed += 1;
                let n: usize = shape.iter().product();
                let vals = round_to(&random_values(n, dtype, seed), dtype);
                let x = tensor_in(&vals, shape, dtype, kind, dev);
                let rx = RefArray::new(shape.to_vec(), vals);
                let out_dtype = if dtype.is_float() { dtype } else { DType::F32 };
                for axes in axis_sets(shape.len()) {
                    let na = norm_axes(&axes, shape.len());
                    let od = out_dtype;
                    for keepdim in [false, true] {
                        let ctx = format!("{dtype} {shape:?} {kind:?} axes {axes:?} keepdim {keepdim}");
                        let m = x.mean(&axes, keepdim).unwrap();
                        assert_eq!(m.dtype(), out_dtype, "mean {ctx}");
                        let mb = ref_reduce(&rx, &na, keepdim, &|g| mean_bound(g, od)).data;
                        assert_bounded(&m, &ref_reduce(&rx, &na, keepdim, &r_mean), &mb, &format!("mean {ctx}"));
                        for c in [0, 1] {
                            let v = x.var(&axes, keepdim, c).unwrap();
                            assert_eq!(v.dtype(), out_dtype);
                            let rv = ref_reduce(&rx, &na, keepdim, &|g| r_var(g, c));
                            let vb = ref_reduce(&rx, &na, keepdim, &|g| var_bound(g, c, od)).data;
                            assert_bounded(&v, &rv, &vb, &format!("var({c}) {ctx}"));
                            let s = x.std(&axes, keepdim, c).unwrap();
                            let sb = ref_reduce(&rx, &na, keepdim, &|g| std_bound(g, c, od)).data;
                            assert_bounded(&s, &rv.map(f64::sqrt), &sb, &format!("std({c}) {ctx}"));
                        }
                    }
                }
                let all: Vec<usize> = (0..shape.len()).collect();
                let mb = ref_reduce(&rx, &all, false, &|g| mean_bound(g, out_dtype)).data;
                assert_bounded(&x.mean_all().unwrap(), &ref_reduce(&rx, &all, false, &r_mean), &mb, "mean_all");
            }
        }
    }
    // Var is computed in two passes: a large offset does not destroy it (one-pass E[x^2]-E[x]^2 would).
    let vals: Vec<f64> = (0..1000).map(|i| 1e4 + (i % 10) as f64 * 0.1).collect();
    let x = tensor(&vals, &[1000], DType::F32, dev);
    let expected = RefArray::new(vec![], vec![r_var(&round_to(&vals, DType::F32), 0)]);
    assert_close_tol(&x.var(&[0], false, 0).unwrap(), &expected, 1e-5, 1e-3, "var with offset 1e4");
}

fn cumsum(dev: &Device) {
    let mut seed = 300;
    for dtype in supported(dev, &all_dtypes()) {
        for &shape in SHAPES.iter().chain([&[3usize, 2100][..]].iter()) {
            for kind in ALL_LAYOUTS {
                seed += 1;
                let n: usize = shape.iter().product();
                let vals = round_to(&random_values(n, dtype, seed), dtype);
                let x = tensor_in(&vals, shape, dtype, kind, dev);
                let rx = RefArray::new(shape.to_vec(), vals);
                for axis in 0..shape.len() {
                    let ctx = format!("{dtype} {shape:?} {kind:?} axis {axis}");
                    let c = x.cumsum(axis as isize - shape.len() as isize).unwrap();
                    assert_eq!(c.dtype(), if dtype.is_float() { dtype } else { DType::I64 }, "{ctx}");
                    let expected = ref_cumsum(&rx, axis);
                    let bound = cumsum_bounds(&rx, axis, dtype, &expected);
                    assert_bounded(&c, &expected, &bound, &ctx);
                }
            }
        }
    }
    let e = Tensor::zeros((0, 3), DType::F32, dev).unwrap().cumsum(0).unwrap();
    assert_eq!(e.dims(), &[0, 3]);
}

/// Per-element bounds of the prefix sums of `rx` along `axis`: element j is a sum of j + 1 terms
/// accumulated in f32 (f64 for f64), then stored in `dtype` (`bounds::sum_bound`); exact for
/// integers.
fn cumsum_bounds(rx: &RefArray, axis: usize, dtype: DType, want: &RefArray) -> Vec<f64> {
    let abs = ref_cumsum(&rx.map(f64::abs), axis);
    (0..rx.data.len()).map(|i| sum_bound(dtype, rx.unravel(i)[axis] + 1, abs.data[i], want.data[i])).collect()
}

/// The cumsum bound catches broken scans: zeros, a shifted result, and prefix sums that missed the
/// first 64 values of the row (a dropped block), on rows of 2100.
fn cumsum_bound_catches_wrong(dev: &Device) {
    for dtype in supported(dev, &[DType::F32, DType::F64, DType::F16, DType::BF16]) {
        let (rows, d) = (3, 2100);
        let vals = round_to(&random_values(rows * d, dtype, 77), dtype);
        let rx = RefArray::new(vec![rows, d], vals.clone());
        let want = ref_cumsum(&rx, 1);
        let bound = cumsum_bounds(&rx, 1, dtype, &want);
        let skipped: Vec<f64> = vals.iter().enumerate().map(|(i, &v)| if i % d < 64 { 0.0 } else { v }).collect();
        let dropped = ref_cumsum(&RefArray::new(vec![rows, d], skipped), 1);
        let ctx = format!("cumsum {dtype} ({rows}, {d})");
        assert_catches_wrong(&want.data, &bound, &dropped.data, &ctx);
        assert_bounded(&tensor(&vals, &[rows, d], dtype, dev).cumsum(1).unwrap(), &want, &bound, &ctx);
    }
}

/// Reference inclusive prefix sums of `rx` along `axis`.
fn ref_cumsum(rx: &RefArray, axis: usize) -> RefArray {
    let mut expected = rx.clone();
    let stride: usize = rx.shape[axis + 1..].iter().product();
    for i in 0..rx.data.len() {
        if !(i / stride).is_multiple_of(rx.shape[axis]) {
            expected.data[i] += expected.data[i - stride];
        }
    }
    expected
}

/// Long rows (several levels of block scans), many short rows, views and every float dtype.
fn cumsum_long_and_many(dev: &Device) {
    let cases: [(&[usize], usize); 9] = [
        (&[200003], 0),
        (&[2, 70001], 1),
        (&[70001, 2], 0),
        (&[3, 1025], 1),
        (&[5000, 3], 1),
        (&[3, 5000], 0),
        (&[2, 3, 1500], 1),
        (&[257, 4], 1),
        (&[4, 4097], 1),
    ];
    let mut seed = 700;
    for dtype in supported(dev, &FLOATS) {
        for (shape, axis) in cases {
            let n: usize = shape.iter().product();
            if dtype != DType::F32 && n > 100000 {
                continue;
            }
            seed += 1;
            let vals = round_to(&random_values(n, dtype, seed), dtype);
            let rx = RefArray::new(shape.to_vec(), vals.clone());
            let expected = ref_cumsum(&rx, axis);
            for kind in ALL_LAYOUTS {
                let x = tensor_in(&vals, shape, dtype, kind, dev);
                let ctx = format!("cumsum {dtype} {shape:?} {kind:?} axis {axis}");
                // Running sums drift by about eps(f32) * |running sum| * sqrt(k) ~ 1e-7 * k, and
                // cross zero: an absolute term for that, the dtype's relative one for the rest.
                let (atol, rtol) = tol(dtype);
                let atol = atol + 1e-7 * shape[axis] as f64;
                assert_close_tol(&x.cumsum(axis as isize).unwrap(), &expected, atol, 2.0 * rtol, &ctx);
            }
        }
    }
    // Infinities and NaN carry to the end of their row only.
    let vals = vec![1.0, f64::INFINITY, 2.0, 3.0, f64::NAN, 1.0, -1.0, 2.0, 3.0];
    let x = tensor(&vals, &[3, 3], DType::F32, dev);
    let rx = RefArray::new(vec![3, 3], vals);
    assert_close(&x.cumsum(1).unwrap(), &ref_cumsum(&rx, 1), 1.0, "cumsum with inf and nan");
    assert_close(&x.cumsum(0).unwrap(), &ref_cumsum(&rx, 0), 1.0, "cumsum with inf and nan, axis 0");
}

fn empty_reductions(dev: &Device) {
    for dtype in supported(dev, &[DType::F32, DType::I32, DType::BF16]) {
        let x = Tensor::zeros((0, 3), dtype, dev).unwrap();
        let ctx = format!("{dtype}");
        let zeros = RefArray::new(vec![3], vec![0.0; 3]);
        assert_exact(&x.sum(&[0], false).unwrap(), &zeros, &ctx);
        assert_exact(&x.prod(&[0], false).unwrap(), &RefArray::new(vec![3], vec![1.0; 3]), &ctx);
        assert_exact(&x.mean(&[0], false).unwrap(), &RefArray::new(vec![3], vec![f64::NAN; 3]), &ctx);
        assert_exact(&x.sum_all().unwrap(), &RefArray::new(vec![], vec![0.0]), &ctx);
        assert_exact(&x.mean_all().unwrap(), &RefArray::new(vec![], vec![f64::NAN]), &ctx);
        // Reducing the non-empty axis of an empty tensor is fine, even without identity.
        assert_eq!(x.max(&[1], false).unwrap().dims(), &[0]);
        assert_eq!(x.argmax(1, true).unwrap().dims(), &[0, 1]);
        assert_eq!(x.sum(&[1], true).unwrap().dims(), &[0, 1]);
        assert_err(x.max(&[0], false), &["max", "(0, 3)"]);
        assert_err(x.min_all(), &["min_all", "(0, 3)"]);
        assert_err(x.argmax(0, false), &["argmax", "(0, 3)"]);
        assert_err(x.argmin(-2, false), &["argmin", "(0, 3)"]);
    }
    // Empty axis list: no reduction (sum of ints still gives i64).
    let x = tensor(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::I32, dev);
    let s = x.sum(&[], false).unwrap();
    assert_eq!(s.dtype(), DType::I64);
    assert_exact(&s, &RefArray::new(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]), "sum over no axes");
    // Rank 0.
    let s = Tensor::scalar(2.5, DType::F32, dev).unwrap();
    assert_exact(&s.sum_all().unwrap(), &RefArray::new(vec![], vec![2.5]), "sum_all of a scalar");
    assert_exact(&s.max_all().unwrap(), &RefArray::new(vec![], vec![2.5]), "max_all of a scalar");
}

fn reduce_errors(dev: &Device) {
    let x = rand_tensor(&[2, 3, 4], DType::F32, 1, dev);
    assert_err(x.sum(&[3], false), &["sum", "axis 3", "(2, 3, 4)"]);
    assert_err(x.mean(&[-4], false), &["mean", "axis -4"]);
    assert_err(x.max(&[0, -3], false), &["max", "axis 0", "more than once"]);
    assert_err(x.argmax(5, false), &["argmax", "axis 5"]);
    assert_err(x.var(&[1, 1], false, 1), &["var", "more than once"]);
    assert_err(x.cumsum(3), &["cumsum", "axis 3"]);
    let s = Tensor::scalar(1.0, DType::F32, dev).unwrap();
    assert_err(s.argmin(0, false), &["argmin", "rank 0"]);
}

/// The bounds above are tight enough to catch broken kernels: at the sizes where the old
/// `sqrt(n)`-scaled tolerances passed an all-zero result (bf16 sums of ~4000 terms, var/std of 129
/// bf16 values, products of 70,001 factors), an all-zero result, one missing a block of terms and
/// one shifted by a row all fail, while the device's own result passes.
fn sum_bounds_catch_wrong(dev: &Device) {
    let rows = 8;
    for dtype in supported(dev, &[DType::BF16, DType::F16, DType::F32]) {
        for (n, shifted_mean) in [(4097usize, true), (4097, false), (3907, false)] {
            let raw = random_values(rows * n, dtype, 77 + n as u64);
            let raw: Vec<f64> = if shifted_mean { raw.iter().map(|x| x + 1.0).collect() } else { raw };
            let vals = round_to(&raw, dtype);
            let rx = RefArray::new(vec![rows, n], vals.clone());
            let want = ref_reduce(&rx, &[1], false, &r_sum);
            let abs = ref_reduce(&rx, &[1], false, &|g| g.iter().map(|v| v.abs()).sum());
            let b: Vec<f64> = want.data.iter().zip(&abs.data).map(|(&w, &a)| sum_bound(dtype, n, a, w)).collect();
            let dropped: Vec<f64> = vals.chunks(n).map(|g| g[..n - 256].iter().sum()).collect();
            let ctx = format!("sum of {n} {dtype} (mean {})", shifted_mean as u8);
            assert_catches_wrong(&want.data, &b, &dropped, &ctx);
            assert_sum(&tensor(&vals, &[rows, n], dtype, dev).sum(&[1], false).unwrap(), &rx, &[1], false, &ctx);
        }
        let n = 129;
        let vals = round_to(&random_values(rows * n, dtype, 5), dtype);
        let x = tensor(&vals, &[rows, n], dtype, dev);
        let rx = RefArray::new(vec![rows, n], vals.clone());
        for c in [0, 1] {
            let ctx = format!("var({c}) of {n} {dtype}");
            let want = ref_reduce(&rx, &[1], false, &|g| r_var(g, c));
            let b = ref_reduce(&rx, &[1], false, &|g| var_bound(g, c, dtype)).data;
            let dropped: Vec<f64> = vals.chunks(n).map(|g| r_var(&g[..n - 32], c)).collect();
            assert_catches_wrong(&want.data, &b, &dropped, &ctx);
            assert_bounded(&x.var(&[1], false, c).unwrap(), &want, &b, &ctx);
            let ctx = format!("std({c}) of {n} {dtype}");
            let want = want.map(f64::sqrt);
            let b = ref_reduce(&rx, &[1], false, &|g| std_bound(g, c, dtype)).data;
            let dropped: Vec<f64> = dropped.iter().map(|v| v.sqrt()).collect();
            assert_catches_wrong(&want.data, &b, &dropped, &ctx);
            assert_bounded(&x.std(&[1], false, c).unwrap(), &want, &b, &ctx);
        }
        let (prows, n) = (4, 70001);
        let vals = round_to(&prod_values(prows * n, dtype, 9), dtype);
        let rx = RefArray::new(vec![prows, n], vals.clone());
        let want = ref_reduce(&rx, &[1], false, &r_prod);
        let b: Vec<f64> = want.data.iter().map(|&w| prod_bound(dtype, n, w)).collect();
        let dropped: Vec<f64> = vals.chunks(n).map(|g| g[..n - 256].iter().product()).collect();
        let ctx = format!("prod of {n} {dtype}");
        assert_catches_wrong(&want.data, &b, &dropped, &ctx);
        assert_prod(&tensor(&vals, &[prows, n], dtype, dev).prod(&[1], false).unwrap(), &rx, &[1], false, &ctx);
    }
}

backend_tests!(
    sum_bounds_catch_wrong,
    sum_prod_max_min,
    large_reductions,
    reduce_boundary_sizes,
    prod_boundary_sizes,
    reduce_axis_groups,
    nan_and_inf_long,
    cumsum_long_and_many,
    sum_accuracy_16m,
    nan_and_inf,
    argmax_argmin,
    mean_var_std,
    cumsum,
    cumsum_bound_catches_wrong,
    empty_reductions,
    reduce_errors
);
