//! `kiln::compile` (issue 26): fused results against the same function run eagerly, on random
//! inputs, per backend. The rule (docs of `kiln::compile`): bit for bit where each op is computed
//! alike; on a GPU, float chains with a multiply followed by an add may differ by one rounding (a
//! contracted FMA) and fused sums by the order of summation. So: the CPU and every integer result
//! are compared exactly; GPU float results within a few units in the last place of their dtype
//! (sums: the tolerance of a float sum of the row).

use crate::common::{gpu_device, rand_tensor, random_values, tensor, tensor_in, Layouts, ALL_LAYOUTS};
use kiln::{compile, Compiled, DType, Device, Result, Tensor};

/// Units in the last place of `dt` allowed on a GPU (one rounding per op of a short chain, twice).
fn ulps(dt: DType) -> f64 {
    match dt {
        DType::F32 => 8.0 * f32::EPSILON as f64,
        DType::F16 => 4.0 * 9.77e-4,
        DType::BF16 => 4.0 * 7.82e-3,
        _ => 0.0,
    }
}

/// Compares fused against eager: exactly on the CPU and for integers, else within `rel` relative
/// (plus `abs` absolute); NaN must match NaN, infinities exactly.
fn same(fused: &Tensor, eager: &Tensor, rel: f64, abs: f64, ctx: &str) {
    assert_eq!(fused.dims(), eager.dims(), "{ctx}: shape");
    assert_eq!(fused.dtype(), eager.dtype(), "{ctx}: dtype");
    let (f, e) = (fused.to_f64_vec().unwrap(), eager.to_f64_vec().unwrap());
    let exact = fused.device().is_cpu() || !fused.dtype().is_float();
    for (i, (&a, &b)) in f.iter().zip(&e).enumerate() {
        let ok = if a.is_nan() || b.is_nan() {
            a.is_nan() && b.is_nan()
        } else if exact || a.is_infinite() || b.is_infinite() {
            a.to_bits() == b.to_bits() || (a == b && a != 0.0) || (a == 0.0 && b == 0.0 && !exact)
        } else {
            (a - b).abs() <= abs + rel * a.abs().max(b.abs())
        };
        assert!(ok, "{ctx}: element {i}: fused {a:e} vs eager {b:e}");
    }
}

type F = fn(&[Tensor]) -> Result<Vec<Tensor>>;

/// Runs `f` compiled and eagerly on `xs`, compares every output; returns the compiled function.
fn check(f: F, xs: &[Tensor], rel: f64, abs: f64, ctx: &str) -> Compiled {
    let c = compile(f);
    let eager = f(xs).unwrap();
    for round in 0..2 {
        // The first call traces, the second runs the cached plan.
        let fused = c.call(xs).unwrap();
        assert_eq!(fused.len(), eager.len());
        for (k, (a, b)) in fused.iter().zip(&eager).enumerate() {
            same(a, b, rel, abs, &format!("{ctx} output {k} call {round}"));
        }
    }
    c
}

fn hypot(x: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![x[0].mul(&x[0])?.add(&x[1].mul(&x[1])?)?.sqrt()?])
}
fn gauss(x: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![x[0].mul(&x[0])?.neg()?.exp()?])
}
/// Broadcasting, scalars, a comparison, `where`, clamp, a cast and two outputs.
fn mixed(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let s = x[0].mul_scalar(0.5)?.sub(&x[1])?;
    let m = s.gt(&x[1])?;
    let w = Tensor::where_(&m, &s, &x[1].tanh()?)?.clamp(-0.75, 2.0)?;
    Ok(vec![w.add_scalar(1.0)?, m.to_dtype(DType::F32)?.mul(&w)?])
}
fn ints(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let a = x[0].mul(&x[1])?.add(&x[0])?.sub_scalar(3.0)?;
    let b = a.maximum(&x[1])?.abs()?.clamp(0.0, 40.0)?;
    Ok(vec![Tensor::where_(&a.lt(&b)?, &a, &b)?.floor_div(&x[1].add_scalar(11.0)?)?, a.square()?])
}

