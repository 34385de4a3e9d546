//! `kiln::compile` (issue 26): fused results, and the same function run eagerly, each against an
//! f64 reference of the same rounded inputs, per backend.
//!
//! What kiln promises (docs of `kiln::compile`): fused and eager results are each within a stated
//! bound of the exact result of the same ops on the same inputs. They need not be equal bit for bit
//! on a GPU: a shader compiler may contract a multiply and an add into an FMA, a fused kernel sums a
//! row in another order, and drivers' exp/tanh differ within their stated accuracy (an NVIDIA run
//! found a fused f16 chain 14 ulp from the eager one, both within bounds). On the CPU fused results
//! are the eager ones bit for bit (`fusion/mod.rs`), and that is checked too; integer results are
//! exact everywhere (fused equal to eager).
//!
//! The bound is derived op by op while the reference is computed (a running error bound, as in
//! Wilkinson's analysis): each reference value carries `e`, a bound on the distance of a kernel's
//! result from the exact value. An op propagates its inputs' bounds through its own sensitivity
//! (`|b| e_a + |a| e_b` for a product, `e^x (e^{e_x} - 1)` for exp, `(1 - tanh^2) e` for tanh, ...),
//! adds its own error in f32 (the compute type of every float dtype: 0.5 ulp for + - *, 3 for
//! division (WGSL's 2.5 for a reciprocal, 0.5 for the multiply a GPU divides with) and sqrt, 6 for
//! rsqrt, 3 + 2|x| for exp, 8 ulp + 2^-24 for tanh, as `unary.rs` states them, and `n u sum|terms|`
//! for a sum of n terms), a possible flush of an f32 subnormal, then the rounding of the result to its dtype
//! (eager stores every op's result, so its error is the larger one; a fused kernel keeping f32
//! intermediates stays inside it). A comparison whose operands' intervals overlap may go either
//! way: its reference is 0.5 +- 0.5, and a `where` on it takes both branches' span. Non-finite
//! references must be matched exactly (NaN by NaN, an infinity by the same infinity).
//!
//! Each bound is shown to catch wrong results (`controls`): an all-zero output, one shifted by an
//! element, and one computed with the last block of the row dropped from every input fail it.

use crate::bounds::{acc_roundoff, check_bounded, flush_floor, stored_bound, ulp_f32};
use crate::common::{broadcast_shape, gpu_device, rand_tensor, random_values, tensor, tensor_in, Layouts, ALL_LAYOUTS};
use kiln::{compile, Compiled, DType, Device, Result, Tensor};

/// A value of the reference: `v` the exact result of the ops in f64 on the stored inputs, `e` a
/// bound on the distance of a kernel's result from `v`.
#[derive(Clone, Copy, Debug)]
struct V {
    v: f64,
    e: f64,
}

/// Whether `v` is stored exactly in `dt` (and is no subnormal a GPU may flush).
fn representable(v: f64, dt: DType) -> bool {
    let back = match dt {
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        DType::F32 => v as f32 as f64,
        _ => v,
    };
    back == v && (v == 0.0 || v.abs() >= f32::MIN_POSITIVE as f64)
}

/// The result `v` of one float op stored in `dt`: the inputs' error carried through the op
/// (`prop`), the op's own error in f32 (`ulps` of the result plus `abs`), a flushed subnormal, then
/// the rounding to `dt`. A correctly rounded op on exact inputs with a result `dt` holds is exact.
fn res(dt: DType, v: f64, prop: f64, ulps: f64, abs: f64) -> V {
    let prop = if prop.is_nan() { 0.0 } else { prop };
    if !v.is_finite() || (prop == 0.0 && ulps <= 0.5 && abs == 0.0 && representable(v, dt)) {
        return V { v, e: 0.0 };
    }
    V { v, e: stored_bound(dt, v, prop + ulps * ulp_f32(v) + abs + flush_floor(dt)) }
}

/// NumPy's promotion of the float dtypes these tests mix (f16/bf16 with f32 is f32; bool is below
/// every float).
fn promote(a: DType, b: DType) -> DType {
    let rank = |d: DType| match d {
        DType::F64 => 4,
        DType::F32 => 3,
        DType::F16 | DType::BF16 => 2,
        _ => 1,
    };
    match rank(a).cmp(&rank(b)) {
        std::cmp::Ordering::Less => b,
        std::cmp::Ordering::Greater => a,
        std::cmp::Ordering::Equal if a != b => DType::F32,
        _ => a,
    }
}

/// A comparison of two reference values: exact where their intervals cannot overlap (or both are
/// exact), else either answer (0.5 +- 0.5).
fn cmp(a: V, b: V, f: fn(f64, f64) -> bool) -> V {
    let undecided = !a.v.is_nan() && !b.v.is_nan() && a.e + b.e > 0.0 && (a.v - b.v).abs() <= a.e + b.e;
    if undecided {
        V { v: 0.5, e: 0.5 }
    } else {
        V { v: f(a.v, b.v) as u8 as f64, e: 0.0 }
    }
}

/// The exact maximum (or minimum) with NaN propagating, and the largest input error (max and min
/// move no value by more than that).
fn extreme(row: &[V], max: bool) -> V {
    let e = row.iter().map(|x| x.e).fold(0.0, f64::max);
    let v = row.iter().fold(if max { f64::NEG_INFINITY } else { f64::INFINITY }, |m, x| {
        if m.is_nan() || x.v.is_nan() {
            f64::NAN
        } else if max {
            m.max(x.v)
        } else {
            m.min(x.v)
        }
    });
    V { v, e }
}

/// An f64 reference array, row-major, of the dtype its tensor has.
#[derive(Clone, Debug)]
struct A {
    shape: Vec<usize>,
    d: Vec<V>,
    dt: DType,
}

impl A {
    /// The exact values a tensor holds.
    fn of(t: &Tensor) -> A {
        let d = t.to_f64_vec().unwrap().into_iter().map(|v| V { v, e: 0.0 }).collect();
        A { shape: t.dims().to_vec(), d, dt: t.dtype() }
    }

    fn map(&self, f: impl Fn(DType, V) -> V) -> A {
        A { shape: self.shape.clone(), d: self.d.iter().map(|&x| f(self.dt, x)).collect(), dt: self.dt }
    }

    /// Element `i` of this array broadcast to `shape` (axes of size 1 repeat).
    fn at(&self, shape: &[usize], i: usize) -> V {
        let (mut rest, mut idx, mut stride) = (i, 0, 1);
        let lead = shape.len() - self.shape.len();
        for k in (lead..shape.len()).rev() {
            let (pos, dim) = (rest % shape[k], self.shape[k - lead]);
            rest /= shape[k];
            idx += if dim == 1 { 0 } else { pos * stride };
            stride *= dim;
        }
        self.d[idx]
    }

    /// Elementwise on the broadcast of two arrays, in their promoted dtype.
    fn zip(&self, o: &A, f: impl Fn(DType, V, V) -> V) -> A {
        let shape = broadcast_shape(&self.shape, &o.shape);
        let dt = promote(self.dt, o.dt);
        let n: usize = shape.iter().product();
        A { d: (0..n).map(|i| f(dt, self.at(&shape, i), o.at(&shape, i))).collect(), shape, dt }
    }

    /// One value per row of the last axis (kept as an axis of 1 when `keep`).
    fn rows(&self, keep: bool, f: impl Fn(DType, &[V]) -> V) -> A {
        let d = *self.shape.last().unwrap();
        let mut shape = self.shape.clone();
        if keep {
            *shape.last_mut().unwrap() = 1;
        } else {
            shape.pop();
        }
        let count: usize = shape.iter().product();
        let d_vals = (0..count).map(|r| f(self.dt, &self.d[r * d..(r + 1) * d])).collect();
        A { shape, d: d_vals, dt: self.dt }
    }

    fn scalar(&self, c: f64) -> A {
        // A Python-style scalar takes the tensor's dtype: stored in it, or exact where it fits.
        let stored = res(self.dt, c, 0.0, 0.5, 0.0);
        A { shape: vec![], d: vec![stored], dt: self.dt }
    }