fn chains(dev: &Device) {
    let floats: &[DType] = &[DType::F32, DType::F16, DType::BF16];
    for &dt in floats {
        for kind in [Layouts::Contiguous, Layouts::Transposed, Layouts::Stepped] {
            for shape in [&[7usize, 33][..], &[3, 4, 5], &[1000], &[2, 1024]] {
                let n: usize = shape.iter().product();
                let a = tensor_in(&random_values(n, dt, 1), shape, dt, kind, dev);
                let b = tensor_in(&random_values(n, dt, 2), shape, dt, kind, dev);
                let ctx = format!("{dt} {kind:?} {shape:?}");
                let c = check(hypot, &[a.clone(), b.clone()], ulps(dt), 0.0, &format!("hypot {ctx}"));
                assert_eq!((c.stats().groups, c.stats().fused_ops, c.stats().eager_ops), (1, 4, 0), "{ctx}");
                let c = check(gauss, std::slice::from_ref(&a), ulps(dt), 0.0, &format!("gauss {ctx}"));
                assert_eq!(c.stats().groups, 1);
                // tanh's and the clamp's rounding: relative to the dtype, a little more absolute.
                check(mixed, &[a, b], ulps(dt), ulps(dt), &format!("mixed {ctx}"));
            }
        }
    }
    // Broadcast of a row, a column and a scalar tensor in one chain.
    let a = rand_tensor(&[6, 40], DType::F32, 3, dev);
    let r = rand_tensor(&[40], DType::F32, 4, dev);
    let c = rand_tensor(&[6, 1], DType::F32, 5, dev);
    let s = rand_tensor(&[], DType::F32, 6, dev);
    let f: F = |x| Ok(vec![x[0].add(&x[1])?.mul(&x[2])?.sub(&x[3])?.relu()?]);
    let comp = check(f, &[a, r, c, s], ulps(DType::F32), 0.0, "broadcast");
    assert_eq!(comp.stats().groups, 1);
    for dt in [DType::I32, DType::U8, DType::U32] {
        let a = tensor(&random_values(500, dt, 7), &[20, 25], dt, dev);
        let b = tensor(&random_values(25, dt, 8), &[25], dt, dev);
        check(ints, &[a, b], 0.0, 0.0, &format!("ints {dt}"));
    }
}

fn rmsnorm(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let ms = x[0].mul(&x[0])?.mean(&[-1], true)?;
    Ok(vec![x[0].mul(&ms.add_scalar(1e-5)?.rsqrt()?)?.mul(&x[1])?])
}
fn softmax(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let e = x[0].sub(&x[0].max(&[-1], true)?)?.exp()?;
    Ok(vec![e.div(&e.sum(&[-1], true)?)?])
}
fn gelu_tanh(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = &x[0];
    let inner = x.add(&x.mul(x)?.mul(x)?.mul_scalar(0.044715)?)?.mul_scalar(0.7978845608028654)?;
    Ok(vec![x.mul_scalar(0.5)?.mul(&inner.tanh()?.add_scalar(1.0)?)?])
}
fn reductions(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let y = x[0].mul_scalar(2.0)?.add(&x[1])?;
    Ok(vec![y.sum(&[-1], true)?, y.max(&[-1], false)?, y.min(&[-1], true)?.abs()?])
}

fn rows(dev: &Device) {
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for shape in [&[5usize, 37][..], &[3, 300], &[2, 2, 1030], &[4, 1]] {
            let d = *shape.last().unwrap();
            let x = rand_tensor(shape, dt, 10, dev);
            let w = rand_tensor(&[d], dt, 11, dev);
            let ctx = format!("{dt} {shape:?}");
            // Sums over rows: the GPU adds in another order (error ~ sqrt(d) ulps of the row's scale).
            let sum_tol = ulps(dt) * (d as f64).sqrt().max(1.0);
            let c = check(rmsnorm, &[x.clone(), w.clone()], sum_tol, sum_tol, &format!("rmsnorm {ctx}"));
            assert_eq!(c.stats().groups, 1, "rmsnorm is one row group ({ctx}): {:?}", c.stats());
            // The fused primitives agree with kiln's own kernel to the same tolerance.
            let own = x.rms_norm(&w, 1e-5).unwrap();
            let fused = c.call(&[x.clone(), w]).unwrap();
            let (f, o) = (fused[0].to_f64_vec().unwrap(), own.to_f64_vec().unwrap());
            for (i, (a, b)) in f.iter().zip(&o).enumerate() {
                let t = 4.0 * sum_tol * (1.0 + a.abs().max(b.abs()));
                assert!((a - b).abs() <= t, "{ctx}: rmsnorm of primitives {a} vs kiln's rms_norm {b} at {i}");
            }
            let c = check(softmax, std::slice::from_ref(&x), sum_tol, sum_tol, &format!("softmax {ctx}"));
            assert_eq!(c.stats().groups, 1, "softmax is one row group ({ctx})");
            check(gelu_tanh, std::slice::from_ref(&x), 2.0 * ulps(dt), ulps(dt), &format!("gelu {ctx}"));
            let y = rand_tensor(shape, dt, 12, dev);
            check(reductions, &[x, y], sum_tol, sum_tol, &format!("reductions {ctx}"));
        }
    }
    // Integer max/min rows are exact.
    let a = tensor(&random_values(3 * 70, DType::I32, 13), &[3, 70], DType::I32, dev);
    let f: F = |x| Ok(vec![x[0].mul_scalar(3.0)?.max(&[-1], true)?.sub(&x[0])?, x[0].min(&[-1], false)?]);
    check(f, &[a], 0.0, 0.0, "int rows");
}

/// The row kernel's paths: rows held in registers (1 to 8 packs of 4 per invocation) and rows too
/// long for them (read once per pass), odd and 4n + 2 lengths, views not contiguous along the row or
/// not starting on a pack, leaves broadcast along and across rows, packed f16/bf16/bool outputs.
fn row_paths(dev: &Device) {
    // A row, a column, a scalar and a max-matching mask around one softmax.
    fn mixed_row(x: &[Tensor]) -> Result<Vec<Tensor>> {
        let y = x[0].mul(&x[1])?.add(&x[2])?.sub(&x[3])?;
        let m = y.max(&[-1], true)?;
        let e = y.sub(&m)?.exp()?;
        Ok(vec![e.div(&e.sum(&[-1], true)?)?, y.eq(&m)?, m])
    }
    // 40001 and 65536 f32 elements are past the register budget of one leaf (at most 1024
    // invocations x 8 packs x 4 elements), 20000 past that of two (`reductions` holds both leaves).
    let shapes: [(usize, usize); 9] =
        [(3, 3), (2, 130), (2, 1031), (3, 1030), (2, 4096), (1, 20000), (1, 32768), (2, 40001), (1, 65536)];
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for (si, &(r, d)) in shapes.iter().enumerate() {
            // Every layout on the short rows; the long ones contiguous and transposed.
            let kinds: &[Layouts] = if d <= 4096 { &ALL_LAYOUTS } else { &[Layouts::Contiguous, Layouts::Transposed] };
            for &kind in kinds {
                let seed = 60 + si as u64;
                let x = tensor_in(&random_values(r * d, dt, seed), &[r, d], dt, kind, dev);
                let y = tensor_in(&random_values(r * d, dt, seed + 1), &[r, d], dt, kind, dev);
                let w = rand_tensor(&[d], dt, seed + 2, dev);
                let ctx = format!("{dt} {kind:?} ({r}, {d})");
                let sum_tol = ulps(dt) * (d as f64).sqrt();
                check(rmsnorm, &[x.clone(), w.clone()], sum_tol, sum_tol, &format!("rmsnorm {ctx}"));
                let c = check(softmax, std::slice::from_ref(&x), sum_tol, sum_tol, &format!("softmax {ctx}"));
                assert_eq!(c.stats().groups, 1, "{ctx}");
                check(reductions, &[x.clone(), y], sum_tol, sum_tol, &format!("reductions {ctx}"));
                let col = rand_tensor(&[r, 1], dt, seed + 3, dev);
                let s = rand_tensor(&[], dt, seed + 4, dev);
                let c = check(mixed_row, &[x, w, col, s], sum_tol, sum_tol, &format!("mixed row {ctx}"));
                assert_eq!(c.stats().groups, 1, "{ctx}: {:?}", c.stats());
            }
            // A row starting past a pack boundary (a view at offset 1 of wider rows).
            let wide = rand_tensor(&[r, d + 1], dt, 70 + si as u64, dev);
            let x = wide.narrow(1, 1, d).unwrap();
            let w = rand_tensor(&[d + 4], dt, 80, dev).narrow(0, 3, d).unwrap();
            let sum_tol = ulps(dt) * (d as f64).sqrt();
            check(rmsnorm, &[x, w], sum_tol, sum_tol, &format!("rmsnorm {dt} offset view ({r}, {d})"));
        }
    }
    // Integer rows: held in registers and read per pass, exact.
    for d in [6, 4096, 40001] {
        let a = tensor(&random_values(2 * d, DType::I32, 90), &[2, d], DType::I32, dev);
        let f: F = |x| {
            let m = x[0].max(&[-1], true)?;
            Ok(vec![m.sub(&x[0])?, x[0].eq(&m)?, x[0].min(&[-1], false)?])
        };
        check(f, &[a], 0.0, 0.0, &format!("int rows of {d}"));
    }
}