    fn add(&self, o: &A) -> A {
        self.zip(o, |dt, a, b| res(dt, a.v + b.v, a.e + b.e, 0.5, 0.0))
    }
    fn sub(&self, o: &A) -> A {
        self.zip(o, |dt, a, b| res(dt, a.v - b.v, a.e + b.e, 0.5, 0.0))
    }
    fn mul(&self, o: &A) -> A {
        self.zip(o, |dt, a, b| res(dt, a.v * b.v, a.v.abs() * b.e + b.v.abs() * a.e + a.e * b.e, 0.5, 0.0))
    }
    fn div(&self, o: &A) -> A {
        self.zip(o, |dt, a, b| {
            let prop = if b.v.abs() > b.e {
                (a.v.abs() * b.e + b.v.abs() * a.e) / (b.v.abs() * (b.v.abs() - b.e))
            } else {
                f64::INFINITY
            };
            res(dt, a.v / b.v, prop, 3.0, 0.0)
        })
    }
    fn add_scalar(&self, c: f64) -> A {
        self.add(&self.scalar(c))
    }
    fn mul_scalar(&self, c: f64) -> A {
        self.mul(&self.scalar(c))
    }
    fn neg(&self) -> A {
        self.map(|_, a| V { v: -a.v, e: a.e })
    }
    fn exp(&self) -> A {
        self.map(|dt, a| {
            let v = a.v.exp();
            // WGSL's exp: 3 + 2|x| ulp (the growth stops where f32's exp is 0 or inf).
            res(dt, v, v * a.e.exp_m1(), 3.0 + 2.0 * a.v.abs().min(104.0), 0.0)
        })
    }
    fn sqrt(&self) -> A {
        self.map(|dt, a| {
            let v = a.v.sqrt();
            let prop = ((a.v + a.e).sqrt() - v).max(v - (a.v - a.e).max(0.0).sqrt());
            res(dt, v, prop, 3.0, 0.0)
        })
    }
    fn rsqrt(&self) -> A {
        self.map(|dt, a| {
            let v = 1.0 / a.v.sqrt();
            let prop = if a.v > a.e { 1.0 / (a.v - a.e).sqrt() - v } else { f64::INFINITY };
            res(dt, v, prop, 6.0, 0.0)
        })
    }
    fn tanh(&self) -> A {
        self.map(|dt, a| {
            let slope = 1.0 - (a.v.abs() - a.e).max(0.0).tanh().powi(2);
            res(dt, a.v.tanh(), slope * a.e, 8.0, 2f64.powi(-24))
        })
    }
    fn relu(&self) -> A {
        self.map(|dt, a| res(dt, if a.v < 0.0 { 0.0 } else { a.v }, a.e, 0.0, 0.0))
    }
    fn abs(&self) -> A {
        self.map(|_, a| V { v: a.v.abs(), e: a.e })
    }
    fn clamp(&self, lo: f64, hi: f64) -> A {
        // The bounds are rounded like the values: one rounding of the result.
        self.map(move |dt, a| res(dt, if a.v.is_nan() { a.v } else { a.v.max(lo).min(hi) }, a.e, 0.5, 0.0))
    }
    fn sum(&self, keep: bool) -> A {
        self.rows(keep, |dt, row| {
            let n = row.len() as f64;
            let abs: f64 = row.iter().map(|x| x.v.abs()).sum();
            let prop = row.iter().map(|x| x.e).sum::<f64>() + n * acc_roundoff(dt) * abs + n * flush_floor(dt);
            res(dt, row.iter().map(|x| x.v).sum(), prop, 0.0, 0.0)
        })
    }
    fn mean(&self) -> A {
        let n = *self.shape.last().unwrap() as f64;
        self.sum(true).map(|dt, a| res(dt, a.v / n, a.e / n, 3.0, 0.0))
    }
    fn max(&self, keep: bool) -> A {
        self.rows(keep, |_, row| extreme(row, true))
    }
    fn min(&self, keep: bool) -> A {
        self.rows(keep, |_, row| extreme(row, false))
    }
    fn cmp(&self, o: &A, f: fn(f64, f64) -> bool) -> A {
        let mut r = self.zip(o, |_, a, b| cmp(a, b, f));
        r.dt = DType::Bool;
        r
    }
    /// `where(m, a, b)`; an undecided condition takes the span of both branches.
    fn where_(m: &A, a: &A, b: &A) -> A {
        let shape = broadcast_shape(&m.shape, &broadcast_shape(&a.shape, &b.shape));
        let n: usize = shape.iter().product();
        let d = (0..n)
            .map(|i| {
                let (c, x, y) = (m.at(&shape, i), a.at(&shape, i), b.at(&shape, i));
                match (c.e == 0.0, c.v != 0.0) {
                    (true, true) => x,
                    (true, false) => y,
                    _ => V { v: (x.v + y.v) / 2.0, e: (x.v - y.v).abs() / 2.0 + x.e.max(y.e) },
                }
            })
            .collect();
        A { shape, d, dt: promote(a.dt, b.dt) }
    }
    fn to_float(&self, dt: DType) -> A {
        A { dt, ..self.clone() }
    }
    fn t(&self) -> A {
        let (r, c) = (self.shape[0], self.shape[1]);
        let d = (0..r * c).map(|i| self.d[(i % r) * c + i / r]).collect();
        A { shape: vec![c, r], d, dt: self.dt }
    }
    fn matmul(&self, o: &A) -> A {
        let (m, k, n) = (self.shape[0], self.shape[1], o.shape[1]);
        let mut d = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                let (mut v, mut prop, mut abs) = (0.0, 0.0, 0.0);
                for t in 0..k {
                    let (a, b) = (self.d[i * k + t], o.d[t * n + j]);
                    v += a.v * b.v;
                    abs += (a.v * b.v).abs();
                    prop += a.v.abs() * b.e + b.v.abs() * a.e + a.e * b.e;
                }
                prop += k as f64 * acc_roundoff(self.dt) * abs + k as f64 * flush_floor(self.dt);
                d.push(res(self.dt, v, prop, 0.0, 0.0));
            }
        }
        A { shape: vec![m, n], d, dt: self.dt }
    }
    fn cumsum(&self) -> A {
        let d = *self.shape.last().unwrap();
        let mut out = self.clone();
        for row in out.d.chunks_mut(d) {
            let (mut v, mut prop, mut abs) = (0.0, 0.0, 0.0);
            for (j, x) in row.iter_mut().enumerate() {
                v += x.v;
                abs += x.v.abs();
                prop += x.e;
                let n = (j + 1) as f64;
                *x = res(self.dt, v, prop + n * acc_roundoff(self.dt) * abs + n * flush_floor(self.dt), 0.0, 0.0);
            }
        }
        out
    }
    /// This array with the last `drop` values of every row of the last axis replaced by zeros (the
    /// input of a kernel that skipped the last block of each row).
    fn drop_last(&self, drop: usize) -> A {
        let d = self.shape.last().copied().unwrap_or(1).max(1);
        let mut out = self.clone();
        for row in out.d.chunks_mut(d) {
            let from = row.len().saturating_sub(drop);
            row[from..].iter_mut().for_each(|x| *x = V { v: 0.0, e: 0.0 });
        }
        out
    }
}