fn special_values(dev: &Device) {
    let mut v = random_values(64, DType::F32, 20);
    v[3] = f64::NAN;
    v[10] = f64::INFINITY;
    v[11] = f64::NEG_INFINITY;
    v[40] = -0.0;
    v[50] = f64::NAN;
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let x = tensor(&v, &[4, 16], dt, dev);
        let f: F = |x| {
            let y = x[0].mul_scalar(2.0)?.exp()?.sub_scalar(1.0)?.clamp(-3.0, 1e30)?;
            Ok(vec![y.clone(), y.max(&[-1], true)?, x[0].relu()?.sqrt()?.sum(&[-1], true)?, x[0].ne(&x[0])?])
        };
        check(f, &[x], ulps(dt), 0.0, &format!("nan/inf {dt}"));
    }
}

fn empty(dev: &Device) {
    for shape in [&[0usize, 5][..], &[3, 0], &[0]] {
        let a = rand_tensor(shape, DType::F32, 1, dev);
        let b = rand_tensor(shape, DType::F32, 2, dev);
        check(hypot, &[a.clone(), b], 0.0, 0.0, &format!("empty {shape:?}"));
        let f: F = |x| Ok(vec![x[0].exp()?.sum(&[-1], true)?]);
        check(f, &[a], 0.0, 0.0, &format!("empty sum {shape:?}"));
    }
}

fn fallback_and_eager_ops(dev: &Device) {
    let a = rand_tensor(&[8, 16], DType::F32, 30, dev);
    let b = rand_tensor(&[16, 8], DType::F32, 31, dev);
    // A matmul between two chains: two groups around an eager op.
    let f: F = |x| Ok(vec![x[0].exp()?.mul_scalar(0.5)?.matmul(&x[1].tanh()?)?.relu()?.add_scalar(1.0)?]);
    let c = check(f, &[a.clone(), b.clone()], ulps(DType::F32), 1e-6, "matmul between chains");
    let s = c.stats();
    assert_eq!((s.groups, s.eager_ops), (3, 1), "{s:?}");
    // Views of intermediates are eager ops; the chains around them still fuse.
    let f: F = |x| Ok(vec![x[0].exp()?.transpose(0, 1)?.add(&x[1])?.sqrt()?]);
    check(f, &[a.clone(), b.clone()], ulps(DType::F32), 0.0, "transpose between chains");
    // Data-dependent control flow: a host readback of a traced value runs the function eagerly.
    let f: F = |x| {
        let m = x[0].sum_all()?.to_vec::<f32>()?[0];
        Ok(vec![if m > 0.0 { x[0].exp()? } else { x[0].neg()? }])
    };
    let c = check(f, std::slice::from_ref(&a), 0.0, 0.0, "readback");
    assert_eq!(c.stats().eager, 1);
    let neg = a.neg().unwrap();
    check(f, &[neg], 0.0, 0.0, "readback, other branch");
    // An op without a trace hook (cumsum) also falls back, with the right answer.
    let f: F = |x| Ok(vec![x[0].exp()?.cumsum(-1)?.mul_scalar(2.0)?]);
    let c = check(f, std::slice::from_ref(&a), 0.0, 0.0, "untraced op");
    assert_eq!(c.stats().eager, 1);
    // i64 values: no GPU kernel, replayed eagerly (exact).
    let i = tensor(&random_values(40, DType::I64, 32), &[4, 10], DType::I64, dev);
    let f: F = |x| Ok(vec![x[0].mul(&x[0])?.add_scalar(7.0)?.sum(&[-1], true)?]);
    check(f, &[i], 0.0, 0.0, "i64");
    // A captured weight, a constant made inside, and one tensor passed twice.
    let w = rand_tensor(&[16], DType::F32, 33, dev);
    let c = compile(move |x: &[Tensor]| {
        let k = Tensor::full(0.25, 16, DType::F32, x[0].device())?;
        Ok(vec![x[0].mul(&w)?.add(&x[1])?.add(&k)?])
    });
    let out = c.call(&[a.clone(), a.clone()]).unwrap();
    let w2 = rand_tensor(&[16], DType::F32, 33, dev);
    let k = Tensor::full(0.25, 16, DType::F32, dev).unwrap();
    let eager = a.mul(&w2).unwrap().add(&a).unwrap().add(&k).unwrap();
    same(&out[0], &eager, ulps(DType::F32), 0.0, "captured");
    let other = rand_tensor(&[8, 16], DType::F32, 34, dev);
    let out = c.call(&[a.clone(), other.clone()]).unwrap();
    let eager = a.mul(&w2).unwrap().add(&other).unwrap().add(&k).unwrap();
    same(&out[0], &eager, ulps(DType::F32), 0.0, "two inputs after one");
}

fn retrace_and_errors(dev: &Device) {
    let c = compile(hypot);
    for shape in [&[4usize, 4][..], &[9], &[4, 4], &[2, 3, 5]] {
        let a = rand_tensor(shape, DType::F32, 40, dev);
        let b = rand_tensor(shape, DType::F32, 41, dev);
        same(
            &c.call(&[a.clone(), b.clone()]).unwrap()[0],
            &hypot(&[a, b]).unwrap()[0],
            ulps(DType::F32),
            0.0,
            "retrace",
        );
    }
    let a16 = rand_tensor(&[4, 4], DType::F16, 42, dev);
    c.call(&[a16.clone(), a16]).unwrap();
    assert_eq!(c.stats().traces, 4, "one trace per signature: {:?}", c.stats());
    // A shape error names the user's op and both shapes.
    let a = rand_tensor(&[3, 4], DType::F32, 43, dev);
    let b = rand_tensor(&[5], DType::F32, 44, dev);
    let err = c.call(&[a, b]).unwrap_err().to_string();
    assert!(err.contains("add") && err.contains("(3, 4)") && err.contains("(5,)"), "{err}");
}

crate::backend_tests!(chains, rows, row_paths, special_values, empty, fallback_and_eager_ops, retrace_and_errors);

/// The GPU program of a chain is compiled once and reused: a second compiled function with the same
/// chain adds no pipeline.
#[test]
fn gpu_pipelines_are_cached_by_program() {
    let Some(dev) = gpu_device() else { return };
    let a = rand_tensor(&[64, 64], DType::F32, 50, &dev);
    let b = rand_tensor(&[64, 64], DType::F32, 51, &dev);
    compile(hypot).call(&[a.clone(), b.clone()]).unwrap();
    // The device's pipeline count is shared with the tests running beside this one, which may
    // compile a kernel in between: a fresh compiled function that compiled its chain again would add
    // a pipeline in every attempt, so one attempt without a new pipeline settles it.
    let mut added = Vec::new();
    for _ in 0..8 {
        let before = dev.compiled_kernels();
        let c = compile(hypot);
        c.call(&[a.clone(), b.clone()]).unwrap();
        c.call(&[a.clone(), b.clone()]).unwrap();
        let after = dev.compiled_kernels();
        if after == before {
            return;
        }
        added.push(after as i64 - before as i64);
    }
    panic!("every compiled copy of one chain added pipelines: {added:?}");
}