/// Checks a result against its reference: shape, dtype, every value within its bound; an output
/// that overflows `dt` where the reference does not may be the infinity rounding gives.
fn check_out(got: &[f64], want: &A) -> std::result::Result<(), String> {
    let vals: Vec<f64> = want.d.iter().map(|x| x.v).collect();
    let bound: Vec<f64> = want.d.iter().map(|x| x.e).collect();
    let got: Vec<f64> = got
        .iter()
        .zip(&vals)
        .map(|(&g, &w)| {
            let overflowed = g.is_infinite() && w.is_finite() && g.signum() == w.signum();
            if overflowed && !representable_finite(w, want.dt) {
                w
            } else {
                g
            }
        })
        .collect();
    check_bounded(&got, &vals, &bound)
}

/// Whether `w` stays finite when stored in `dt` (rounds to a finite value).
fn representable_finite(w: f64, dt: DType) -> bool {
    match dt {
        DType::F16 => half::f16::from_f64(w).is_finite(),
        DType::BF16 => half::bf16::from_f64(w).is_finite(),
        DType::F32 => (w as f32).is_finite(),
        _ => true,
    }
}

fn assert_out(got: &Tensor, want: &A, ctx: &str) {
    assert_eq!(got.dims(), want.shape.as_slice(), "{ctx}: shape");
    assert_eq!(got.dtype(), want.dt, "{ctx}: dtype");
    if let Err(e) = check_out(&got.to_f64_vec().unwrap(), want) {
        panic!("{ctx} ({}): {e}", got.dtype());
    }
}

type F = fn(&[Tensor]) -> Result<Vec<Tensor>>;
type R = fn(&[A]) -> Vec<A>;

/// Runs `f` eagerly and compiled (twice: the first call traces, the second runs the cached plan) on
/// `xs`: every output of each within the bound of its reference `r` (the same ops on f64 values);
/// on the CPU, fused equal to eager bit for bit. Returns the compiled function.
fn check(f: F, r: R, xs: &[Tensor], ctx: &str) -> Compiled {
    let want = r(&xs.iter().map(A::of).collect::<Vec<_>>());
    let c = compile(f);
    let eager = f(xs).unwrap();
    assert_eq!(eager.len(), want.len());
    for (k, (e, w)) in eager.iter().zip(&want).enumerate() {
        assert_out(e, w, &format!("{ctx} eager output {k}"));
    }
    for round in 0..2 {
        let fused = c.call(xs).unwrap();
        assert_eq!(fused.len(), eager.len());
        for (k, (a, w)) in fused.iter().zip(&want).enumerate() {
            assert_out(a, w, &format!("{ctx} fused output {k} call {round}"));
            if a.device().is_cpu() {
                same(a, &eager[k], &format!("{ctx} output {k} call {round}: CPU fused against eager"));
            }
        }
    }
    c
}

/// The bound of `r`'s outputs `outs` catches wrong results: all zeros, shifted by one element, and
/// the outputs computed with the last quarter of every row (at least one value) dropped.
fn controls(r: R, xs: &[Tensor], outs: &[usize], ctx: &str) {
    let inputs: Vec<A> = xs.iter().map(A::of).collect();
    let want = r(&inputs);
    let drop = xs[0].dims().last().map_or(1, |d| (d / 4).max(1));
    let dropped = r(&inputs.iter().map(|a| a.drop_last(drop)).collect::<Vec<_>>());
    for &k in outs {
        let w = &want[k];
        let vals: Vec<f64> = w.d.iter().map(|x| x.v).collect();
        let ctx = format!("{ctx} output {k}");
        check_out(&vals, w).unwrap_or_else(|e| panic!("{ctx}: the reference fails its own bound: {e}"));
        assert!(check_out(&vec![0.0; vals.len()], w).is_err(), "{ctx}: an all-zero result passes");
        if vals.len() >= 2 {
            // (A single value cannot be shifted.)
            let mut shifted = vals.clone();
            shifted.rotate_left(1);
            assert!(check_out(&shifted, w).is_err(), "{ctx}: a result shifted by one element passes");
        }
        let dv: Vec<f64> = dropped[k].d.iter().map(|x| x.v).collect();
        assert!(check_out(&dv, w).is_err(), "{ctx}: a result without the last {drop} values of each row passes");
    }
}

/// Fused against eager exactly (integer results, and the CPU's floats): same bits, or equal
/// non-zero values, NaN matching NaN.
fn same(fused: &Tensor, eager: &Tensor, ctx: &str) {
    assert_eq!(fused.dims(), eager.dims(), "{ctx}: shape");
    assert_eq!(fused.dtype(), eager.dtype(), "{ctx}: dtype");
    let (f, e) = (fused.to_f64_vec().unwrap(), eager.to_f64_vec().unwrap());
    for (i, (&a, &b)) in f.iter().zip(&e).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
        assert!(ok, "{ctx}: element {i}: fused {a:e} vs eager {b:e}");
    }
}

/// Integer functions: fused equal to eager (integer ops are exact), on every backend.
fn check_exact(f: F, xs: &[Tensor], ctx: &str) -> Compiled {
    let c = compile(f);
    let eager = f(xs).unwrap();
    for round in 0..2 {
        let fused = c.call(xs).unwrap();
        assert_eq!(fused.len(), eager.len());
        for (k, (a, b)) in fused.iter().zip(&eager).enumerate() {
            same(a, b, &format!("{ctx} output {k} call {round}"));
        }
    }
    c
}

fn hypot(x: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![x[0].mul(&x[0])?.add(&x[1].mul(&x[1])?)?.sqrt()?])
}
fn hypot_ref(x: &[A]) -> Vec<A> {
    vec![x[0].mul(&x[0]).add(&x[1].mul(&x[1])).sqrt()]
}
fn gauss(x: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![x[0].mul(&x[0])?.neg()?.exp()?])
}
fn gauss_ref(x: &[A]) -> Vec<A> {
    vec![x[0].mul(&x[0]).neg().exp()]
}
/// Broadcasting, scalars, a comparison, `where`, clamp, a cast and two outputs.
fn mixed(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let s = x[0].mul_scalar(0.5)?.sub(&x[1])?;
    let m = s.gt(&x[1])?;
    let w = Tensor::where_(&m, &s, &x[1].tanh()?)?.clamp(-0.75, 2.0)?;
    Ok(vec![w.add_scalar(1.0)?, m.to_dtype(DType::F32)?.mul(&w)?])
}
fn mixed_ref(x: &[A]) -> Vec<A> {
    let s = x[0].mul_scalar(0.5).sub(&x[1]);
    let m = s.cmp(&x[1], |a, b| a > b);
    let w = A::where_(&m, &s, &x[1].tanh()).clamp(-0.75, 2.0);
    vec![w.add_scalar(1.0), m.to_float(DType::F32).mul(&w)]
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
                let xs = [a.clone(), b.clone()];
                let c = check(hypot, hypot_ref, &xs, &format!("hypot {ctx}"));
                assert_eq!((c.stats().groups, c.stats().fused_ops, c.stats().eager_ops), (1, 4, 0), "{ctx}");
                let c = check(gauss, gauss_ref, std::slice::from_ref(&a), &format!("gauss {ctx}"));
                assert_eq!(c.stats().groups, 1);
                check(mixed, mixed_ref, &xs, &format!("mixed {ctx}"));
                if kind == Layouts::Contiguous {
                    controls(hypot_ref, &xs, &[0], &format!("hypot {ctx}"));
                    controls(gauss_ref, std::slice::from_ref(&a), &[0], &format!("gauss {ctx}"));
                    controls(mixed_ref, &xs, &[0], &format!("mixed {ctx}"));
                }
            }
        }
    }
    // Broadcast of a row, a column and a scalar tensor in one chain.
    let a = rand_tensor(&[6, 40], DType::F32, 3, dev);
    let r = rand_tensor(&[40], DType::F32, 4, dev);
    let c = rand_tensor(&[6, 1], DType::F32, 5, dev);
    let s = rand_tensor(&[], DType::F32, 6, dev);
    let f: F = |x| Ok(vec![x[0].add(&x[1])?.mul(&x[2])?.sub(&x[3])?.relu()?]);
    let fr: R = |x| vec![x[0].add(&x[1]).mul(&x[2]).sub(&x[3]).relu()];
    let comp = check(f, fr, &[a, r, c, s], "broadcast");
    assert_eq!(comp.stats().groups, 1);
    for dt in [DType::I32, DType::U8, DType::U32] {
        let a = tensor(&random_values(500, dt, 7), &[20, 25], dt, dev);
        let b = tensor(&random_values(25, dt, 8), &[25], dt, dev);
        check_exact(ints, &[a, b], &format!("ints {dt}"));
    }
}

fn rmsnorm(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let ms = x[0].mul(&x[0])?.mean(&[-1], true)?;
    Ok(vec![x[0].mul(&ms.add_scalar(1e-5)?.rsqrt()?)?.mul(&x[1])?])
}
fn rmsnorm_ref(x: &[A]) -> Vec<A> {
    let ms = x[0].mul(&x[0]).mean();
    vec![x[0].mul(&ms.add_scalar(1e-5).rsqrt()).mul(&x[1])]
}
fn softmax(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let e = x[0].sub(&x[0].max(&[-1], true)?)?.exp()?;
    Ok(vec![e.div(&e.sum(&[-1], true)?)?])
}
fn softmax_ref(x: &[A]) -> Vec<A> {
    let e = x[0].sub(&x[0].max(true)).exp();
    vec![e.div(&e.sum(true))]
}
fn gelu_tanh(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = &x[0];
    let inner = x.add(&x.mul(x)?.mul(x)?.mul_scalar(0.044715)?)?.mul_scalar(0.7978845608028654)?;
    Ok(vec![x.mul_scalar(0.5)?.mul(&inner.tanh()?.add_scalar(1.0)?)?])
}
fn gelu_tanh_ref(x: &[A]) -> Vec<A> {
    let x = &x[0];
    let inner = x.add(&x.mul(x).mul(x).mul_scalar(0.044715)).mul_scalar(0.7978845608028654);
    vec![x.mul_scalar(0.5).mul(&inner.tanh().add_scalar(1.0))]
}
fn reductions(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let y = x[0].mul_scalar(2.0)?.add(&x[1])?;
    Ok(vec![y.sum(&[-1], true)?, y.max(&[-1], false)?, y.min(&[-1], true)?.abs()?])
}
fn reductions_ref(x: &[A]) -> Vec<A> {
    let y = x[0].mul_scalar(2.0).add(&x[1]);
    vec![y.sum(true), y.max(false), y.min(true).abs()]
}

fn rows(dev: &Device) {
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for shape in [&[5usize, 37][..], &[3, 300], &[2, 2, 1030], &[4, 1]] {
            let d = *shape.last().unwrap();
            let x = rand_tensor(shape, dt, 10, dev);
            let w = rand_tensor(&[d], dt, 11, dev);
            let ctx = format!("{dt} {shape:?}");
            let xw = [x.clone(), w.clone()];
            let c = check(rmsnorm, rmsnorm_ref, &xw, &format!("rmsnorm {ctx}"));
            assert_eq!(c.stats().groups, 1, "rmsnorm is one row group ({ctx}): {:?}", c.stats());
            // kiln's own kernel (one op, one rounding) is within the bound of the primitives.
            let want = &rmsnorm_ref(&[A::of(&x), A::of(&w)])[0];
            assert_out(&x.rms_norm(&w, 1e-5).unwrap(), want, &format!("kiln's rms_norm {ctx}"));
            check(softmax, softmax_ref, std::slice::from_ref(&x), &format!("softmax {ctx}"));
            check(gelu_tanh, gelu_tanh_ref, std::slice::from_ref(&x), &format!("gelu {ctx}"));
            let y = rand_tensor(shape, dt, 12, dev);
            let xy = [x.clone(), y];
            check(reductions, reductions_ref, &xy, &format!("reductions {ctx}"));
            if d > 1 {
                controls(rmsnorm_ref, &xw, &[0], &format!("rmsnorm {ctx}"));
                controls(softmax_ref, std::slice::from_ref(&x), &[0], &format!("softmax {ctx}"));
                controls(gelu_tanh_ref, std::slice::from_ref(&x), &[0], &format!("gelu {ctx}"));
                controls(reductions_ref, &xy, &[0], &format!("reductions {ctx}"));
            }
        }
    }
    // Integer max/min rows are exact.
    let a = tensor(&random_values(3 * 70, DType::I32, 13), &[3, 70], DType::I32, dev);
    let f: F = |x| Ok(vec![x[0].mul_scalar(3.0)?.max(&[-1], true)?.sub(&x[0])?, x[0].min(&[-1], false)?]);
    check_exact(f, &[a], "int rows");
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
    fn mixed_row_ref(x: &[A]) -> Vec<A> {
        let y = x[0].mul(&x[1]).add(&x[2]).sub(&x[3]);
        let m = y.max(true);
        let e = y.sub(&m).exp();
        vec![e.div(&e.sum(true)), y.cmp(&m, |a, b| a == b), m]
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
                let xw = [x.clone(), w.clone()];
                check(rmsnorm, rmsnorm_ref, &xw, &format!("rmsnorm {ctx}"));
                let c = check(softmax, softmax_ref, std::slice::from_ref(&x), &format!("softmax {ctx}"));
                assert_eq!(c.stats().groups, 1, "{ctx}");
                let xy = [x.clone(), y];
                check(reductions, reductions_ref, &xy, &format!("reductions {ctx}"));
                let col = rand_tensor(&[r, 1], dt, seed + 3, dev);
                let s = rand_tensor(&[], dt, seed + 4, dev);
                let xs = [x, w, col, s];
                let c = check(mixed_row, mixed_row_ref, &xs, &format!("mixed row {ctx}"));
                assert_eq!(c.stats().groups, 1, "{ctx}: {:?}", c.stats());
                // Controls up to 4096 values a row: past that the worst-case bound of a sum of
                // random-sign terms (n u sum|y|) is larger than the sum itself, so it cannot tell
                // zeros from the answer (the short rows hold the controls).
                if kind == Layouts::Contiguous && d <= 4096 {
                    controls(rmsnorm_ref, &xw, &[0], &format!("rmsnorm {ctx}"));
                    controls(softmax_ref, &xs[..1], &[0], &format!("softmax {ctx}"));
                    controls(reductions_ref, &xy, &[0], &format!("reductions {ctx}"));
                }
            }
            // A row starting past a pack boundary (a view at offset 1 of wider rows).
            let wide = rand_tensor(&[r, d + 1], dt, 70 + si as u64, dev);
            let x = wide.narrow(1, 1, d).unwrap();
            let w = rand_tensor(&[d + 4], dt, 80, dev).narrow(0, 3, d).unwrap();
            check(rmsnorm, rmsnorm_ref, &[x, w], &format!("rmsnorm {dt} offset view ({r}, {d})"));
        }
    }
    // Integer rows: held in registers and read per pass, exact.
    for d in [6, 4096, 40001] {
        let a = tensor(&random_values(2 * d, DType::I32, 90), &[2, d], DType::I32, dev);
        let f: F = |x| {
            let m = x[0].max(&[-1], true)?;
            Ok(vec![m.sub(&x[0])?, x[0].eq(&m)?, x[0].min(&[-1], false)?])
        };
        check_exact(f, &[a], &format!("int rows of {d}"));
    }
}

fn special_values(dev: &Device) {
    let mut v = random_values(64, DType::F32, 20);
    v[3] = f64::NAN;
    v[10] = f64::INFINITY;
    v[11] = f64::NEG_INFINITY;
    v[40] = -0.0;
    v[50] = f64::NAN;
    fn f(x: &[Tensor]) -> Result<Vec<Tensor>> {
        let y = x[0].mul_scalar(2.0)?.exp()?.sub_scalar(1.0)?.clamp(-3.0, 1e30)?;
        Ok(vec![y.clone(), y.max(&[-1], true)?, x[0].relu()?.sqrt()?.sum(&[-1], true)?, x[0].ne(&x[0])?])
    }
    fn f_ref(x: &[A]) -> Vec<A> {
        let y = x[0].mul_scalar(2.0).exp().add_scalar(-1.0).clamp(-3.0, 1e30);
        vec![y.clone(), y.max(true), x[0].relu().sqrt().sum(true), x[0].cmp(&x[0], |a, b| a != b)]
    }
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let x = tensor(&v, &[4, 16], dt, dev);
        check(f, f_ref, std::slice::from_ref(&x), &format!("nan/inf {dt}"));
        controls(f_ref, &[x], &[0], &format!("nan/inf {dt}"));
    }
}

fn empty(dev: &Device) {
    for shape in [&[0usize, 5][..], &[3, 0], &[0]] {
        let a = rand_tensor(shape, DType::F32, 1, dev);
        let b = rand_tensor(shape, DType::F32, 2, dev);
        check(hypot, hypot_ref, &[a.clone(), b], &format!("empty {shape:?}"));
        let f: F = |x| Ok(vec![x[0].exp()?.sum(&[-1], true)?]);
        let fr: R = |x| vec![x[0].exp().sum(true)];
        check(f, fr, &[a], &format!("empty sum {shape:?}"));
    }
}

fn fallback_and_eager_ops(dev: &Device) {
    let a = rand_tensor(&[8, 16], DType::F32, 30, dev);
    let b = rand_tensor(&[16, 8], DType::F32, 31, dev);
    let ab = [a.clone(), b.clone()];
    // A matmul between two chains: two groups around an eager op.
    let f: F = |x| Ok(vec![x[0].exp()?.mul_scalar(0.5)?.matmul(&x[1].tanh()?)?.relu()?.add_scalar(1.0)?]);
    let fr: R = |x| vec![x[0].exp().mul_scalar(0.5).matmul(&x[1].tanh()).relu().add_scalar(1.0)];
    let c = check(f, fr, &ab, "matmul between chains");
    controls(fr, &ab, &[0], "matmul between chains");
    let s = c.stats();
    assert_eq!((s.groups, s.eager_ops), (3, 1), "{s:?}");
    // Views of intermediates are eager ops; the chains around them still fuse.
    let f: F = |x| Ok(vec![x[0].exp()?.transpose(0, 1)?.add(&x[1])?.sqrt()?]);
    let fr: R = |x| vec![x[0].exp().t().add(&x[1]).sqrt()];
    check(f, fr, &ab, "transpose between chains");
    // Data-dependent control flow: a host readback of a traced value runs the function eagerly.
    let f: F = |x| {
        let m = x[0].sum_all()?.to_vec::<f32>()?[0];
        Ok(vec![if m > 0.0 { x[0].exp()? } else { x[0].neg()? }])
    };
    let fr: R = |x| vec![if x[0].d.iter().map(|v| v.v).sum::<f64>() > 0.0 { x[0].exp() } else { x[0].neg() }];
    let c = check(f, fr, std::slice::from_ref(&a), "readback");
    assert_eq!(c.stats().eager, 1);
    let neg = a.neg().unwrap();
    check(f, fr, &[neg], "readback, other branch");
    // An op without a trace hook (cumsum) also falls back, with the right answer.
    let f: F = |x| Ok(vec![x[0].exp()?.cumsum(-1)?.mul_scalar(2.0)?]);
    let fr: R = |x| vec![x[0].exp().cumsum().mul_scalar(2.0)];
    let c = check(f, fr, std::slice::from_ref(&a), "untraced op");
    controls(fr, std::slice::from_ref(&a), &[0], "untraced op (cumsum)");
    assert_eq!(c.stats().eager, 1);
    // i64 values: no GPU kernel, replayed eagerly (exact).
    let i = tensor(&random_values(40, DType::I64, 32), &[4, 10], DType::I64, dev);
    let f: F = |x| Ok(vec![x[0].mul(&x[0])?.add_scalar(7.0)?.sum(&[-1], true)?]);
    check_exact(f, &[i], "i64");
    // A captured weight, a constant made inside, and one tensor passed twice.
    let w = rand_tensor(&[16], DType::F32, 33, dev);
    let wr = A::of(&w);
    let c = compile(move |x: &[Tensor]| {
        let k = Tensor::full(0.25, 16, DType::F32, x[0].device())?;
        Ok(vec![x[0].mul(&w)?.add(&x[1])?.add(&k)?])
    });
    let want = |x0: &Tensor, x1: &Tensor| A::of(x0).mul(&wr).add(&A::of(x1)).add_scalar(0.25);
    assert_out(&c.call(&[a.clone(), a.clone()]).unwrap()[0], &want(&a, &a), "captured");
    let other = rand_tensor(&[8, 16], DType::F32, 34, dev);
    assert_out(&c.call(&[a.clone(), other.clone()]).unwrap()[0], &want(&a, &other), "two inputs after one");
}

fn retrace_and_errors(dev: &Device) {
    let c = compile(hypot);
    for shape in [&[4usize, 4][..], &[9], &[4, 4], &[2, 3, 5]] {
        let a = rand_tensor(shape, DType::F32, 40, dev);
        let b = rand_tensor(shape, DType::F32, 41, dev);
        let want = &hypot_ref(&[A::of(&a), A::of(&b)])[0];
        assert_out(&c.call(&[a, b]).unwrap()[0], want, &format!("retrace {shape:?}"));
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
